"""The detector's shared numpy pieces (dlbench.detection) on hand-computed cases.

Boxes are x1, y1, x2, y2 in continuous coordinates: width x2 - x1, area (x2 - x1) * (y2 - y1).
"""
import math

import numpy as np
import pytest

from dlbench.shared.detection.boxes import (
    BBOX_XFORM_CLIP,
    HEAD_WEIGHTS,
    base_anchors,
    clip_boxes,
    decode,
    encode,
    iou,
    shifted_anchors,
)
from dlbench.shared.detection.nms import nms
from dlbench.shared.detection.targets import assign_anchors, roi_targets, rpn_targets, sample_labels
from dlbench.shared.detection.voc_eval import average_precision, voc_map

SQUARE = [0, 0, 10, 10]  # area 100


# ---- IoU ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("other, expected", [
    (SQUARE, 1.0),                  # identical: 100 / 100
    ([20, 20, 30, 30], 0.0),        # disjoint
    ([10, 0, 20, 10], 0.0),         # touching along x = 10: intersection width 0
    ([10, 10, 20, 20], 0.0),        # touching at a corner
    ([2, 2, 7, 7], 0.25),           # contained: 25 / (100 + 25 - 25)
    ([5, 0, 15, 10], 50 / 150),     # half overlap: 50 / (100 + 100 - 50)
    ([5, 5, 5, 5], 0.0),            # a point inside: area 0, so 0 / 100
    ([0, 5, 10, 5], 0.0),           # a line inside: area 0
])
def test_iou_hand_cases(other, expected):
    assert iou(np.array([SQUARE], np.float32), np.array([other], np.float32))[0, 0] == expected
    assert iou([other], [SQUARE])[0, 0] == expected  # symmetric


def test_iou_of_zero_area_boxes_with_each_other_is_zero_not_nan():
    point = [[3, 3, 3, 3]]
    assert iou(point, point)[0, 0] == 0.0  # 0 / 0 union: defined as 0
    assert iou([[0, 0, 0, 0], [1, 1, 1, 5]], [[0, 0, 0, 0]]).tolist() == [[0.0], [0.0]]


def test_iou_matrix_shape_and_empty_sets():
    a = np.array([SQUARE, [2, 2, 7, 7]])
    b = np.array([SQUARE, [5, 0, 15, 10], [20, 20, 30, 30]])
    # row [2, 2, 7, 7]: with SQUARE 25 / 100; with [5, 0, 15, 10] 2 * 5 = 10 / (25 + 100 - 10) = 10 / 115
    assert iou(a, b).tolist() == [[1.0, 50 / 150, 0.0], [0.25, 10 / 115, 0.0]]
    assert iou(np.zeros((0, 4)), b).shape == (0, 3)
    assert iou(a, np.zeros((0, 4))).shape == (2, 0)


# ---- anchors --------------------------------------------------------------------------------------------

# py-faster-rcnn's generate_anchors(16, [0.5, 1, 2], 2 ** arange(3, 6)) in its "+1" convention.
PY_FASTER_RCNN = [[-84, -40, 99, 55], [-176, -88, 191, 103], [-360, -184, 375, 199],
                  [-56, -56, 71, 71], [-120, -120, 135, 135], [-248, -248, 263, 263],
                  [-36, -80, 51, 95], [-80, -168, 95, 183], [-168, -344, 183, 359]]
# Ours: centre (8, 8), the middle of cell [0, 16). Ratio 0.5: w = round(sqrt(256 / 0.5)) = round(22.63) = 23,
# h = round(23 * 0.5) = round(11.5) = 12; x 8 -+ 23 * 8 / 2 = 8 -+ 92 -> -84, 100; y 8 -+ 12 * 8 / 2 = 8 -+ 48
# -> -40, 56. Ratio 1: 16 x 16, scale 8 -> 8 -+ 64. Ratio 2: w = round(sqrt(128)) = round(11.31) = 11,
# h = 22; scale 8 -> 88 x 176: x 8 -+ 44, y 8 -+ 88. Each is py-faster-rcnn's with x2 + 1 and y2 + 1.
OURS = [[-84, -40, 100, 56], [-176, -88, 192, 104], [-360, -184, 376, 200],
        [-56, -56, 72, 72], [-120, -120, 136, 136], [-248, -248, 264, 264],
        [-36, -80, 52, 96], [-80, -168, 96, 184], [-168, -344, 184, 360]]


