"""MXNet 1.9 optimisers and learning-rate schedules, for the adapter and the detector.

Optimisers are written out with nd operators, as the reference defines them (torch's formulas):
MXNet's own differ (SGD's momentum folds the learning rate in; Adam applies its bias correction to
the learning rate, which moves epsilon; Adadelta has no learning rate), and its embeddings'
row-sparse lazy updates would skip rows, where the reference moves every row. Embeddings therefore
keep dense gradients (sparse_grad False, Gluon's default), and every row takes every step.

Loaded through adapter.py, which fixes MXNet's OpenMP threads before mxnet is imported.
"""
from __future__ import annotations

from typing import List

from mxnet import nd

from dlbench.shared import schedule as schedules
from dlbench.worker.base import lookup


def learning_rate(config: dict, schedule=None):
    """Each update's learning rate by its number (from 0), a host float as MXNet's lr_scheduler gives its
    optimisers one per update: the recipe's constant, or its schedule's (shared/schedule.py)."""
    if schedule is None:
        return lambda update: config["lr"]
    factor = lookup({"warmup_cosine": schedules.factor}, "schedule", schedule["name"])
    return lambda update: config["lr"] * factor(schedule, update)


class SGD(object):
    def __init__(self, params: List[nd.NDArray], config: dict, schedule=None):
        self.rate, self.updates = learning_rate(config, schedule), 0
        self.momentum = config.get("momentum", 0.0)
        self.nesterov, self.weight_decay = config.get("nesterov", False), config.get("weight_decay", 0.0)
        self.velocity = [nd.zeros_like(p) for p in params] if self.momentum else []

    def step(self, params, grads):
        lr, self.updates = self.rate(self.updates), self.updates + 1
        for k, (p, g) in enumerate(zip(params, grads)):
            if self.weight_decay:
                g = g + self.weight_decay * p  # coupled L2, on every trainable weight
            if self.momentum:
                v = self.velocity[k]
                v *= self.momentum
                v += g
                g = g + self.momentum * v if self.nesterov else v
            p -= lr * g


class Adam(object):
    decoupled_decay = 0.0  # AdamW's: p -= lr_t * weight_decay * p before the step

    def __init__(self, params: List[nd.NDArray], config: dict, schedule=None):
        self.rate = learning_rate(config, schedule)
        self.b1, self.b2, self.eps = config["beta1"], config["beta2"], config["epsilon"]
        self.t = 0
        self.m = [nd.zeros_like(p) for p in params]
        self.v = [nd.zeros_like(p) for p in params]

    def step(self, params, grads):
        lr = self.rate(self.t)
        self.t += 1  # the step count lives on the host: the bias corrections are plain floats
        step_size = lr / (1.0 - self.b1 ** self.t)
        bc2_sqrt = (1.0 - self.b2 ** self.t) ** 0.5
        for p, g, m, v in zip(params, grads, self.m, self.v):
            if self.decoupled_decay:
                p *= 1.0 - lr * self.decoupled_decay
            m *= self.b1
            m += (1.0 - self.b1) * g
            v *= self.b2
            v += (1.0 - self.b2) * nd.square(g)
            denominator = nd.sqrt(v)
            denominator /= bc2_sqrt
            denominator += self.eps
            p -= step_size * m / denominator


class AdamW(Adam):
    """The reference's (torch's) AdamW: Adam above with the decoupled decay first. MXNet 1.9's own
    (nd.contrib.adamw_update, w -= eta * (lr * m / (sqrt(v) + eps) + wd * w)) has no bias correction: its
    callers fold it into lr, which moves epsilon, as MXNet's Adam does."""

    def __init__(self, params: List[nd.NDArray], config: dict, schedule=None):
        super().__init__(params, config, schedule)
        self.decoupled_decay = config["weight_decay"]


class Adadelta(object):
    def __init__(self, params: List[nd.NDArray], config: dict, schedule=None):
        self.rate, self.updates = learning_rate(config, schedule), 0
        self.rho, self.eps = config["rho"], config["epsilon"]
        self.square_avg = [nd.zeros_like(p) for p in params]
        self.delta_avg = [nd.zeros_like(p) for p in params]

    def step(self, params, grads):
        lr, self.updates = self.rate(self.updates), self.updates + 1
        for p, g, v, u in zip(params, grads, self.square_avg, self.delta_avg):
            v *= self.rho
            v += (1.0 - self.rho) * nd.square(g)
            d = nd.sqrt(u + self.eps)
            d /= nd.sqrt(v + self.eps)
            d *= g
            u *= self.rho
            u += (1.0 - self.rho) * nd.square(d)
            p -= lr * d


OPTIMIZERS = {"sgd": SGD, "adam": Adam, "adadelta": Adadelta, "adamw": AdamW}
