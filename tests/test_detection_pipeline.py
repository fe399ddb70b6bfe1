"""The detector's shared host side (detection/pipeline.py) and its IR: RoI Align's sampling plan
against a scalar transcription of torchvision's roi_align, canvases, flips, proposals, detections,
and the frcnn-voc model's parts, parameters and canonical weights."""
import math

import numpy as np
import pytest

from dlbench.harness.plan.workloads import get_workload
from dlbench.shared import ir
from dlbench.shared.detection import boxes as boxes_module
from dlbench.shared.detection import pipeline
from dlbench.shared.detection.nms import fixed_point_keep, nms
from dlbench.shared.initializers import canonical_init

ROI = {"op": "roi_align", "size": 7, "sampling_ratio": 2, "spatial_scale": 1 / 16, "aligned": False}
SMALL_META = {"task": "detection", "min_side": 64, "max_side": 96, "num_classes": 20}


def bilinear(feature, y, x):
    """torchvision's bilinear_interpolate (roi_align_kernel.cpp), one sample at a time."""
    height, width = feature.shape[:2]
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return np.zeros(feature.shape[-1])
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_high = y_low = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_high = x_low = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    return (hy * hx * feature[y_low, x_low] + hy * lx * feature[y_low, x_high] + ly * hx * feature[y_high, x_low]
            + ly * lx * feature[y_high, x_high])


def scalar_roi_align(feature, roi, size=7, grid=2, scale=1 / 16):
    x1, y1, x2, y2 = (value * scale for value in roi)
    roi_w, roi_h = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
    bin_w, bin_h = roi_w / size, roi_h / size
    out = np.zeros((size, size, feature.shape[-1]))
    for py in range(size):
        for px in range(size):
            for iy in range(grid):
                for ix in range(grid):
                    y = y1 + py * bin_h + (iy + 0.5) * bin_h / grid
                    x = x1 + px * bin_w + (ix + 0.5) * bin_w / grid
                    out[py, px] += bilinear(feature, y, x)
    return out / (grid * grid)


def test_roi_align_plan_reproduces_torchvisions_sampling():
    rng = np.random.RandomState(0)
    feature = rng.standard_normal((5, 7, 3))
    rois = np.array([
        [3.0, 5.0, 60.0, 40.0],        # inside
        [0.0, 0.0, 112.0, 80.0],       # the whole map: samples reach the last row and column
        [100.0, 70.0, 104.0, 75.0],    # under one cell: its size is clamped to 1
        [-30.0, -30.0, 10.0, 10.0],    # starts beyond the map: samples under -1 weigh nothing
        [90.0, 60.0, 140.0, 100.0],    # ends beyond the map
    ])
    pooled = pipeline.roi_align(feature, rois, ROI)
    for r, roi in enumerate(rois):
        np.testing.assert_allclose(pooled[r], scalar_roi_align(feature, roi), rtol=1e-6, atol=1e-6)


def test_roi_align_plan_shapes_and_weights():
    index, weights = pipeline.roi_align_plan(np.array([[0, 0, 32, 32.0]]), (4, 6), ROI)
    assert index.shape == weights.shape == (1, 49, 16) and index.dtype == np.int32
    assert index.min() >= 0 and index.max() < 24
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)  # inside the map, each bin averages to 1


def test_canvas_for_turns_with_the_image_and_refuses_an_image_too_big():
    model = get_workload("frcnn-voc").model(SMALL_META)
    assert model["input_shape"][:2] == [64, 96]
    assert pipeline.canvas_for(64, 90, model) == (64, 96)
    assert pipeline.canvas_for(90, 64, model) == (96, 64)
    with pytest.raises(ValueError, match="does not fit"):
        pipeline.canvas_for(70, 90, model)