def test_base_anchors_are_py_faster_rcnns_in_continuous_coordinates():
    anchors = base_anchors()
    assert anchors.dtype == np.float32
    assert anchors.tolist() == OURS
    assert (anchors - np.array([0, 0, 1, 1])).tolist() == PY_FASTER_RCNN
    # sizes 184 x 96, 368 x 192, 736 x 384, 128 x 128, ..., 352 x 704
    assert (anchors[:, 2] - anchors[:, 0]).tolist() == [184, 368, 736, 128, 256, 512, 88, 176, 352]


def test_shifted_anchors_order_is_row_major_positions_then_the_9_anchors():
    anchors = shifted_anchors(2, 3)  # a 2 x 3 feature map at stride 16
    assert anchors.shape == (2 * 3 * 9, 4) and anchors.dtype == np.float32
    grid = anchors.reshape(2, 3, 9, 4)
    for y in range(2):
        for x in range(3):
            assert (grid[y, x] == np.array(OURS) + [16 * x, 16 * y, 16 * x, 16 * y]).all()
    assert anchors[(1 * 3 + 2) * 9 + 4].tolist() == [-120 + 32, -120 + 16, 136 + 32, 136 + 16]


# ---- box coding -----------------------------------------------------------------------------------------


def test_encode_hand_case():
    # anchor [0, 0, 10, 10]: centre (5, 5), 10 x 10; target [2, 4, 22, 14]: centre (12, 9), 20 x 10
    # dx = (12 - 5) / 10 = 0.7, dy = (9 - 5) / 10 = 0.4, dw = log(20 / 10) = log 2, dh = log 1 = 0
    deltas = encode([[0, 0, 10, 10]], [[2, 4, 22, 14]])
    assert deltas.dtype == np.float32
    assert deltas.tolist() == [[np.float32(v) for v in (0.7, 0.4, math.log(2), 0.0)]]
    # head weights (10, 10, 5, 5): 7, 4, 5 log 2, 0
    assert encode([[0, 0, 10, 10]], [[2, 4, 22, 14]], HEAD_WEIGHTS).tolist() == [
        [np.float32(7.0), np.float32(4.0), np.float32(5 * math.log(2)), np.float32(0.0)]]


def test_decode_hand_case_and_clip():
    # reference [0, 0, 10, 20]: centre (5, 10), 10 x 20; dx 0.5 -> x 5 + 5 = 10, dy -0.25 -> y 10 - 5 = 5,
    # sizes unchanged -> [10 - 5, 5 - 10, 10 + 5, 5 + 10]
    assert decode([[0, 0, 10, 20]], [[0.5, -0.25, 0, 0]]).tolist() == [[5, -5, 15, 15]]
    # same with head weights: the deltas are divided by (10, 10, 5, 5) first
    assert decode([[0, 0, 10, 20]], [[5, -2.5, 0, 0]], HEAD_WEIGHTS).tolist() == [[5, -5, 15, 15]]
    # dw = 100 is clamped at log(1000 / 16): width 16 * 1000 / 16 = 1000 around centre 8 -> [-492, 508];
    # with head weights dh = 50 / 5 = 10 is clamped too
    for weights, deltas in (((1, 1, 1, 1), [0, 0, 100, 0]), (HEAD_WEIGHTS, [0, 0, 0, 50])):
        box = decode([[0, 0, 16, 16]], [deltas], weights)[0]
        size = box[2] - box[0] if deltas[2] else box[3] - box[1]
        assert np.isfinite(box).all()
        assert size == pytest.approx(16 * math.exp(BBOX_XFORM_CLIP), rel=1e-6) == pytest.approx(1000, rel=1e-6)


def test_encode_decode_round_trip():
    rng = np.random.RandomState(0)
    corners = rng.uniform(0, 500, (50, 2))
    anchors = np.concatenate([corners, corners + rng.uniform(4, 300, (50, 2))], axis=1)
    corners = rng.uniform(0, 500, (50, 2))
    targets = np.concatenate([corners, corners + rng.uniform(4, 300, (50, 2))], axis=1)
    for weights in ((1, 1, 1, 1), HEAD_WEIGHTS):
        back = decode(anchors, encode(anchors, targets, weights), weights)
        np.testing.assert_allclose(back, targets, rtol=0, atol=1e-3)  # float32 deltas


