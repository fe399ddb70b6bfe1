"""Runs inside a framework's environment (Python 3.8+, numpy, the framework): trains each workload's
architecture a few steps on tiny generated data and prints one JSON line of facts per workload.

Usage: python adapter_check.py ADAPTER_PATH < models.json
models.json: [{"workload", "model", "recipe", "task", "n_classes"}...] made by the harness-side test.
"""

import json
import sys

import numpy as np

from dlbench.frameworks.base import Split, epoch_order
from dlbench.models.init import canonical_init
from dlbench.worker import load_adapter_class


def tiny_data(case, count, rng):
    model = case["model"]
    shape = [count] + model["input_shape"]
    if model["input_dtype"].startswith("float"):
        x = rng.integers(0, 256, size=shape).astype(np.uint8)
        scale = 255.0
    else:
        x = rng.integers(0, model["layers"][0]["vocab"], size=shape).astype(np.int32)
        scale = None
    if case["task"] == "language_model":
        y = rng.integers(0, case["n_classes"], size=shape).astype(np.int32)
    else:
        y = rng.integers(0, case["n_classes"], size=count).astype(np.int32)
    return Split(x, y, scale)


def check(adapter_class, case):
    rng = np.random.default_rng(0)
    recipe = dict(case["recipe"], batch_size=8)
    data = tiny_data(case, 16, rng)
    adapter = adapter_class(case["model"], recipe, case["task"], "cpu", 1, 0)
    weights = canonical_init(case["model"], 0)
    adapter.set_weights(weights)
    exported = adapter.get_weights()
    roundtrip = max(float(np.max(np.abs(exported[k] - weights[k]))) for k in weights)
    before = adapter.evaluate(data)
    losses = [adapter.train_epoch(data, epoch_order(0, epoch, len(data)))["loss"] for epoch in range(1, 9)]
    return {
        "workload": case["workload"],
        "losses": losses,
        "roundtrip_max_abs": roundtrip,
        "exported_keys": sorted(exported),
        "canonical_keys": sorted(weights),
        "eval_before": before,
        "eval_after": adapter.evaluate(data),
        "threads": adapter.threads_used(),
        "versions": adapter.versions(),
    }


def main():
    adapter_class = load_adapter_class(sys.argv[1])
    for case in json.load(sys.stdin):
        print(json.dumps(check(adapter_class, case)), flush=True)


if __name__ == "__main__":
    main()
