"""MXNet's Faster R-CNN: the IR's parts as the classifier adapter's Gluon blocks, hybridized.

Two hybridized graphs share the parts' parameters: `Proposer` (backbone and RPN, the no-gradient
first pass) and `Objective` (the whole network and the four losses, trained under autograd.record).
The training step's shapes are fixed per canvas: the anchors are, and the sampled RoIs are padded to
the recipe's roi_batch with zero-weight rows that a mask keeps out of the losses, so each canvas's
graph is planned once (static_alloc, static_shape, as the classifier adapter hybridizes).

RoI Align: MXNet's own op, contrib.ROIAlign (aligned=False, sample_ratio 2: Caffe2's sampling, as
torchvision's), in the training step and in head_outputs.

NMS: MXNet's contrib.box_nms. Its sort breaks ties in no documented order, so the boxes go in
pre-sorted on the host (stable, descending score) with their rank as the score, and each box's
index rides in an extra column; box_nms suppresses at IoU > threshold, as the reference does.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

# first: it fixes MXNet's OpenMP threads and cache folder, which mxnet reads when it loads
from dlbench.worker.frameworks.mxnet.adapter import DTYPES, THREADS, check_threads

# isort: split
import mxnet as mx
from mxnet import autograd, gluon, nd

from dlbench.shared.detection.pipeline import SMOOTH_L1_BETA
from dlbench.shared.ir import detector_parts
from dlbench.worker.base import lookup, recipe_dtype
from dlbench.worker.detector import LOSS_NAMES, DetectorAdapter
from dlbench.worker.frameworks.mxnet.layers import build_net, gluon_params, layout
from dlbench.worker.frameworks.mxnet.optimizers import OPTIMIZERS

PROPOSER = ("backbone", "rpn", "rpn_cls", "rpn_box")
SIGMA = (1.0 / SMOOTH_L1_BETA) ** 0.5  # MXNet's smooth_l1 takes sigma, with beta = 1 / sigma^2


class Proposer(gluon.HybridBlock):
    """(feature map NHWC, objectness logits (fh * fw * A,), deltas (fh * fw * A, 4)) of one image."""

    def __init__(self, parts):
        super(Proposer, self).__init__()
        self.backbone, self.rpn, self.rpn_cls, self.rpn_box = (parts[name] for name in PROPOSER)

    def hybrid_forward(self, F, x):
        features = self.backbone(x)[0]  # each part is a classifier Net: [output] (no BatchNorm statistics)
        hidden = self.rpn(features)[0]
        objectness = F.reshape(self.rpn_cls(hidden)[0], shape=(-1,))  # NHWC: the anchors' (y, x, a) order
        deltas = F.reshape(self.rpn_box(hidden)[0], shape=(-1, 4))
        return features, objectness, deltas


class Objective(gluon.HybridBlock):
    """The four losses (the PyTorch detector's definitions) and the head's right count of one image and its
    sample. `roi_real` is 1 on the sampled RoIs and 0 on the padding."""

    def __init__(self, proposer: Proposer, parts, detector: dict):
        super(Objective, self).__init__()
        self.roi = detector["roi"]
        self.proposer = proposer  # Block attributes are registered as children
        self.head, self.cls, self.box = parts["head"], parts["cls"], parts["box"]

    def hybrid_forward(self, F, x, rpn_labels, rpn_targets, rpn_weights, rois, roi_labels, roi_targets, roi_weights,
                       roi_real):
        features, objectness, deltas = self.proposer(x)
        sampled = rpn_labels >= 0
        anchors = F.maximum(F.sum(sampled), 1.0)
        # log(1 + exp(-|z|)) + max(z, 0) - z y: stable for every z (the classifier's sigmoid loss)
        z = objectness
        bce = F.relu(z) - z * rpn_labels + F.Activation(-F.abs(z), act_type="softrelu")
        rpn_objectness = F.sum(bce * sampled) / anchors
        rpn_box = F.sum(F.smooth_l1(deltas - rpn_targets, scalar=SIGMA) * rpn_weights) / anchors

        size = self.roi["size"]
        pooled = F.contrib.ROIAlign(F.transpose(features, axes=(0, 3, 1, 2)), rois, pooled_size=(size, size),
                                    spatial_scale=self.roi["spatial_scale"], sample_ratio=self.roi["sampling_ratio"],
                                    aligned=False)
        hidden = self.head(F.transpose(pooled, axes=(0, 2, 3, 1)))[0]  # the head flattens NHWC
        logits, box_deltas = self.cls(hidden)[0], self.box(hidden)[0]
        count = F.maximum(F.sum(roi_real), 1.0)
        head_class = F.sum(-F.pick(F.log_softmax(logits, axis=-1), roi_labels, axis=-1) * roi_real) / count
        own_class = F.broadcast_like(F.expand_dims(roi_labels, axis=1), roi_targets)  # (R, 4): the label 4 times
        own = F.pick(F.reshape(box_deltas, shape=(0, -1, 4)), own_class, axis=1)  # each RoI's own class's deltas
        head_box = F.sum(F.smooth_l1(own - roi_targets, scalar=SIGMA) * roi_weights) / count
        right = F.sum((F.argmax(logits, axis=-1) == roi_labels) * roi_real)
        return rpn_objectness, rpn_box, head_class, head_box, right


class Detector(DetectorAdapter):
    name = "mxnet"
    executions = ("graph",)  # two hybridized graphs
    dtypes = tuple(DTYPES)

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        check_threads(threads)
        self.ctx = _context(device)
        self.dtype = lookup(DTYPES, "dtype", recipe_dtype(recipe))
        self.parts, self.by_name, self.kinds = {}, {}, {}
        for name, part in detector_parts(model).items():
            self.parts[name], blocks, norms = build_net(part)
            if norms:  # their moving statistics would need the classifier's bookkeeping
                raise NotImplementedError("MXNet's detector has no BatchNorm in its parts")
            self.by_name.update(blocks)
            self.kinds.update((layer["name"], layer["type"]) for layer in part["layers"])
        self.proposer = Proposer(self.parts)
        self.objective = Objective(self.proposer, self.parts, model["detector"])
        self.objective.initialize(ctx=self.ctx)  # placeholders: set_weights brings the canonical ones
        if self.dtype == np.float64:
            self.objective.cast("float64")
        # the parts are children of both: each graph is built by its first call, per canvas
        self.objective.hybridize(static_alloc=True, static_shape=True)
        self.proposer.hybridize(static_alloc=True, static_shape=True)
        self.trainable = [p for p in self.objective.collect_params().values() if p.grad_req != "null"]
        optimizer = lookup(OPTIMIZERS, "optimizer", recipe["optimizer"]["name"])
        self.optimizer = optimizer([p.data(self.ctx) for p in self.trainable], recipe["optimizer"])
        self.features = None

    def versions(self):
        return {"mxnet": mx.__version__, "numpy": np.__version__}

    def threads_used(self):
        return THREADS

    def synchronise(self):
        nd.waitall()

    # ---- weights -------------------------------------------------------------------------------

    def _params(self):
        for layer_name, block in self.by_name.items():
            kind = self.kinds[layer_name]
            for key, param in gluon_params(kind, block).items():
                yield layer_name + "/" + key, kind, key, param

    def set_weights(self, weights):
        for name, kind, key, param in self._params():
            value = layout(kind).to_native(key, weights[name])
            param.set_data(nd.array(np.ascontiguousarray(value), ctx=self.ctx, dtype=self.dtype))

    def get_weights(self):
        return self._export(gradients=False)

    def _export(self, gradients: bool) -> Dict[str, np.ndarray]:
        out = {}
        for name, kind, key, param in self._params():
            value = param.grad(self.ctx) if gradients else param.data(self.ctx)
            out[name] = layout(kind).to_canonical(key, value.asnumpy()).copy()
        return out

    # ---- the network ---------------------------------------------------------------------------

    def _array(self, value):
        return nd.array(np.ascontiguousarray(value), ctx=self.ctx, dtype=self.dtype)

    def rpn_outputs(self, x):
        self.features, objectness, deltas = self.proposer(self._array(x))
        return objectness.asnumpy(), deltas.asnumpy()

    def head_outputs(self, rois, plan_index, plan_weights):
        classes = self.model_ir["detector"]["num_classes"]
        if len(rois) == 0:  # no proposals: nothing to pool
            return np.zeros((0, classes), self.dtype), np.zeros((0, 4 * classes), self.dtype)
        boxes = np.zeros((len(rois), 5), self.dtype)  # [batch index, x1, y1, x2, y2]
        boxes[:, 1:] = rois
        roi = self.model_ir["detector"]["roi"]
        pooled = nd.contrib.ROIAlign(nd.transpose(self.features, axes=(0, 3, 1, 2)), self._array(boxes),
                                     pooled_size=(roi["size"], roi["size"]), spatial_scale=roi["spatial_scale"],
                                     sample_ratio=roi["sampling_ratio"], aligned=False)
        hidden = self.parts["head"](nd.transpose(pooled, axes=(0, 2, 3, 1)))[0]  # the head flattens NHWC
        return self.parts["cls"](hidden)[0].asnumpy(), self.parts["box"](hidden)[0].asnumpy()

    def _inputs(self, x, targets):
        """The objective's inputs; the RoIs padded to roi_batch (a fixed shape per canvas) with
        zero-weight rows, as (R, 5) [batch index, x1, y1, x2, y2] for ROIAlign."""
        real = len(targets["roi_labels"])
        padded = max(self.config["roi_batch"], real)
        rois = np.zeros((padded, 5), self.dtype)
        rois[:real, 1:] = targets["rois"]
        roi_real = (np.arange(padded) < real).astype(self.dtype)
        head = [_padded(targets[key], padded) for key in ("roi_labels", "roi_targets", "roi_weights")]
        arrays = [x, targets["rpn_labels"], targets["rpn_targets"], targets["rpn_weights"], rois] + head + [roi_real]
        return [self._array(value) for value in arrays]

    def _forward_backward(self, x, targets):
        """The losses and right count, the gradient of the losses' sum in the parameters."""
        inputs = self._inputs(x, targets)
        with autograd.record():
            outputs = self.objective(*inputs)
            total = outputs[0] + outputs[1] + outputs[2] + outputs[3]
        total.backward()
        return outputs

    def train_step(self, x, targets):
        outputs = self._forward_backward(x, targets)
        self.optimizer.step([p.data(self.ctx) for p in self.trainable], [p.grad(self.ctx) for p in self.trainable])
        values = nd.concat(*[value.reshape((1,)).astype(np.float64) for value in outputs], dim=0).asnumpy()
        return dict(zip(LOSS_NAMES + ("right",), values.tolist()))

    def losses_and_gradients(self, x, targets):
        outputs = self._forward_backward(x, targets)
        losses = {name: float(value.asscalar()) for name, value in zip(LOSS_NAMES, outputs)}
        return losses, self._export(gradients=True)

    def nms(self, boxes, scores, threshold):
        """contrib.box_nms on boxes pre-sorted stably by descending score (see the module's doc)."""
        count = len(boxes)
        if count == 0:
            return np.zeros(0, np.int64)
        order = np.argsort(-np.asarray(scores), kind="stable")
        rows = np.empty((count, 6), np.float32)  # [rank score, x1, y1, x2, y2, index]; exact below 2**24
        rows[:, 0] = count - np.arange(count)
        rows[:, 1:5] = np.asarray(boxes, np.float32)[order]
        rows[:, 5] = order
        kept = nd.contrib.box_nms(nd.array(rows, ctx=self.ctx), overlap_thresh=threshold, valid_thresh=0.0, topk=-1,
                                  coord_start=1, score_index=0, id_index=-1, force_suppress=True).asnumpy()
        return kept[kept[:, 0] > 0, 5].astype(np.int64)  # suppressed rows come back as -1, after the kept


def _padded(value, rows: int) -> np.ndarray:
    """`value` with zero rows appended up to `rows`."""
    value = np.asarray(value)
    out = np.zeros((rows,) + value.shape[1:], value.dtype)
    out[:len(value)] = value
    return out


def _context(device: str):
    if device != "gpu":
        return mx.cpu()
    if mx.context.num_gpus() == 0:
        raise RuntimeError("device gpu requested, but MXNet %s sees no GPU (CUDA build: %s)"
                           % (mx.__version__, mx.runtime.Features().is_enabled("CUDA")))
    return mx.gpu(0)
