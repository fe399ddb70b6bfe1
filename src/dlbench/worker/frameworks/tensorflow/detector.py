"""TensorFlow's Faster R-CNN: the IR's parts as the classifier adapter's Models (tf.nn ops over
canonical variables), the training step one tf.function with GradientTape and the classifier's SGD.

Every compiled function takes free shapes (input signatures with None axes): the two canvases and
any count of sampled RoIs run the same graph, traced once, with no padding of the sample.

RoI Align in the training step is TensorFlow's own crop_and_resize, the op the TF Object Detection
API's Faster R-CNN pools with, made to sample where torchvision's roi_align (aligned=False) does
(crop_align); with its gradient it ran ~3x faster than the shared plan applied as a sparse-dense
matmul (128 RoIs on frcnn-voc's 38x63x256 map, one thread: ~43 ms against ~123 ms). NMS is
tf.image.non_max_suppression.
"""
from __future__ import annotations

from typing import Dict

import numpy as np
import tensorflow as tf

from dlbench.shared.detection.pipeline import SMOOTH_L1_BETA
from dlbench.shared.ir import detector_parts
from dlbench.worker.base import lookup
from dlbench.worker.detector import LOSS_NAMES, DetectorAdapter
from dlbench.worker.frameworks.tensorflow.adapter import choose_device, configure_threads
from dlbench.worker.frameworks.tensorflow.layers import Model
from dlbench.worker.frameworks.tensorflow.optimizers import OPTIMIZERS

TARGETS = (("rpn_labels", tf.int32, [None]), ("rpn_targets", tf.float32, [None, 4]),
           ("rpn_weights", tf.float32, [None, 4]), ("rois", tf.float32, [None, 4]),
           ("roi_labels", tf.int32, [None]), ("roi_targets", tf.float32, [None, 4]),
           ("roi_weights", tf.float32, [None, 4]))


def smooth_l1(difference):
    d = tf.abs(difference)
    return tf.where(d < SMOOTH_L1_BETA, 0.5 * d * d / SMOOTH_L1_BETA, d - 0.5 * SMOOTH_L1_BETA)


def crop_align(features, rois, roi: dict):
    """(R, size, size, C) RoI Align of features (1, fh, fw, C), as torchvision's roi_align with
    aligned=False. crop_and_resize samples a grid from its box's first to its last point, so a
    (size * grid)^2 crop whose first and last samples sit at roi_start + (i + 0.5) * roi_size /
    (size * grid) takes torchvision's samples; average pooling of grid x grid makes the bins.
    torchvision reads a sample in [-1, 0) at 0 and one in (fh - 1, fh] at fh - 1, and zeroes those
    beyond: the map replicated by one cell each side (SYMMETRIC padding of one cell copies the edge;
    coordinates shifted by 1) reads the same, and
    crop_and_resize's extrapolation value 0 zeroes the rest."""
    size, grid = roi["size"], roi["sampling_ratio"]
    samples = size * grid
    padded = tf.pad(features, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="SYMMETRIC")
    scaled = rois * roi["spatial_scale"]
    extent = tf.maximum(scaled[:, 2:] - scaled[:, :2], 1.0)  # (w, h), at least one cell, as torchvision
    first = scaled[:, :2] + 0.5 * extent / samples + 1.0
    last = scaled[:, :2] + (samples - 0.5) * extent / samples + 1.0
    span = tf.cast(tf.shape(padded)[1:3], tf.float32) - 1.0  # crop_and_resize's unit box spans (h - 1, w - 1)
    boxes = tf.stack([first[:, 1] / span[0], first[:, 0] / span[1], last[:, 1] / span[0], last[:, 0] / span[1]], 1)
    crops = tf.image.crop_and_resize(padded, boxes, tf.zeros(tf.shape(rois)[:1], tf.int32), [samples, samples],
                                     extrapolation_value=0.0)
    return tf.nn.avg_pool2d(crops, grid, grid, "VALID")


def rpn_losses(objectness, deltas, labels, targets, weights):
    sampled = tf.cast(labels >= 0, tf.float32)
    count = tf.maximum(tf.reduce_sum(sampled), 1.0)
    entropy = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(tf.maximum(labels, 0), tf.float32),
                                                      logits=objectness)
    box = tf.reduce_sum(smooth_l1(deltas - targets) * weights)
    return tf.reduce_sum(entropy * sampled) / count, box / count


def head_losses(logits, box_deltas, labels, targets, weights):
    rois = tf.shape(labels)[0]
    own = tf.gather(tf.reshape(box_deltas, [rois, -1, 4]), labels, batch_dims=1)
    box = tf.reduce_sum(smooth_l1(own - targets) * weights)
    head_class = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    right = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), labels), tf.float64))
    return head_class, box / tf.cast(tf.maximum(rois, 1), tf.float32), right


