"""Training targets of Faster R-CNN's approximate joint training (Ren et al. 2015): which anchors the
RPN learns from and what they regress to (as py-faster-rcnn's anchor_target_layer), and which
proposals the RoI head learns from (as torchvision's RoIHeads, whose losses the frameworks compute).
Box conventions are torchvision's throughout: continuous coordinates, IoU without the devkit's +1.

Every random choice draws from the `rng` the caller passes, `np.random.RandomState(seed)`: numpy keeps
the legacy RandomState streams unchanged across versions, so one seed samples the same anchors and
RoIs in every framework's environment, old numpy included. (A `np.random.Generator` also works, but its
streams may change between numpy releases.) The functions return plain numpy arrays; the losses
(and their normalisation) are the frameworks' business.

Ground truth: (M, 4) boxes in the continuous convention of `boxes` and labels 0..19 over VOC's
CLASSES. Difficult objects are the caller's to drop first, as py-faster-rcnn trains without them
(`use_diff = False`).
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from dlbench.shared.detection.boxes import HEAD_WEIGHTS, RPN_WEIGHTS, encode, iou

RPN_POSITIVE_IOU = 0.7
RPN_NEGATIVE_IOU = 0.3
RPN_BATCH = 256
RPN_POSITIVE_FRACTION = 0.5
ROI_BATCH = 128
ROI_FOREGROUND_FRACTION = 0.25
ROI_FOREGROUND_IOU = 0.5
ROI_BACKGROUND_IOU = (0.0, 0.5)  # [low, high): torchvision's (py-faster-rcnn's BG_THRESH_LO is 0.1)


def _choose(rng, indices: np.ndarray, count: int) -> np.ndarray:
    """`count` of `indices` without replacement (all of them when fewer), in ascending order."""
    if len(indices) <= count:
        return indices
    return np.sort(indices[rng.permutation(len(indices))[:count]])


def assign_anchors(anchors: np.ndarray, gt_boxes: np.ndarray, height: float, width: float,
                   positive_iou: float = RPN_POSITIVE_IOU,
                   negative_iou: float = RPN_NEGATIVE_IOU) -> Dict[str, np.ndarray]:
    """Each anchor's RPN label before sampling: 1 object, 0 background, -1 ignored.

    As py-faster-rcnn's anchor_target_layer: an anchor not wholly inside the height x width image
    is ignored. An inside anchor is background when its best IoU with every ground-truth box is
    below `negative_iou`, then object when it is (one of) the best anchor(s) of some ground-truth
    box, or its best IoU is at least `positive_iou`; the rest are ignored. One departure: a
    ground-truth box that no inside anchor overlaps at all makes no anchor positive (py-faster-rcnn
    would mark every anchor tied at IoU 0 with it). With no ground truth, every inside anchor is
    background.

    Returns "labels" (A,) int32 and "matched" (A,) int64, the ground-truth box each anchor's IoU is
    highest with (first on ties; -1 where no ground truth or outside the image).
    """
    anchors = np.asarray(anchors, dtype=np.float64).reshape(-1, 4)
    gt_boxes = np.asarray(gt_boxes, dtype=np.float64).reshape(-1, 4)
    labels = np.full(len(anchors), -1, dtype=np.int32)
    matched = np.full(len(anchors), -1, dtype=np.int64)
    inside = np.flatnonzero((anchors[:, 0] >= 0) & (anchors[:, 1] >= 0) &
                            (anchors[:, 2] <= width) & (anchors[:, 3] <= height))
    if len(gt_boxes) == 0:
        labels[inside] = 0
        return {"labels": labels, "matched": matched}
    overlaps = iou(anchors[inside], gt_boxes)  # (inside, M)
    best_gt = overlaps.argmax(axis=1)
    best_iou = overlaps[np.arange(len(inside)), best_gt]
    inside_labels = np.full(len(inside), -1, dtype=np.int32)
    inside_labels[best_iou < negative_iou] = 0
    if len(inside):
        best_per_gt = overlaps.max(axis=0)
        ties = (overlaps == best_per_gt[None, :]) & (best_per_gt[None, :] > 0)
        inside_labels[ties.any(axis=1)] = 1
    inside_labels[best_iou >= positive_iou] = 1
    labels[inside] = inside_labels
    matched[inside] = best_gt
    return {"labels": labels, "matched": matched}


def sample_labels(labels: np.ndarray, rng, batch: int, positive_fraction: float) -> np.ndarray:
    """`labels` (1, 0, -1) with all but a sample of `batch` set to -1: at most
    int(positive_fraction * batch) positives, drawn at random when there are more, and background to
    fill the batch (fewer when there is not enough). Positives are drawn first, then background.
    """
    labels = np.array(labels, dtype=np.int32, copy=True)
    positives = np.flatnonzero(labels == 1)
    kept = _choose(rng, positives, int(positive_fraction * batch))
    labels[np.setdiff1d(positives, kept)] = -1
    negatives = np.flatnonzero(labels == 0)
    kept = _choose(rng, negatives, batch - len(kept))
    labels[np.setdiff1d(negatives, kept)] = -1
    return labels


def rpn_targets(anchors: np.ndarray, gt_boxes: np.ndarray, height: float, width: float, rng,
                batch: int = RPN_BATCH, positive_fraction: float = RPN_POSITIVE_FRACTION) -> Dict[str, np.ndarray]:
    """The RPN's targets for one image: `assign_anchors`, then `sample_labels`.

    "labels" (A,) int32: 1 and 0 for the sampled anchors the objectness loss counts, -1 elsewhere.
    "targets" (A, 4) float32: (dx, dy, dw, dh) of each positive anchor onto its matched box (weights
    1, 1, 1, 1), 0 elsewhere. "weights" (A, 4) float32: 1 on the sampled positives' rows, 0 elsewhere,
    the mask of the regression loss (torchvision divides both losses by the sampled count).
    """
    anchors = np.asarray(anchors, dtype=np.float32).reshape(-1, 4)
    gt_boxes = np.asarray(gt_boxes, dtype=np.float32).reshape(-1, 4)
    assigned = assign_anchors(anchors, gt_boxes, height, width)
    labels = sample_labels(assigned["labels"], rng, batch, positive_fraction)
    targets = np.zeros((len(anchors), 4), dtype=np.float32)
    weights = np.zeros((len(anchors), 4), dtype=np.float32)
    positive = np.flatnonzero(labels == 1)
    if len(positive):
        targets[positive] = encode(anchors[positive], gt_boxes[assigned["matched"][positive]], RPN_WEIGHTS)
        weights[positive] = 1.0
    return {"labels": labels, "targets": targets, "weights": weights}


def roi_targets(proposals: np.ndarray, gt_boxes: np.ndarray, gt_labels: np.ndarray, rng,
                batch: int = ROI_BATCH, foreground_fraction: float = ROI_FOREGROUND_FRACTION,
                foreground_iou: float = ROI_FOREGROUND_IOU,
                background_iou: Tuple[float, float] = ROI_BACKGROUND_IOU) -> Dict[str, np.ndarray]:
    """The RoI head's sample for one image, as torchvision's RoIHeads samples it (foreground at IoU >= 0.5,
    background at IoU in [0, 0.5): every proposal below 0.5, where py-faster-rcnn's proposal_target_layer
    leaves out those under 0.1), with a legacy-RandomState draw in place of torch.randperm.

    The ground-truth boxes are appended to the proposals (after them, as py-faster-rcnn and
    torchvision do), so the head always sees some foreground. Each candidate takes the label of the
    ground-truth box it overlaps most (first on ties): foreground when that IoU >= `foreground_iou`,
    background when it lies in [background_iou[0], background_iou[1]), left out otherwise. Up to
    round(foreground_fraction * batch) foreground RoIs (32 of 128) are drawn, then background RoIs
    fill the batch; the sample is smaller when there are not enough, as in both references.

    Returns, foreground first then background, each in candidate order:
    "rois" (R, 4) float32; "labels" (R,) int32, class + 1 for foreground (1..20 for VOC, 0 is
    background); "targets" (R, 4) float32, (dx, dy, dw, dh) onto the matched box with weights
    (10, 10, 5, 5), 0 for background; "weights" (R, 4) float32, 1 on foreground rows. The head's
    regression is per class: its loss reads the four outputs of the RoI's label.
    """
    proposals = np.asarray(proposals, dtype=np.float32).reshape(-1, 4)
    gt_boxes = np.asarray(gt_boxes, dtype=np.float32).reshape(-1, 4)
    gt_labels = np.asarray(gt_labels, dtype=np.int32).reshape(-1)
    candidates = np.concatenate([proposals, gt_boxes], axis=0)
    if len(gt_boxes):
        overlaps = iou(candidates, gt_boxes)
        best_gt = overlaps.argmax(axis=1)
        best_iou = overlaps[np.arange(len(candidates)), best_gt]
    else:
        best_gt = np.zeros(len(candidates), dtype=np.int64)
        best_iou = np.zeros(len(candidates))
    foreground = _choose(rng, np.flatnonzero(best_iou >= foreground_iou),
                         int(round(foreground_fraction * batch)))
    low, high = background_iou
    background = _choose(rng, np.flatnonzero((best_iou >= low) & (best_iou < high)), batch - len(foreground))
    keep = np.concatenate([foreground, background])
    rois = candidates[keep]
    labels = np.zeros(len(keep), dtype=np.int32)
    targets = np.zeros((len(keep), 4), dtype=np.float32)
    weights = np.zeros((len(keep), 4), dtype=np.float32)
    n_fg = len(foreground)
    if n_fg:
        labels[:n_fg] = gt_labels[best_gt[foreground]] + 1
        targets[:n_fg] = encode(rois[:n_fg], gt_boxes[best_gt[foreground]], HEAD_WEIGHTS)
        weights[:n_fg] = 1.0
    return {"rois": rois, "labels": labels, "targets": targets, "weights": weights}
