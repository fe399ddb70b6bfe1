"""No silent fallbacks (issue #42): every dispatch on a layer type, activation, padding, loss or schedule
names its known cases and refuses any other by name, so a member added to one of the IR's sets fails
loudly in every place that must learn it instead of taking the last known member's rule. Here the shared
side (FLOPs, parameter shapes, initial weights, token inputs, the schedule's factor), the worker's metrics,
the adapter contract's dtype and device, the detector's loss, the certification probes' kinds and the numpy
reference; each framework's adapter is asked in its own environment (test_adapters.py,
adapter_check.refusals)."""
import json
import sys

import numpy as np
import pytest
from numpy_forward import forward

from dlbench.harness.plan.workloads import get_workload
from dlbench.shared import ir
from dlbench.shared import schedule as schedules
from dlbench.shared.initializers import _layer_weights, canonical_init
from dlbench.worker import probe
from dlbench.worker.base import BaseAdapter, finish_metrics
from dlbench.worker.detector import DetectorAdapter

NOVEL = "novel"


@pytest.fixture
def novel_layer(monkeypatch):
    """The IR made to accept a layer type 'novel' that keeps its input's shape (as adapter_check does)."""
    monkeypatch.setitem(ir.LAYER_SETTINGS, NOVEL, ())
    shape_rule = ir.output_shape
    monkeypatch.setattr(ir, "output_shape",
                        lambda layer, shape: tuple(shape) if layer["type"] == NOVEL else shape_rule(layer, shape))
    return ir.model([8], "float32", [ir.dense(4), {"type": NOVEL}, ir.dense(2)])


def test_a_novel_layer_type_has_no_flops_rule(novel_layer):
    """It counted 0 FLOPs, as an element-wise layer does."""
    with pytest.raises(ir.IRError, match="layer type 'novel' has no FLOPs rule"):
        ir.forward_flops(novel_layer)


def test_a_novel_layer_type_has_no_parameter_rule(novel_layer):
    """It held no weights, so no adapter was asked to load any."""
    for call in (ir.weight_shapes, ir.count_params, lambda spec: canonical_init(spec, 0)):
        with pytest.raises(ir.IRError, match="layer type 'novel' has no parameter rule"):
            call(novel_layer)


@pytest.mark.parametrize("kind, key", [("novel", "kernel"), ("dense", "scale"), ("conv2d", "recurrent_kernel")])
def test_a_weight_without_an_initial_rule_is_refused(kind, key):
    """A kernel of any type was drawn as a dense kernel's Glorot (fan_in = shape[0], fan_out = shape[1])."""
    with pytest.raises(ir.IRError, match=f"no rule for weight {key!r} of layer type {kind!r}"):
        _layer_weights(np.random.RandomState(0), {"type": kind, "units": 2}, key, (3, 3))


def test_only_token_layers_take_token_ids():
    """input_vocab read a seq2seq block's vocabularies off any first layer but an embedding."""
    with pytest.raises(ir.IRError, match="layer type 'dense' does not take token ids"):
        ir.input_vocab(ir.model([8], "float32", [ir.dense(2)]))


def test_a_novel_padding_has_no_output_size(monkeypatch):
    """It sized its output as 'valid' does."""
    monkeypatch.setattr(ir, "PADDINGS", ir.PADDINGS + (NOVEL,))
    with pytest.raises(ir.IRError, match="padding 'novel' has no output size rule"):
        ir.model([8, 8, 1], "float32", [ir.conv2d(2, 3, NOVEL)])


def test_a_novel_detector_part_has_no_input_rule(monkeypatch):
    monkeypatch.setattr(ir, "DETECTOR_PARTS", ir.DETECTOR_PARTS + (NOVEL,))
    with pytest.raises(ir.IRError, match="detector part 'novel' has no input rule"):
        ir.detector((32, 32), [ir.conv2d(2, 3, "same", 16)], 4, [8], 3, [1.0])


@pytest.mark.parametrize("changed", [{"op": "roi_pool"}, {"aligned": True}])
def test_a_detector_roi_op_that_nothing_computes_is_refused(changed):
    """Every detector computes torchvision's roi_align with aligned=False, whatever the spec declared."""
    spec = get_workload("frcnn-voc").model()
    spec["detector"]["roi"].update(changed)
    with pytest.raises(ir.IRError, match="only roi_align with aligned false is built"):
        ir.detector_parts(spec)