def split_of(pixels, boxes, labels, difficult):
    height, width = pixels.shape[:2]
    return pipeline.DetectionSplit(np.array([[0, height, width, height, width]]), np.array([[0, len(labels)]]),
                                   pixels.reshape(-1), np.asarray(boxes, np.float32), np.asarray(labels, np.int32),
                                   np.asarray(difficult, np.uint8))


def test_training_image_flips_from_the_seed_and_leaves_difficult_objects_out():
    model = get_workload("frcnn-voc").model(SMALL_META)
    pixels = np.arange(50 * 80 * 3, dtype=np.uint32).reshape(50, 80, 3).astype(np.uint8)
    split = split_of(pixels, [[10, 5, 30, 25], [0, 0, 5, 5]], [14, 7], [0, 1])
    flips = {}
    for epoch in range(8):
        rng = pipeline.image_rng(0, epoch, 0)
        flipped = rng.rand() < 0.5
        image = pipeline.training_image(split, 0, model, 255.0, pipeline.image_rng(0, epoch, 0))
        flips[epoch] = flipped
        assert image.x.shape == (1, 64, 96, 3) and (image.height, image.width) == (50, 80)
        assert not image.x[0, 50:].any() and not image.x[0, :, 80:].any()  # zeros around the image
        expected = pixels[:, ::-1] if flipped else pixels
        np.testing.assert_allclose(image.x[0, :50, :80], expected / np.float32(255.0))
        box = [50, 5, 70, 25] if flipped else [10, 5, 30, 25]
        assert image.boxes.tolist() == [box] and image.labels.tolist() == [14]
    assert set(flips.values()) == {True, False}


def test_proposals_lie_inside_the_image_best_first_and_no_more_than_asked():
    model = get_workload("frcnn-voc").model(SMALL_META)
    image = pipeline.Image(np.zeros((1, 64, 96, 3), np.float32), 60, 90, None, None)
    count = 4 * 6 * 9
    rng = np.random.RandomState(1)
    objectness, deltas = rng.standard_normal(count), rng.standard_normal((count, 4)) * 0.5
    proposals = pipeline.propose(model, image, objectness, deltas, nms, 100, 20, pipeline.SETTINGS)
    assert 0 < len(proposals) <= 20
    assert (proposals[:, 0] >= 0).all() and (proposals[:, 2] <= 90).all() and (proposals[:, 3] <= 60).all()
    anchors = pipeline.anchors(model, (4, 6))
    best = np.argmax(objectness)
    expected = pipeline.clip_boxes(pipeline.decode(anchors[best:best + 1], deltas[best:best + 1]), 60, 90)
    np.testing.assert_allclose(proposals[0], expected[0], rtol=1e-6)


def test_detections_decode_each_class_and_suppress_within_it():
    model = get_workload("frcnn-voc").model(SMALL_META)
    image = pipeline.Image(None, 60, 90, None, None)
    proposals = np.array([[10, 10, 30, 30], [11, 11, 31, 31], [50, 20, 80, 50]], np.float32)
    logits = np.full((3, 21), -10.0)
    logits[0, 15] = logits[1, 15] = 5.0  # two overlapping people (label 14)
    logits[1, 15] = 4.0
    logits[2, 8] = 5.0  # a cat (label 7)
    boxes, scores, labels = pipeline.detections(model, image, proposals, logits, np.zeros((3, 84)), nms,
                                                pipeline.SETTINGS)
    assert labels.tolist() == [14, 7] or labels.tolist() == [7, 14]
    assert sorted(map(tuple, boxes.tolist())) == [(10, 10, 30, 30), (50, 20, 80, 50)]
    assert (np.diff(scores) <= 0).all() and (scores > 0.9).all()