def test_clip_boxes_to_the_continuous_image():
    # a 20 wide, 10 high image spans [0, 20] x [0, 10]
    assert clip_boxes(np.array([[-5, -5, 30, 12], [1, 2, 3, 4]], np.float32), 10, 20).tolist() == [
        [0, 0, 20, 10], [1, 2, 3, 4]]


# ---- NMS ------------------------------------------------------------------------------------------------


def test_nms_hand_case_with_ties():
    boxes = [[0, 0, 10, 10],    # 0: score 0.9
             [1, 0, 11, 10],    # 1: 0.9, IoU with 0 = 90 / 110 = 0.82: the tie goes to index 0, 1 goes
             [20, 0, 30, 10],   # 2: 0.9, disjoint from all above: kept
             [0, 0, 10, 5],     # 3: 0.95, first; IoU with 0 = 50 / 100 = 0.5, not > 0.5: 0 survives
             [21, 0, 31, 10]]   # 4: 0.1, IoU with 2 = 90 / 110: suppressed
    scores = [0.9, 0.9, 0.9, 0.95, 0.1]
    keep = nms(np.array(boxes, np.float32), np.array(scores, np.float32), 0.5)
    assert keep.dtype == np.int64 and keep.tolist() == [3, 0, 2]
    # boxes 0 and 1 swapped: the tie now goes to the lower index, box [1, 0, 11, 10]
    assert nms([boxes[1], boxes[0]] + boxes[2:], scores, 0.5).tolist() == [3, 0, 2]
    # threshold 0.85: 0.82 no longer suppresses, neither box 1 nor box 4
    assert nms([boxes[1], boxes[0]] + boxes[2:], scores, 0.85).tolist() == [3, 0, 1, 2, 4]
    assert nms(np.zeros((0, 4)), np.zeros(0), 0.5).tolist() == []


def _brute_force_nms(boxes, scores, threshold):
    def overlap(a, b):
        inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
        return inter / union if union > 0 else 0.0

    kept = []
    for i in sorted(range(len(boxes)), key=lambda i: (-scores[i], i)):
        if all(overlap(boxes[i], boxes[j]) <= threshold for j in kept):
            kept.append(i)
    return kept


@pytest.mark.parametrize("seed", range(5))
def test_nms_equals_brute_force_on_random_boxes(seed):
    rng = np.random.RandomState(seed)
    corners = rng.randint(0, 60, (80, 2)).astype(np.float64)
    boxes = np.concatenate([corners, corners + rng.randint(0, 30, (80, 2))], axis=1)  # some of zero area
    scores = rng.randint(0, 10, 80) / 10.0  # many ties
    for threshold in (0.3, 0.5, 0.7):
        assert nms(boxes, scores, threshold).tolist() == _brute_force_nms(boxes.tolist(), scores.tolist(),
                                                                           threshold)


# ---- RPN targets ----------------------------------------------------------------------------------------

GT = [[0, 0, 40, 40], [50, 50, 90, 90]]  # in a 100 x 100 image; each 1600
ANCHORS = [
    [0, 0, 40, 40],      # 0: IoU 1 with gt 0                                    -> 1
    [0, 0, 40, 30],      # 1: 1200 / 1600 = 0.75 >= 0.7                          -> 1
    [0, 0, 40, 20],      # 2: 800 / 1600 = 0.5, between 0.3 and 0.7              -> -1
    [55, 55, 95, 95],    # 3: with gt 1: 35 * 35 = 1225 / (3200 - 1225) = 0.62, gt 1's best -> 1
    [60, 60, 100, 100],  # 4: 30 * 30 = 900 / (3200 - 900) = 0.39, touches the border: inside -> -1
    [0, 60, 30, 100],    # 5: IoU 0 with both                                    -> 0
    [-10, 0, 30, 40],    # 6: IoU 0.75 with gt 0 but crosses the left border     -> -1
    [70, 0, 101, 30],    # 7: crosses the right border                           -> -1
    [60, 0, 100, 40],    # 8: IoU 0 with both                                    -> 0
    [0, 0, 20, 20],      # 9: 400 / 1600 = 0.25 < 0.3                           -> 0
    [55, 55, 95, 95],    # 10: ties anchor 3 as gt 1's best                      -> 1
]


