"""JAX's Faster R-CNN: each IR part a Flax module of the classifier adapter's (layers.IRModel),
optimised with its optax chain, every pass one jitted function.

RoI Align: JAX has no op, so the shared plan (pipeline.roi_align_plan) is applied as gathers of
feature-map rows and a weighted sum, in the form XLA's CPU runs fastest with a gradient (training)
and without (detection); see roi_align_for_gradient. NMS: no op either; the pairwise IoU and the
greedy pass both run in one jitted function on the run's device (the pass as a fixed point in a
lax.while_loop, shared/detection/nms.fixed_point_keep), the sort on the host as the reference's.

Shapes are fixed so that each jitted function compiles once per canvas (landscape and portrait): the
sampled RoIs are padded to roi_batch (training) or post_nms_test (detection) with zero-weight rows
that the losses mask, and NMS pads its boxes to a power of two with zero-area boxes, which overlap
nothing.
"""
from __future__ import annotations

# the adapter first: importing it configures XLA's CPU threads, which must happen before jax loads
from dlbench.worker.frameworks.jax.adapter import Adapter, jax_device
from dlbench.worker.frameworks.jax.layers import IRModel
from dlbench.worker.frameworks.jax.losses import first_argmax
from dlbench.worker.frameworks.jax.optimizers import make_optimizer

# isort: split
import functools
from typing import Dict

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dlbench.shared.detection.pipeline import SMOOTH_L1_BETA
from dlbench.shared.ir import detector_parts, infer_shapes, param_shapes
from dlbench.worker.detector import LOSS_NAMES, DetectorAdapter

NMS_MIN_BOXES = 64  # the smallest NMS bucket: per-class detection NMS sees a few boxes at a time


def smooth_l1(difference):
    d = jnp.abs(difference)
    return jnp.where(d < SMOOTH_L1_BETA, 0.5 * d * d / SMOOTH_L1_BETA, d - 0.5 * SMOOTH_L1_BETA)


def rpn_losses(objectness, deltas, labels, targets, weights):
    """Objectness: mean sigmoid cross-entropy of the sampled anchors (labels >= 0); box: smooth L1 of
    the positives (weights) summed, over the sampled count."""
    sampled = labels >= 0
    count = jnp.maximum(jnp.sum(sampled), 1).astype(objectness.dtype)
    entropy = optax.sigmoid_binary_cross_entropy(objectness, (labels > 0).astype(objectness.dtype))
    return (jnp.sum(jnp.where(sampled, entropy, 0.0)) / count,
            jnp.sum(smooth_l1(deltas - targets) * weights) / count)


def head_losses(logits, box_deltas, labels, targets, weights, real):
    """As the PyTorch detector's head_losses over the first `real` rows; the padding rows (label 0, weights
    0) add nothing to the losses, their gradient or the right count."""
    rows = labels.shape[0]
    kept = jnp.arange(rows) < real
    count = jnp.maximum(real, 1).astype(logits.dtype)
    own = jnp.take_along_axis(box_deltas.reshape(rows, -1, 4), labels[:, None, None], axis=1)[:, 0]
    entropy = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    right = jnp.sum((first_argmax(logits) == labels) & kept)
    return (jnp.sum(jnp.where(kept, entropy, 0.0)) / count,
            jnp.sum(smooth_l1(own - targets) * weights) / count, right)


def roi_align_for_gradient(flat, plan_index, plan_weights):
    """The plan applied as one gather of every (RoI, bin, corner) row and a contraction over the
    corners: its gradient is one scatter-add. Measured on the 2-core machine (128 RoIs, a 38x63x256
    map, CPU time): forward and backward 73 ms, against 110-115 ms for roi_align_forward's K gathers
    (K scatters back, or a custom VJP scattering as here)."""
    return jnp.einsum("rbk,rbkc->rbc", plan_weights, jnp.take(flat, plan_index, axis=0))


def roi_align_forward(flat, plan_index, plan_weights):
    """The plan applied corner by corner: XLA fuses the K gathers into the weighted sum, so the
    gathered rows are never stored. Measured as above, forward alone: 8 ms against 50 ms."""
    pooled = 0.0
    for corner in range(plan_index.shape[-1]):
        pooled = pooled + plan_weights[:, :, corner, None] * jnp.take(flat, plan_index[:, :, corner], axis=0)
    return pooled


