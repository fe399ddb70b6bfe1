"""Box geometry shared by the detector's pieces: IoU, the RPN's anchors, the (dx, dy, dw, dh)
box coding and clipping to the image.

Convention: a box is (x1, y1, x2, y2) in continuous coordinates, so its width is x2 - x1 and its
area (x2 - x1) * (y2 - y1), as in torchvision and Detectron2, not py-faster-rcnn's pixel-inclusive
"+1" (width x2 - x1 + 1). An image of W x H pixels spans [0, W] x [0, H]. The VOC boxes of
`data/voc.py` (0-based xmin, ymin, xmax, ymax) are used as such coordinates unchanged. One convention
everywhere keeps the frameworks' own IoU and NMS ops (torchvision's, for one) comparable with these.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import numpy as np

BASE_SIZE = 16
RATIOS = (0.5, 1.0, 2.0)
SCALES = (8, 16, 32)
FEATURE_STRIDE = 16
# torchvision's BoxCoder clamps the decoded log-size change here, so exp() cannot overflow
BBOX_XFORM_CLIP = math.log(1000.0 / 16)
RPN_WEIGHTS = (1.0, 1.0, 1.0, 1.0)
HEAD_WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # py-faster-rcnn's BBOX_NORMALIZE_STDS (0.1, 0.1, 0.2, 0.2)


def area(boxes: np.ndarray) -> np.ndarray:
    """Areas of (N, 4) boxes; a box with x2 <= x1 or y2 <= y1 has area 0."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    return np.maximum(boxes[:, 2] - boxes[:, 0], 0.0) * np.maximum(boxes[:, 3] - boxes[:, 1], 0.0)


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, M) float64 intersection over union of (N, 4) boxes `a` and (M, 4) boxes `b`.

    Boxes that only touch share no area (IoU 0); a zero-area box has IoU 0 with everything, itself
    included, rather than 0 / 0 = NaN.
    """
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    width = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    height = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.maximum(width, 0.0) * np.maximum(height, 0.0)
    union = area(a)[:, None] + area(b)[None, :] - inter
    out = np.zeros_like(inter)
    np.divide(inter, union, out=out, where=union > 0)
    return out


def base_anchors(base_size: int = BASE_SIZE, ratios: Sequence[float] = RATIOS,
                 scales: Sequence[float] = SCALES) -> np.ndarray:
    """The (len(ratios) * len(scales), 4) float32 anchors of one feature-map position, ratio-major
    (ratio 0.5 with scales 8, 16, 32, then ratio 1, then ratio 2), as py-faster-rcnn's
    generate_anchors.

    A ratio is height / width. As py-faster-rcnn, the ratio's width and height are rounded to whole
    pixels at the base size (ratio 0.5: round(sqrt(256 / 0.5)) = 23 wide, round(23 * 0.5) = 12 high)
    and then multiplied by the scale (184 x 96 at scale 8). Every anchor is centred on the middle of
    the position's base_size cell, (8, 8) for position 0; in this module's continuous convention
    that is py-faster-rcnn's anchor with 1 added to x2 and y2 ([-84, -40, 99, 55] becomes
    [-84, -40, 100, 56]): the same pixels, the same sizes.
    """
    center = base_size / 2.0
    anchors = []
    for ratio in ratios:
        # np.round, as py-faster-rcnn: halves round to even (11.5 -> 12)
        width = np.round(np.sqrt(base_size * base_size / ratio))
        height = np.round(width * ratio)
        for scale in scales:
            w, h = width * scale, height * scale
            anchors.append([center - w / 2, center - h / 2, center + w / 2, center + h / 2])
    return np.array(anchors, dtype=np.float32)


def shifted_anchors(height: int, width: int, stride: int = FEATURE_STRIDE,
                    base: Optional[np.ndarray] = None) -> np.ndarray:
    """All (height * width * A, 4) float32 anchors of a height x width feature map at `stride`.

    Row-major over positions, then the A base anchors at each: anchor a at position (y, x) is row
    (y * width + x) * A + a, shifted by (x * stride, y * stride). This is py-faster-rcnn's and
    torchvision's order, and the order of an RPN output laid out (H, W, A).
    """
    base = base_anchors() if base is None else np.asarray(base, dtype=np.float32).reshape(-1, 4)
    xs = np.arange(width, dtype=np.float32) * stride
    ys = np.arange(height, dtype=np.float32) * stride
    shift_y, shift_x = np.meshgrid(ys, xs, indexing="ij")
    shifts = np.stack([shift_x, shift_y, shift_x, shift_y], axis=-1).reshape(-1, 1, 4)
    return (shifts + base[None, :, :]).reshape(-1, 4).astype(np.float32)


def _centres(boxes: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    widths = boxes[:, 2] - boxes[:, 0]
    heights = boxes[:, 3] - boxes[:, 1]
    return boxes[:, 0] + 0.5 * widths, boxes[:, 1] + 0.5 * heights, widths, heights


def encode(reference: np.ndarray, target: np.ndarray, weights: Sequence[float] = RPN_WEIGHTS) -> np.ndarray:
    """(N, 4) float32 regression targets (dx, dy, dw, dh) that move each `reference` box (an anchor
    or a proposal, of positive size) onto its `target` box (Ren et al. 2015, eq. 2), times `weights`:

        dx = wx * (tx - rx) / rw    dy = wy * (ty - ry) / rh
        dw = ww * log(tw / rw)      dh = wh * log(th / rh)

    with (rx, ry) and (tx, ty) the centres and rw, rh, tw, th the widths and heights. The RPN uses
    weights (1, 1, 1, 1), the RoI head (10, 10, 5, 5).
    """
    reference = np.asarray(reference, dtype=np.float64).reshape(-1, 4)
    target = np.asarray(target, dtype=np.float64).reshape(-1, 4)
    wx, wy, ww, wh = weights
    rx, ry, rw, rh = _centres(reference)
    tx, ty, tw, th = _centres(target)
    deltas = np.stack([wx * (tx - rx) / rw, wy * (ty - ry) / rh, ww * np.log(tw / rw), wh * np.log(th / rh)],
                      axis=1)
    return deltas.astype(np.float32)


def decode(reference: np.ndarray, deltas: np.ndarray, weights: Sequence[float] = RPN_WEIGHTS,
           clip: float = BBOX_XFORM_CLIP) -> np.ndarray:
    """(N, 4) float32 boxes that `deltas` make of the `reference` boxes: `encode`'s inverse.

    As torchvision's BoxCoder, dw and dh are clamped at `clip` (log(1000 / 16)) after dividing by
    their weights, so an untrained network's large outputs give large boxes, never inf.
    """
    reference = np.asarray(reference, dtype=np.float64).reshape(-1, 4)
    deltas = np.asarray(deltas, dtype=np.float64).reshape(-1, 4)
    wx, wy, ww, wh = weights
    rx, ry, rw, rh = _centres(reference)
    x = deltas[:, 0] / wx * rw + rx
    y = deltas[:, 1] / wy * rh + ry
    w = np.exp(np.minimum(deltas[:, 2] / ww, clip)) * rw
    h = np.exp(np.minimum(deltas[:, 3] / wh, clip)) * rh
    return np.stack([x - 0.5 * w, y - 0.5 * h, x + 0.5 * w, y + 0.5 * h], axis=1).astype(np.float32)


def clip_boxes(boxes: np.ndarray, height: float, width: float) -> np.ndarray:
    """`boxes` clipped to the image [0, width] x [0, height] (not width - 1: continuous coordinates)."""
    boxes = np.array(boxes, copy=True).reshape(-1, 4)
    boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, width)
    boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, height)
    return boxes