def test_assign_anchors_hand_case():
    assigned = assign_anchors(np.array(ANCHORS, np.float32), np.array(GT, np.float32), 100, 100)
    assert assigned["labels"].dtype == np.int32
    assert assigned["labels"].tolist() == [1, 1, -1, 1, -1, 0, -1, -1, 0, 0, 1]
    # the box with the highest IoU (the first, 0, when all are 0); -1 outside the image
    assert assigned["matched"].tolist() == [0, 0, 0, 1, 1, 0, -1, -1, 0, 0, 1]


def test_assign_anchors_best_anchor_below_negative_iou_and_edge_cases():
    anchors = [[0, 0, 40, 40], [50, 50, 60, 60]]
    # gt [0, 0, 10, 10]: its best anchor has IoU 100 / 1600 = 0.0625 < 0.3, still positive
    assert assign_anchors(anchors, [[0, 0, 10, 10]], 100, 100)["labels"].tolist() == [1, 0]
    # a gt no anchor overlaps makes nothing positive (py-faster-rcnn would mark both, tied at IoU 0)
    assert assign_anchors(anchors, [[80, 80, 90, 90]], 100, 100)["labels"].tolist() == [0, 0]
    # no ground truth: every inside anchor is background
    assert assign_anchors(anchors + [[-1, 0, 5, 5]], np.zeros((0, 4)), 100, 100)["labels"].tolist() == [0, 0, -1]


def test_rpn_targets_hand_case():
    out = rpn_targets(np.array(ANCHORS, np.float32), np.array(GT, np.float32), 100, 100,
                      np.random.RandomState(0))
    assert out["labels"].tolist() == [1, 1, -1, 1, -1, 0, -1, -1, 0, 0, 1]  # 4 + 3 < 256: all kept
    # anchor 1 [0, 0, 40, 30] (centre (20, 15)) onto gt 0 (centre (20, 20)): dy = 5 / 30, dh = log(40 / 30)
    assert out["targets"][1].tolist() == [0.0, np.float32(5 / 30), 0.0, np.float32(math.log(40 / 30))]
    # anchor 3 [55, 55, 95, 95] onto gt 1 [50, 50, 90, 90]: dx = dy = -5 / 40, same size
    assert out["targets"][3].tolist() == [-0.125, -0.125, 0.0, 0.0]
    assert out["targets"][[0, 2, 4, 5]].tolist() == [[0.0] * 4] * 4
    assert out["weights"][:, 0].tolist() == [1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1]


def test_sample_labels_limits_and_seed():
    labels = np.array([1] * 300 + [0] * 1000 + [-1] * 50, np.int32)
    sampled = sample_labels(labels, np.random.RandomState(1), 256, 0.5)
    assert (sampled == 1).sum() == 128 and (sampled == 0).sum() == 128
    assert set(np.flatnonzero(sampled == 1)) <= set(range(300))
    assert (sampled[1300:] == -1).all()
    few = sample_labels(np.array([1] * 20 + [0] * 1000, np.int32), np.random.RandomState(1), 256, 0.5)
    assert (few == 1).sum() == 20 and (few == 0).sum() == 236  # background fills the batch
    assert sample_labels(np.array([1] * 3 + [0] * 2), np.random.RandomState(1), 256, 0.5).tolist() == [1] * 3 + [0] * 2
    assert (sample_labels(labels, np.random.RandomState(1), 256, 0.5) == sampled).all()  # same seed
    assert not (sample_labels(labels, np.random.RandomState(2), 256, 0.5) == sampled).all()


def test_sample_labels_draws_numpys_frozen_legacy_stream():
    # RandomState(0).permutation(6) = [5, 2, 1, 3, 0, 4] in every numpy: of positives 0..5 the first two,
    # 5 and 2, stay; the stream's next permutation(4) = [3, 0, 2, 1] keeps negatives 6 + 3 and 6 + 0
    sampled = sample_labels(np.array([1] * 6 + [0] * 4), np.random.RandomState(0), 4, 0.5)
    assert sampled.tolist() == [-1, -1, 1, -1, -1, 1, 0, -1, -1, 0]


