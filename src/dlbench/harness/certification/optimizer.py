"""Optimiser certificates: each framework's optimiser against a float64 rule of the reference's formulas.

A few optimiser steps on one batch (probes.py) cannot see a term that is small on one batch: the
CNN recipes' coupled L2 of 1e-6 moves a weight by 1e-8 of itself a step, below float32's rounding;
an epsilon matters only where the gradients are as small as it; momentum, the betas, rho and Adam's
bias corrections need many steps to show. So each optimiser a recipe names is certified on its own.
The framework's adapter applies synthetic gradient sequences to a small dense layer through its
apply_gradients (the optimiser object it trains with), and its weights after chosen steps are
compared with the rule computed in float64 from the same start. Each check makes some terms dominate
(`checks`):
- decay: zero gradients, so that only the coupled L2 (or AdamW's decoupled decay) moves the weights.
  SGD's and AdamW's learning rate is raised for it so that a step moves a weight by DECAY_STEP of
  itself (at the recipe's, a zero-gradient step rounds away in float32); every other value is the
  recipe's;
- epsilon: gradients at the scale where epsilon is as large as the term it is added to;
- sequence: SEQUENCE_STEPS steps, one large gradient then small ones with a drift, which exposes
  momentum, Nesterov (from the first step), the betas, rho and the bias corrections;
- schedule (recipes with a learning-rate schedule): SCHEDULE_STEPS steps of gradients that keep their
  sign, so that each step moves a weight by about its learning rate, recorded after every step, run
  with PROBE_SCHEDULE's warm-up and total steps and the recipe's final_lr_fraction: the steps span
  the warm-up (from its learning rate 0), the cosine decay and the constant rate after it. The
  recipe's own warm-up and total run to thousands of steps; the adapter reads the three settings
  from the recipe it is handed, so a setting it misread or ignored shows in these steps.
AdamW's decay is decoupled (torch.optim.AdamW: p <- p - lr_t * weight_decay * p, then Adam's step with
lr_t): with a zero gradient Adam's step is 0, so the raised rate moves the weights by the decay alone.
A weight passes when it deviates from the rule by at most TOLERANCE of the rule's change of that
weight since the start.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlbench.shared import ir
from dlbench.shared import schedule as schedules
from dlbench.shared.initializers import canonical_init
from dlbench.shared.recipe import OPTIMIZER_SETTINGS

SEED = 0
# the optimiser's settings by name; a setting outside these, or one missing, is refused
DECOUPLED = ("adamw",)  # whose weight_decay is decoupled (torch.optim.AdamW's), not coupled L2
RAISED_LR = ("sgd", "adamw")  # whose zero-gradient step is the decay alone, so the decay check raises lr
MODEL = ir.model([5], "float32", [ir.dense(4)])  # kernel (5, 4) and bias (4,): 24 weights
START_SCALE = 0.05  # start weights uniform in +-this: small, so float32 rounds them finely
DECAY_STEP = 1e-3  # the decay check's SGD or AdamW moves a weight by this share of itself a step
DECAY_STEPS = 10
EPSILON_STEPS = 10
SEQUENCE_STEPS = 300  # enough for beta2 = 0.999's memory of the first gradient to show (see the tests)
SCHEDULE_STEPS = 8
PROBE_SCHEDULE = {"warmup_steps": 2, "total_steps": 6}  # steps 1-2 warm up, 3-6 decay, 7-8 at the end
TOLERANCE = 1e-3


class OptimizerError(ValueError):
    pass


def validate(config: dict) -> None:
    name = config.get("name")
    if name not in OPTIMIZER_SETTINGS:
        raise OptimizerError(f"optimizer {name!r}: no rule for it; known: {', '.join(OPTIMIZER_SETTINGS)}")
    given, needed = set(config) - {"name"}, set(OPTIMIZER_SETTINGS[name])
    if needed - given:
        raise OptimizerError(f"optimizer {name}: missing {', '.join(sorted(needed - given))}")
    # exactly these: adam's and adadelta's adapters read no weight_decay, so a rule that applied one would
    # certify a term that no framework trains with
    unknown = given - needed
    if unknown:
        raise OptimizerError(f"optimizer {name}: unknown setting(s) {', '.join(sorted(unknown))}; "
                             f"accepted: {', '.join(OPTIMIZER_SETTINGS[name])}")


def lr_factor(schedule: dict | None, k: int) -> float:
    """The reference's learning-rate multiplier for update k (from 0): warmup_cosine's linear warm-up from
    0, then cosine decay to final_lr_fraction (docs/workloads.md); 1 without a schedule."""
    if schedule is None:
        return 1.0
    if schedule.get("name") != "warmup_cosine":
        raise OptimizerError(f"schedule {schedule.get('name')!r}: no rule for it; known: warmup_cosine")
    warmup, total, final = schedule["warmup_steps"], schedule["total_steps"], schedule["final_lr_fraction"]
    if k < warmup:
        return k / warmup
    return final + (1 - final) * 0.5 * (1 + np.cos(np.pi * min(1.0, (k - warmup) / (total - warmup))))


def _update(config: dict, p: np.ndarray, g: np.ndarray, state: dict, t: int, lr: float) -> np.ndarray:
    """One step of the reference's (torch's) rule for one weight, in float64, at learning rate lr."""
    name = config["name"]
    if name in DECOUPLED:
        p = p - lr * config["weight_decay"] * p
    else:
        g = g + config.get("weight_decay", 0.0) * p
    if name == "sgd":
        if config["momentum"]:
            v = state["v"] = config["momentum"] * state.get("v", 0.0) + g
            g = g + config["momentum"] * v if config["nesterov"] else v
        return p - lr * g
    if name in ("adam", "adamw"):
        b1, b2 = config["beta1"], config["beta2"]
        m = state["m"] = b1 * state.get("m", 0.0) + (1 - b1) * g
        v = state["v"] = b2 * state.get("v", 0.0) + (1 - b2) * g * g
        return p - lr / (1 - b1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + config["epsilon"])
    rho, eps = config["rho"], config["epsilon"]
    v = state["v"] = rho * state.get("v", 0.0) + (1 - rho) * g * g
    d = np.sqrt(state.get("u", 0.0) + eps) / np.sqrt(v + eps) * g
    state["u"] = rho * state.get("u", 0.0) + (1 - rho) * d * d
    return p - lr * d


def rule_steps(config: dict, start: dict[str, np.ndarray], gradients: dict[str, np.ndarray],
               record: tuple[int, ...], schedule: dict | None = None) -> dict[str, np.ndarray]:
    """The rule's weights after each recorded step ("after/STEP/NAME"), in float64."""
    validate(config)
    params = {name: value.astype(np.float64) for name, value in start.items()}
    states: dict[str, dict] = {name: {} for name in params}
    out = {}
    for t in range(1, len(next(iter(gradients.values()))) + 1):
        lr = config["lr"] * lr_factor(schedule, t - 1)
        for name in params:
            params[name] = _update(config, params[name], gradients[name][t - 1].astype(np.float64), states[name], t,
                                   lr)
        if t in record:
            out.update((f"after/{t}/{name}", value.copy()) for name, value in params.items())
    return out


