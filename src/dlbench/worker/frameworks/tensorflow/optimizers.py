"""TensorFlow's optimisers and learning-rate schedules, written out: the brief's (torch's) formulas, slots
as tf.Variables, applied inside the adapter's compiled train step (no Keras optimisers).

Slots take their variable's dtype (zeros_like): float32 master slots under the mixed precisions, bfloat16 ones under
"bfloat16". The update's arithmetic is float32 whatever the variable's type: a bfloat16 variable or slot is read
into float32, each result rounded to its bfloat16 on assignment (as PyTorch's bfloat16 optimiser ops compute
element-wise in float32 and store bfloat16); with float32 variables every cast is the identity and the ops are
those of before the precision axis. Gradients may come in any float type (bfloat16 from a bfloat16 model) and are
read into float32 likewise."""
from __future__ import annotations

import math
from typing import List

import tensorflow as tf

from dlbench.worker.base import lookup


class WarmupCosine(object):
    """The recipe's warmup_cosine schedule (shared/schedule.py) of an update counter kept as a tf.Variable:
    each call gives the next update's learning rate (float64) and counts it."""

    def __init__(self, lr: float, schedule: dict):
        self.lr, self.final = lr, schedule["final_lr_fraction"]
        self.warmup, self.total = float(schedule["warmup_steps"]), float(schedule["total_steps"])
        self.updates = tf.Variable(0.0, dtype=tf.float64, trainable=False)

    def __call__(self):
        k = self.updates.read_value()
        warm = tf.math.divide_no_nan(k, self.warmup)
        progress = tf.minimum(tf.constant(1.0, tf.float64), (k - self.warmup) / (self.total - self.warmup))
        decayed = self.final + (1.0 - self.final) * 0.5 * (1.0 + tf.cos(math.pi * progress))
        self.updates.assign_add(1.0)
        return self.lr * tf.where(k < self.warmup, warm, decayed)


def arithmetic(value):
    """A variable, slot or gradient as the update computes with it: float32 (the value itself where it is)."""
    return tf.cast(value, tf.float32)


def store(variable: tf.Variable, value) -> None:
    """variable <- value, rounded to the variable's type."""
    variable.assign(tf.cast(value, variable.dtype))


def subtract(variable: tf.Variable, delta) -> None:
    """variable -= delta (float32): in place for a float32 variable, else computed in float32 and rounded."""
    if variable.dtype == delta.dtype:
        variable.assign_sub(delta)
    else:
        store(variable, arithmetic(variable) - delta)


def learning_rate(config: dict, schedule=None):
    """A callable giving each update's learning rate: the recipe's constant, or its schedule's."""
    if schedule is None:
        return lambda: config["lr"]
    return lookup({"warmup_cosine": WarmupCosine}, "schedule", schedule["name"])(config["lr"], schedule)


class SGD(object):
    def __init__(self, params: List[tf.Variable], config: dict, schedule=None):
        self.rate = learning_rate(config, schedule)
        self.momentum = config.get("momentum", 0.0)
        self.nesterov, self.weight_decay = config.get("nesterov", False), config.get("weight_decay", 0.0)
        self.velocity = [tf.Variable(tf.zeros_like(p), trainable=False) for p in params] if self.momentum else []

    def apply(self, params, grads):
        lr = tf.cast(self.rate(), tf.float32)
        for k, (p, g) in enumerate(zip(params, grads)):
            g = arithmetic(g)
            if self.weight_decay:
                g = g + self.weight_decay * arithmetic(p)  # coupled L2, on every trainable weight
            if self.momentum:
                v = self.velocity[k]
                store(v, self.momentum * arithmetic(v) + g)
                g = g + self.momentum * arithmetic(v) if self.nesterov else arithmetic(v)
            subtract(p, lr * g)


class Adam(object):
    decoupled_decay = 0.0  # AdamW's: p -= lr_t * weight_decay * p before the step

    def __init__(self, params: List[tf.Variable], config: dict, schedule=None):
        self.rate = learning_rate(config, schedule)
        self.b1, self.b2, self.eps = config["beta1"], config["beta2"], config["epsilon"]
        self.step = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        self.m = [tf.Variable(tf.zeros_like(p), trainable=False) for p in params]
        self.v = [tf.Variable(tf.zeros_like(p), trainable=False) for p in params]

    def apply(self, params, grads):
        lr = self.rate()
        t = self.step.assign_add(1.0)
        step_size = tf.cast(lr / (1.0 - tf.pow(tf.constant(self.b1, tf.float64), t)), tf.float32)
        bc2_sqrt = tf.cast(tf.sqrt(1.0 - tf.pow(tf.constant(self.b2, tf.float64), t)), tf.float32)
        decay = tf.cast(lr * self.decoupled_decay, tf.float32)
        for p, g, m, v in zip(params, grads, self.m, self.v):
            g = arithmetic(g)
            if self.decoupled_decay:
                subtract(p, decay * arithmetic(p))
            store(m, self.b1 * arithmetic(m) + (1.0 - self.b1) * g)
            store(v, self.b2 * arithmetic(v) + (1.0 - self.b2) * tf.square(g))
            subtract(p, step_size * arithmetic(m) / (tf.sqrt(arithmetic(v)) / bc2_sqrt + self.eps))


class AdamW(Adam):
    def __init__(self, params: List[tf.Variable], config: dict, schedule=None):
        super().__init__(params, config, schedule)
        self.decoupled_decay = config["weight_decay"]


class Adadelta(object):
    def __init__(self, params: List[tf.Variable], config: dict, schedule=None):
        self.rate = learning_rate(config, schedule)
        self.rho, self.eps = config["rho"], config["epsilon"]
        self.square_avg = [tf.Variable(tf.zeros_like(p), trainable=False) for p in params]
        self.delta_avg = [tf.Variable(tf.zeros_like(p), trainable=False) for p in params]

    def apply(self, params, grads):
        lr = tf.cast(self.rate(), tf.float32)
        for p, g, v, u in zip(params, grads, self.square_avg, self.delta_avg):
            g = arithmetic(g)
            store(v, self.rho * arithmetic(v) + (1.0 - self.rho) * tf.square(g))
            d = tf.sqrt(arithmetic(u) + self.eps) / tf.sqrt(arithmetic(v) + self.eps) * g
            store(u, self.rho * arithmetic(u) + (1.0 - self.rho) * tf.square(d))
            subtract(p, lr * d)


OPTIMIZERS = {"sgd": SGD, "adam": Adam, "adadelta": Adadelta, "adamw": AdamW}


def dense_gradient(gradient):
    """Embedding lookups give IndexedSlices; the optimisers update whole tables, as torch's dense
    embedding gradients do (Adam moves rows with zero gradient through its moments)."""
    return tf.convert_to_tensor(gradient) if isinstance(gradient, tf.IndexedSlices) else gradient