def test_rpn_targets_are_deterministic_on_a_full_feature_map():
    anchors = shifted_anchors(38, 50)  # a 600 x 800 image at stride 16: 17,100 anchors
    gt = np.array([[100, 100, 300, 400], [400, 50, 700, 250], [30, 420, 90, 590]], np.float32)
    first = rpn_targets(anchors, gt, 600, 800, np.random.RandomState(5))
    again = rpn_targets(anchors, gt, 600, 800, np.random.RandomState(5))
    for key in ("labels", "targets", "weights"):
        assert np.array_equal(first[key], again[key])
    positives, negatives = (first["labels"] == 1).sum(), (first["labels"] == 0).sum()
    assert 3 <= positives <= 128 and positives + negatives == 256
    assert (first["weights"][:, 0] == (first["labels"] == 1)).all()


# ---- RoI head targets -----------------------------------------------------------------------------------


def test_roi_targets_hand_case():
    proposals = [[0, 0, 40, 30],         # 0: IoU 0.75 with gt 0: foreground
                 [0, 0, 40, 20],         # 1: 0.5, foreground (>= 0.5)
                 [0, 0, 20, 20],         # 2: 0.25: background
                 [60, 60, 100, 100],     # 3: 0.39 with gt 1: background
                 [200, 200, 210, 210]]   # 4: 0: background ([0.0, 0.5))
    # candidates 5 and 6 are the appended gts themselves (IoU 1): foreground
    out = roi_targets(np.array(proposals, np.float32), np.array(GT, np.float32), np.array([14, 11], np.int32),
                      np.random.RandomState(0))
    assert out["rois"].tolist() == [proposals[0], proposals[1], GT[0], GT[1], proposals[2], proposals[3],
                                    proposals[4]]
    assert out["labels"].dtype == np.int32 and out["labels"].tolist() == [15, 15, 15, 12, 0, 0, 0]
    # weights (10, 10, 5, 5): proposal 0, centre (20, 15), 40 x 30 onto (20, 20), 40 x 40: dy = 10 * 5 / 30,
    # dh = 5 log(40 / 30); proposal 1, centre (20, 10), 40 x 20: dy = 10 * 10 / 20 = 5, dh = 5 log 2
    assert out["targets"].tolist() == [[0, np.float32(10 * 5 / 30), 0, np.float32(5 * math.log(40 / 30))],
                                       [0, 5, 0, np.float32(5 * math.log(2))]] + [[0, 0, 0, 0]] * 5
    assert out["weights"][:, 0].tolist() == [1, 1, 1, 1, 0, 0, 0]


def test_roi_targets_limits_seed_and_no_ground_truth():
    rng = np.random.RandomState(0)
    near = np.array([[0, 0, 40, 40]]) + rng.uniform(-3, 3, (100, 4))  # IoU with gt 0 well above 0.5
    far = np.array([[300, 300, 340, 340]]) + rng.uniform(-50, 50, (500, 4))
    proposals = np.concatenate([near, far]).astype(np.float32)
    gt, labels = np.array(GT, np.float32), np.array([14, 11], np.int32)
    out = roi_targets(proposals, gt, labels, np.random.RandomState(3))
    assert len(out["rois"]) == 128 and (out["labels"] > 0).sum() == 32  # 25% of 128
    again = roi_targets(proposals, gt, labels, np.random.RandomState(3))
    assert all(np.array_equal(out[key], again[key]) for key in out)
    small = roi_targets(proposals, gt, labels, np.random.RandomState(3), batch=4)
    assert (small["labels"] > 0).sum() == 1 and len(small["labels"]) == 4  # round(0.25 * 4) = 1
    empty = roi_targets(proposals[:5], np.zeros((0, 4)), np.zeros(0), np.random.RandomState(3))
    assert len(empty["rois"]) == 5 and (empty["labels"] == 0).all() and (empty["targets"] == 0).all()


# ---- VOC mAP --------------------------------------------------------------------------------------------

G0, G1, ELSEWHERE = [0, 0, 10, 10], [20, 20, 30, 30], [50, 50, 60, 60]


def one_class(detections, gt_boxes, difficult=None):
    """voc_map over one image and one class (label 0)."""
    boxes, scores = [box for box, _ in detections], [score for _, score in detections]
    det = (np.array(boxes, np.float32).reshape(-1, 4), np.array(scores, np.float32), np.zeros(len(scores), np.int32))
    gt = (np.array(gt_boxes, np.float32), np.zeros(len(gt_boxes), np.int32),
          np.array(difficult or [0] * len(gt_boxes), np.uint8))
    return voc_map([det], [gt], num_classes=1)


