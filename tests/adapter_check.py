"""Runs inside a framework's environment (Python 3.8+, its numpy, the framework): for each workload's
architecture, loads the canonical weights, records the outputs on fixed probe inputs (predict's, and the
serving path's on the same inputs as stored, at batch 1 and 2), trains a few
steps on tiny generated data, and prints one JSON line of facts per workload.

Usage: python adapter_check.py ADAPTER_PATH < cases.json
cases.json: [{"workload", "model", "recipe", "task", "n_classes"}...], made by the harness-side test;
a case with "data": {"x": path, "y": path, "scale"} trains on those arrays' first rows instead; a case with
"grid" (a list of floats) is a dense layer as wide as the grid, then an activation: it gets an identity
kernel and zero bias, and its row holds only the predictions on the grid (the activation itself); a case
with "gradients" (weight name -> a list of steps) applies them one step each through apply_gradients from
the case's "weights", and its row holds the weights after every step; a case with "fit_orders" (Keras's
adapters alone) trains two twins on 21 generated samples, one by train_epoch, one by model.fit, over that
many epoch orders, and its row is the adapter module's feed_matches_fit. Last, one line {"workload":
"refusals", ...}: what the adapter raised for a layer type, an optimizer, a learning-rate schedule, a loss,
an activation and a padding that the IR and the recipes would accept (patched in here) but that it has no
code for, for the detector's loss, which a classifier adapter does not compute, and for each execution and
precision it does not run (with those it runs).
Data come from numpy's legacy RandomState, whose stream is the same in every numpy version, so the
harness side regenerates the probe inputs exactly.
"""

import json
import sys
import time

import numpy as np

from dlbench.shared import ir
from dlbench.shared import schedule as schedules
from dlbench.shared.initializers import canonical_init
from dlbench.shared.ir import input_vocab
from dlbench.worker import base
from dlbench.worker.base import Split, epoch_order
from dlbench.worker.cell import load_adapter_class

NOVEL = "novel"  # a layer type, optimizer, schedule, loss, activation and padding that no adapter builds


def generated_inputs(model, count, seed):
    rng = np.random.RandomState(seed)
    shape = [count] + model["input_shape"]
    if model["input_dtype"].startswith("float"):
        return rng.randint(0, 256, size=shape).astype(np.uint8)
    return rng.randint(0, input_vocab(model), size=shape).astype(np.int32)


def stored_probe_inputs(model):
    """Two samples as a split stores them: uint8 pixels, or token ids."""
    return generated_inputs(model, 2, 1)


def probe_inputs(model):
    """Two samples as the model consumes them: pixels scaled to [0, 1], or token ids."""
    x = stored_probe_inputs(model)
    return x.astype(np.float32) / 255 if x.dtype == np.uint8 else x


def served(adapter, model):
    """The serving path's outputs on the stored probe inputs: each sample alone (batch 1, stacked) and both
    at once (batch 2)."""
    serve = adapter.serving()
    x = stored_probe_inputs(model)
    return {"serving_batch1": np.concatenate([serve(x[i:i + 1]) for i in range(len(x))]).tolist(),
            "serving_batch2": serve(x).tolist()}


def probe_weights(model):
    """Canonical weights with biases and BatchNorm statistics moved off their zero/one start, so that
    a wrong mapping of any of them shows in the outputs."""
    weights = canonical_init(model, 0)
    rng = np.random.RandomState(3)
    for key in sorted(weights):
        if key.endswith(("bias", "beta", "gamma", "moving_mean")):
            weights[key] = weights[key] + rng.uniform(-0.2, 0.2, size=weights[key].shape).astype(np.float32)
        elif key.endswith("moving_var"):
            weights[key] = rng.uniform(0.5, 1.5, size=weights[key].shape).astype(np.float32)
    return weights


def tiny_data(case, count):
    if "data" in case:  # the first rows of a prepared dataset
        x, y = (np.load(case["data"][part])[:count] for part in ("x", "y"))
        return Split(x, y, case["data"]["scale"])
    x = generated_inputs(case["model"], count, 0)
    label_shape = {"language_model": x.shape, "translation": (count, case["target_len"])}.get(case["task"], (count,))
    y = np.random.RandomState(2).randint(0, case["n_classes"], size=label_shape).astype(np.int32)
    return Split(x, y, 255.0 if x.dtype == np.uint8 else None)


