"""The MXNet adapter computes exactly what the reference computes: at float64, where float32's rounding
(and its amplification through BatchNorm, ReLU and pooling) is out of the way, its outputs, gradients
and weights after the optimiser steps agree with the PyTorch reference's to float64 precision. One
workload per optimiser: SGD with BatchNorm, Adadelta with stacked LSTMs, Adam with the masked
seq2seq loss."""
import pytest

from dlbench.harness.certification import probes
from dlbench.harness.environments.envs import REFERENCE
from dlbench.harness.plan.workloads import get_workload
from dlbench.shared.initializers import canonical_init

pytestmark = pytest.mark.framework

NAMES = ["cnn-svhn", "lstm-ptb", "seq2seq-manythings"]


@pytest.fixture(scope="module")
def float64_probes(tmp_path_factory) -> dict[str, tuple[dict, dict]]:
    """Both frameworks' float64 probes of the three workloads, one process each."""
    folder = tmp_path_factory.mktemp("float64")
    wanted = [(get_workload(name), True) for name in NAMES]
    return dict(zip(NAMES, zip(probes.probe_many(REFERENCE, wanted, folder),
                               probes.probe_many("mxnet", wanted, folder), strict=True), strict=True))


@pytest.mark.parametrize("name", NAMES)
def test_mxnet_matches_the_reference_at_float64(float64_probes, name):
    reference, candidate = float64_probes[name]
    start = canonical_init(probes.without_dropout(get_workload(name).model()), probes.SEED)
    assert sorted(candidate) == sorted(reference)
    worst = max(row["max_rel"] for row in probes.compare(reference, candidate, start))
    assert worst < 1e-10
