"""Certification probe: what one framework computes for one workload on one fixed batch.

Worker side (Python 3.8, numpy and the one framework). Run by the harness as
`<framework env python> -m dlbench.worker.probe BATCH.json`, BATCH.json a list of requests, each naming the
.npz file its arrays go to. One process serves every workload of a framework, so the framework is
imported once and compiled code (Theano's modules, under the compile cache the harness names) is
shared between workloads. From the canonical weights of the seed a request records the outputs of the model as
declared, dropout in (predict's, and the serving path's on the batch as stored, "serving"), then, with dropout
off, the loss and its gradients and the weights after a few optimiser steps on the same batch, all in canonical
layout, for the harness to compare with the reference's. A dropout request (kind "dropout") records a dropout
layer's (or attention's) output in training mode instead (dropout_probe); an inference request (kind
"inference"), a small model's outputs in inference mode (inference_probe: the layer checks of the normalisations'
epsilon and of the activations); an optimiser request (kind "optimizer"), the weights of a small model after the
adapter's optimiser applied a synthetic gradient sequence (optimizer_probe). A detector's request (kind
"detector") carries its image and sampled targets instead of a batch (detector_probe). A request that fails
leaves its traceback in OUT.error instead, and the others still run.
"""
from __future__ import annotations

import json
import sys
import traceback

import numpy as np

from dlbench.shared.initializers import canonical_init
from dlbench.worker.base import Split, lookup
from dlbench.worker.cell import load_adapter_class
from dlbench.worker.detector import detector_class


def probe(request: dict) -> dict:
    x, y = np.load(request["x"]), np.load(request["y"])
    scale = 255.0 if x.dtype == np.uint8 else None
    batch = Split(x, y, scale)
    model, seed = request["model"], request["seed"]
    adapter_class = load_adapter_class(request["adapter"])
    adapter = adapter_class(model, request["recipe"], request["task"], "cpu", 1, seed)
    start = canonical_init(model, seed)
    adapter.set_weights(start)
    # the outputs and the serving path of the model as declared, dropout in: inference must turn it off
    inference = adapter
    if request["inference_model"] != model:
        inference = adapter_class(request["inference_model"], request["recipe"], request["task"], "cpu", 1, seed)
        inference.set_weights(start)
    arrays = {"output": inference.predict(x.astype(np.float32) / scale if scale else x)}
    inference.input_scale = scale
    arrays["serving"] = inference.serving()(x)  # the serving path on the batch as stored, in one call
    loss, gradients = adapter.loss_and_gradients(batch)
    arrays["loss"] = np.array(loss)
    arrays.update(("grad/" + key, value) for key, value in gradients.items())
    adapter.set_weights(start)  # the gradient pass may have moved BatchNorm's statistics
    for _ in range(request["steps"]):  # one step each: the recipe's batch size is the batch's
        adapter.train_epoch(batch, np.arange(len(x)))
    arrays.update(("after/" + key, value) for key, value in adapter.get_weights().items())
    return arrays


def detector_probe(request: dict) -> dict:
    """A detector's outputs on the request's image and fixed RoIs, its four losses and their
    gradients, then its weights after `steps` optimiser steps on the same image and sample."""
    x = np.load(request["x"])
    with np.load(request["targets"]) as loaded:
        targets = dict(loaded)
    model, seed = request["model"], request["seed"]
    adapter = detector_class(request["adapter"])(model, request["recipe"], "detection", "cpu", 1, seed)
    start = canonical_init(model, seed)
    adapter.set_weights(start)
    objectness, deltas = adapter.rpn_outputs(x)
    logits, box_deltas = adapter.head_outputs(targets["rois"], targets["plan_index"], targets["plan_weights"])
    arrays = {"output/rpn_objectness": objectness, "output/rpn_deltas": deltas, "output/class_logits": logits,
              "output/box_deltas": box_deltas}
    losses, gradients = adapter.losses_and_gradients(x, targets)
    arrays.update(("loss/" + key, np.array(value)) for key, value in losses.items())
    arrays.update(("grad/" + key, value) for key, value in gradients.items())
    for _ in range(request["steps"]):
        adapter.train_step(x, targets)
    arrays.update(("after/" + key, value) for key, value in adapter.get_weights().items())
    return arrays


def _small_model(request: dict):
    """The adapter of the request's small model (a check of one layer or of the optimiser), its weights
    set from the request's file."""
    adapter = load_adapter_class(request["adapter"])(request["model"], request["recipe"], request["task"], "cpu", 1,
                                                     request["seed"])
    with np.load(request["weights"]) as weights:
        adapter.set_weights(dict(weights))
    return adapter


def dropout_probe(request: dict) -> dict:
    """A model of one dropout layer and an identity dense layer, in training mode on a batch of ones:
    its output is the dropout layer's, for the harness to count zeros and measure the kept values."""
    return {"output": _small_model(request).training_outputs(np.load(request["x"]))}


def inference_probe(request: dict) -> dict:
    """A small model's outputs in inference mode (predict) from the request's weights: certification's
    BatchNorm check, with moving variances where epsilon dominates."""
    return {"output": _small_model(request).predict(np.load(request["x"]))}


def optimizer_probe(request: dict) -> dict:
    """The adapter's optimiser on a synthetic gradient sequence: from the request's weights, one
    apply_gradients per step; the weights after each step the request records ("after/STEP/NAME")."""
    adapter = _small_model(request)
    with np.load(request["gradients"]) as loaded:
        sequence = dict(loaded)  # weight name -> (steps, *shape)
    steps = len(next(iter(sequence.values())))
    arrays = {}
    for step in range(1, steps + 1):
        adapter.apply_gradients({name: value[step - 1] for name, value in sequence.items()})
        if step in request["record"]:
            arrays.update(("after/%d/%s" % (step, name), value) for name, value in adapter.get_weights().items())
    return arrays


PROBES = {None: probe, "dropout": dropout_probe, "detector": detector_probe, "inference": inference_probe,
          "optimizer": optimizer_probe}


def main() -> int:
    with open(sys.argv[1]) as handle:
        requests = json.load(handle)
    failed = 0
    for request in requests:
        try:
            # a weights probe has no kind; any kind this worker has no probe for is refused by name
            arrays = lookup(PROBES, "probe kind", request.get("kind"))(request)
        except Exception:  # one workload's failure must not hide the others' results
            failed += 1
            with open(request["out"] + ".error", "w") as handle:
                handle.write(traceback.format_exc())
            continue
        np.savez(request["out"], **arrays)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
