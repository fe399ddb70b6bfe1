"""Theano's Faster R-CNN: each IR part is the Theano package's Model (layers.py) over canonical shared weights, and the
network runs as four compiled theano.functions (the RPN's forward pass, the head's forward pass, one
SGD step, the losses and their gradient), built on first use.

Shapes stay symbolic, so both canvas orientations and any count of sampled RoIs run through the same
compiled code: nothing is padded, and the losses see only the real anchors and RoIs.

Theano has neither RoI Align nor NMS. RoI Align is the shared plan (pipeline.roi_align_plan) as a
sparse matrix, one row per (RoI, bin) holding its samples' weights at their feature-map cells, times
the flattened feature map (theano.sparse.structured_dot, whose gradient is the transposed product):
the weighted gather-sum of torch's embedding_bag, never materialising the gathered rows. Measured on
one core, a 600x1000 canvas's 37x62x256 map, forward and backward: 7 ms for 128 RoIs and 17 ms for 300
against 181 ms and 429 ms for advanced indexing (AdvancedSubtensor1) and a weighted sum, identical
gradients. NMS is one compiled function: the pairwise IoU, then the greedy pass as a fixed point of matrix
products (shared/detection/nms.fixed_point_keep).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse

from dlbench.shared.detection.pipeline import SMOOTH_L1_BETA
from dlbench.shared.ir import detector_parts
from dlbench.worker.base import lookup
from dlbench.worker.detector import LOSS_NAMES, DetectorAdapter
from dlbench.worker.frameworks.theano.adapter import BLAS_LDFLAGS, THREADS, T, theano
from dlbench.worker.frameworks.theano.layers import F32, Model
from dlbench.worker.frameworks.theano.optimizers import OPTIMIZERS

# isort: split
import theano.sparse  # only once the adapter has set THEANO_FLAGS and imported Theano


def smooth_l1(difference):
    """torchvision's (pipeline.smooth_l1), elementwise."""
    d = abs(difference)
    beta = F32(SMOOTH_L1_BETA)
    return T.switch(T.lt(d, beta), F32(0.5) * d * d / beta, d - F32(0.5) * beta)


def rpn_losses(objectness, deltas, labels, targets, weights):
    """Objectness: the mean sigmoid cross-entropy of the sampled anchors (labels >= 0); box: smooth L1
    of the positives' deltas summed, over the sampled count."""
    sampled = T.cast(T.ge(labels, 0), "float32")
    count = T.maximum(sampled.sum(), F32(1))
    # softplus(z) - z y: Theano's softplus is stable and its gradient is exactly sigmoid(z) - y
    cross_entropy = T.nnet.softplus(objectness) - objectness * T.cast(T.gt(labels, 0), "float32")
    box = (smooth_l1(deltas - targets) * weights).sum()
    return (cross_entropy * sampled).sum() / count, box / count


def head_losses(logits, box_deltas, labels, targets, weights):
    """Class: the mean softmax cross-entropy of the RoIs; box: smooth L1 of each RoI's deltas for its
    own class summed, over the RoI count; and how many RoIs the head classified right."""
    rois, classes = logits.shape[0], logits.shape[1]
    # written as Theano's tutorials write it, so that its optimiser fuses it into one stable op
    head_class = T.nnet.categorical_crossentropy(T.nnet.softmax(logits), labels).mean()
    own_class = T.cast(T.eq(T.arange(classes)[None, :], labels[:, None]), "float32")  # (R, classes)
    own = (box_deltas.reshape((rois, classes, 4)) * own_class[:, :, None]).sum(axis=1)
    box = (smooth_l1(own - targets) * weights).sum() / T.cast(T.maximum(rois, 1), "float32")
    right = T.eq(T.argmax(logits, axis=1), labels).sum(dtype="float64")
    return head_class, box, right