def test_ap_hand_computed_curve():
    # by score: TP (G0), FP, TP (G1) of 2 gts. recall 0.5, 0.5, 1; precision 1, 0.5, 2/3.
    # Made decreasing from the right: 1, 2/3, 2/3. Recall steps 0 -> 0.5 at precision 1, 0.5 -> 1 at 2/3:
    # AP = 0.5 * 1 + 0.5 * 2/3 = 0.8333
    result = one_class([(G0, 0.9), (ELSEWHERE, 0.8), (G1, 0.7)], [G0, G1])
    assert result["ap"] == [0.5 * 1.0 + 0.5 * (2.0 / 3.0)] and result["map"] == result["ap"][0]
    assert average_precision(np.array([0.5, 0.5, 1.0]), np.array([1.0, 0.5, 2.0 / 3.0])) == result["map"]


def test_ap_ties_keep_input_order():
    # both 0.8: the FP listed first goes first: recall 0, 1; precision 0, 0.5 -> AP = 1 * 0.5
    assert one_class([(ELSEWHERE, 0.8), (G0, 0.8)], [G0])["map"] == 0.5
    # listed the other way: recall 1, 1; precision 1, 0.5 -> AP = 1 * 1
    assert one_class([(G0, 0.8), (ELSEWHERE, 0.8)], [G0])["map"] == 1.0


def test_ap_detection_of_a_difficult_gt_is_neither_tp_nor_fp():
    # G1 difficult: the 0.9 detection on it is left out, so the 0.8 one on G0 is first: AP 1
    # (counted as FP it would give 0.5); recall counts G0 only
    assert one_class([(G1, 0.9), (G0, 0.8)], [G0, G1], difficult=[0, 1])["map"] == 1.0
    assert one_class([(G0, 0.8)], [G0, G1], difficult=[0, 1])["map"] == 1.0


def test_ap_without_detections_is_zero():
    assert one_class([], [G0, G1]) == {"ap": [0.0], "map": 0.0}


def test_class_without_ground_truth_is_nan_and_left_out_of_the_mean():
    # class 0: one TP of one gt -> 1. Class 1: a detection but no gt. Class 2: only a difficult gt.
    det = (np.array([G0, G1, ELSEWHERE], np.float32), np.array([0.9, 0.8, 0.7], np.float32),
           np.array([0, 1, 2], np.int32))
    gt = (np.array([G0, ELSEWHERE], np.float32), np.array([0, 2], np.int32), np.array([0, 1], np.uint8))
    result = voc_map([det], [gt], num_classes=3)
    assert result["ap"][0] == 1.0 and math.isnan(result["ap"][1]) and math.isnan(result["ap"][2])
    assert result["map"] == 1.0
    assert math.isnan(voc_map([det], [(np.zeros((0, 4)), np.zeros(0), np.zeros(0))], num_classes=3)["map"])


def test_duplicate_detection_of_a_gt_is_a_false_positive():
    # second detection of G0 (IoU 80 / 100 = 0.8) is FP: the same sequence as the hand curve, AP 0.8333
    duplicate = [0, 0, 10, 8]
    result = one_class([(G0, 0.9), (duplicate, 0.8), (G1, 0.7)], [G0, G1])
    assert result["map"] == 0.5 * 1.0 + 0.5 * (2.0 / 3.0)


def test_iou_of_exactly_one_half_matches_and_other_images_count():
    # [0, 0, 10, 5] on G0: 50 / 100 = 0.5 >= 0.5, a TP (the devkit's >=)
    assert one_class([([0, 0, 10, 5], 0.9)], [G0])["map"] == 1.0
    # two images, the class only in image 1: image 0's detection (no gt there) is a FP ranked first,
    # then the TP: recall 0, 1; precision 0, 0.5 -> AP 0.5
    det = [(np.array([G0], np.float32), np.array([0.9]), np.array([0])),
           (np.array([G0], np.float32), np.array([0.8]), np.array([0]))]
    gt = [(np.zeros((0, 4)), np.zeros(0, np.int32), np.zeros(0, np.uint8)),
          (np.array([G0], np.float32), np.array([0]), np.array([0]))]
    assert voc_map(det, gt, num_classes=1) == {"ap": [0.5], "map": 0.5}