def _padded(array: np.ndarray, rows: int) -> np.ndarray:
    """`array` with zero rows added up to `rows`."""
    extra = rows - len(array)
    return np.pad(array, [(0, extra)] + [(0, 0)] * (array.ndim - 1)) if extra else array


@jax.jit
def _greedy_keep(boxes, threshold):
    """Which boxes (sorted by descending score) greedy NMS keeps, as shared/detection/nms.fixed_point_keep
    computes it: a box goes when a kept box before it overlaps it with IoU > threshold; zero-area boxes
    overlap nothing. The fixed point is reached in a lax.while_loop, on the device."""
    area = jnp.clip(boxes[:, 2] - boxes[:, 0], 0) * jnp.clip(boxes[:, 3] - boxes[:, 1], 0)
    top_left = jnp.maximum(boxes[:, None, :2], boxes[None, :, :2])
    bottom_right = jnp.minimum(boxes[:, None, 2:], boxes[None, :, 2:])
    inter = jnp.prod(jnp.clip(bottom_right - top_left, 0), axis=-1)
    union = area[:, None] + area[None, :] - inter
    overlaps = jnp.where(union > 0, inter / jnp.where(union > 0, union, 1.0), 0.0)
    suppress = jnp.triu(overlaps > threshold, 1).astype(jnp.float32)  # a box only removes those after it

    def again(state):
        keep, _ = state
        return (keep @ suppress == 0).astype(jnp.float32), keep

    def changed(state):
        keep, before = state
        return jnp.any(keep != before)

    keep = jnp.ones(len(boxes), jnp.float32)
    return jax.lax.while_loop(changed, again, again((keep, keep)))[0] > 0


