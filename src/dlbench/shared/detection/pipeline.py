"""The detector's host side, written once in numpy and shared by every framework: the images and
their boxes as a prepared detection dataset stores them, the canvas each image is padded into, the
flip from the seed, the RPN's and the RoI head's training targets, the proposals made of the RPN's
outputs, the detections made of the head's, and the RoI Align sampling plan.

Why shared numpy rather than each framework's own: none of it carries a gradient (approximate joint
training: proposals are constants to the head), so one implementation makes every framework sample
the same anchors and RoIs from the same seed, and a deviation between frameworks can only come from
what they compute. The frameworks still run what costs: the networks, RoI Align (their own op where
they have one, else gathered from the plan), the losses, and NMS (their own op where they have one;
`nms` arrives here as the adapter's function).

Worker side: Python 3.8, numpy alone.
"""
from __future__ import annotations

import functools
import os
from typing import Callable, Dict, Tuple

import numpy as np

from dlbench.shared.detection.boxes import HEAD_WEIGHTS, base_anchors, clip_boxes, decode, shifted_anchors
from dlbench.shared.detection.targets import roi_targets, rpn_targets
from dlbench.shared.protocol import array_file

# Proposals (torchvision's Faster R-CNN defaults for one feature map): the top PRE_NMS by objectness,
# NMS at 0.7, the top POST_NMS kept; boxes smaller than MIN_SIZE pixels a side are dropped.
SETTINGS = {
    "rpn_batch": 256, "roi_batch": 128,
    "pre_nms_train": 2000, "post_nms_train": 2000, "pre_nms_test": 1000, "post_nms_test": 300,
    "rpn_nms": 0.7, "min_size": 1e-3,
    # detections (torchvision's box_score_thresh, box_nms_thresh, box_detections_per_img)
    "score_threshold": 0.05, "detection_nms": 0.5, "detections_per_image": 100,
}
SMOOTH_L1_BETA = 1.0 / 9  # torchvision's, for both box losses (py-faster-rcnn's RPN sigma 3)

Nms = Callable[[np.ndarray, np.ndarray, float], np.ndarray]


def settings(recipe: dict) -> dict:
    """SETTINGS with the recipe's "detection" overrides."""
    return dict(SETTINGS, **recipe.get("detection", {}))


