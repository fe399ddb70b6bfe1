"""PASCAL VOC detection mAP: the frcnn-voc workload's quality metric, computed the same way for
every framework from its detections.

Follows the VOC devkit (VOCevaldet.m) at IoU 0.5 with the all-point interpolated AP of VOC 2010 and
later, with IoU in the continuous convention of `boxes` (the devkit adds 1 to widths and heights,
which gives small boxes slightly higher IoU):

- per class, every image's detections are pooled and sorted by score, highest first; equal scores
  keep their input order (image order, then their order within the image);
- a detection's ground truth is the same-class box of its image it overlaps most (first on ties),
  difficult and already-matched boxes included; with IoU >= 0.5 (the devkit's >=) it is a true
  positive if that box is not difficult and not yet matched, a false positive if already matched
  (a duplicate), and neither, so left out of the curve, if the box is difficult; below 0.5, or
  with no ground truth in the image, it is a false positive;
- recall counts the class's non-difficult boxes; precision is made monotonically decreasing from the
  right, and AP sums precision times the recall gained at each step (the area under that curve);
- a class with no non-difficult ground truth has no recall: its AP is NaN and the mAP averages the
  other classes. A class with ground truth but no detections has AP 0.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from dlbench.shared.detection.boxes import iou

IOU_THRESHOLD = 0.5
NUM_CLASSES = 20  # VOC's CLASSES, labels 0..19 (the detector's class k + 1 is label k here)


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """All-point interpolated AP (VOC 2010+): area under the precision-recall curve after making
    precision monotonically decreasing, summed where recall changes."""
    mrec = np.concatenate([[0.0], np.asarray(recall, dtype=np.float64), [1.0]])
    mpre = np.concatenate([[0.0], np.asarray(precision, dtype=np.float64), [0.0]])
    for i in range(len(mpre) - 2, -1, -1):
        mpre[i] = max(mpre[i], mpre[i + 1])
    steps = np.flatnonzero(mrec[1:] != mrec[:-1])
    return float(np.sum((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1]))


def _class_ap(detections: Sequence[Tuple[np.ndarray, np.ndarray, np.ndarray]],
              ground_truths: Sequence[Tuple[np.ndarray, np.ndarray, np.ndarray]], cls: int,
              threshold: float) -> float:
    gt_boxes, gt_difficult, gt_taken = [], [], []
    for boxes, labels, difficult in ground_truths:
        mine = np.asarray(labels).reshape(-1) == cls
        gt_boxes.append(np.asarray(boxes, dtype=np.float64).reshape(-1, 4)[mine])
        gt_difficult.append(np.asarray(difficult).reshape(-1)[mine].astype(bool))
        gt_taken.append(np.zeros(int(mine.sum()), dtype=bool))
    positives = sum(int((~d).sum()) for d in gt_difficult)
    if positives == 0:
        return float("nan")
    images, scores, boxes_of_class = [], [], []
    for image, (boxes, det_scores, labels) in enumerate(detections):
        mine = np.asarray(labels).reshape(-1) == cls
        images.append(np.full(int(mine.sum()), image, dtype=np.int64))
        scores.append(np.asarray(det_scores, dtype=np.float64).reshape(-1)[mine])
        boxes_of_class.append(np.asarray(boxes, dtype=np.float64).reshape(-1, 4)[mine])
    images, scores, det_boxes = np.concatenate(images), np.concatenate(scores), np.concatenate(boxes_of_class)
    outcomes: List[int] = []  # 1 true positive, 0 false positive; ignored detections are left out
    for d in np.argsort(-scores, kind="stable"):
        image = images[d]
        if len(gt_boxes[image]) == 0:
            outcomes.append(0)
            continue
        overlaps = iou(det_boxes[d:d + 1], gt_boxes[image])[0]
        best = int(overlaps.argmax())
        if overlaps[best] < threshold:
            outcomes.append(0)
        elif gt_difficult[image][best]:
            continue
        elif gt_taken[image][best]:
            outcomes.append(0)
        else:
            gt_taken[image][best] = True
            outcomes.append(1)
    tp = np.cumsum(np.array(outcomes, dtype=np.float64))
    fp = np.cumsum(1.0 - np.array(outcomes, dtype=np.float64))
    recall = tp / positives
    precision = tp / (tp + fp)  # every outcome counts one, so never 0 / 0
    return average_precision(recall, precision)


def voc_map(detections: Sequence[Tuple[np.ndarray, np.ndarray, np.ndarray]],
            ground_truths: Sequence[Tuple[np.ndarray, np.ndarray, np.ndarray]],
            num_classes: int = NUM_CLASSES, iou_threshold: float = IOU_THRESHOLD) -> Dict[str, object]:
    """VOC mAP over a set of images.

    `detections[i]` is image i's (boxes (D, 4), scores (D,), labels (D,)) and `ground_truths[i]` its
    (boxes (G, 4), labels (G,), difficult (G,)), labels in 0..num_classes-1. Returns {"ap": a list of
    num_classes floats, NaN for a class without non-difficult ground truth, "map": their mean over
    the other classes (NaN if none)}.
    """
    if len(detections) != len(ground_truths):
        raise ValueError("voc_map: detections for %d images, ground truth for %d"
                         % (len(detections), len(ground_truths)))
    ap = [_class_ap(detections, ground_truths, cls, iou_threshold) for cls in range(num_classes)]
    scored = [value for value in ap if not np.isnan(value)]
    return {"ap": ap, "map": float(np.mean(scored)) if scored else float("nan")}
