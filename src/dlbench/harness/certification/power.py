"""The certificate's power: what a certificate can see, found by changing every value a workload declares.

A certificate proves something only if a wrong value fails it. For every value of the workload's
model IR (every setting of every layer, and of a detector's parts) and of its recipe (the optimiser's
settings included), the reference is run with that value changed, as an adapter that read it wrongly
would run, and judged against the true reference exactly as a framework is (probes.compare,
layer_checks.rows, optimizer.rows). The change (`changed`): a number by 10 % (a rate
of decay such as a momentum, a beta or rho by 10 % of its distance to 1, the stricter change), a whole
number by 10 % or to the next one, a choice to the next in its list, a flag to its opposite; attention's
heads doubled (the next count, 3 for 2, rarely splits the same features: doubled, they split whenever
each head has an even number, and a head size read as the whole width is the mistake to catch).

A change that fails certification is seen. A changed model the reference cannot run (weights of
another shape, an input it refuses) is seen as well: a framework that built it could not load the
canonical weights either. A change that passes is not seen; NOT_SEEN says why for each value that
is known not to be, and anything else unseen is reported as unexplained (the tests fail on it).
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dlbench.harness.certification import layer_checks, optimizer, probes, terms
from dlbench.harness.certification.certified_model import certified_model, without_dropout
from dlbench.harness.environments import envs
from dlbench.harness.plan.workloads import Workload
from dlbench.shared import ir
from dlbench.shared.initializers import canonical_init
from dlbench.shared.recipe import OPTIMIZER_SETTINGS

DECAY_RATES = ("momentum", "beta1", "beta2", "rho")  # changed by 10 % of their distance to 1
CHOICES = {"fn": ir.ACTIVATIONS, "padding": ir.PADDINGS, "loss": ir.LOSSES,
           "op": ("roi_align",), "name": tuple(OPTIMIZER_SETTINGS)}
NOT_CHANGED = ("type", "name", "input_shape", "input_dtype")  # what a layer is, not a setting of it
UNEXPLAINED = "UNEXPLAINED: no reason known why this change passes"
_HOST = "read by the shared host pipeline (shared/detection), the same code in every framework"
_PLAN = ("RoI Align's sampling plan is the shared host pipeline's; a framework with an RoI op of its own is "
         "compared with the reference's outputs")
# Values a certificate cannot see, by the last key of their path, and why.
NOT_SEEN = {
    "batch_size": "the certificate steps on its own fixed batch of 16 samples as one batch",
    "epochs": "the worker's loop, the same code for every framework, counts the epochs; the probes take steps",
    "warmup_fraction": "the harness resolves it into the cell's warmup_steps (run/cell_config.cell_recipe), the "
                       "same code for every framework, and no adapter reads it; the schedule check certifies "
                       "warmup_steps with the probe's own",
}
DETECTOR_NOT_SEEN = {
    **NOT_SEEN,
    "loss": "a detector's four losses are its own (worker/detector.py); the task, not the loss's name, picks them",
    "anchor_scales": _HOST, "anchor_ratios": _HOST, "feature_stride": _HOST,
    "anchors": f"{_HOST}; the RPN layers' filters, which the frameworks build, are seen",
    "num_classes": "the reference reads the classes from the cls and box layers, whose units are seen; a "
                   "framework that reads this copy is compared with the reference's outputs",
    "sampling_ratio": _PLAN, "spatial_scale": _PLAN, "aligned": _PLAN,
}


@dataclass(frozen=True)
class Change:
    path: tuple  # keys into {"model": ..., "recipe": ...}, e.g. ("model", "layers", 0, "stride")
    label: str  # the path as a reader names it: "conv2d_1.stride", "recipe.optimizer.momentum"
    was: object
    to: object


def changed(key: str, value):
    """The value an adapter that read `key` wrongly might use (see the module's doc)."""
    if isinstance(value, bool):
        return not value
    if key in ("heads", "kv_heads"):
        return value * 2
    if key in CHOICES:
        options = CHOICES[key]
        return options[(options.index(value) + 1) % len(options)] if value in options else None
    if isinstance(value, int):
        return round(value * 1.1) if round(value * 1.1) != value else value + 1
    if isinstance(value, float):
        return 1 - (1 - value) * 1.1 if key in DECAY_RATES else value * 1.1
    if isinstance(value, list) and value and all(isinstance(v, float) for v in value):
        return [v * 1.1 for v in value]
    return None


def _walk(node, path: tuple, label: str) -> Iterator[Change]:
    if isinstance(node, dict):
        name = node.get("name") if "type" in node else None
        for key, value in node.items():
            if key in NOT_CHANGED and name is not None or key in ("input_shape", "input_dtype"):
                continue
            child_label = f"{name}.{key}" if name else (f"{label}.{key}" if label else key)
            yield from _walk(value, (*path, key), child_label)
    elif isinstance(node, list) and node and isinstance(node[0], dict):
        for index, item in enumerate(node):
            yield from _walk(item, (*path, index), label)
    else:
        to = changed(path[-1] if isinstance(path[-1], str) else "", node)
        if to is not None and to != node:
            yield Change(path, label, node, to)


def changes(model: dict, recipe: dict) -> list[Change]:
    """Every value of the model and the recipe, each with its change."""
    found = list(_walk(model, ("model",), ""))
    found += list(_walk(recipe, ("recipe",), "recipe"))
    return found


def _applied(model: dict, recipe: dict, change: Change) -> tuple[dict, dict]:
    spec = copy.deepcopy({"model": model, "recipe": recipe})
    node = spec
    for key in change.path[:-1]:
        node = node[key]
    node[change.path[-1]] = copy.deepcopy(change.to)
    return spec["model"], spec["recipe"]


def _share(rows: list[dict]) -> tuple[bool, str, float]:
    """(any row failed, the worst row's tensor, its deviation over its tolerance)."""
    worst = terms.worst(rows)
    return (not all(row["passed"] for row in rows), worst["tensor"], terms.share_of_tolerance(worst))


@dataclass(frozen=True)
class Truth:
    """The true workload's reference results and requests, which every changed one is judged against."""
    float32: dict
    exact: dict
    start: dict  # the canonical weights the steps began from
    weights: dict  # the weights probe's request: its batch, or image and sampled targets
    checks: list[dict]  # the layer checks' requests (layer_checks.py)


def power(workload: Workload, workdir: Path) -> list[dict]:
    """One row per value of the workload: whether its change fails certification, by what, or why not."""
    detector = workload.study_meta["task"] == "detection"
    true_model = certified_model(workload) if detector else workload.model()
    references = probes.reference_probes([workload], workdir)[probes.reference_key(workload)]
    float32, exact = references.same, references.exact
    folder = probes.probe_folder(envs.REFERENCE, workdir)
    truth = Truth(float32, exact, canonical_init(certified_model(workload), probes.SEED),
                  probes.weights_request(workload, folder, False), layer_checks.requests(workload, folder))
    optimizer_checks = probes.optimizer_requests(workload, folder)
    optimizer_out = probes.run_probes(envs.REFERENCE, [request for _, request in optimizer_checks], workdir)
    pending: list[tuple[Change, list[dict], Callable[[list[dict]], list[dict]]]] = []
    rows = []
    for index, change in enumerate(changes(true_model, workload.recipe)):
        if change.path[:2] in (("recipe", "optimizer"), ("recipe", "schedule")):
            rows.append(_row(workload, true_model, change, _optimizer_rows(change, optimizer_checks, optimizer_out)))
            continue
        model, recipe = _applied(true_model, workload.recipe, change)
        try:
            requests, judge = _probes(workload, model, recipe, folder / f"change-{index}", truth)
        except ir.IRError as error:
            rows.append(_row(workload, true_model, change, None, f"not a valid model: {error}"))
            continue
        pending.append((change, requests, judge))
    failures: dict[int, str] = {}
    outputs = iter(probes.run_probes(envs.REFERENCE, [r for _, requests, _ in pending for r in requests], workdir,
                                      failures))
    position = 0
    for change, requests, judge in pending:
        got = [next(outputs) for _ in requests]
        error = next((failures[i] for i in range(position, position + len(requests)) if i in failures), None)
        position += len(requests)
        rows.append(_row(workload, true_model, change, None if error else judge(got), error))
    return rows


def _optimizer_rows(change: Change, checks: list, outputs: list[dict]) -> list[dict]:
    """The true optimiser's outputs against the rule with the changed value, check by check. A schedule's
    value changes in the schedule check alone, where the probe's own warm-up and total steps are changed
    as the recipe's would be (an adapter that misread one would misread the probe's)."""
    key = change.path[-1]
    judged = []
    for (check, _), out in zip(checks, outputs, strict=True):
        try:
            if change.path[1] == "schedule":
                if check.schedule is not None:  # warmup_fraction is not in the probe's schedule: judged unchanged
                    change_to = {key: changed(key, check.schedule[key])} if key in check.schedule else {}
                    judged += optimizer.rows(check, out, None, dict(check.schedule, **change_to))
                continue
            to = changed(key, check.config[key]) if key == "lr" else change.to  # the decay check's raised rate
            judged += optimizer.rows(check, out, dict(check.config, **{key: to}))
        except optimizer.OptimizerError as error:
            return [{"tensor": f"optimizer rule: {error}", "passed": False, "max_rel": None, "max_abs": None,
                     "tolerance": optimizer.TOLERANCE}]
    return judged


def _probes(workload: Workload, model: dict, recipe: dict, folder: Path,
            truth: Truth) -> tuple[list[dict], Callable[[list[dict]], list[dict]]]:
    """The reference's probes of a changed model and recipe on the true workload's inputs (outputs into
    `folder`), and how their outputs are judged."""
    layers = {layer["name"]: layer for layer, _, _ in ir.all_shapes(model)}  # an IRError if it makes no model
    folder.mkdir(parents=True, exist_ok=True)
    if workload.study_meta["task"] == "detection":
        weights = dict(truth.weights, model=model, recipe=probes.constant_rate(recipe))
    else:
        training = dict(probes.constant_rate(recipe), batch_size=truth.weights["recipe"]["batch_size"])
        weights = dict(truth.weights, model=without_dropout(model), inference_model=model, recipe=training)
    weights["out"] = str(folder / "weights.npz")
    # the layer checks on the true inputs and weights, with the changed layer's settings
    checks = [dict(layer_checks.rebuilt(request, layers[request["layer"]]), out=str(folder / f"check-{i}.npz"))
              for i, request in enumerate(truth.checks)]

    def judge(outputs: list[dict]) -> list[dict]:
        judged = probes.compare(truth.float32, outputs[0], truth.start, truth.exact, recipe["optimizer"])
        for request, out in zip(truth.checks, outputs[1:], strict=True):
            judged += layer_checks.rows(request, out["output"])
        return judged

    return [weights, *checks], judge


def _row(workload: Workload, model: dict, change: Change, rows: list[dict] | None, error: str | None = None) -> dict:
    row = {"workload": workload.name, "value": change.label, "was": change.was, "changed to": change.to}
    if error is not None and error.startswith("not a valid model"):
        return dict(row, seen=None, by=error, share=None, why=None)
    if rows is None:
        return dict(row, seen=True, by=f"the reference cannot run it ({error[:100]})", share=None, why=None)
    failed, tensor, share = _share(rows)
    return dict(row, seen=failed, by=tensor, share=share, why=None if failed else _why(workload, model, change))


def _why(workload: Workload, model: dict, change: Change) -> str:
    """Why a change that passed cannot be seen, or UNEXPLAINED."""
    key = change.path[-1]
    if key == "padding":
        return _padding_without_effect(model, change) or UNEXPLAINED
    reasons = DETECTOR_NOT_SEEN if workload.study_meta["task"] == "detection" else NOT_SEEN
    return reasons.get(key, UNEXPLAINED)


def _padding_without_effect(model: dict, change: Change) -> str | None:
    """The reason when 'same' pads nothing for the layer at the certificate's shapes, else None."""
    name = change.label.split(".")[0]
    for layer, in_shape, _ in ir.all_shapes(model):
        if layer["name"] != name:
            continue
        window = layer["kernel"] if layer["type"] == "conv2d" else layer["pool"]
        pads = [ir.same_padding(side, window, layer["stride"]) for side in in_shape[:2]]
        if all(pad == (0, 0) for pad in pads):
            return (f"no effect at the certificate's shapes: 'same' pads nothing on a {in_shape[0]}x{in_shape[1]} "
                    f"input with a {window}x{window} window and stride {layer['stride']}")
    return None