def check(adapter_class, case):
    recipe = dict(case["recipe"], batch_size=8)
    data = tiny_data(case, 16)
    adapter = adapter_class(case["model"], recipe, case["task"], "cpu", 1, 0)
    weights = probe_weights(case["model"])
    adapter.set_weights(weights)
    exported = adapter.get_weights()
    same_shapes = sorted(exported) == sorted(weights) and all(exported[k].shape == weights[k].shape for k in weights)
    roundtrip = max(float(np.max(np.abs(exported[k] - weights[k]))) for k in weights) if same_shapes else None
    predictions = adapter.predict(probe_inputs(case["model"]))
    serving = served(adapter, case["model"])
    before = adapter.evaluate(data)
    started = time.perf_counter()
    losses = [adapter.train_epoch(data, epoch_order(0, 1, len(data)))["loss"]]
    adapter.synchronise()
    # when the adapter's first step had finished (BaseAdapter.step_done), against its first epoch's start and end
    first_step = [started, adapter.first_step_at, time.perf_counter()]
    losses += [adapter.train_epoch(data, epoch_order(0, epoch, len(data)))["loss"] for epoch in range(2, 9)]
    return {
        "first_step": first_step,
        "workload": case["workload"],
        "same_shapes": same_shapes,
        "roundtrip_max_abs": roundtrip,
        "predictions": predictions.tolist(),
        **serving,
        "train_losses": losses,
        "eval_before": before,
        "eval_after": adapter.evaluate(data),
        "threads": adapter.threads_used(),
        "versions": adapter.versions(),
    }


def fit_comparison(adapter_class, case):
    """Keras's train_epoch against model.fit over the same epoch orders (keras3/adapter.py's
    feed_matches_fit): 21 samples in batches of 8, so the last batch of every epoch is partial."""
    data = tiny_data(case, 21)
    orders = [epoch_order(0, epoch, len(data)) for epoch in range(1, case["fit_orders"] + 1)]
    compare = sys.modules[adapter_class.__module__].feed_matches_fit
    return dict(compare(case["model"], dict(case["recipe"], batch_size=8), case["task"], data, orders),
                workload=case["workload"])


def grid(adapter_class, case):
    """The activation alone on the case's grid of inputs, through an identity dense layer."""
    adapter = adapter_class(case["model"], dict(case["recipe"], batch_size=1), case["task"], "cpu", 1, 0)
    width = len(case["grid"])
    adapter.set_weights({"dense_1/kernel": np.eye(width, dtype=np.float32),
                         "dense_1/bias": np.zeros(width, np.float32)})
    predictions = adapter.predict(np.asarray([case["grid"]], np.float32))
    return {"workload": case["workload"], "predictions": predictions.tolist()}


def optimizer_steps(adapter_class, case):
    """The weights after each apply_gradients of the case's gradient sequence, from its weights."""
    adapter = adapter_class(case["model"], dict(case["recipe"], batch_size=1), case["task"], "cpu", 1, 0)
    adapter.set_weights({name: np.asarray(value, np.float32) for name, value in case["weights"].items()})
    after = []
    gradients = {name: np.asarray(value, np.float32) for name, value in case["gradients"].items()}
    for step in range(len(next(iter(gradients.values())))):
        adapter.apply_gradients({name: value[step] for name, value in gradients.items()})
        after.append({name: value.tolist() for name, value in adapter.get_weights().items()})
    return {"workload": case["workload"], "after": after}


def raised(build, input_shape=(8,), train=True):
    """What build() raised, as "Type: message" (or while computing a loss and its gradients, then, if `train`,
    training one epoch, on what it returned). A loss is asked without training: it must be refused where it is
    computed, not by the epoch's metrics (base.finish_metrics) after an epoch of another loss."""
    try:
        adapter = build()
        data = Split(np.ones([4] + list(input_shape), np.uint8), np.zeros(4, np.int32), 255.0)  # pixels, as stored
        adapter.loss_and_gradients(data)
        if train:
            adapter.train_epoch(data, epoch_order(0, 1, 4))
    except Exception as error:  # the adapter's own error, whatever its framework wraps it in
        return f"{type(error).__name__}: {error}"
    return None