@dataclass(frozen=True)
class Check:
    name: str
    config: dict  # the optimiser's settings as this check runs them
    gradients: dict[str, np.ndarray]  # weight name -> (steps, *shape), float32
    record: tuple[int, ...]  # the steps after which the weights are compared
    schedule: dict | None = None  # the learning-rate schedule this check runs with; None: constant


def start_weights() -> dict[str, np.ndarray]:
    rng = np.random.RandomState(SEED)
    return {name: rng.uniform(-START_SCALE, START_SCALE, value.shape).astype(np.float32)
            for name, value in canonical_init(MODEL, SEED).items()}


def _signed(rng: np.random.RandomState, shape: tuple[int, ...], low: float, high: float) -> np.ndarray:
    return rng.uniform(low, high, shape) * rng.choice([-1.0, 1.0], shape)


def probe_schedule(schedule: dict) -> dict:
    """The schedule check's schedule: the recipe's, over PROBE_SCHEDULE's few steps (see the module's doc)."""
    # a warm-up given as a share of the updates is the harness's, resolved into warmup_steps per cell
    return dict({key: value for key, value in schedule.items() if key != schedules.WARMUP_FRACTION}, **PROBE_SCHEDULE)


def checks(config: dict, schedule: dict | None = None) -> list[Check]:
    """The checks of one optimiser and the recipe's schedule: each that applies (see the module's doc)."""
    validate(config)
    shapes = {name: value.shape for name, value in start_weights().items()}
    rng = np.random.RandomState(SEED + 1)
    made = []
    if config.get("weight_decay"):
        raised = dict(config, lr=DECAY_STEP / config["weight_decay"]) if config["name"] in RAISED_LR else config
        made.append(Check("decay", raised, {n: np.zeros((DECAY_STEPS, *s), np.float32) for n, s in shapes.items()},
                          (1, DECAY_STEPS)))
    if "epsilon" in config:
        # Adam adds epsilon to sqrt(v), of the gradients' scale; Adadelta adds it to v, of their square's
        scale = config["epsilon"] if config["name"] in ("adam", "adamw") else np.sqrt(config["epsilon"])
        small = {n: (scale * _signed(rng, (EPSILON_STEPS, *s), 0.5, 2.0)).astype(np.float32) for n, s in shapes.items()}
        made.append(Check("epsilon", config, small, (1, EPSILON_STEPS)))
    sequence = {}
    for name, shape in shapes.items():
        drift = _signed(rng, shape, 0.5, 1.0)  # a direction the small gradients keep, for momentum to build on
        steps = 0.01 * (rng.standard_normal((SEQUENCE_STEPS, *shape)) + drift)
        steps[0] = _signed(rng, shape, 0.5, 1.5)
        sequence[name] = steps.astype(np.float32)
    made.append(Check("sequence", config, sequence, (1, 2, SEQUENCE_STEPS)))
    if schedule is not None:
        steady = {}
        for name, shape in shapes.items():  # a sign each weight keeps: Adam then steps by about lr_t
            drift = _signed(rng, shape, 0.5, 1.0)
            steady[name] = (drift + 0.1 * rng.standard_normal((SCHEDULE_STEPS, *shape))).astype(np.float32)
        made.append(Check("schedule", config, steady, tuple(range(1, SCHEDULE_STEPS + 1)),
                          probe_schedule(schedule)))
    return made


