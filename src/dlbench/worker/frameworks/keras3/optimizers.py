"""Keras 3's optimisers and learning-rate schedules, one module for the three backends.

Where Keras differs from the reference (PyTorch) semantics, it is corrected here:
- SGD: Keras m = momentum*m - lr*g; p += m equals torch's v = momentum*v + g; p -= lr*v for a constant
  lr (m = -lr*v), so keras.optimizers.SGD is used as it is. Keras's weight_decay is decoupled, so the
  coupled L2 (g + wd*p, before momentum) is added to the gradient in update_step (CoupledL2): the
  reported loss stays the data loss, as torch's.
- Adam: Keras adds epsilon to sqrt(v) before v's bias correction (p -= lr*sqrt(1-b2^t)/(1-b1^t) * m /
  (sqrt(v) + eps)); torch after it (p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)). TorchAdam
  applies torch's formula. AdamW is TorchAdam with Keras's own decoupled weight_decay (p -= lr_t * wd * p
  before each update, as keras.optimizers.AdamW and torch's AdamW), and a schedule is Keras's CosineDecay
  with warm-up, evaluated at the optimizer's iterations before each update counts itself.
- Adadelta: Keras's formula is torch's (checked in keras 3.15 source, generic and torch-parallel).

Imported by adapter.py after the backend's thread settings (KERAS_BACKEND and the threads are fixed there).
"""
from __future__ import annotations

import keras
from keras import ops

from dlbench.worker.base import not_built

BACKEND = keras.backend.backend()
if BACKEND == "tensorflow":
    import tensorflow as tf
elif BACKEND == "torch":
    import torch


def dense_gradient(gradient):
    """TensorFlow hands embedding gradients over as IndexedSlices with one row per token occurrence,
    repeats included; Keras's element-wise ops (ops.square among them) then act on each occurrence
    before the rows are summed, so Adam's v took the sum of squares where the reference squares the
    sum. Densified, every optimiser sees the one summed gradient, as in the reference.
    (keras.ops.convert_to_tensor returns IndexedSlices unchanged.)"""
    if BACKEND == "tensorflow" and isinstance(gradient, tf.IndexedSlices):
        return tf.convert_to_tensor(gradient)
    return gradient


class DenseGradients(object):
    """Mixin: every update step takes a dense gradient (see dense_gradient)."""

    def update_step(self, gradient, variable, learning_rate):
        return super().update_step(dense_gradient(gradient), variable, learning_rate)


class CoupledL2(object):
    """Mixin: coupled L2 as torch's weight_decay, g = grad + wd * p before the optimiser's own update
    (Keras's weight_decay is decoupled). The loss stays the data loss."""

    coupled_l2 = 0.0

    def update_step(self, gradient, variable, learning_rate):
        gradient = ops.add(gradient, ops.multiply(ops.cast(variable, gradient.dtype), self.coupled_l2))
        return super().update_step(gradient, variable, learning_rate)


class TorchAdam(keras.optimizers.Adam):
    """Adam with torch's epsilon placement: p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).

    The step's scalars (lr, the step count, the bias corrections) are taken in float32 whatever the variable's type,
    as torch's Adam takes them in Python floats, and cast to it where they meet the tensors: in bfloat16 (the
    "bfloat16" precision's weights and slots) beta_2 = 0.999 rounds to 1, so 1 - beta_2^t would be 0 and no weight
    would move, and the step count stops being exact past 256. In float32 the casts are no-ops."""

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = ops.cast(learning_rate, "float32")
        gradient = ops.cast(gradient, dtype)
        step = ops.cast(self.iterations + 1, "float32")
        correction1 = 1.0 - ops.power(ops.cast(self.beta_1, "float32"), step)
        correction2 = 1.0 - ops.power(ops.cast(self.beta_2, "float32"), step)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1.0 - self.beta_1))  # torch's lerp
        self.assign(v, ops.add(ops.multiply(v, self.beta_2), ops.multiply(ops.square(gradient), 1.0 - self.beta_2)))
        denominator = ops.add(ops.divide(ops.sqrt(v), ops.cast(ops.sqrt(correction2), dtype)), self.epsilon)
        step_size = ops.cast(ops.divide(lr, correction1), dtype)
        self.assign_sub(variable, ops.multiply(step_size, ops.divide(m, denominator)))


