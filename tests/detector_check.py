"""Runs inside a framework's environment: builds its Faster R-CNN from the IR, checks the canonical
weights round-trip, trains a few epochs on a prepared detection set, evaluates it, and runs the
framework's NMS on hand-made cases; prints one JSON line of facts for the harness-side test.

Usage: python detector_check.py < case.json, case.json {"adapter", "model", "recipe", "data", "epochs"}.
"""
import json
import sys

import numpy as np
from adapter_check import probe_weights

from dlbench.shared.detection.pipeline import DetectionSplit
from dlbench.shared.init import canonical_init
from dlbench.worker.base import epoch_order
from dlbench.worker.detector import detector_class

# (boxes, scores, threshold): ties in score, a box inside another, touching boxes, a zero-area box
NMS_CASES = [
    ([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 10]], [0.9, 0.8, 0.7, 0.9], 0.5),
    ([[0, 0, 10, 10], [2, 2, 8, 8], [10, 0, 20, 10], [5, 5, 5, 9]], [0.5, 0.6, 0.4, 0.3], 0.3),
    ([[0, 0, 4, 4], [0, 0, 4, 5], [0, 0, 4, 6], [0, 0, 4, 8]], [0.1, 0.2, 0.3, 0.4], 0.7),
]


def check(case):
    adapter = detector_class(case["adapter"])(case["model"], case["recipe"], "detection", "cpu", 1, 0)
    moved = probe_weights(case["model"])
    adapter.set_weights(moved)
    exported = adapter.get_weights()
    same = sorted(exported) == sorted(moved) and all(exported[k].shape == moved[k].shape for k in moved)
    roundtrip = max(float(np.max(np.abs(exported[k] - moved[k]))) for k in moved) if same else None
    adapter.set_weights(canonical_init(case["model"], 0))
    train, test = DetectionSplit.load(case["data"], "train"), DetectionSplit.load(case["data"], "test")
    epochs = [adapter.train_epoch(train, epoch_order(0, epoch, len(train))) for epoch in range(1, case["epochs"] + 1)]
    boxes = []
    for i in range(len(test)):
        found, scores, labels = adapter.detect(test.image(i))
        height, width = test.image(i).shape[:2]
        boxes.append({"height": height, "width": width, "boxes": found.tolist(), "scores": scores.tolist(),
                      "labels": labels.tolist()})
    nms = [adapter.nms(np.array(b, np.float32), np.array(s, np.float32), t).tolist() for b, s, t in NMS_CASES]
    return {"same_shapes": same, "roundtrip_max_abs": roundtrip, "epochs": epochs, "evaluation": adapter.evaluate(test),
            "detections": boxes, "nms": nms, "threads": adapter.threads_used(), "versions": adapter.versions()}


if __name__ == "__main__":
    print(json.dumps(check(json.load(sys.stdin))))