class Detector(DetectorAdapter):
    name = "jax"
    executions = ("compiled",)
    versions = Adapter.versions
    threads_used = Adapter.threads_used

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        self.jax_device = jax_device(device)
        self.modules, self.locations, params = {}, {}, {}
        for part_name, part in detector_parts(model).items():
            self.modules[part_name] = IRModel(tuple(part["layers"]))
            params[part_name] = {}
            for layer, in_shape, _ in infer_shapes(part):
                shapes = param_shapes(layer, in_shape)
                # only "params" are carried: BatchNorm's moving statistics would need Flax's batch_stats
                if shapes and layer["type"] not in ("conv2d", "dense"):
                    raise NotImplementedError("jax's detector builds conv2d and dense weights, not %s" % layer["type"])
                for key, shape in shapes.items():
                    self.locations[layer["name"] + "/" + key] = (part_name, layer["name"], key)
                    params[part_name].setdefault(layer["name"], {})[key] = np.zeros(shape, np.float32)
        self.params = self._put(params)
        self.tx = make_optimizer(recipe["optimizer"])
        # put, not left as jit's uncommitted output: the step's outputs are committed, and a committed
        # state would then compile the step a second time
        self.opt_state = self._put(self.tx.init(self.params))
        self._rpn_fn = jax.jit(self._rpn)
        self._head_fn = jax.jit(functools.partial(self._head, roi_align=roi_align_forward))
        self._gradients_fn = jax.jit(jax.grad(self._objective, has_aux=True))
        # not donated, as the classifier's step (the adapter's module doc: slower on XLA's CPU)
        self._step_fn = jax.jit(self._step)
        self.features = None

    def _put(self, tree):
        return jax.device_put(tree, self.jax_device)

    def synchronise(self):
        jax.block_until_ready((self.params, self.opt_state))

    # ---- weights -------------------------------------------------------------------------------

    def set_weights(self, weights):
        params = jax.device_get(self.params)
        for name, (part, layer, key) in self.locations.items():
            value, expected = np.asarray(weights[name], dtype=np.float32), params[part][layer][key].shape
            if value.shape != expected:
                raise ValueError("weight %s: shape %s, expected %s" % (name, value.shape, expected))
            params[part][layer][key] = np.array(value)
        self.params = self._put(params)

    def get_weights(self):
        return self._export(self.params)

    def _export(self, tree) -> Dict[str, np.ndarray]:
        tree = jax.device_get(tree)
        return {name: np.array(tree[part][layer][key]) for name, (part, layer, key) in self.locations.items()}

    # ---- the network ---------------------------------------------------------------------------

    def _apply(self, params, part, x):
        return self.modules[part].apply({"params": params[part]}, x, train=False)

    def _rpn(self, params, x):
        features = self._apply(params, "backbone", x)
        hidden = self._apply(params, "rpn", features)
        return (features, self._apply(params, "rpn_cls", hidden).reshape(-1),
                self._apply(params, "rpn_box", hidden).reshape(-1, 4))

    def _head(self, params, features, plan_index, plan_weights, roi_align=roi_align_for_gradient):
        flat = features.reshape(-1, features.shape[-1])
        pooled = roi_align(flat, plan_index, plan_weights)
        rois, bins = plan_index.shape[:2]
        size = int(round(bins ** 0.5))
        hidden = self._apply(params, "head", pooled.reshape(rois, size, size, -1))
        return self._apply(params, "cls", hidden), self._apply(params, "box", hidden)

    def _objective(self, params, x, targets):
        """The four losses' sum, with (the losses, the head's right count)."""
        features, objectness, deltas = self._rpn(params, x)
        rpn = rpn_losses(objectness, deltas, targets["rpn_labels"], targets["rpn_targets"], targets["rpn_weights"])
        logits, box_deltas = self._head(params, features, targets["plan_index"], targets["plan_weights"])
        head = head_losses(logits, box_deltas, targets["roi_labels"], targets["roi_targets"], targets["roi_weights"],
                           targets["real"])
        losses = rpn + head[:2]
        return sum(losses), (jnp.stack(losses), head[2])

    def _step(self, params, opt_state, x, targets):
        grads, (losses, right) = jax.grad(self._objective, has_aux=True)(params, x, targets)
        updates, opt_state = self.tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, losses, right

    def _device_targets(self, targets):
        """The sample on the device, its RoIs padded to roi_batch (one compiled step for any count)."""
        real = len(targets["roi_labels"])
        rows = max(real, self.config["roi_batch"])
        keys = ("plan_index", "plan_weights", "roi_labels", "roi_targets", "roi_weights")
        arrays = {key: _padded(np.asarray(targets[key]), rows) for key in keys}
        arrays.update((key, targets[key]) for key in ("rpn_labels", "rpn_targets", "rpn_weights"))
        arrays["real"] = np.int32(real)
        return self._put(arrays)

    def rpn_outputs(self, x):
        self.features, objectness, deltas = self._rpn_fn(self.params, self._put(np.asarray(x, np.float32)))
        return np.asarray(objectness), np.asarray(deltas)

    def head_outputs(self, rois, plan_index, plan_weights):
        """The RoIs padded to post_nms_test (one compiled head for any count), the padding cut off after."""
        real = len(plan_index)
        rows = max(real, self.config["post_nms_test"])
        logits, deltas = self._head_fn(self.params, self.features, self._put(_padded(plan_index, rows)),
                                       self._put(_padded(plan_weights, rows)))
        return np.asarray(logits)[:real], np.asarray(deltas)[:real]

    def train_step(self, x, targets):
        self.params, self.opt_state, losses, right = self._step_fn(
            self.params, self.opt_state, self._put(np.asarray(x, np.float32)), self._device_targets(targets))
        losses, right = jax.device_get((losses, right))
        return dict(zip(LOSS_NAMES + ("right",), [float(v) for v in losses] + [float(right)]))

    def losses_and_gradients(self, x, targets):
        grads, (losses, _) = self._gradients_fn(self.params, self._put(np.asarray(x, np.float32)),
                                                self._device_targets(targets))
        return dict(zip(LOSS_NAMES, (float(v) for v in jax.device_get(losses)))), self._export(grads)

    def nms(self, boxes, scores, threshold):
        """Greedy NMS (_greedy_keep) on the boxes sorted as the reference sorts them (stable, by
        descending score), padded to a power of two so a few compiled sizes serve every call."""
        count = len(boxes)
        if count == 0:
            return np.zeros(0, np.int64)
        order = np.argsort(-np.asarray(scores), kind="stable")
        size = max(NMS_MIN_BOXES, 1 << (count - 1).bit_length())
        sorted_boxes = _padded(np.asarray(boxes, np.float32).reshape(-1, 4)[order], size)
        keep = _greedy_keep(self._put(sorted_boxes), np.float32(threshold))
        return order[np.asarray(keep)[:count]].astype(np.int64)

