"""The reference greedy non-maximum suppression, in plain numpy, and the loop-free form of its greedy
pass that the frameworks without an NMS op of their own compute in their own array ops.

Each framework's NMS (tf.image.non_max_suppression, MXNet's box_nms, the others' fixed_point_keep) is
tested against `nms`, so that is written for clarity and an exact, documented order, not for speed.
"""
from __future__ import annotations

import numpy as np

from dlbench.shared.detection.boxes import iou


def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> np.ndarray:
    """Indices (int64) of the boxes greedy NMS keeps, highest score first.

    Boxes are visited by descending score, equal scores in index order (lower index first). A box is
    kept unless a box kept before it overlaps it with IoU > `threshold` (strictly greater: IoU equal
    to the threshold survives, as torchvision's nms).
    """
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if len(boxes) != len(scores):
        raise ValueError("nms: %d boxes but %d scores" % (len(boxes), len(scores)))
    order = np.argsort(-scores, kind="stable")
    keep = []
    while len(order):
        best = order[0]
        keep.append(best)
        overlaps = iou(boxes[best:best + 1], boxes[order[1:]])[0]
        order = order[1:][overlaps <= threshold]
    return np.array(keep, dtype=np.int64)


def fixed_point_keep(suppress: np.ndarray) -> np.ndarray:
    """The greedy pass of NMS without a loop over the boxes, as the frameworks without an NMS op of their
    own compute it in their own array ops (this numpy copy states the rule and is tested against `nms`).

    `suppress` (N, N) bool holds, for boxes sorted best first, whether box i removes box j (IoU >
    threshold); only i < j counts. Greedy NMS keeps box j exactly when no kept box before it removes it,
    keep[j] = not any(keep[i] and suppress[i, j] for i < j), and that equation has one solution (box 0
    is kept; each later box's value follows from those before it). Starting from every box kept and
    applying the equation to all boxes at once (one matrix-vector product) until nothing changes reaches
    it: after k rounds the first k boxes are settled, so at most N + 1 rounds, and a few in practice
    (Cluster-NMS, Zheng et al. 2021). Returns the kept positions (int64), best first."""
    suppress = np.triu(np.asarray(suppress, dtype=bool), 1).astype(np.float32)
    keep = np.ones(len(suppress), dtype=np.float32)
    while True:
        again = (keep @ suppress == 0).astype(np.float32)  # counts of kept suppressors, exact in float32
        if np.array_equal(again, keep):
            return np.flatnonzero(keep).astype(np.int64)
        keep = again
