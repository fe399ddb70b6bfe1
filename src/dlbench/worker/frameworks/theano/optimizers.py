"""Theano's optimisers, written out as update lists over shared slots with the formulas of the TensorFlow
adapter (torch's), and the recipe's learning-rate schedule as a shared update counter.

Imported by adapter.py once it has set THEANO_FLAGS and imported Theano.
"""
from __future__ import annotations

import numpy as np
import theano
import theano.tensor as T

from dlbench.worker.base import not_built
from dlbench.worker.frameworks.theano.layers import F32

# ---- optimisers: the brief's (torch's) formulas as update lists over shared slots ----------------

def zeros_like(p):
    return theano.shared(np.zeros(p.get_value(borrow=True).shape, np.float32))


def learning_rate(config, schedule):
    """The update's learning rate (float64) and the update list that counts updates: the recipe's constant, or
    its schedule (shared/schedule.py) of a shared update counter, from 0."""
    if schedule is None:
        return np.float64(config["lr"]), []
    if schedule["name"] != "warmup_cosine":
        raise not_built("schedule", schedule["name"])
    k = theano.shared(np.float64(0.0))
    warmup, total = float(schedule["warmup_steps"]), float(schedule["total_steps"])
    final = schedule["final_lr_fraction"]
    warm = k / max(warmup, 1.0)  # taken only while k < warmup
    decayed = final + (1.0 - final) * 0.5 * (1.0 + T.cos(np.pi * T.minimum(1.0, (k - warmup) / (total - warmup))))
    return config["lr"] * T.switch(T.lt(k, warmup), warm, decayed), [(k, k + 1.0)]


def sgd(params, grads, config, schedule=None):
    lr, updates = learning_rate(config, schedule)
    lr, momentum = T.cast(lr, "float32"), F32(config.get("momentum", 0.0))
    nesterov, weight_decay = config.get("nesterov", False), F32(config.get("weight_decay", 0.0))
    for p, g in zip(params, grads):
        if weight_decay:
            g = g + weight_decay * p  # coupled L2, on every trainable weight
        if momentum:
            v = zeros_like(p)
            v_new = momentum * v + g
            updates.append((v, v_new))
            g = g + momentum * v_new if nesterov else v_new
        updates.append((p, p - lr * g))
    return updates


def adam(params, grads, config, schedule=None, decoupled_decay=0.0):
    """Adam; with decoupled_decay, AdamW: p -= lr_t * decoupled_decay * p, then Adam's step."""
    lr, updates = learning_rate(config, schedule)
    b1, b2, eps = config["beta1"], config["beta2"], F32(config["epsilon"])
    step = theano.shared(np.float64(0.0))
    t = step + 1.0
    step_size = T.cast(lr / (1.0 - np.float64(b1) ** t), "float32")  # bias corrections in float64, as torch
    bc2_sqrt = T.cast(T.sqrt(1.0 - np.float64(b2) ** t), "float32")
    kept = T.cast(1.0 - lr * decoupled_decay, "float32")
    updates.append((step, t))
    for p, g in zip(params, grads):
        m, v = zeros_like(p), zeros_like(p)
        m_new = F32(b1) * m + F32(1.0 - b1) * g
        v_new = F32(b2) * v + F32(1.0 - b2) * T.sqr(g)
        decayed = kept * p if decoupled_decay else p
        updates += [(m, m_new), (v, v_new), (p, decayed - step_size * m_new / (T.sqrt(v_new) / bc2_sqrt + eps))]
    return updates


def adamw(params, grads, config, schedule=None):
    return adam(params, grads, config, schedule, decoupled_decay=config["weight_decay"])


def adadelta(params, grads, config, schedule=None):
    lr, updates = learning_rate(config, schedule)
    lr, rho, eps = T.cast(lr, "float32"), F32(config["rho"]), F32(config["epsilon"])
    for p, g in zip(params, grads):
        square_avg, delta_avg = zeros_like(p), zeros_like(p)
        v = rho * square_avg + (F32(1) - rho) * T.sqr(g)
        d = T.sqrt(delta_avg + eps) / T.sqrt(v + eps) * g
        updates += [(square_avg, v), (delta_avg, rho * delta_avg + (F32(1) - rho) * T.sqr(d)), (p, p - lr * d)]
    return updates


OPTIMIZERS = {"sgd": sgd, "adam": adam, "adadelta": adadelta, "adamw": adamw}
