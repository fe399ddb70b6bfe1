"""Keras 3's Faster R-CNN, one module for the three backends (KERAS_BACKEND: tensorflow, jax, torch).

Each IR part is built by the layer table's build_model (layers.py), its spatial input sizes left open so
that the landscape canvas and its transpose run through the same layers. Three keras.Models share
them: Proposer (backbone and RPN), Head (RoI Align and the head) and FasterRCNN (both, and the four
losses in compute_loss). Training is FasterRCNN.train_on_batch, the Keras way, with the classifier's
optimiser: Keras compiles the step as it compiles fit's (tf.function, jax.jit, eager torch), and
inference is predict_on_batch. The sampled RoIs are padded to a fixed count with zero-weight, masked
rows, so a compiled step sees one set of shapes per canvas whatever the sample holds.

keras.ops has neither RoI Align nor NMS. RoI Align applies the shared plan (pipeline.roi_align_plan):
one keras.ops.take of feature-map rows per plan corner, weighted and summed, so that no (RoIs, bins,
corners, channels) block is ever materialised. NMS is the pairwise IoU in keras.ops, then the greedy
pass as a fixed point of keras.ops matrix products (shared/detection/nms.fixed_point_keep), on the device.
"""
from __future__ import annotations

import numpy as np

from dlbench.shared.detection.pipeline import SMOOTH_L1_BETA
from dlbench.shared.ir import detector_parts
from dlbench.worker.detector import LOSS_NAMES, DetectorAdapter
from dlbench.worker.frameworks.keras3 import adapter
from dlbench.worker.frameworks.keras3.adapter import BACKEND, _check_device, keras, ops
from dlbench.worker.frameworks.keras3.layers import build_model
from dlbench.worker.frameworks.keras3.optimizers import make_optimizer

if BACKEND == "tensorflow":
    import tensorflow as tf
elif BACKEND == "jax":
    import jax
else:
    import torch

CONVOLUTIONAL = ("backbone", "rpn", "rpn_cls", "rpn_box")
TRUTH = ("rpn_labels", "rpn_targets", "rpn_weights", "roi_labels", "roi_targets", "roi_weights")


def roi_align(features, plan_index, plan_weights):
    """(R, size, size, C): pooled[r, b] = sum_k weights[r, b, k] * flat[index[r, b, k]], one gather per
    corner k (K = 16 gathers of (R, bins, C) rows rather than one of (R, bins, K, C))."""
    channels = features.shape[-1]
    flat = ops.reshape(features, (-1, channels))
    bins, corners = plan_index.shape[1], plan_index.shape[2]
    pooled = None
    for k in range(corners):
        term = ops.take(flat, plan_index[:, :, k], axis=0) * plan_weights[:, :, k:k + 1]
        pooled = term if pooled is None else pooled + term
    size = int(round(bins ** 0.5))
    return ops.reshape(pooled, (-1, size, size, channels))


def smooth_l1(difference):
    d = ops.abs(difference)
    return ops.where(d < SMOOTH_L1_BETA, 0.5 * d * d / SMOOTH_L1_BETA, d - 0.5 * SMOOTH_L1_BETA)


def detector_losses(truth, outputs):
    """The four losses (detector.py) and how many real RoIs the head classified right; padded RoIs
    (roi_mask 0) count in none of them."""
    truth = {key: ops.convert_to_tensor(value) for key, value in truth.items()}
    labels = truth["rpn_labels"]
    sampled = ops.cast(ops.greater_equal(labels, 0), "float32")
    anchors = ops.maximum(ops.sum(sampled), 1.0)
    objectness = ops.binary_crossentropy(ops.cast(ops.equal(labels, 1), "float32"), outputs["objectness"],
                                         from_logits=True)
    rpn_box = smooth_l1(outputs["rpn_deltas"] - truth["rpn_targets"]) * truth["rpn_weights"]
    real, roi_labels, logits = truth["roi_mask"], truth["roi_labels"], outputs["class_logits"]
    rois = ops.maximum(ops.sum(real), 1.0)
    classes = logits.shape[-1]
    cross = ops.sparse_categorical_crossentropy(roi_labels, logits, from_logits=True)
    own = ops.sum(ops.reshape(outputs["box_deltas"], (-1, classes, 4)) * ops.one_hot(roi_labels, classes)[:, :, None],
                  axis=1)
    head_box = smooth_l1(own - truth["roi_targets"]) * truth["roi_weights"]
    hits = ops.cast(ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), ops.cast(roi_labels, "int32")), "float32")
    return (ops.sum(objectness * sampled) / anchors, ops.sum(rpn_box) / anchors, ops.sum(cross * real) / rois,
            ops.sum(head_box) / rois, ops.sum(hits * real))


class Proposer(keras.Model):
    """Image -> objectness (fh * fw * A,), deltas (fh * fw * A, 4) in the anchors' order, feature map."""

    def __init__(self, backbone, rpn, rpn_cls, rpn_box, **kwargs):
        super().__init__(**kwargs)
        self.backbone, self.rpn, self.rpn_cls, self.rpn_box = backbone, rpn, rpn_cls, rpn_box
        self.built = True  # no weights of its own; its parts are built (stateless_call needs it)

    def call(self, image):
        features = self.backbone(image)
        hidden = self.rpn(features)
        return ops.reshape(self.rpn_cls(hidden), (-1,)), ops.reshape(self.rpn_box(hidden), (-1, 4)), features


