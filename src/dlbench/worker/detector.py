"""The contract of a framework's Faster R-CNN, and the training and evaluation loops they all share.

Worker side: Python 3.8, numpy alone. A framework's detector lives beside its adapter, in
`dlbench.worker.frameworks.<name>.detector`, as a class `Detector(DetectorAdapter)`; `detector_class`
finds it. It builds the IR's parts (shared/ir.py: detector) from the canonical weights and implements the
methods below that raise NotImplementedError. Everything without a gradient is shared numpy
(shared/detection/pipeline.py), so every framework samples the same anchors and RoIs from the seed.

One training step per image, in two passes:
1. `rpn_outputs(x)`: objectness logits and deltas, no gradient; the host decodes them into
   proposals (the framework's `nms`) and samples the RPN's anchors and the head's RoIs;
2. `train_step(x, targets)`: the whole network on the same image, the four losses, their gradient,
   one optimiser step.
The second pass runs the backbone again: every framework pays it alike, and graph-compiled
frameworks (JAX, Theano, TensorFlow's functions) need the sampled RoIs as inputs of one compiled step.

The losses (torchvision's fasterrcnn_resnet50_fpn's, weights 1): RPN objectness, the mean sigmoid
cross-entropy of the sampled anchors; RPN box, smooth L1 (beta 1/9, pipeline.smooth_l1) of the
positive anchors' deltas summed, over the number of sampled anchors; head class, the mean softmax
cross-entropy of the sampled RoIs; head box, smooth L1 (beta 1/9) of each foreground RoI's deltas
for its own class summed, over the number of sampled RoIs. The total is their sum.
"""
from __future__ import annotations

import importlib
import time
from typing import Dict, Tuple

import numpy as np

from dlbench.shared.detection import pipeline
from dlbench.shared.detection.voc_eval import voc_map
from dlbench.worker.base import BaseAdapter, not_built, sibling_module

LOSS_NAMES = ("rpn_objectness", "rpn_box", "head_class", "head_box")


def detector_class(adapter_path: str):
    """The Detector of the framework whose classifier adapter is `adapter_path` ("module:Adapter"),
    or an error saying it has none."""
    module = sibling_module(adapter_path, "detector")
    try:
        return importlib.import_module(module).Detector
    except ModuleNotFoundError as error:
        if error.name not in (module, module.rpartition(".")[0]):  # a missing import inside it is a bug
            raise
        raise NotImplementedError("%s has no Faster R-CNN in dlbench yet (no module %s)"
                                  % (module.split(".")[-2], module)) from None


class EpochClock(object):
    """Where a training epoch's time goes, summed over its images: the framework's network calls, its
    NMS, and the host's share of each image (its wall time less those two)."""

    def __init__(self):
        self.framework_s = self.nms_s = self.host_s = 0.0

    def framework(self, function, *args):
        started = time.perf_counter()
        result = function(*args)
        self.framework_s += time.perf_counter() - started
        return result

    def timed_nms(self, nms):
        def timed(*args):
            started = time.perf_counter()
            result = nms(*args)
            self.nms_s += time.perf_counter() - started
            return result
        return timed

    def image(self, function, *args):
        """function(*args), one image's whole step: its seconds outside the timed calls are the host's."""
        started, timed_before = time.perf_counter(), self.framework_s + self.nms_s
        result = function(*args)
        self.host_s += time.perf_counter() - started - (self.framework_s + self.nms_s - timed_before)
        return result

    def totals(self) -> Dict[str, float]:
        return {"host_time_s": self.host_s, "nms_time_s": self.nms_s, "framework_time_s": self.framework_s}


