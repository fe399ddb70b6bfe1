"""The reference greedy non-maximum suppression, in plain numpy.

Each framework's own NMS op (torchvision.ops.nms, tf.image.non_max_suppression, ...) is tested
against this one, so it is written for clarity and an exact, documented order, not for speed.
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


def greedy_keep(suppress: np.ndarray) -> np.ndarray:
    """The greedy pass of NMS over boxes sorted best first, for frameworks that compute the pairwise
    overlaps themselves: suppress[i, j] is whether box i, once kept, removes box j (IoU > threshold).
    Returns the kept positions (int64), best first."""
    suppress = np.asarray(suppress, dtype=bool)
    removed = np.zeros(len(suppress), dtype=bool)
    keep = []
    for i in range(len(suppress)):
        if not removed[i]:
            keep.append(i)
            removed |= suppress[i, :len(suppress)]
    return np.array(keep, dtype=np.int64)