def test_a_novel_schedule_has_no_factor(monkeypatch):
    """Its factor was the warm-up and cosine's."""
    monkeypatch.setitem(schedules.SCHEDULES, NOVEL, ())
    schedule = {"name": NOVEL}
    schedules.validate(schedule)
    with pytest.raises(schedules.ScheduleError, match="schedule 'novel': no learning-rate factor"):
        schedules.factor(schedule, 3)


@pytest.mark.parametrize("loss", ["hinge", "faster_rcnn"])
def test_metrics_of_a_loss_they_do_not_know_are_refused(loss):
    """finish_metrics read any name ending in sequence_softmax_cross_entropy as a sequence loss and any
    other as a plain one; the detector's loss has its own metrics (worker/detector.py)."""
    with pytest.raises(NotImplementedError, match=f"loss {loss!r}: this adapter does not build it"):
        finish_metrics(loss, 1.0, 1, 1, 1)


def test_the_numpy_reference_refuses_a_novel_activation():
    """It raised KeyError; the adapters' own refusal names it."""
    spec = ir.model([3], "float32", [ir.dense(2), ir.activation("relu")])
    weights = canonical_init(spec, 0)
    spec["layers"][1]["fn"] = NOVEL  # the forward pass checks no shapes
    with pytest.raises(NotImplementedError, match="activation 'novel': this adapter does not build it"):
        forward(spec, weights, np.ones((1, 3), np.float32))


def test_the_numpy_reference_refuses_a_novel_layer_type_and_padding(novel_layer):
    weights = {key: np.ones(shape) for key, shape in ir.weight_shapes(
        ir.model([8], "float32", [ir.dense(4), ir.dense(2)])).items()}
    with pytest.raises(NotImplementedError, match="layer type 'novel': this adapter does not build it"):
        forward(novel_layer, weights, np.ones((1, 8), np.float32))
    spec = ir.model([4, 4, 1], "float32", [ir.maxpool2d(2)])
    spec["layers"][0]["padding"] = NOVEL
    with pytest.raises(NotImplementedError, match="padding 'novel': this adapter does not build it"):
        forward(spec, {}, np.ones((1, 4, 4, 1), np.float32))


PLAIN = ir.model([8], "float32", [ir.dense(2)])
RECIPE = {"optimizer": {"name": "sgd", "lr": 0.1}, "batch_size": 4, "epochs": 1, "loss": "softmax_cross_entropy"}


@pytest.mark.parametrize("changed, refused", [
    ({"recipe": dict(RECIPE, dtype="float64")}, "dtype 'float64'"),  # only an adapter that builds it says so
    ({"recipe": dict(RECIPE, dtype="bfloat16")}, "dtype 'bfloat16'"),
    ({"device": "tpu"}, "device 'tpu'"),
])
def test_the_adapter_contract_refuses_a_dtype_or_device_the_adapter_does_not_build(changed, refused):
    """The adapters read any dtype but float64 as float32 and any device but gpu as the CPU."""
    arguments = dict({"model": PLAIN, "recipe": RECIPE, "task": "classification", "device": "cpu", "threads": 1,
                      "seed": 0}, **changed)
    with pytest.raises(NotImplementedError, match=f"{refused}: this adapter does not build it"):
        BaseAdapter(**arguments)
    BaseAdapter(**dict(arguments, recipe=RECIPE, device="cpu"))  # float32 on the CPU: built by all


def test_a_detector_refuses_a_classifiers_loss():
    """DetectorAdapter computed its four losses whatever the recipe's loss named."""
    frcnn = get_workload("frcnn-voc")
    with pytest.raises(NotImplementedError, match="loss 'softmax_cross_entropy': this adapter does not build it"):
        DetectorAdapter(frcnn.model(), dict(frcnn.recipe, loss="softmax_cross_entropy"), "detection", "cpu", 1, 0)


def test_a_probe_of_a_kind_the_worker_lacks_is_refused(tmp_path, monkeypatch):
    """worker/probe.py ran the weights probe for any kind it did not know."""
    requests = tmp_path / "requests.json"
    requests.write_text(json.dumps([{"kind": NOVEL, "out": str(tmp_path / "novel.npz")}]))
    monkeypatch.setattr(sys, "argv", ["probe", str(requests)])
    assert probe.main() == 1
    assert "probe kind 'novel': this adapter does not build it" in (tmp_path / "novel.npz.error").read_text()