def test_frcnn_voc_model_counts_its_parameters_by_hand():
    model = get_workload("frcnn-voc").model()
    convs = 3 * 3 * (3 * 32 + 32 * 64 + 64 * 128 + 128 * 256) + 32 + 64 + 128 + 256
    rpn = 3 * 3 * 256 * 256 + 256 + 256 * 9 + 9 + 256 * 36 + 36
    head = 7 * 7 * 256 * 512 + 512 + 512 * 512 + 512 + 512 * 21 + 21 + 512 * 84 + 84
    assert ir.count_params(model) == convs + rpn + head
    parts = ir.detector_parts(model)
    assert list(parts) == ["backbone", "rpn", "rpn_cls", "rpn_box", "head", "cls", "box"]
    assert parts["rpn"]["input_shape"] == [38, 63, 256] and parts["head"]["input_shape"] == [7, 7, 256]
    assert model["detector"]["anchor_scales"] == [8.0, 16.0, 32.0]
    weights = canonical_init(model, 0)
    assert {k: v.shape for k, v in weights.items()} == dict(ir.weight_shapes(model))
    small = get_workload("frcnn-voc").model(SMALL_META)
    assert math.isclose(small["detector"]["anchor_scales"][0], 8 * 64 / 600)
    assert ir.count_params(small) == ir.count_params(model)  # the canvas changes no weight


def test_a_canvas_off_the_stride_is_refused():
    with pytest.raises(ir.IRError, match="multiples of 16"):
        ir.detector([60, 96], [ir.conv2d(8, padding="same"), ir.maxpool2d(16)], 8, [16], 21, [1, 2])
    with pytest.raises(ir.IRError, match="not stride 16"):
        ir.detector([64, 96], [ir.conv2d(8, padding="same"), ir.maxpool2d(8)], 8, [16], 21, [1, 2])


def test_fixed_point_keep_walks_down_the_sorted_boxes():
    suppress = np.zeros((4, 4), bool)
    suppress[0, [1, 3]] = True  # the best removes the second and the fourth
    suppress[1, 2] = True  # the second, removed, removes nothing
    suppress[3, 0] = True  # a later box never removes an earlier one
    assert fixed_point_keep(suppress).tolist() == [0, 2]
    assert fixed_point_keep(np.zeros((0, 0), bool)).tolist() == []


def _greedy_pass(suppress):
    removed, keep = np.zeros(len(suppress), bool), []
    for i in range(len(suppress)):
        if not removed[i]:
            keep.append(i)
            removed[i + 1:] |= suppress[i, i + 1:]
    return keep


@pytest.mark.parametrize("seed", range(5))
def test_fixed_point_keep_is_the_greedy_pass_on_long_chains(seed):
    # dense random suppression, and a chain where each box removes the next: N / 2 boxes kept, the
    # slowest case for the fixed point (one box settles per round)
    rng = np.random.RandomState(seed)
    dense = rng.rand(300, 300) < 0.02
    chain = np.eye(60, k=1, dtype=bool)
    for suppress in (dense, chain):
        assert fixed_point_keep(suppress).tolist() == _greedy_pass(suppress)
    assert fixed_point_keep(chain).tolist() == list(range(0, 60, 2))


def test_fixed_point_keep_on_proposals_keeps_what_nms_keeps():
    # an untrained RPN's 2,000 best proposals on a 600x1000 image, as pipeline.propose makes them
    rng = np.random.RandomState(0)
    anchors = pipeline.anchors(get_workload("frcnn-voc").model({"min_side": 600, "max_side": 1000, "num_classes": 20}),
                               (38, 63))
    boxes = boxes_module.clip_boxes(boxes_module.decode(anchors, rng.randn(len(anchors), 4) * 0.3), 600, 1000)
    scores = rng.randn(len(anchors)).astype(np.float32)
    top = np.argsort(-scores, kind="stable")[:2000]
    boxes, scores = boxes[top], scores[top]
    for threshold in (0.7, 0.5):
        order = np.argsort(-scores, kind="stable")
        suppress = boxes_module.iou(boxes[order], boxes[order]) > threshold
        assert order[fixed_point_keep(suppress)].tolist() == nms(boxes, scores, threshold).tolist()
