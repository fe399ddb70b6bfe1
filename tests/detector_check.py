"""Runs inside a framework's environment: builds its Faster R-CNN from the IR, checks the canonical
weights round-trip, trains a few epochs on a prepared detection set, evaluates it, serves its test images
through the serving path, and runs the
framework's NMS on hand-made cases and on proposals; prints one JSON line of facts for the harness-side test.

Usage: python detector_check.py < case.json, case.json {"adapter", "model", "recipe", "data", "epochs"}.
"""
import json
import sys
import time

import numpy as np
from adapter_check import probe_weights

from dlbench.shared.detection.boxes import base_anchors, clip_boxes, decode, shifted_anchors
from dlbench.shared.detection.pipeline import DetectionSplit
from dlbench.shared.initializers import canonical_init
from dlbench.worker.base import epoch_order
from dlbench.worker.detector import detector_class

# (boxes, scores, threshold): ties in score, a box inside another, touching boxes, a zero-area box
NMS_CASES = [
    ([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 10]], [0.9, 0.8, 0.7, 0.9], 0.5),
    ([[0, 0, 10, 10], [2, 2, 8, 8], [10, 0, 20, 10], [5, 5, 5, 9]], [0.5, 0.6, 0.4, 0.3], 0.3),
    ([[0, 0, 4, 4], [0, 0, 4, 5], [0, 0, 4, 6], [0, 0, 4, 8]], [0.1, 0.2, 0.3, 0.4], 0.7),
]


def proposals(seed, count=2000):
    """An untrained RPN's `count` best proposals on a 600x1000 image and their scores, as
    pipeline.propose makes them (legacy RandomState: the same boxes in every numpy)."""
    rng = np.random.RandomState(seed)
    anchors = shifted_anchors(38, 63, 16, base_anchors())
    boxes = clip_boxes(decode(anchors, rng.randn(len(anchors), 4) * 0.3), 600, 1000)
    scores = rng.randn(len(anchors)).astype(np.float32)
    top = np.argsort(-scores, kind="stable")[:count]
    return boxes[top], scores[top]


def check_nms(adapter):
    """The NMS cases' kept indices, then those of two sets of proposals at the training and detection
    thresholds."""
    kept = [adapter.nms(np.array(b, np.float32), np.array(s, np.float32), t).tolist() for b, s, t in NMS_CASES]
    for seed, threshold in ((0, 0.7), (1, 0.5)):
        kept.append(adapter.nms(*proposals(seed), threshold).tolist())
    return kept


def timed_epochs(adapter, train, epochs):
    """Each epoch's metrics with "wall_s", its time as the worker's clock measures it."""
    timed = []
    for epoch in range(1, epochs + 1):
        tic = time.perf_counter()
        metrics = adapter.train_epoch(train, epoch_order(0, epoch, len(train)))
        adapter.synchronise()
        timed.append(dict(metrics, wall_s=time.perf_counter() - tic))
        if epoch == 1:  # worker/train.py's first_step_s
            timed[0]["first_step_s"] = adapter.first_step_at - tic
    return timed


def served(adapter, test):
    """The serving path's detections of each test image, served last image first (so that nothing one call
    leaves behind, a feature map, can pass for the next image's), listed in the split's order."""
    serve = adapter.serving()
    found = {}
    for i in reversed(range(len(test))):
        boxes, scores, labels = serve(test.image(i))
        found[i] = {"boxes": boxes.tolist(), "scores": scores.tolist(), "labels": labels.tolist()}
    return [found[i] for i in range(len(test))]


def check(case):
    adapter = detector_class(case["adapter"])(case["model"], case["recipe"], "detection", "cpu", 1, 0)
    moved = probe_weights(case["model"])
    adapter.set_weights(moved)
    exported = adapter.get_weights()
    same = sorted(exported) == sorted(moved) and all(exported[k].shape == moved[k].shape for k in moved)
    roundtrip = max(float(np.max(np.abs(exported[k] - moved[k]))) for k in moved) if same else None
    adapter.set_weights(canonical_init(case["model"], 0))
    train, test = DetectionSplit.load(case["data"], "train"), DetectionSplit.load(case["data"], "test")
    epochs = timed_epochs(adapter, train.in_memory(), case["epochs"])
    boxes = []
    for i in range(len(test)):
        found, scores, labels = adapter.detect(test.image(i))
        height, width = test.image(i).shape[:2]
        boxes.append({"height": height, "width": width, "boxes": found.tolist(), "scores": scores.tolist(),
                      "labels": labels.tolist()})
    nms = check_nms(adapter)
    return {"same_shapes": same, "roundtrip_max_abs": roundtrip, "epochs": epochs, "evaluation": adapter.evaluate(test),
            "detections": boxes, "served": served(adapter, test), "nms": nms, "threads": adapter.threads_used(),
            "versions": adapter.versions()}


if __name__ == "__main__":
    print(json.dumps(check(json.load(sys.stdin))))
