"""The MXNet adapter computes exactly what the reference computes: at float64, where float32's rounding
(and its amplification through BatchNorm, ReLU and pooling) is out of the way, its outputs, gradients
and weights after the optimiser steps agree with the PyTorch reference's to float64 precision. One
workload per optimiser: SGD with BatchNorm, Adadelta with stacked LSTMs, Adam with the masked
seq2seq loss."""
import pytest

from dlbench import certify
from dlbench.models.init import canonical_init
from dlbench.runner import REFERENCE
from dlbench.workloads import get_workload


@pytest.mark.parametrize("name", ["cnn-svhn", "lstm-ptb", "seq2seq-manythings"])
def test_mxnet_matches_the_reference_at_float64(tmp_path, name):
    workload = get_workload(name)
    reference = certify.probe(REFERENCE, workload, tmp_path, exact=True)
    candidate = certify.probe("mxnet", workload, tmp_path, exact=True)
    start = canonical_init(certify.without_dropout(workload.model()), certify.SEED)
    assert sorted(candidate) == sorted(reference)
    worst = max(row["max_rel"] for row in certify.compare(reference, candidate, start))
    assert worst < 1e-10