class Head(keras.Model):
    """Feature map and RoI Align plan -> class logits, box deltas."""

    def __init__(self, head, cls, box, **kwargs):
        super().__init__(**kwargs)
        self.head, self.cls, self.box = head, cls, box
        self.built = True  # no weights of its own; its parts are built (stateless_call needs it)

    def call(self, inputs):
        hidden = self.head(roi_align(inputs["features"], inputs["plan_index"], inputs["plan_weights"]))
        return self.cls(hidden), self.box(hidden)


class StepValues(keras.metrics.Metric):
    """The last step's four losses and right count, as train_on_batch's logs."""

    def __init__(self, name="step_values", **kwargs):
        super().__init__(name=name, **kwargs)
        self.values = self.add_variable(shape=(len(LOSS_NAMES) + 1,), initializer="zeros", name="values")

    def update_state(self, values):
        self.values.assign(ops.stop_gradient(ops.stack(values)))

    def result(self):
        return {name: self.values[i] for i, name in enumerate(LOSS_NAMES + ("right",))}


class FasterRCNN(keras.Model):
    """The whole network on one image and its sampled RoIs; compute_loss is the four losses' sum."""

    def __init__(self, proposer, head, **kwargs):
        super().__init__(**kwargs)
        self.proposer, self.head = proposer, head
        self.step_values = StepValues()
        self.built = True  # no weights of its own; its parts are built (stateless_call needs it)

    def call(self, inputs):
        objectness, deltas, features = self.proposer(inputs["image"])
        logits, box_deltas = self.head({"features": features, "plan_index": inputs["plan_index"],
                                        "plan_weights": inputs["plan_weights"]})
        return {"objectness": objectness, "rpn_deltas": deltas, "class_logits": logits, "box_deltas": box_deltas}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        values = detector_losses(y, y_pred)
        self.step_values.update_state(values)
        return values[0] + values[1] + values[2] + values[3]


def padded_plan(plan_index, plan_weights, rows: int):
    """The plan with zero-weight rows (reading cell 0) up to `rows` RoIs: one shape for the compiled step."""
    extra = max(rows - len(plan_index), 0)
    index = np.pad(np.asarray(plan_index, np.int32), ((0, extra), (0, 0), (0, 0)))
    weights = np.pad(np.asarray(plan_weights, np.float32), ((0, extra), (0, 0), (0, 0)))
    return index, weights


