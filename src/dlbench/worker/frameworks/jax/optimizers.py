"""JAX's optimisers: optax chains with the reference's (torch's) formulas, and the recipe's learning-rate
schedule as an optax schedule.

Imported by adapter.py once it has configured XLA's CPU threads (which must happen before jax loads).
"""
from __future__ import annotations

import optax

from dlbench.worker.base import not_built


def learning_rate(config: dict, schedule=None):
    """The optimiser's learning rate: the recipe's number, or an optax schedule of the update count (from 0)."""
    if schedule is None:
        return config["lr"]
    if schedule["name"] != "warmup_cosine":
        raise not_built("schedule", schedule["name"])
    # from 0 up to lr over warmup_steps, then cosine to end_value over decay_steps - warmup_steps
    return optax.warmup_cosine_decay_schedule(0.0, config["lr"], schedule["warmup_steps"], schedule["total_steps"],
                                              end_value=schedule["final_lr_fraction"] * config["lr"])


def make_optimizer(config: dict, schedule=None) -> optax.GradientTransformation:
    """optax chains with the reference's (torch's) formulas; see the module docstring of base. `schedule`:
    the recipe's learning-rate schedule, None for a constant rate."""
    name = config["name"]
    lr = learning_rate(config, schedule)
    if name == "sgd":
        # optax's trace: v = momentum * v + g; then p -= lr * v: torch's non-Nesterov SGD. Coupled L2
        # goes into the gradient before the momentum, so add_decayed_weights comes first.
        momentum = config["momentum"] or None
        steps = [optax.sgd(lr, momentum=momentum, nesterov=config["nesterov"])]
        if config["weight_decay"]:
            steps.insert(0, optax.add_decayed_weights(config["weight_decay"]))
        return optax.chain(*steps)
    if name == "adam":
        # m_hat / (sqrt(v_hat + eps_root) + eps): torch's formula when eps_root = 0
        return optax.adam(lr, b1=config["beta1"], b2=config["beta2"], eps=config["epsilon"], eps_root=0.0)
    if name == "adamw":
        # -lr_t * (adam's step + weight_decay * p): torch's AdamW, whose decay p -= lr_t * wd * p comes first
        return optax.adamw(lr, b1=config["beta1"], b2=config["beta2"], eps=config["epsilon"], eps_root=0.0,
                           weight_decay=config["weight_decay"])
    # optax's adadelta: v = rho v + (1-rho) g^2; d = sqrt(u + eps) / sqrt(v + eps) g; u = rho u + (1-rho) d^2;
    # p -= lr d: torch's formula
    if name == "adadelta":
        return optax.adadelta(lr, rho=config["rho"], eps=config["epsilon"])
    raise not_built("optimizer", name)