class Detector(DetectorAdapter):
    name = "theano"
    executions = ("compiled",)

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        if device == "gpu":
            raise RuntimeError("device gpu requested; this recipe installs Theano for the CPU only")
        if threads != THREADS:
            raise RuntimeError("Theano took %d threads at import (DLBENCH_THREADS); %d cannot be set afterwards"
                               % (THREADS, threads))
        self.parts = {name: Model(part, seed) for name, part in detector_parts(model).items()}
        self.weights = {}  # canonical name -> shared variable, over all parts
        for part in self.parts.values():
            self.weights.update(part.weights)
        self.roi_size = model["detector"]["roi"]["size"]
        self.stride = model["detector"]["feature_stride"]
        self.x = T.tensor4("x")
        self.plan = theano.sparse.csr_matrix("plan", dtype="float32")
        self.targets_in = [T.ivector("rpn_labels"), T.matrix("rpn_targets"), T.matrix("rpn_weights"),
                           T.ivector("roi_labels"), T.matrix("roi_targets"), T.matrix("roi_weights")]
        self._functions = {}
        self.features = None

    def versions(self):
        return {"theano": theano.__version__, "numpy": np.__version__,
                "theano-blas": "scipy-openblas" if BLAS_LDFLAGS else "numpy-c-api",
                "theano-openmp": "on" if theano.config.openmp else "off"}

    def threads_used(self):
        return THREADS

    def synchronise(self):
        pass  # CPU only: a compiled function returns when its work is done

    # ---- weights: shared variables in canonical layout ----------------------------------------

    def set_weights(self, weights):
        for name, var in self.weights.items():
            var.set_value(np.array(weights[name], dtype=np.float32))

    def get_weights(self):
        return {name: var.get_value() for name, var in self.weights.items()}

    # ---- the symbolic network ------------------------------------------------------------------

    def _part(self, name, x):
        return self.parts[name](x, training=False)[0]  # no dropout or BatchNorm in a detector

    def _rpn(self, x):
        features = self._part("backbone", x)
        hidden = self._part("rpn", features)
        return features, self._part("rpn_cls", hidden).flatten(), self._part("rpn_box", hidden).reshape((-1, 4))

    def _head(self, features, plan):
        """RoI Align as the plan's sparse matrix (R * size^2, fh * fw) times the flattened map."""
        channels = features.shape[3]
        pooled = theano.sparse.structured_dot(plan, features.reshape((-1, channels)))
        hidden = self._part("head", pooled.reshape((-1, self.roi_size, self.roi_size, channels)))
        return self._part("cls", hidden), self._part("box", hidden)

    def _losses(self):
        rpn_labels, rpn_targets, rpn_weights, roi_labels, roi_targets, roi_weights = self.targets_in
        features, objectness, deltas = self._rpn(self.x)
        rpn = rpn_losses(objectness, deltas, rpn_labels, rpn_targets, rpn_weights)
        logits, box_deltas = self._head(features, self.plan)
        head = head_losses(logits, box_deltas, roi_labels, roi_targets, roi_weights)
        return list(rpn + head[:2]), head[2]

    # ---- compiled functions, built on first use --------------------------------------------------

    def _function(self, kind: str):
        if kind not in self._functions:
            self._functions[kind] = self._compile(kind)
        return self._functions[kind]

    def _compile(self, kind: str):
        if kind == "rpn":
            return theano.function([self.x], list(self._rpn(self.x)))
        if kind == "head":
            features = T.tensor4("features")
            return theano.function([features, self.plan], list(self._head(features, self.plan)))
        if kind == "nms":
            return nms_function()
        inputs = [self.x, self.plan] + self.targets_in
        losses, right = self._losses()
        params = list(self.weights.values())
        grads = T.grad(sum(losses), params)
        if kind == "gradients":
            return theano.function(inputs, losses + grads)
        optimizer = lookup(OPTIMIZERS, "optimizer", self.recipe["optimizer"]["name"])
        updates = optimizer(params, grads, self.recipe["optimizer"])
        return theano.function(inputs, T.stack([T.cast(loss, "float64") for loss in losses] + [right]),
                               updates=updates)

    def _step_inputs(self, x, targets):
        cells = (x.shape[1] // self.stride) * (x.shape[2] // self.stride)
        return [np.asarray(x, np.float32), plan_matrix(targets["plan_index"], targets["plan_weights"], cells),
                np.asarray(targets["rpn_labels"], np.int32), np.asarray(targets["rpn_targets"], np.float32),
                np.asarray(targets["rpn_weights"], np.float32), np.asarray(targets["roi_labels"], np.int32),
                np.asarray(targets["roi_targets"], np.float32), np.asarray(targets["roi_weights"], np.float32)]

    # ---- the contract ------------------------------------------------------------------------------

    def rpn_outputs(self, x):
        self.features, objectness, deltas = self._function("rpn")(np.asarray(x, np.float32))
        return objectness, deltas

    def head_outputs(self, rois, plan_index, plan_weights):
        cells = self.features.shape[1] * self.features.shape[2]
        logits, deltas = self._function("head")(self.features, plan_matrix(plan_index, plan_weights, cells))
        return logits, deltas

    def train_step(self, x, targets):
        values = self._function("train")(*self._step_inputs(x, targets))
        return dict(zip(LOSS_NAMES + ("right",), values.tolist()))

    def losses_and_gradients(self, x, targets):
        outputs = self._function("gradients")(*self._step_inputs(x, targets))
        losses, grads = outputs[:len(LOSS_NAMES)], outputs[len(LOSS_NAMES):]
        return (dict(zip(LOSS_NAMES, (float(loss) for loss in losses))),
                {name: np.asarray(g) for name, g in zip(self.weights, grads)})

    def nms(self, boxes, scores, threshold):
        """Greedy NMS as one compiled function (nms_function)."""
        if len(boxes) == 0:
            return np.zeros(0, np.int64)
        order = np.argsort(-np.asarray(scores), kind="stable")
        keep = self._function("nms")(np.asarray(boxes, np.float32)[order], np.float32(threshold))
        return order[np.flatnonzero(keep)]


def plan_matrix(index, weights, cells):
    """The RoI Align plan as a CSR matrix: row r * size^2 + b holds bin b's K weights at their cells (a
    cell read twice appears twice, and the products add up)."""
    index, weights = np.asarray(index, np.int32), np.asarray(weights, np.float32)
    corners = index.shape[-1]
    rows = index.size // corners
    starts = np.arange(0, index.size + 1, corners, dtype=np.int32)
    return scipy.sparse.csr_matrix((weights.ravel(), index.ravel(), starts), shape=(rows, cells))


def nms_function():
    """(N, 4) float32 boxes sorted best first, threshold -> (N,) which of them greedy NMS keeps: the
    pairwise IoU, then the greedy pass as shared/detection/nms.fixed_point_keep computes it, its rounds a
    scan that stops when one changes nothing. A zero-area box has IoU 0 with everything."""
    boxes, threshold = T.fmatrix("boxes"), T.fscalar("threshold")
    area = T.maximum(boxes[:, 2] - boxes[:, 0], 0.0) * T.maximum(boxes[:, 3] - boxes[:, 1], 0.0)
    width = T.minimum(boxes[:, None, 2], boxes[None, :, 2]) - T.maximum(boxes[:, None, 0], boxes[None, :, 0])
    height = T.minimum(boxes[:, None, 3], boxes[None, :, 3]) - T.maximum(boxes[:, None, 1], boxes[None, :, 1])
    inter = T.maximum(width, 0.0) * T.maximum(height, 0.0)
    union = area[:, None] + area[None, :] - inter
    overlaps = T.switch(T.gt(union, 0.0), inter / T.switch(T.gt(union, 0.0), union, 1.0), 0.0)
    suppress = T.cast(T.triu(T.gt(overlaps, threshold), 1), "float32")

    def again(keep, suppress):
        kept = T.cast(T.eq(T.dot(keep, suppress), 0.0), "float32")
        return kept, theano.scan_module.until(T.all(T.eq(kept, keep)))

    rounds, _ = theano.scan(again, outputs_info=T.ones((boxes.shape[0],), dtype="float32"), non_sequences=suppress,
                            n_steps=boxes.shape[0] + 1)
    return theano.function([boxes, threshold], T.gt(rounds[-1], 0.0))
