"""Chainer's Faster R-CNN: each IR part a chainer adapter's Model (NHWC in and out), all seven held by one
Chain, trained define-by-run as the classifier adapter trains (cleargrads, forward, backward,
optimizer.update) with its optimiser: MomentumSGD and coupled L2 through the WeightDecay hook.
Define-by-run builds the graph per step, so the varying number of sampled anchors and RoIs needs no
padding and nothing is compiled.

RoI Align: Chainer's own F.roi_average_align_2d computes torchvision's aligned=False sampling (it
matched the shared plan to 4e-7 here), but its CPU forward and backward are Python loops over every
output element (RoIs x channels x 49 bins): 1.4 s for the forward of 8 RoIs of a 256-channel map
on the project's 2-core machine, so about 22 s for a training step's 128. The shared plan
(pipeline.roi_align_plan) is applied from Chainer's primitives instead: F.embed_id gathers the K
feature-map rows of each bin, a batched F.matmul weighs and sums them (0.16 s forward and backward
for 128 RoIs there; the plan as a dense matrix and one matmul took as long, F.get_item longer: its
backward is numpy.add.at).
NMS: Chainer has none (ChainerCV's is not installed): the pairwise IoU in numpy, Chainer's array
module on the CPU, then the greedy pass without a loop over the boxes (shared/detection/nms.fixed_point_keep,
whose numpy is that array module's).
Device: CPU only, as the classifier adapter (no CuPy).
"""
from __future__ import annotations

from typing import Dict

import chainer
import chainer.functions as F
import numpy as np

from dlbench.shared.detection.nms import fixed_point_keep
from dlbench.shared.detection.pipeline import SMOOTH_L1_BETA
from dlbench.shared.ir import detector_parts
from dlbench.worker.detector import LOSS_NAMES, DetectorAdapter
from dlbench.worker.frameworks.chainer.adapter import Adapter, cpu_threads, exported
from dlbench.worker.frameworks.chainer.layers import Model, layout, native_arrays
from dlbench.worker.frameworks.chainer.optimizers import optimizer_for


def smooth_l1(x, t):
    """Elementwise smooth L1 with beta SMOOTH_L1_BETA: Chainer's Huber loss at delta beta, over beta."""
    return F.huber_loss(x, t, SMOOTH_L1_BETA, reduce="no") / SMOOTH_L1_BETA


def rpn_losses(objectness, deltas, targets):
    labels = targets["rpn_labels"].astype(np.int32)
    count = max(int(np.count_nonzero(labels >= 0)), 1)
    rpn_objectness = F.sigmoid_cross_entropy(objectness, labels)  # the mean over labels >= 0: -1 is ignored
    box = F.sum(smooth_l1(deltas, targets["rpn_targets"]) * targets["rpn_weights"])
    return rpn_objectness, box / count


def head_losses(logits, box_deltas, targets):
    labels = targets["roi_labels"].astype(np.int32)
    rows = np.arange(len(labels))
    own = F.reshape(box_deltas, (len(labels), -1, 4))[rows, labels]  # each RoI's deltas for its own class
    box = F.sum(smooth_l1(own, targets["roi_targets"]) * targets["roi_weights"])
    right = int(np.count_nonzero(logits.array.argmax(axis=1) == labels))
    return F.softmax_cross_entropy(logits, labels), box / max(len(labels), 1), right


def roi_align(features, plan_index, plan_weights):
    """(R, size, size, C) from an NHWC feature map (1, fh, fw, C): the plan's rows gathered, weighed
    and summed per bin."""
    rois, bins, corners = plan_index.shape
    flat = F.reshape(features, (-1, features.shape[-1]))
    gathered = F.embed_id(plan_index.reshape(-1, corners), flat)  # (R * bins, K, C)
    pooled = F.matmul(plan_weights.reshape(-1, 1, corners), gathered)  # (R * bins, 1, C)
    size = int(round(bins ** 0.5))
    return F.reshape(pooled, (rois, size, size, -1))