class DetectorAdapter(BaseAdapter):
    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        if recipe["batch_size"] != 1:  # the loop below takes one image a step, whatever a recipe says
            raise ValueError("a detector trains on one image a step: batch_size %r; accepted: 1" % recipe["batch_size"])
        if recipe["loss"] != "faster_rcnn":  # the four losses below are the only ones a detector computes
            raise not_built("loss", recipe["loss"])
        if "schedule" in recipe:  # the detectors step their optimisers at the recipe's constant rate
            raise not_built("learning-rate schedule", recipe["schedule"]["name"])
        self.config = pipeline.settings(recipe)
        self.scale = 255.0
        self.epochs_trained = 0  # the worker's epochs count from 1: each image's stream is keyed by it

    # ---- what each framework implements ------------------------------------------------------

    def rpn_outputs(self, x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """For one image x (1, H, W, 3): objectness logits (fh * fw * A,) and deltas (fh * fw * A, 4),
        in the anchors' (y, x, a) order, no gradient. Keeps the feature map for head_outputs."""
        raise NotImplementedError

    def head_outputs(self, rois: np.ndarray, plan_index: np.ndarray,
                     plan_weights: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Class logits (R, classes) and box deltas (R, 4 * classes) of (R, 4) RoIs, on the feature
        map of the last rpn_outputs; with the RoIs' RoI Align plan (pipeline.roi_align_plan) for
        frameworks that apply it, the RoIs themselves for those with an op of their own."""
        raise NotImplementedError

    def train_step(self, x: np.ndarray, targets: Dict[str, np.ndarray]) -> Dict[str, float]:
        """One optimiser step on the four losses' sum; returns each loss and "right", how many of the
        sampled RoIs the head classified right."""
        raise NotImplementedError

    def losses_and_gradients(self, x: np.ndarray, targets: Dict[str, np.ndarray]):
        """(each loss as a float, the gradient of their sum for every canonical weight); no step."""
        raise NotImplementedError

    def nms(self, boxes: np.ndarray, scores: np.ndarray, threshold: float) -> np.ndarray:
        """Indices of the boxes greedy NMS keeps, best first (shared/detection/nms.py is the reference)."""
        raise NotImplementedError

    # ---- shared ------------------------------------------------------------------------------

    def targets(self, image: pipeline.Image, rng, clock: EpochClock) -> Dict[str, np.ndarray]:
        """The training targets of one image; `clock` is charged the RPN pass as framework time and the
        proposals' NMS as NMS time."""
        objectness, deltas = clock.framework(self.rpn_outputs, image.x)
        proposals = pipeline.propose(self.model_ir, image, objectness, deltas, clock.timed_nms(self.nms),
                                     self.config["pre_nms_train"], self.config["post_nms_train"], self.config)
        return pipeline.train_targets(self.model_ir, image, proposals, rng, self.config)

    def train_epoch(self, data: pipeline.DetectionSplit, order: np.ndarray) -> Dict[str, float]:
        """The epoch's mean losses and the head's accuracy, and where its time went: "framework_time_s"
        (rpn_outputs and train_step, whose outputs come back to the host, so the device has finished),
        "nms_time_s" (the framework's nms on the proposals) and "host_time_s" (the shared numpy: each
        image's flip and canvas, decoding and sampling, targets and RoI Align plans). What the epoch's
        clock measures beyond their sum is the loop itself and the worker's synchronise."""
        self.epochs_trained += 1
        sums = dict.fromkeys(LOSS_NAMES + ("right", "rois"), 0.0)
        clock = EpochClock()
        for i in order:
            step, sampled = clock.image(self._train_image, data, int(i), clock)
            self.step_done()  # an image's step: its outputs came back to the host
            for key in LOSS_NAMES + ("right",):
                sums[key] += step[key]
            sums["rois"] += sampled
        metrics = {key: sums[key] / len(order) for key in LOSS_NAMES}
        metrics["loss"] = sum(metrics[key] for key in LOSS_NAMES)
        metrics["accuracy"] = sums["right"] / max(sums["rois"], 1.0)  # the head's, on the sampled RoIs
        metrics.update(clock.totals())
        return metrics

    def _train_image(self, data: pipeline.DetectionSplit, i: int, clock: EpochClock):
        """One training step on image i: (the step's losses and "right", how many RoIs it sampled)."""
        rng = pipeline.image_rng(self.seed, self.epochs_trained, i)
        image = pipeline.training_image(data, i, self.model_ir, self.scale, rng)
        targets = self.targets(image, rng, clock)
        return clock.framework(self.train_step, image.x, targets), len(targets["roi_labels"])

    def detect(self, pixels: np.ndarray):
        """(boxes, scores, labels) of one (height, width, 3) uint8 image."""
        height, width = pixels.shape[:2]
        image = pipeline.Image(pipeline.padded(pixels, self.model_ir, self.scale), height, width, None, None)
        objectness, deltas = self.rpn_outputs(image.x)
        proposals = pipeline.propose(self.model_ir, image, objectness, deltas, self.nms, self.config["pre_nms_test"],
                                     self.config["post_nms_test"], self.config)
        feature = pipeline.feature_size(image, self.model_ir)
        index, weights = pipeline.roi_align_plan(proposals, feature, self.model_ir["detector"]["roi"])
        logits, box_deltas = self.head_outputs(proposals, index, weights)
        return pipeline.detections(self.model_ir, image, proposals, logits, box_deltas, self.nms, self.config)

    def evaluate(self, data: pipeline.DetectionSplit) -> Dict[str, float]:
        """VOC mAP at IoU 0.5 (shared/detection/voc_eval.py) over the split, and detections per image."""
        found, truth = [], []
        for i in range(len(data)):
            found.append(self.detect(data.image(i)))
            truth.append(data.truth(i))
        result = voc_map(found, truth)
        return {"map": result["map"], "detections": float(np.mean([len(f[0]) for f in found]))}

    def serving(self):
        """One (height, width, 3) uint8 image in, its detections after NMS out: (boxes, scores, labels), as
        evaluate computes them, through the framework's inference calls (rpn_outputs, head_outputs, nms)."""
        return self.detect

    def predict(self, x):
        raise NotImplementedError("a detector predicts with detect(), image by image")

    def training_outputs(self, x):
        raise NotImplementedError("the detector has no dropout")

    def loss_and_gradients(self, data):
        raise NotImplementedError("a detector's certification calls losses_and_gradients")
