"""PyTorch's optimisers and learning-rate schedules: torch.optim's own, as the recipe names them."""
from __future__ import annotations

import torch

from dlbench.shared import schedule as schedules
from dlbench.worker.base import lookup, not_built

# What differs across the torch releases the recipe supports, said here, where it is used: Adam's and AdamW's
# fused kernels run on the CPU from torch 2.4; before, fused=True refuses a CPU tensor ("requires all the params to
# be floating point Tensors of supported devices: ['cuda', ...]"), and the default (foreach) kernels are the
# fastest such a release has.
RELEASE = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
FUSED_ADAM_ON_CPU = RELEASE >= (2, 4)


def make_optimizer(params, config: dict) -> torch.optim.Optimizer:
    """torch.optim's optimizers; Adam and AdamW as their fused kernels (fused=True: one pass over each
    weight, on the CPU too), which PyTorch documents as its fastest implementation. Its default on the CPU
    is a loop of small ops per weight: transformer-lm's steady epochs took about 5 % longer with it on the
    2-core Intel machine. A release without them on the CPU (FUSED_ADAM_ON_CPU) takes its default."""
    fused = True if FUSED_ADAM_ON_CPU else None
    name = config["name"]
    if name == "sgd":
        return torch.optim.SGD(params, lr=config["lr"], momentum=config["momentum"],
                               nesterov=config["nesterov"], weight_decay=config["weight_decay"])
    if name == "adam":
        return torch.optim.Adam(params, lr=config["lr"], betas=(config["beta1"], config["beta2"]),
                                eps=config["epsilon"], fused=fused)
    if name == "adadelta":
        return torch.optim.Adadelta(params, lr=config["lr"], rho=config["rho"], eps=config["epsilon"])
    if name == "adamw":
        return torch.optim.AdamW(params, lr=config["lr"], betas=(config["beta1"], config["beta2"]),
                                 eps=config["epsilon"], weight_decay=config["weight_decay"], fused=fused)
    raise not_built("optimizer", name)


def make_scheduler(optimizer: torch.optim.Optimizer, recipe: dict):
    """The recipe's learning-rate schedule as a LambdaLR stepped after every update (Hugging Face's
    get_cosine_schedule_with_warmup is one); None without a schedule: the rate stays constant."""
    if "schedule" not in recipe:
        return None
    schedule = recipe["schedule"]
    factor = lookup({"warmup_cosine": schedules.factor}, "schedule", schedule["name"])
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: factor(schedule, step))
