"""Every framework's Faster R-CNN (frcnn-voc), run in its own environment on the photo-boxes stand-in
prepared from fixture wheels: it loads the canonical weights exactly, its losses fall over a few
epochs, its detections are finite boxes inside their images, its serving path detects what its
evaluation detects, its NMS keeps what the numpy reference
keeps (hand-made cases and 2,000 proposals), and its epochs' time splits into host, NMS and framework.
A framework without a detector would say so. (Each detector's certificate against PyTorch is
test_certify's, with every other workload's.)"""
import json
from pathlib import Path

import guard
import numpy as np
import pytest
from detector_check import NMS_CASES, proposals
from fixtures_data import prepared_standin

from dlbench.harness.environments import envs
from dlbench.harness.environments.process import PACKAGE_PARENT
from dlbench.harness.plan.workloads import get_workload
from dlbench.shared.detection.nms import nms
from dlbench.worker.detector import detector_class

TESTS = Path(__file__).parent
FRAMEWORKS = sorted(envs.RECIPES)
WORKLOAD = get_workload("frcnn-voc")
# Fewer anchors, proposals and RoIs than the workload's: the same code paths at a CI's pace.
SMALL = {"rpn_batch": 64, "roi_batch": 32, "pre_nms_train": 300, "post_nms_train": 100, "pre_nms_test": 300,
         "post_nms_test": 50}
EPOCHS = 6


@pytest.fixture(scope="module")
def photo_boxes(session_dir):
    return prepared_standin("photo-boxes", session_dir / "standins")


def run_check(framework: str, case: dict, home: Path, compile_cache: Path) -> dict:
    env = envs.require(framework)
    recipe = envs.get_recipe(framework)
    home.mkdir(parents=True, exist_ok=True)
    variables = {"PYTHONPATH": f"{PACKAGE_PARENT}:{TESTS}", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                 "DLBENCH_THREADS": "1", "HOME": str(home), "DLBENCH_COMPILE_CACHE": str(compile_cache),
                 **recipe.worker_env}
    done = guard.run([str(env.python), str(TESTS / "detector_check.py")], 2400, input=json.dumps(case), env=variables)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module", params=FRAMEWORKS)
def checked(request, photo_boxes, tmp_path_factory, compile_cache):
    case = {"adapter": envs.get_recipe(request.param).adapter, "model": WORKLOAD.model(photo_boxes.meta),
            "recipe": dict(WORKLOAD.recipe, detection=SMALL), "data": str(photo_boxes.path), "epochs": EPOCHS}
    return request.param, case, run_check(request.param, case, tmp_path_factory.mktemp("home"), compile_cache)


@pytest.mark.framework
def test_canonical_weights_round_trip_exactly(checked):
    _, _, facts = checked
    assert facts["same_shapes"] and facts["roundtrip_max_abs"] == 0.0


@pytest.mark.framework
def test_a_few_epochs_lower_the_loss(checked):
    _, _, facts = checked
    losses = [epoch["loss"] for epoch in facts["epochs"]]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    for name in ("rpn_objectness", "head_class"):  # the box losses grow as proposals start to overlap objects
        assert facts["epochs"][-1][name] < facts["epochs"][0][name], name
    assert all(0 <= epoch["accuracy"] <= 1 for epoch in facts["epochs"])


@pytest.mark.framework
def test_detections_are_finite_boxes_inside_their_images(checked):
    _, _, facts = checked
    assert 0 <= facts["evaluation"]["map"] <= 1
    assert sum(len(image["boxes"]) for image in facts["detections"]) > 0
    for image in facts["detections"]:
        boxes = np.array(image["boxes"]).reshape(-1, 4)
        assert np.isfinite(boxes).all()
        assert (boxes[:, 0] >= 0).all() and (boxes[:, 1] >= 0).all()
        assert (boxes[:, 2] <= image["width"]).all() and (boxes[:, 3] <= image["height"]).all()
        assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()
        assert all(0.05 < score <= 1 for score in image["scores"])
        assert all(0 <= label < 20 for label in image["labels"])
        assert len(boxes) <= 100


@pytest.mark.framework
def test_serving_detects_what_the_evaluation_detects(checked):
    """adapter.serving(), one image a call (served in reverse order): each image's boxes, scores and labels
    after NMS, those the evaluation path's detect() found for it."""
    _, _, facts = checked
    assert len(facts["served"]) == len(facts["detections"])
    for served, evaluated in zip(facts["served"], facts["detections"], strict=True):
        assert served["labels"] == evaluated["labels"]
        np.testing.assert_allclose(np.array(served["boxes"]).reshape(-1, 4),
                                   np.array(evaluated["boxes"]).reshape(-1, 4), rtol=0, atol=1e-4)
        np.testing.assert_allclose(served["scores"], evaluated["scores"], rtol=0, atol=1e-6)


@pytest.mark.framework
def test_nms_keeps_what_the_reference_keeps(checked):
    _, _, facts = checked
    expected = [nms(np.array(b), np.array(s), t).tolist() for b, s, t in NMS_CASES]
    expected += [nms(*proposals(seed), threshold).tolist() for seed, threshold in ((0, 0.7), (1, 0.5))]
    assert [len(kept) for kept in expected[-2:]] == [1232, 556]  # proposals enough to suppress and keep many
    assert facts["nms"] == expected


@pytest.mark.framework
def test_epoch_time_splits_into_host_nms_and_framework(checked):
    _, _, facts = checked
    for epoch in facts["epochs"]:
        parts = [epoch[key] for key in ("host_time_s", "nms_time_s", "framework_time_s")]
        assert all(part > 0 for part in parts), epoch
        rest = epoch["wall_s"] - sum(parts)  # the loop around the timed parts, and synchronise
        assert 0 <= rest < 0.05 * epoch["wall_s"], epoch
    first = facts["epochs"][0]  # its first image's step, the first epoch holding more than one
    assert 0 < first["first_step_s"] < first["wall_s"], first


def test_a_framework_without_a_detector_says_so():
    with pytest.raises(NotImplementedError, match="nothing has no Faster R-CNN in dlbench yet"):
        detector_class("dlbench.worker.frameworks.nothing.adapter:Adapter")