class Parts(chainer.Chain):
    """The detector's parts (shared/ir.detector_parts), each a chainer adapter's Model, as child links named
    after the parts (so the passes' methods have other names): one optimiser and one cleargrads
    cover them all."""

    def __init__(self, model: dict):
        super().__init__()
        self.names = []
        with self.init_scope():
            for name, part in detector_parts(model).items():
                setattr(self, name, Model(part))
                self.names.append(name)

    def rpn_pass(self, x):
        features = self.backbone(x)
        hidden = self.rpn(features)
        return features, F.reshape(self.rpn_cls(hidden), (-1,)), F.reshape(self.rpn_box(hidden), (-1, 4))

    def head_pass(self, features, plan_index, plan_weights):
        hidden = self.head(roi_align(features, plan_index, plan_weights))
        return self.cls(hidden), self.box(hidden)


class Detector(DetectorAdapter):
    name = "chainer"

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        self._thread_limit = cpu_threads(device, threads)
        self.parts = Parts(model)
        self.optimizer = optimizer_for(self.parts, recipe["optimizer"])
        self.features = None

    versions = Adapter.versions
    threads_used = Adapter.threads_used

    def synchronise(self):
        pass  # numpy on the CPU: every operation has finished when it returns

    # ---- weights -------------------------------------------------------------------------------

    def _native(self):
        for name in self.parts.names:
            part = getattr(self.parts, name)
            for layer, _ in part.layers:
                link = getattr(part, layer["name"], None)
                if link is not None:
                    for key, target in native_arrays(layer["type"], link).items():
                        yield layer, key, target

    def set_weights(self, weights):
        for layer, key, target in self._native():
            target.array[...] = layout(layer["type"]).to_native(key, weights[layer["name"] + "/" + key])

    def get_weights(self):
        return self._export(gradients=False)

    def _export(self, gradients: bool) -> Dict[str, np.ndarray]:
        return {layer["name"] + "/" + key: exported(layer, key, target, gradients)
                for layer, key, target in self._native()}

    # ---- the network ---------------------------------------------------------------------------

    def rpn_outputs(self, x):
        with chainer.no_backprop_mode():
            self.features, objectness, deltas = self.parts.rpn_pass(np.ascontiguousarray(x, np.float32))
        return objectness.array.copy(), deltas.array.copy()

    def head_outputs(self, rois, plan_index, plan_weights):
        with chainer.no_backprop_mode():
            logits, deltas = self.parts.head_pass(self.features, plan_index, plan_weights)
        return logits.array.copy(), deltas.array.copy()

    def _losses(self, x, targets):
        features, objectness, deltas = self.parts.rpn_pass(np.ascontiguousarray(x, np.float32))
        logits, box_deltas = self.parts.head_pass(features, targets["plan_index"], targets["plan_weights"])
        head_class, head_box, right = head_losses(logits, box_deltas, targets)
        return rpn_losses(objectness, deltas, targets) + (head_class, head_box), right

    def train_step(self, x, targets):
        self.parts.cleargrads()
        losses, right = self._losses(x, targets)
        sum(losses).backward()
        self.optimizer.update()
        values = dict(zip(LOSS_NAMES, (float(loss.array) for loss in losses)))
        values["right"] = float(right)
        return values

    def losses_and_gradients(self, x, targets):
        self.parts.cleargrads()
        losses, _ = self._losses(x, targets)
        sum(losses).backward()
        gradients = self._export(gradients=True)
        self.parts.cleargrads()
        return dict(zip(LOSS_NAMES, (float(loss.array) for loss in losses))), gradients

    def nms(self, boxes, scores, threshold):
        """Greedy NMS in Chainer's CPU array module (numpy), float32 as the other frameworks' device
        arrays: the pairwise IoU, then the greedy pass as fixed_point_keep computes it."""
        if len(boxes) == 0:
            return np.zeros(0, np.int64)
        order = np.argsort(-np.asarray(scores).reshape(-1), kind="stable")
        x1, y1, x2, y2 = np.asarray(boxes, np.float32).reshape(-1, 4)[order].T
        area = np.maximum(x2 - x1, 0) * np.maximum(y2 - y1, 0)
        inter = np.maximum(np.minimum(x2[:, None], x2) - np.maximum(x1[:, None], x1), 0)
        inter *= np.maximum(np.minimum(y2[:, None], y2) - np.maximum(y1[:, None], y1), 0)
        with np.errstate(invalid="ignore"):  # two zero-area boxes: 0 / 0 = NaN, which no threshold passes
            suppress = inter / (area[:, None] + area - inter) > threshold
        return order[fixed_point_keep(suppress)]