def requests(workload_name: str, config: dict, folder: Path,
             schedule: dict | None = None) -> list[tuple[Check, dict]]:
    """One probe request per check of the recipe's optimiser and schedule, its weights and gradients written
    beside it."""
    start = start_weights()
    made = []
    for check in checks(config, schedule):
        name = f"{workload_name}-optimizer-{check.name}"
        weights, gradients, out = (folder / f"{name}-{what}" for what in ("weights.npz", "gradients.npz", "out.npz"))
        np.savez(weights, **start)
        np.savez(gradients, **check.gradients)
        for stale in (out, out.with_name(out.name + ".error")):
            stale.unlink(missing_ok=True)
        recipe = {"optimizer": check.config, "batch_size": 1, "epochs": 1, "loss": "softmax_cross_entropy"}
        if check.schedule is not None:
            recipe["schedule"] = check.schedule
        made.append((check, {
            "kind": "optimizer", "name": f"{workload_name} optimizer ({check.name})", "model": MODEL, "recipe": recipe,
            "task": "classification", "weights": str(weights), "gradients": str(gradients),
            "record": list(check.record), "seed": SEED, "out": str(out)}))
    return made


def rows(check: Check, candidate: dict[str, np.ndarray], config: dict | None = None,
         schedule: dict | None = None) -> list[dict]:
    """The check's rows: the candidate's weights after each recorded step against the rule's, run with
    `config` and `schedule` (the check's own when None; the power test hands in a changed one)."""
    start = start_weights()
    expected = rule_steps(config or check.config, start, check.gradients, check.record, schedule or check.schedule)
    made = []
    for key, value in expected.items():
        got = candidate.get(key)
        row = {"tensor": f"optimizer/{check.name}/{key[len('after/'):]}", "kind": "optimizer",
               "tolerance": TOLERANCE, "max_abs": None, "max_rel": None}
        if got is None or got.shape != value.shape:
            row.update(passed=False, problem="missing" if got is None else f"shape {got.shape} != {value.shape}")
        else:
            deviation = float(np.max(np.abs(got.astype(np.float64) - value)))
            change = float(np.max(np.abs(value - start[key.split("/", 2)[2]])))
            relative = deviation / change if change > 0 else (0.0 if deviation == 0 else float("inf"))
            row.update(max_abs=deviation, max_rel=relative, passed=bool(relative <= TOLERANCE))
        made.append(row)
    return made