class CoupledL2Parallel(object):
    """Mixin: CoupledL2 for Keras's torch optimisers, which update all variables at once in
    _parallel_update_step (torch._foreach_* ops) and never call update_step."""

    coupled_l2 = 0.0

    def _parallel_update_step(self, grads, variables, learning_rate):
        grads = torch._foreach_add(grads, [variable.value for variable in variables], alpha=self.coupled_l2)
        return super()._parallel_update_step(grads, variables, learning_rate)


def backend_class(cls, kwargs: dict):
    """The class Keras builds for `cls` on this backend. On torch, keras.optimizers.SGD and Adadelta
    build their "parallel" versions (a few multi-tensor torch ops per step, where the generic update_step
    runs several ops per variable from Python), but a subclass of them is built as itself: deriving from
    the class Keras picks keeps that fast path, as an idiomatic Keras program gets it."""
    return type(cls(learning_rate=1.0, **kwargs))


def learning_rate(config: dict, schedule=None):
    """The recipe's learning rate, or its schedule as a Keras LearningRateSchedule of the optimizer's
    iterations (from 0, read before each update increments them)."""
    if schedule is None:
        return config["lr"]
    if schedule["name"] != "warmup_cosine":
        raise not_built("schedule", schedule["name"])
    if config["name"] == "sgd" and config["momentum"]:
        raise ValueError("keras adapter: momentum SGD with a learning-rate schedule: Keras's SGD keeps lr inside "
                         "its velocity (m = momentum*m - lr*g), the reference's does not, so a changing lr "
                         "differs; not built")
    # from initial_learning_rate 0 up to warmup_target over warmup_steps, then cosine to alpha * warmup_target
    # over decay_steps
    return keras.optimizers.schedules.CosineDecay(
        0.0, schedule["total_steps"] - schedule["warmup_steps"], alpha=schedule["final_lr_fraction"],
        warmup_target=config["lr"], warmup_steps=schedule["warmup_steps"])


def make_optimizer(config: dict, schedule=None):
    name = config["name"]
    coupled = float(config.get("weight_decay") or 0.0)
    if name == "sgd":
        cls, kwargs = keras.optimizers.SGD, {"momentum": config["momentum"], "nesterov": config["nesterov"]}
    elif name == "adam":
        cls, kwargs = TorchAdam, {"beta_1": config["beta1"], "beta_2": config["beta2"], "epsilon": config["epsilon"]}
    elif name == "adadelta":
        cls, kwargs = keras.optimizers.Adadelta, {"rho": config["rho"], "epsilon": config["epsilon"]}
    elif name == "adamw":
        # keras.optimizers.AdamW is Adam with Keras's own decoupled weight_decay (p -= lr_t * wd * p before
        # each update), torch's AdamW's; TorchAdam keeps torch's epsilon placement
        cls, kwargs = TorchAdam, {"beta_1": config["beta1"], "beta_2": config["beta2"], "epsilon": config["epsilon"],
                                  "weight_decay": config["weight_decay"]}
        coupled = 0.0
    else:
        raise not_built("optimizer", name)
    cls = backend_class(cls, kwargs)
    if coupled:
        mixin = CoupledL2Parallel if hasattr(cls, "_parallel_update_step") else CoupledL2
        cls = type("CoupledL2" + cls.__name__, (mixin, cls), {"coupled_l2": coupled})
    cls = type("Dense" + cls.__name__, (DenseGradients, cls), {})
    return cls(learning_rate=learning_rate(config, schedule), **kwargs)
