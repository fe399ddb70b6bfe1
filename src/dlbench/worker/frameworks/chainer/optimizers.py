"""Chainer's optimisers and learning-rate schedules.

MomentumSGD + the WeightDecay hook (coupled L2 added to the gradient) is the
reference's SGD exactly (velocity kept as -lr times torch's, the same arithmetic); AdaDelta is the
reference's Adadelta with lr 1 (Chainer's has no learning rate: another lr is refused). Chainer's
Adam puts epsilon outside the bias correction of the second moment (eps * sqrt(1 - beta2^t) in the
reference's terms, 30x the reference's at step 1), which moves parameters with small gradients
visibly differently; the reference's Adam is written out as a Chainer UpdateRule instead, with Chainer's
Adam's eta (a schedule's multiplier, set by an optimizer hook before each update) and weight_decay_rate
(AdamW's decoupled decay, which Chainer scales by eta but not by the learning rate).

mixed-float16 (the adapter's): the optimiser updates float32 copies of the float16 Parameters (Chainer's
use_fp32_update, with float32 state), and LossScale steps it on base.LOSS_SCALE's terms.
"""
from __future__ import annotations

import math

import chainer
import numpy as np
from chainer import optimizer_hooks

from dlbench.shared import schedule as schedules
from dlbench.worker.base import LOSS_SCALE, lookup, not_built


class TorchAdamRule(chainer.optimizer.UpdateRule):
    """The reference's Adam: epsilon added after the second moment's bias correction."""

    def init_state(self, param):
        self.state["m"] = np.zeros_like(param.data)
        self.state["v"] = np.zeros_like(param.data)

    def update_core_cpu(self, param):
        grad = param.grad
        if grad is None:
            return
        hp, m, v = self.hyperparam, self.state["m"], self.state["v"]
        m += (1.0 - hp.beta1) * (grad - m)
        v *= hp.beta2
        v += (1.0 - hp.beta2) * grad * grad
        step_size = hp.eta * hp.lr / (1.0 - hp.beta1 ** self.t)  # self.t counts this update already
        denominator = np.sqrt(v) / math.sqrt(1.0 - hp.beta2 ** self.t) + hp.eps
        if hp.weight_decay_rate:  # decoupled, scaled by eta as Chainer's Adam scales it
            param.data -= (hp.eta * hp.weight_decay_rate) * param.data
        param.data -= step_size * m / denominator


class TorchAdam(chainer.optimizer.GradientMethod):
    lr = chainer.optimizer.HyperparameterProxy("lr")
    beta1 = chainer.optimizer.HyperparameterProxy("beta1")
    beta2 = chainer.optimizer.HyperparameterProxy("beta2")
    eps = chainer.optimizer.HyperparameterProxy("eps")
    eta = chainer.optimizer.HyperparameterProxy("eta")
    weight_decay_rate = chainer.optimizer.HyperparameterProxy("weight_decay_rate")

    def __init__(self, lr: float, beta1: float, beta2: float, eps: float, weight_decay_rate: float = 0.0):
        """eta and weight_decay_rate as Chainer's Adam has them: every step scaled by the schedule multiplier
        eta (1 without a schedule), param -= eta * (step + weight_decay_rate * param)."""
        super().__init__()
        self.hyperparam.lr, self.hyperparam.beta1 = lr, beta1
        self.hyperparam.beta2, self.hyperparam.eps = beta2, eps
        self.hyperparam.eta, self.hyperparam.weight_decay_rate = 1.0, weight_decay_rate

    def create_update_rule(self):
        return TorchAdamRule(self.hyperparam)


def make_optimizer(config: dict) -> chainer.Optimizer:
    name = config["name"]
    if name == "sgd":
        if config.get("nesterov"):  # Chainer's NesterovAG is another formulation than the reference's
            raise ValueError("chainer adapter: Nesterov momentum is not implemented (no workload uses it)")
        return chainer.optimizers.MomentumSGD(lr=config["lr"], momentum=config.get("momentum", 0.0))
    if name == "adam":
        return TorchAdam(config["lr"], config["beta1"], config["beta2"], config["epsilon"])
    if name == "adamw":
        # Chainer scales the decoupled decay by eta but not by alpha (lr): the rate holds lr * weight_decay,
        # so that eta * rate * param is torch's lr_t * weight_decay * param
        return TorchAdam(config["lr"], config["beta1"], config["beta2"], config["epsilon"],
                         weight_decay_rate=config["lr"] * config["weight_decay"])
    if name != "adadelta":
        raise not_built("optimizer", name)
    if config["lr"] != 1.0:
        raise ValueError("chainer adapter: Chainer's AdaDelta has no learning rate; lr %r is not 1" % config["lr"])
    return chainer.optimizers.AdaDelta(rho=config["rho"], eps=config["epsilon"])


class WarmupCosine(object):
    """Optimizer hook: before each update, eta (Adam's schedule multiplier) for the update numbered
    optimizer.t (from 0; the update counts itself after the pre-update hooks)."""

    name = "WarmupCosine"
    timing = "pre"
    call_for_each_param = False

    def __init__(self, schedule: dict):
        self.schedule = schedule

    def __call__(self, optimizer):
        optimizer.eta = schedules.factor(self.schedule, optimizer.t)


class LossScale(object):
    """mixed-float16's dynamic loss scaling on base.LOSS_SCALE's terms, every framework's. The backward pass takes
    the scale (Variable.backward(loss_scale=...), Chainer's own: each Parameter's update rule divides its gradient
    by it); `update` skips a step whose gradients are not all finite. Chainer's Optimizer.loss_scaling starts at 1
    and, after its first overflow, grows by 2^(1/interval) every step: other terms than the other frameworks'."""

    def __init__(self):
        self.scale = LOSS_SCALE["initial"]
        self.finite_steps = 0

    def update(self, optimizer: chainer.Optimizer) -> None:
        """The optimiser's step with the gradients the scaled backward pass left, or none (a skipped step leaves
        the schedule where it is, as TensorFlow's and JAX's do) and the scale backed off."""
        if all(np.isfinite(param.grad).all() for param in optimizer.target.params() if param.grad is not None):
            optimizer.update()
            self.finite_steps += 1
            if self.finite_steps == LOSS_SCALE["growth_interval"]:
                self.scale, self.finite_steps = self.scale * LOSS_SCALE["growth_factor"], 0
        else:
            self.scale, self.finite_steps = self.scale * LOSS_SCALE["backoff_factor"], 0


def optimizer_for(link: chainer.Link, config: dict, schedule=None, float32_master: bool = False
                  ) -> chainer.Optimizer:
    """make_optimizer's optimiser set up on `link`, with coupled L2 (a WeightDecay hook) when asked, and the
    recipe's learning-rate schedule (a hook setting eta) when it has one; `float32_master`: it updates float32
    copies of float16 Parameters (use_fp32_update, which must come before setup)."""
    optimizer = make_optimizer(config)
    if float32_master:
        optimizer.use_fp32_update()
    optimizer.setup(link)
    if config.get("weight_decay") and config["name"] != "adamw":  # adamw's is decoupled: in its update rule
        optimizer.add_hook(optimizer_hooks.WeightDecay(config["weight_decay"]))
    if schedule is not None:
        hook = lookup({"warmup_cosine": WarmupCosine}, "schedule", schedule["name"])
        if not isinstance(optimizer, TorchAdam):
            raise ValueError("chainer adapter: a learning-rate schedule is built for adam and adamw (eta); "
                             "MomentumSGD keeps lr inside its velocity and AdaDelta has no learning rate: %r"
                             % config["name"])
        optimizer.add_hook(hook(schedule))
    return optimizer