def refusals(adapter_class, case):
    """A layer type, activation and padding the IR accepts, a loss, optimizer and schedule the adapter
    contract accepts, none built by any adapter: each must raise an error naming it, never build another
    in its place (a loss: never train as softmax cross-entropy); so must the detector's loss."""
    recipe = dict(case["recipe"], batch_size=4, loss="softmax_cross_entropy")
    ir.LAYER_SETTINGS[NOVEL] = ()
    shape_rule = ir.output_shape
    ir.output_shape = lambda layer, shape: tuple(shape) if layer["type"] == NOVEL else shape_rule(layer, shape)
    with_novel_layer = ir.model([8], "float32", [ir.dense(4), {"type": NOVEL}, ir.dense(2)])
    plain = ir.model([8], "float32", [ir.dense(4), ir.activation("relu"), ir.dense(2)])
    base.OPTIMIZER_SETTINGS[NOVEL] = ("lr",)  # shared.recipe's table, which the contract reads
    novel_optimizer = dict(recipe, optimizer={"name": NOVEL, "lr": 0.1})
    schedules.SCHEDULES[NOVEL] = ()
    novel_schedule = dict(recipe, schedule={"name": NOVEL})
    ir.LOSSES += (NOVEL,)
    base.LOSSES += (NOVEL,)  # the adapter contract's own copy
    ir.ACTIVATIONS += (NOVEL,)
    with_novel_activation = ir.model([8], "float32", [ir.dense(4), ir.activation(NOVEL), ir.dense(2)])
    ir.PADDINGS += (NOVEL,)
    sized = ir._spatial_out  # the IR sizes the novel padding as "valid"; the adapter must not build it so
    ir._spatial_out = lambda size, kernel, stride, padding: sized(size, kernel, stride,
                                                                  "valid" if padding == NOVEL else padding)
    padded = [ir.model([4, 4, 1], "float32", [layer, ir.flatten(), ir.dense(2)])
              for layer in (ir.conv2d(2, 3, NOVEL), ir.maxpool2d(2, padding=NOVEL))]

    def build(model, changed=None):
        return lambda: adapter_class(model, dict(recipe, **(changed or {})), "classification", "cpu", 1, 0)
    return {
        "workload": "refusals",
        "layer": raised(build(with_novel_layer)),
        "optimizer": raised(build(plain, novel_optimizer)),
        "schedule": raised(build(plain, novel_schedule)),
        "loss": raised(build(plain, {"loss": NOVEL}), train=False),
        "detector_loss": raised(build(plain, {"loss": "faster_rcnn"}), train=False),
        "activation": raised(build(with_novel_activation)),
        "conv_padding": raised(build(padded[0]), padded[0]["input_shape"]),
        "pool_padding": raised(build(padded[1]), padded[1]["input_shape"]),
        # the executions the adapter runs, its default first, and what it raised for each of the others
        "executions": list(adapter_class.executions),
        "execution": {mode: raised(build(plain, {"execution": mode})) for mode in base.EXECUTIONS
                      if mode not in adapter_class.executions},
        # the precisions it trains in, float32 first, and what it raised for each of the others
        "precisions": list(adapter_class.precisions),
        "precision": {name: raised(build(plain, {"precision": name})) for name in base.PRECISIONS
                      if name not in adapter_class.precisions},
    }


def main():
    adapter_class = load_adapter_class(sys.argv[1])
    cases = json.load(sys.stdin)
    for case in cases:
        run = (grid if "grid" in case else optimizer_steps if "gradients" in case
               else fit_comparison if "fit_orders" in case else check)
        print(json.dumps(run(adapter_class, case)), flush=True)
    print(json.dumps(refusals(adapter_class, cases[0])), flush=True)


if __name__ == "__main__":
    main()