class Detector(DetectorAdapter):
    name = "tensorflow"
    executions = ("graph",)  # its steps are tf.functions without XLA, the adapter's default

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        configure_threads(threads)
        self.tf_device = choose_device(device)
        self.roi = model["detector"]["roi"]
        with tf.device(self.tf_device):
            parts = detector_parts(model)
            self.parts = {name: Model(part, seed) for name, part in parts.items()}
            self.weights = {key: var for part in self.parts.values() for key, var in part.weights.items()}
            self.trainable_names = [key for part in self.parts.values() for key in part.trainable_names]
            self.params = [self.weights[key] for key in self.trainable_names]
            optimizer = lookup(OPTIMIZERS, "optimizer", recipe["optimizer"]["name"])
            self.optimizer = optimizer(self.params, recipe["optimizer"])
        image = tf.TensorSpec([1, None, None, 3], tf.float32)
        targets = [tf.TensorSpec(shape, dtype) for _, dtype, shape in TARGETS]
        compiled = dict(jit_compile=False)  # graph, the adapter's default execution (adapter.EXECUTIONS)
        self._rpn = tf.function(lambda x: self._rpn_fn(x, training=False), input_signature=[image], **compiled)
        self._roi_head = tf.function(self._roi_head_fn, input_signature=[
            tf.TensorSpec([1, None, None, parts["rpn"]["input_shape"][-1]], tf.float32),
            tf.TensorSpec([None, 4], tf.float32)], **compiled)
        self._train = tf.function(self._train_fn, input_signature=[image] + targets, **compiled)
        self._gradients = tf.function(self._gradients_fn, input_signature=[image] + targets, **compiled)
        self.features = None

    def versions(self):
        return {"tensorflow": tf.__version__, "numpy": np.__version__}

    def threads_used(self):
        return tf.config.threading.get_intra_op_parallelism_threads()

    def synchronise(self):
        if self.tf_device.startswith("/GPU"):
            if hasattr(tf.test.experimental, "sync_devices"):
                tf.test.experimental.sync_devices()
            else:
                self.params[-1].numpy()  # a fetch waits for the queued work before it

    # ---- weights: TensorFlow's layouts are the canonical ones ------------------------------------

    def set_weights(self, weights):
        with tf.device(self.tf_device):
            for key, var in self.weights.items():
                var.assign(np.asarray(weights[key], dtype=np.float32))

    def get_weights(self):
        return {key: var.numpy().copy() for key, var in self.weights.items()}

    # ---- compiled bodies -------------------------------------------------------------------------

    def _rpn_fn(self, x, training):
        features = self.parts["backbone"](x, training)
        hidden = self.parts["rpn"](features, training)
        objectness = tf.reshape(self.parts["rpn_cls"](hidden, training), [-1])
        return features, objectness, tf.reshape(self.parts["rpn_box"](hidden, training), [-1, 4])

    def _head(self, pooled, training):
        hidden = self.parts["head"](pooled, training)
        return self.parts["cls"](hidden, training), self.parts["box"](hidden, training)

    def _roi_head_fn(self, features, rois):
        return self._head(crop_align(features, rois, self.roi), training=False)

    def _losses(self, x, rpn_labels, rpn_targets, rpn_weights, rois, roi_labels, roi_targets, roi_weights):
        features, objectness, deltas = self._rpn_fn(x, training=True)
        rpn = rpn_losses(objectness, deltas, rpn_labels, rpn_targets, rpn_weights)
        logits, box_deltas = self._head(crop_align(features, rois, self.roi), training=True)
        head_class, head_box, right = head_losses(logits, box_deltas, roi_labels, roi_targets, roi_weights)
        return tf.stack(rpn + (head_class, head_box)), right

    def _gradients_fn(self, x, *targets):
        with tf.GradientTape() as tape:
            losses, right = self._losses(x, *targets)
            total = tf.reduce_sum(losses)
        return losses, right, tape.gradient(total, self.params)

    def _train_fn(self, x, *targets):
        losses, right, grads = self._gradients_fn(x, *targets)
        self.optimizer.apply(self.params, grads)
        return tf.concat([tf.cast(losses, tf.float64), [right]], 0)

    # ---- the contract ----------------------------------------------------------------------------

    def _targets(self, targets: Dict[str, np.ndarray]):
        return [tf.constant(np.asarray(targets[key], dtype.as_numpy_dtype)) for key, dtype, _ in TARGETS]

    def rpn_outputs(self, x):
        with tf.device(self.tf_device):
            self.features, objectness, deltas = self._rpn(tf.constant(x, tf.float32))
        return objectness.numpy(), deltas.numpy()

    def head_outputs(self, rois, plan_index, plan_weights):
        with tf.device(self.tf_device):
            logits, deltas = self._roi_head(self.features, tf.constant(np.asarray(rois, np.float32).reshape(-1, 4)))
        return logits.numpy(), deltas.numpy()

    def train_step(self, x, targets):
        with tf.device(self.tf_device):
            values = self._train(tf.constant(x, tf.float32), *self._targets(targets))
        return dict(zip(LOSS_NAMES + ("right",), values.numpy().tolist()))  # the step's one fetch

    def losses_and_gradients(self, x, targets):
        with tf.device(self.tf_device):
            losses, _, grads = self._gradients(tf.constant(x, tf.float32), *self._targets(targets))
        gradients = {key: grad.numpy() for key, grad in zip(self.trainable_names, grads)}
        return dict(zip(LOSS_NAMES, losses.numpy().tolist())), gradients

    def nms(self, boxes, scores, threshold):
        """tf.image.non_max_suppression on boxes sorted on the host (descending score, ties by lower
        index), scored by rank, so TensorFlow's own tie order never decides."""
        boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
        if len(boxes) == 0:
            return np.zeros(0, np.int64)
        order = np.argsort(-np.asarray(scores), kind="stable")
        b = boxes[order]
        # TensorFlow's boxes are (y1, x1, y2, x2), either corner first; an inverted box is made
        # zero-area, so that its IoU is 0 as in the reference rather than that of its flipped box
        corners = np.stack([b[:, 1], b[:, 0], np.maximum(b[:, 3], b[:, 1]), np.maximum(b[:, 2], b[:, 0])], 1)
        ranks = -np.arange(len(b), dtype=np.float32)
        with tf.device(self.tf_device):
            keep = tf.image.non_max_suppression(corners, ranks, len(b), iou_threshold=threshold)
        return order[keep.numpy()]