class DetectionSplit(object):
    """One part of a prepared detection dataset (data/voc.py's layout): images in one flat pixel
    array, boxes in the resized images' pixels."""

    def __init__(self, index, spans, pixels, boxes, labels, difficult):
        self.index, self.spans, self.pixels = index, spans, pixels
        self.boxes, self.labels, self.difficult = boxes, labels, difficult

    @classmethod
    def load(cls, folder: str, part: str) -> "DetectionSplit":
        def array(name):
            return np.load(os.path.join(folder, array_file("%s_%s" % (name, part))), mmap_mode="r")
        return cls(array("x"), array("y"), array("pixels"), array("boxes"), array("labels"), array("difficult"))

    def in_memory(self) -> "DetectionSplit":
        """This split with every array read into memory from its memory-mapped file."""
        return DetectionSplit(*(np.array(array) for array in (self.index, self.spans, self.pixels, self.boxes,
                                                              self.labels, self.difficult)))

    def __len__(self) -> int:
        return len(self.index)

    def image(self, i: int) -> np.ndarray:
        """(height, width, 3) uint8."""
        offset, height, width = (int(v) for v in self.index[i][:3])
        return np.asarray(self.pixels[offset:offset + height * width * 3]).reshape(height, width, 3)

    def truth(self, i: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(boxes (M, 4) float32, labels (M,) int32 in 0..19, difficult (M,) bool)."""
        first, count = (int(v) for v in self.spans[i])
        part = slice(first, first + count)
        return (np.asarray(self.boxes[part], np.float32), np.asarray(self.labels[part], np.int32),
                np.asarray(self.difficult[part]).astype(bool))


class Image(object):
    """One image as a detector consumes it: `x` (1, canvas H, canvas W, 3) float32 in [0, 1], the
    image in its top-left corner and zeros elsewhere; `height` and `width`, the image's own size;
    ground truth for training (difficult objects left out, as py-faster-rcnn trains)."""

    def __init__(self, x, height, width, boxes, labels):
        self.x, self.height, self.width, self.boxes, self.labels = x, height, width, boxes, labels


def canvas_for(height: int, width: int, model: dict) -> Tuple[int, int]:
    """The model's landscape canvas, or its transpose for a portrait image."""
    rows, cols = model["input_shape"][:2]
    canvas = (rows, cols) if width >= height else (cols, rows)
    if height > canvas[0] or width > canvas[1]:
        raise ValueError("a %dx%d image does not fit the model's %dx%d canvas" % (width, height, canvas[1], canvas[0]))
    return canvas


def padded(pixels: np.ndarray, model: dict, scale: float) -> np.ndarray:
    height, width = pixels.shape[:2]
    x = np.zeros((1,) + canvas_for(height, width, model) + (3,), np.float32)
    x[0, :height, :width] = pixels / np.float32(scale)
    return x


def training_image(split: DetectionSplit, i: int, model: dict, scale: float, rng) -> Image:
    """Image i, flipped left-right when the rng's first draw is below 0.5, difficult boxes dropped."""
    pixels = split.image(i)
    boxes, labels, difficult = split.truth(i)
    boxes, labels = boxes[~difficult], labels[~difficult]
    height, width = pixels.shape[:2]
    if rng.rand() < 0.5:
        pixels = pixels[:, ::-1]
        boxes = np.stack([width - boxes[:, 2], boxes[:, 1], width - boxes[:, 0], boxes[:, 3]], axis=1)
    return Image(padded(pixels, model, scale), height, width, boxes.reshape(-1, 4), labels)


def image_rng(seed: int, epoch: int, i: int):
    """The stream of image i's flip and samples in an epoch: legacy RandomState, the same in every
    numpy, independent of the order images come in."""
    return np.random.RandomState([seed, epoch, i])


def anchors(model: dict, feature_hw: Tuple[int, int]) -> np.ndarray:
    """(fh * fw * A, 4) float32 anchors of a feature map, in the RPN outputs' (y, x, a) order; read-only."""
    config = model["detector"]
    return _anchors(int(feature_hw[0]), int(feature_hw[1]), config["feature_stride"],
                    tuple(config["anchor_ratios"]), tuple(config["anchor_scales"]))


@functools.lru_cache(maxsize=8)
def _anchors(height: int, width: int, stride: int, ratios: tuple, scales: tuple) -> np.ndarray:
    """Made once per canvas: every training step asks twice (proposals, then targets), every image alike."""
    made = shifted_anchors(height, width, stride, base_anchors(ratios=ratios, scales=scales))
    made.setflags(write=False)
    return made


def feature_size(image: Image, model: dict) -> Tuple[int, int]:
    stride = model["detector"]["feature_stride"]
    return image.x.shape[1] // stride, image.x.shape[2] // stride


def propose(model: dict, image: Image, objectness: np.ndarray, deltas: np.ndarray, nms: Nms,
            pre_nms: int, post_nms: int, config: dict) -> np.ndarray:
    """(P, 4) float32 proposals: the RPN's deltas decoded onto the anchors, clipped to the image, boxes
    under min_size dropped, the pre_nms most object-like, NMS, the post_nms best."""
    boxes = decode(anchors(model, feature_size(image, model)), deltas)
    boxes = clip_boxes(boxes, image.height, image.width)
    scores = np.asarray(objectness, np.float32).reshape(-1)
    big = np.flatnonzero((boxes[:, 2] - boxes[:, 0] >= config["min_size"]) &
                         (boxes[:, 3] - boxes[:, 1] >= config["min_size"]))
    top = big[np.argsort(-scores[big], kind="stable")[:pre_nms]]
    kept = np.asarray(nms(boxes[top], scores[top], config["rpn_nms"]), np.int64)[:post_nms]
    return boxes[top[kept]]


def train_targets(model: dict, image: Image, proposals: np.ndarray, rng, config: dict) -> Dict[str, np.ndarray]:
    """Everything a training step needs besides the image: the RPN's sampled anchors and their
    targets, the RoI head's sample of proposals and ground truth, and that sample's RoI Align plan."""
    rpn = rpn_targets(anchors(model, feature_size(image, model)), image.boxes, image.height, image.width, rng,
                      batch=config["rpn_batch"])
    rois = roi_targets(proposals, image.boxes, image.labels, rng, batch=config["roi_batch"])
    index, weights = roi_align_plan(rois["rois"], feature_size(image, model), model["detector"]["roi"])
    return {"rpn_labels": rpn["labels"], "rpn_targets": rpn["targets"], "rpn_weights": rpn["weights"],
            "rois": rois["rois"], "roi_labels": rois["labels"], "roi_targets": rois["targets"],
            "roi_weights": rois["weights"], "plan_index": index, "plan_weights": weights}


def detections(model: dict, image: Image, proposals: np.ndarray, class_logits: np.ndarray, box_deltas: np.ndarray,
               nms: Nms, config: dict) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes (D, 4), scores (D,), labels (D,) in 0..19) as torchvision's postprocess_detections:
    softmax scores, each class's deltas decoded onto its proposal and clipped, scores under the
    threshold and tiny boxes dropped, NMS per class, the best detections_per_image kept."""
    logits = np.asarray(class_logits, np.float64)
    scores = np.exp(logits - logits.max(axis=1, keepdims=True))
    scores /= scores.sum(axis=1, keepdims=True)
    classes = scores.shape[1]
    all_boxes, all_scores, all_labels = [], [], []
    for cls in range(1, classes):
        mine = np.flatnonzero(scores[:, cls] > config["score_threshold"])
        boxes = decode(proposals[mine], np.asarray(box_deltas)[mine, 4 * cls:4 * cls + 4], HEAD_WEIGHTS)
        boxes = clip_boxes(boxes, image.height, image.width)
        big = (boxes[:, 2] - boxes[:, 0] >= 1e-2) & (boxes[:, 3] - boxes[:, 1] >= 1e-2)
        boxes, cls_scores = boxes[big], scores[mine[big], cls].astype(np.float32)
        kept = np.asarray(nms(boxes, cls_scores, config["detection_nms"]), np.int64)
        all_boxes.append(boxes[kept])
        all_scores.append(cls_scores[kept])
        all_labels.append(np.full(len(kept), cls - 1, np.int32))
    boxes, scores, labels = np.concatenate(all_boxes), np.concatenate(all_scores), np.concatenate(all_labels)
    best = np.argsort(-scores, kind="stable")[:config["detections_per_image"]]
    return boxes[best].reshape(-1, 4), scores[best], labels[best]


def roi_align_plan(rois: np.ndarray, feature_hw: Tuple[int, int], roi: dict) -> Tuple[np.ndarray, np.ndarray]:
    """Where RoI Align reads the feature map, as torchvision's roi_align (aligned=False) computes it:
    for RoI r and bin b (row-major over size x size), `index` (R, size^2, K) int32 positions in the
    flattened (fh * fw) map and `weights` (R, size^2, K) float32 such that

        pooled[r, b, :] = sum_k weights[r, b, k] * feature[index[r, b, k], :]

    K = 4 * sampling_ratio^2 (four bilinear corners per sample, the bin's mean already folded into
    the weights). A sample outside [-1, size] of the map weighs 0, one in [-1, 0] reads the edge."""
    rois = np.asarray(rois, np.float64).reshape(-1, 4) * roi["spatial_scale"]
    size, grid = roi["size"], roi["sampling_ratio"]
    height, width = feature_hw
    roi_w = np.maximum(rois[:, 2] - rois[:, 0], 1.0)
    roi_h = np.maximum(rois[:, 3] - rois[:, 1], 1.0)
    steps = (np.arange(size)[:, None] + (np.arange(grid)[None, :] + 0.5) / grid).reshape(-1)  # (size * grid,)
    ys = rois[:, 1:2] + steps[None, :] * (roi_h / size)[:, None]  # (R, size * grid)
    xs = rois[:, 0:1] + steps[None, :] * (roi_w / size)[:, None]
    y_low, y_high, y_frac, y_valid = _axis_corners(ys, height)
    x_low, x_high, x_frac, x_valid = _axis_corners(xs, width)
    count = len(rois)
    # (R, size*grid rows, size*grid cols, 4 corners)
    rows = np.stack([y_low, y_low, y_high, y_high], axis=-1)[:, :, None, :]
    cols = np.stack([x_low, x_high, x_low, x_high], axis=-1)[:, None, :, :]
    wy = np.stack([1 - y_frac, 1 - y_frac, y_frac, y_frac], axis=-1)[:, :, None, :]
    wx = np.stack([1 - x_frac, x_frac, 1 - x_frac, x_frac], axis=-1)[:, None, :, :]
    valid = (y_valid[:, :, None] & x_valid[:, None, :])[..., None]
    index = rows * width + cols
    weights = np.where(valid, wy * wx, 0.0) / (grid * grid)
    # (R, size, grid, size, grid, 4) -> (R, size, size, grid, grid, 4) -> (R, size^2, K)
    index = np.broadcast_to(index, weights.shape).reshape(count, size, grid, size, grid, 4)
    weights = weights.reshape(count, size, grid, size, grid, 4)
    order = (0, 1, 3, 2, 4, 5)
    return (index.transpose(order).reshape(count, size * size, -1).astype(np.int32),
            weights.transpose(order).reshape(count, size * size, -1).astype(np.float32))


def _axis_corners(coords: np.ndarray, size: int):
    """torchvision's bilinear_interpolate along one axis: the low and high cells, the fraction towards
    the high one, and whether the sample counts at all."""
    valid = (coords >= -1.0) & (coords <= size)
    coords = np.maximum(coords, 0.0)
    low = np.floor(coords).astype(np.int64)
    at_edge = low >= size - 1
    low = np.where(at_edge, size - 1, low)
    high = np.where(at_edge, size - 1, low + 1)
    frac = np.where(at_edge, 0.0, coords - low)
    return low, high, frac, valid


def roi_align(feature: np.ndarray, rois: np.ndarray, roi: dict) -> np.ndarray:
    """(R, size, size, C) RoI Align of an (fh, fw, C) feature map: the plan applied in numpy."""
    index, weights = roi_align_plan(rois, feature.shape[:2], roi)
    flat = np.asarray(feature, np.float64).reshape(-1, feature.shape[-1])
    pooled = np.einsum("rbk,rbkc->rbc", weights.astype(np.float64), flat[index])
    return pooled.reshape(len(index), roi["size"], roi["size"], -1)


def smooth_l1(difference: np.ndarray, beta: float = SMOOTH_L1_BETA) -> np.ndarray:
    """Elementwise: 0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (torchvision's)."""
    d = np.abs(difference)
    return np.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