class Detector(DetectorAdapter):
    name = "keras"
    executions = adapter.EXECUTIONS[adapter.BACKEND][:1]  # compile()'s default for the backend alone

    versions = adapter.Adapter.versions
    threads_used = adapter.Adapter.threads_used
    synchronise = adapter.Adapter.synchronise  # reads self.variables and self.device_name, as here

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        if BACKEND == "tensorflow":
            adapter._configure_tf_threads(threads)
        elif BACKEND == "torch":
            torch.set_num_threads(threads)
        self.device_name = _check_device(device)
        parts, self.variables = {}, {}
        with keras.device(self.device_name):
            for name, part in detector_parts(model).items():
                if name in CONVOLUTIONAL:  # either canvas orientation
                    part = dict(part, input_shape=[None, None, part["input_shape"][-1]])
                parts[name], variables = build_model(part)
                self.variables.update(variables)
            self.proposer = Proposer(*(parts[name] for name in CONVOLUTIONAL))
            self.head = Head(parts["head"], parts["cls"], parts["box"])
            self.network = FasterRCNN(self.proposer, self.head)
            self.network.compile(optimizer=make_optimizer(recipe["optimizer"]))
        self.features = None

    # ---- weights ---------------------------------------------------------------------------------

    def set_weights(self, weights):
        for key, variable in self.variables.items():
            variable.assign(np.asarray(weights[key], dtype=np.float32))

    def get_weights(self):
        return {key: np.array(ops.convert_to_numpy(variable)) for key, variable in self.variables.items()}

    # ---- the network -----------------------------------------------------------------------------

    def rpn_outputs(self, x):
        with keras.device(self.device_name):
            objectness, deltas, self.features = self.proposer.predict_on_batch(np.asarray(x, np.float32))
        return objectness, deltas

    def head_outputs(self, rois, plan_index, plan_weights):
        # padded to the test-time proposal count: one compiled shape per canvas
        index, weights = padded_plan(plan_index, plan_weights, self.config["post_nms_test"])
        with keras.device(self.device_name):
            logits, deltas = self.head.predict_on_batch({"features": self.features, "plan_index": index,
                                                         "plan_weights": weights})
        return logits[:len(plan_index)], deltas[:len(plan_index)]

    def _batch(self, x, targets):
        """(inputs, truth) of one step, the RoIs padded to roi_batch (zero weight, roi_mask 0)."""
        count = len(targets["roi_labels"])
        rows = max(self.config["roi_batch"], count)
        index, weights = padded_plan(targets["plan_index"], targets["plan_weights"], rows)
        inputs = {"image": np.asarray(x, np.float32), "plan_index": index, "plan_weights": weights}
        truth = {key: np.asarray(targets[key]) for key in TRUTH}
        for key in ("roi_labels", "roi_targets", "roi_weights"):
            truth[key] = np.pad(truth[key], ((0, rows - count),) + ((0, 0),) * (truth[key].ndim - 1))
        truth["roi_mask"] = (np.arange(rows) < count).astype(np.float32)
        return inputs, truth

    def train_step(self, x, targets):
        inputs, truth = self._batch(x, targets)
        with keras.device(self.device_name):
            logs = self.network.train_on_batch(inputs, truth, return_dict=True)
        return {key: float(logs[key]) for key in LOSS_NAMES + ("right",)}

    def losses_and_gradients(self, x, targets):
        inputs, truth = self._batch(x, targets)
        with keras.device(self.device_name):
            losses, gradients = self._gradients(inputs, truth)
        return dict(zip(LOSS_NAMES, (float(ops.convert_to_numpy(loss)) for loss in losses))), gradients

    def _gradients(self, inputs, truth):
        """The four losses and the gradient of their sum for every canonical weight, the backend's way
        (as the classifier adapter's loss_and_gradients)."""
        keys = list(self.variables)
        network = self.network
        if BACKEND == "tensorflow":
            with tf.GradientTape() as tape:
                losses = detector_losses(truth, network(inputs))[:4]
                total = sum(losses)  # inside the tape, or the gradient finds no path
            grads = [g.numpy() for g in tape.gradient(total, [self.variables[k].value for k in keys])]
        elif BACKEND == "jax":
            trainable = network.trainable_variables
            place = {id(v): i for i, v in enumerate(trainable)}
            frozen = [v.value for v in network.non_trainable_variables]

            def total(values):
                outputs, _ = network.stateless_call(values, frozen, inputs)
                terms = detector_losses(truth, outputs)[:4]
                return sum(terms), terms

            (_, losses), all_grads = jax.value_and_grad(total, has_aux=True)([v.value for v in trainable])
            grads = [np.asarray(all_grads[place[id(self.variables[k])]]) for k in keys]
        else:
            params = [self.variables[k].value for k in keys]
            losses = detector_losses(truth, network(inputs))[:4]
            sum(losses).backward()
            grads = [param.grad.detach().cpu().numpy() for param in params]
            for param in params:
                param.grad = None
        return losses, {k: np.array(g) for k, g in zip(keys, grads)}

    # ---- NMS -------------------------------------------------------------------------------------

    def nms(self, boxes, scores, threshold):
        """Greedy NMS in keras.ops on the run's device: the pairwise IoU, then fixed_point_keep."""
        if len(boxes) == 0:
            return np.zeros(0, np.int64)
        order = np.argsort(-np.asarray(scores), kind="stable")
        ordered = np.asarray(boxes, np.float32)[order]
        if BACKEND == "jax":
            # JAX compiles each op per shape: zero-area rows (IoU 0 with all) up to a power of two bound
            # the shapes to a handful whatever the box count
            rows = 1 << max(6, (len(ordered) - 1).bit_length())
            ordered = np.pad(ordered, ((0, rows - len(ordered)), (0, 0)))
        with keras.device(self.device_name):
            keep = fixed_point_keep(ops.greater(pairwise_iou(ops.convert_to_tensor(ordered)), threshold))
        return order[np.flatnonzero(keep[:len(order)])]


def fixed_point_keep(suppress):
    """shared/detection/nms.fixed_point_keep in keras.ops, on the device: which boxes (sorted best
    first) greedy NMS keeps, as a bool numpy array; only the check for a settled round comes to the host."""
    suppress = ops.triu(ops.cast(suppress, "float32"), 1)
    keep = ops.ones((suppress.shape[0],), "float32")
    while True:
        again = ops.cast(ops.equal(ops.matmul(keep, suppress), 0.0), "float32")
        if bool(ops.convert_to_numpy(ops.all(ops.equal(again, keep)))):
            return ops.convert_to_numpy(keep) > 0
        keep = again


def pairwise_iou(b):
    """(N, N) IoU, one coordinate at a time (no (N, N, 2) corner blocks); a zero-area box has IoU 0 with
    every box, itself included (boxes.iou)."""
    x1, y1, x2, y2 = (b[:, i] for i in range(4))
    area = ops.maximum(x2 - x1, 0.0) * ops.maximum(y2 - y1, 0.0)
    width = ops.maximum(ops.minimum(x2[:, None], x2[None]) - ops.maximum(x1[:, None], x1[None]), 0.0)
    height = ops.maximum(ops.minimum(y2[:, None], y2[None]) - ops.maximum(y1[:, None], y1[None]), 0.0)
    inter = width * height
    union = area[:, None] + area[None, :] - inter
    return ops.where(union > 0, inter / ops.maximum(union, 1e-12), 0.0)
