"""Equivalence certificates: a framework trains the same model as the reference, or dlbench says so.

For a workload, both frameworks load the same canonical weights with dropout off, and on one fixed
batch their outputs, loss, the gradient of every weight, and every weight after a few optimiser
steps are compared in canonical layout. A tensor passes when its largest absolute deviation,
relative to the scale of what it measures, is within the float32 tolerance of its kind. The scale of
an output is its largest magnitude. A gradient's is the largest gradient of its layer: a bias feeding
a BatchNorm has a true gradient of zero, so its own magnitude is rounding noise. Weights after the
steps are measured against the steps themselves (the layer's largest change from the start), not
against the weights, which would hide a wrong update in the weights' size. BatchNorm's moving
statistics are among the weights after the steps. Adam and AdamW divide a gradient by its own size plus
epsilon, so a weight whose exact gradient is near 0 moves by its gradient's rounding times up to lr /
epsilon: there, a tensor that fails its tolerance and the reference's own error is still judged
element by element against that amplified rounding (amplified_rounding).

The outputs and the serving path (adapter.serving(), what an inference cell times) are computed by the model
with its dropout left in, from the same weights, and held to the reference's forward pass with dropout off: a
predict or serving path that ran in training mode would drop values there. The serving path's outputs (the
tensor "serving") are of the batch as stored (uint8 pixels, token ids), in one call.

Dropout, off where gradients and steps are compared, is checked on its own, as are the normalisations' epsilon
and the activation functions, each on a model of its layer alone (layer_checks.py).

A reduced precision (bfloat16, mixed) is certified against the reference in the same precision, at tolerances of
so many unit roundoffs of the half type (terms.tolerances), and by the same fall-back to the float64 result; its
layer checks and optimiser checks, which check definitions, not rounding, run in float32; and the precision must
show (precision_checks.py).
"""
import dataclasses
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from dlbench.harness.certification import layer_checks, optimizer, precision_checks, terms
from dlbench.harness.certification.certified_model import certified_model, without_dropout, workload_digest
from dlbench.harness.certification.terms import (
    ABSOLUTE_FLOOR,
    BATCH,
    NORMALISING,
    SEED,
    STEPS,
    constant_rate,
    max_abs,
    tolerances,
)
from dlbench.harness.environments import envs, sources
from dlbench.harness.environments.process import worker_environment
from dlbench.harness.plan import executions, precisions
from dlbench.harness.plan.workloads import Workload
from dlbench.harness.store import Store
from dlbench.shared.detection import pipeline
from dlbench.shared.initializers import canonical_init
from dlbench.shared.ir import input_vocab

NOISE_FACTOR = 3.0  # beyond tolerance, a tensor still passes within this many times the reference's own error
# ... in a reduced precision, whose programs round in other places than the reference's (what they accumulate in,
# which operations they keep in float32): measured up to 6.5 times (keras-torch's mixed-float16 cnn-mnist)
REDUCED_NOISE_FACTOR = 8.0
# A detector is certified on one image of certified_model.DETECTOR_SIDES, with this many fixed proposals, and
# this many anchors and RoIs sampled: small enough for every framework's CI test, big enough for
# positive anchors and foreground RoIs of both boxes.
DETECTOR_PROPOSALS = 48
DETECTOR_ANCHORS = 64
DETECTOR_ROIS = 32


# A probe process ends after this long a request, at most MAX_PROBES_S (a bound subprocess's poll accepts)
PROBE_S = 1800
MAX_PROBES_S = 86400


class CertifyError(RuntimeError):
    pass


def fixed_batch(model: dict, meta: dict, count: int = BATCH) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and labels from a fixed seed: pixels, token ids, and labels of the workload's task."""
    rng = np.random.RandomState(SEED)
    shape = [count, *model["input_shape"]]
    if model["input_dtype"].startswith("float"):
        x = rng.randint(0, 256, size=shape).astype(np.uint8)
    else:
        x = rng.randint(0, input_vocab(model), size=shape).astype(np.int32)
    task = meta["task"]
    if task == "classification":
        y = rng.randint(0, meta["num_classes"], size=count)
    elif task == "binary":
        y = rng.randint(0, 2, size=count)
    elif task == "language_model":
        y = rng.randint(0, meta["vocab_size"], size=x.shape)
    else:  # translation: the last target positions are padding, as in a real padded batch
        y = rng.randint(1, meta["target_vocab_size"], size=(count, meta["target_len"]))
        y[:, -2:] = 0
    return x, y.astype(np.int32)


class References(NamedTuple):
    """The reference's probes of one workload in one precision: in that precision, in float64, in float32."""
    same: dict[str, np.ndarray]
    exact: dict[str, np.ndarray]
    float32: dict[str, np.ndarray]


def in_float32(workload: Workload) -> Workload:
    """The workload in float32: its recipe without a precision."""
    return dataclasses.replace(workload, recipe={k: v for k, v in workload.recipe.items() if k != "precision"})


def probe_name(workload: Workload, exact: bool) -> str:
    """A probe's files' name: the workload's, with float64 or the reduced precision it runs in."""
    precision = precisions.of_recipe(workload.recipe)
    return workload.name + ("-float64" if exact else "" if precision == precisions.DEFAULT else f"-{precision}")


def detector_request(workload: Workload, folder: Path, exact: bool) -> dict:
    """A detector's probe: one image of seeded pixels with two boxes, and fixed proposals (seeded boxes
    inside the image), so that the RPN's anchors and the head's RoIs are sampled once, here, and every
    framework computes the four losses on the same sample."""
    name = probe_name(workload, exact)
    model = certified_model(workload)
    rng = np.random.RandomState(SEED)
    height, width = model["input_shape"][:2]
    pixels = rng.randint(0, 256, size=(height, width, 3)).astype(np.uint8)
    image = pipeline.Image(pipeline.padded(pixels, model, 255.0), height, width,
                           np.array([[4, 6, 40, 50], [30, 10, 90, 60]], np.float32), np.array([14, 7], np.int32))
    corners = rng.uniform(0, [width, height], size=(DETECTOR_PROPOSALS, 2))
    sizes = rng.uniform(8, 48, size=(DETECTOR_PROPOSALS, 2))
    proposals = pipeline.clip_boxes(np.concatenate([corners, corners + sizes], axis=1), height, width)
    config = dict(pipeline.SETTINGS, rpn_batch=DETECTOR_ANCHORS, roi_batch=DETECTOR_ROIS)
    targets = pipeline.train_targets(model, image, proposals.astype(np.float32), rng, config)
    np.save(folder / f"{name}-x.npy", image.x)
    np.savez(folder / f"{name}-targets.npz", **targets)
    out = folder / f"{name}.npz"
    for stale in (out, out.with_name(out.name + ".error")):
        stale.unlink(missing_ok=True)
    return {"kind": "detector", "name": f"{workload.name}{' (float64)' if exact else ''}", "model": model,
            "recipe": dict(constant_rate(workload.recipe), **({"dtype": "float64"} if exact else {})),
            "task": "detection",
            "x": str(folder / f"{name}-x.npy"), "targets": str(folder / f"{name}-targets.npz"), "seed": SEED,
            "steps": STEPS, "out": str(out)}


def weights_request(workload: Workload, folder: Path, exact: bool) -> dict:
    """One probe's request: the fixed batch written next to it, the recipe at the batch's size, the model it trains
    (dropout off) and the model as declared, whose outputs and serving path it computes ("inference_model")."""
    if workload.study_meta["task"] == "detection":
        return detector_request(workload, folder, exact)
    workload = in_float32(workload) if exact else workload  # float64 is the exact result of float32's maths
    name = probe_name(workload, exact)
    model = without_dropout(workload.model())
    x, y = fixed_batch(model, workload.study_meta)
    np.save(folder / f"{name}-x.npy", x)
    np.save(folder / f"{name}-y.npy", y)
    out = folder / f"{name}.npz"
    for stale in (out, out.with_name(out.name + ".error")):
        stale.unlink(missing_ok=True)
    training = dict(constant_rate(workload.recipe), batch_size=len(x), **({"dtype": "float64"} if exact else {}))
    return {"name": f"{workload.name}{' (float64)' if exact else ''}", "model": model,
            "inference_model": workload.model(), "recipe": training,
            "task": workload.study_meta["task"], "x": str(folder / f"{name}-x.npy"),
            "y": str(folder / f"{name}-y.npy"), "seed": SEED, "steps": STEPS, "out": str(out)}


def optimizer_requests(workload: Workload, folder: Path) -> list[tuple[optimizer.Check, dict]]:
    """The optimiser certificate's probes of the workload's recipe (certification/optimizer.py)."""
    return optimizer.requests(workload.name, workload.recipe["optimizer"], folder, workload.recipe.get("schedule"))


def probe_many(framework: str, probes: list[tuple[Workload, bool]], workdir: Path) -> list[dict[str, np.ndarray]]:
    """Runs dlbench.worker.probe once in the framework's environment for every (workload, exact) probe, in
    order; `exact` asks for float64 (the reference can)."""
    folder = probe_folder(framework, workdir)
    return run_probes(framework, [weights_request(workload, folder, exact) for workload, exact in probes], workdir)


def probe_folder(framework: str, workdir: Path) -> Path:
    folder = workdir / framework
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run_probes(framework: str, requests: list[dict], workdir: Path,
               failures: dict[int, str] | None = None) -> list[dict[str, np.ndarray]]:
    """Runs dlbench.worker.probe once in the framework's environment for every request, in order, one process for
    each precision the requests train in: a framework's mixed precision may rewrite its whole process for good
    (MXNet's AMP), where a float32 model would compute in the half type. Compiled code is shared by every probe of
    one workdir (its compile cache): certification times nothing, so a warm cache changes no verdict. A failed probe
    raises CertifyError, or, when `failures` is a dict, gives empty arrays and its error's last line under its index
    there (power.py's changed models)."""
    by_precision: dict[str, list[int]] = {}
    for index, request in enumerate(requests):
        by_precision.setdefault(precisions.of_recipe(request["recipe"]), []).append(index)
    arrays: list[dict[str, np.ndarray]] = [{} for _ in requests]
    for indices in by_precision.values():
        failed: dict[int, str] | None = None if failures is None else {}
        found = _probe_process(framework, [requests[index] for index in indices], workdir, failed)
        for position, index in enumerate(indices):
            arrays[index] = found[position]
        if failures is not None and failed:
            failures.update({indices[position]: why for position, why in failed.items()})
    return arrays


def _probe_process(framework: str, requests: list[dict], workdir: Path,
                   failures: dict[int, str] | None) -> list[dict[str, np.ndarray]]:
    """One process of dlbench.worker.probe for the requests, in order (run_probes)."""
    env = envs.require(framework)
    recipe = envs.get_recipe(framework)
    folder = probe_folder(framework, workdir)
    requests = [dict(request, adapter=recipe.adapter) for request in requests]
    (folder / "requests.json").write_text(json.dumps(requests))
    variables = dict(recipe.worker_env, DLBENCH_COMPILE_CACHE=str(workdir / "compile-cache"))
    done = subprocess.run([str(env.python), "-m", "dlbench.worker.probe", str(folder / "requests.json")],
                          capture_output=True, text=True, cwd=folder, env=worker_environment(folder, 1, variables),
                          timeout=min(PROBE_S * len(requests), MAX_PROBES_S))
    arrays = []
    for index, request in enumerate(requests):
        out, error = Path(request["out"]), Path(request["out"] + ".error")
        if not out.is_file():
            detail = error.read_text() if error.is_file() else done.stderr
            if failures is not None:
                failures[index] = detail.strip().splitlines()[-1] if detail.strip() else f"exit {done.returncode}"
                arrays.append({})
                continue
            raise CertifyError(f"{framework} {request['name']}: the probe failed (exit {done.returncode}):\n"
                               f"{detail[-3000:]}")
        with np.load(out) as loaded:
            arrays.append(dict(loaded))
    return arrays


def reference_key(workload: Workload) -> tuple[str, str]:
    """What reference_probes keys a workload's probes by: its name and precision."""
    return workload.name, precisions.of_recipe(workload.recipe)


def reference_probes(workloads: list[Workload], workdir: Path) -> dict[tuple[str, str], References]:
    """The reference's probes of each workload (reference_key), in its precision, float64 and float32, from one
    process, in the reference's own default execution whatever execution the workload's recipe holds (a
    candidate's)."""
    chosen = {reference_key(w): executions.as_run(w, envs.REFERENCE) for w in workloads}
    wanted: dict[tuple[str, str], tuple[Workload, bool]] = {}  # each probe once, by (name, precision or float64)
    for (name, precision), workload in chosen.items():
        wanted[name, precision] = (workload, False)
        wanted[name, precisions.DEFAULT] = (in_float32(workload), False)
        wanted[name, "float64"] = (workload, True)
    arrays = dict(zip(wanted, map(served_as_forward, probe_many(envs.REFERENCE, list(wanted.values()), workdir)),
                      strict=True))
    return {(name, precision): References(arrays[name, precision], arrays[name, "float64"],
                                          arrays[name, precisions.DEFAULT]) for name, precision in chosen}


def served_as_forward(reference: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reference's probe with its forward outputs as what a serving path must compute: a framework's
    serving path is held to the reference's forward pass, not to the reference's own serving path. A
    detector's probe (its outputs by part, no serving entry) is left as it is."""
    if "output" not in reference:
        return reference
    return dict(reference, serving=reference["output"])


def scales(reference: dict[str, np.ndarray], start: dict[str, np.ndarray] | None) -> dict[str, float]:
    """What each tensor's deviation is measured against (see the module's docstring)."""
    def measured(name: str) -> np.ndarray:
        if name.startswith("after/") and start:
            return reference[name] - start[name[len("after/"):]]
        return reference[name]

    own = {name: float(np.max(np.abs(measured(name)), initial=0.0)) for name in reference}
    layer = {}  # "grad/conv2d_1" -> the largest of that layer's tensors
    for name, value in own.items():
        if name.count("/") == 2:
            key = name.rsplit("/", 1)[0]
            layer[key] = max(layer.get(key, 0.0), value)
    return {name: layer.get(name.rsplit("/", 1)[0], value) if name.count("/") == 2 else value
            for name, value in own.items()}


def amplified_rounding(name: str, reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray],
                       exact: dict[str, np.ndarray], config: dict | None) -> np.ndarray | None:
    """Per element of the weights "after/NAME": how far the STEPS steps of an Adam-like optimiser may carry it
    from the exact result on gradient rounding alone. A step is lr * g / (|g| + epsilon) at first, whose
    slope in g is lr * epsilon / (|g| + epsilon)^2: up to lr / epsilon where the exact gradient g is near 0
    (an attention key bias's is 0, since softmax ignores a constant added to all of a query's scores). The
    rounding is the larger of the two frameworks' gradient errors on that tensor; None for other optimisers."""
    key = "grad/" + name[len("after/"):]
    if config is None or config.get("name") not in NORMALISING or key not in exact or key not in candidate:
        return None
    rounding = max(max_abs(candidate[key], exact[key]), max_abs(reference[key], exact[key]))
    epsilon = config["epsilon"]
    return STEPS * config["lr"] * epsilon / (np.abs(exact[key]) + epsilon) ** 2 * rounding


def compare(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray],
            start: dict[str, np.ndarray] | None = None, exact: dict[str, np.ndarray] | None = None,
            optimizer_config: dict | None = None, precision: str = precisions.DEFAULT) -> list[dict]:
    """One row per reference tensor; a tensor the candidate lacks or shapes differently fails.
    `start` holds the canonical weights the steps began from; `exact`, the reference in float64;
    `optimizer_config`, the recipe's optimiser that made the steps; `precision`, both probes' (its tolerances)."""
    rows = []
    limits = tolerances(precision)
    scale_of = scales(reference, start)
    for name, expected in reference.items():
        kind = name.split("/")[0]
        row = {"tensor": name, "kind": kind, "tolerance": limits[kind], "max_abs": None, "max_rel": None}
        got = candidate.get(name)
        if got is None or got.shape != expected.shape:
            row.update(passed=False, problem="missing" if got is None else f"shape {got.shape} != {expected.shape}")
        else:
            deviation = max_abs(got, expected)
            scale = scale_of[name]
            relative = deviation / scale if scale > 0 else (0.0 if deviation == 0 else float("inf"))
            row.update(max_abs=deviation, max_rel=relative,
                       passed=bool(deviation <= ABSOLUTE_FLOOR or relative <= limits[kind]))
            if exact is not None and not row["passed"]:
                # Where float32 itself is unstable (BatchNorm of near-constant channels, near-ties in
                # pooling), judge by the exact result: no further from it than the reference is.
                noise, off = max_abs(expected, exact[name]), max_abs(got, exact[name])
                factor = NOISE_FACTOR if precision == precisions.DEFAULT else REDUCED_NOISE_FACTOR
                row.update(reference_error=noise, error=off, passed=bool(off <= factor * noise))
                allowance = amplified_rounding(name, reference, candidate, exact, optimizer_config)
                if allowance is not None and not row["passed"]:
                    each = np.abs(got.astype(np.float64) - exact[name])
                    row.update(amplified_rounding=float(allowance.max()),
                               passed=bool(np.all(each <= factor * (noise + allowance))))
            if not row["passed"] and precision != precisions.DEFAULT and start and optimizer_config:
                judged = precision_checks.normalised_steps(name, got, expected, start, optimizer_config, STEPS)
                row.update(judged or {}, passed=bool(judged and judged["within_steps"]))
            grid = precision_checks.storage_rounding(name, expected, precision, STEPS)
            if grid is not None and not row["passed"]:
                # weights stored in bfloat16 land on its grid after every step: two right programs may part there
                each = np.abs(got.astype(np.float64) - expected)
                row.update(storage_rounding=float(grid.max()),
                           passed=bool(np.all(each <= grid + limits[kind] * scale)))
        rows.append(row)
    return rows


def certificate(framework: str, workload: Workload, rows: list[dict]) -> dict:
    worst = terms.worst(rows)
    env, reference_env = envs.require(framework), envs.require(envs.REFERENCE)
    return {
        "framework": envs.framework_name(framework), "framework_version": env.version(),
        "framework_env": env.packages_digest(),
        "reference": envs.REFERENCE, "reference_version": reference_env.version(), "workload": workload.name,
        "passed": all(r["passed"] for r in rows), "worst_tensor": worst["tensor"],
        "worst_scaled_deviation": worst["max_rel"], "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "deviations": rows, "worker_source": sources.framework_source(framework),
        "reference_source": sources.framework_source(envs.REFERENCE), "workload_digest": workload_digest(workload),
        "execution": executions.of_recipe(framework, workload.recipe),
        "precision": precisions.of_recipe(workload.recipe),
    }


class Checks(NamedTuple):
    """Where a mode's layer and optimiser checks start in a framework's requests, and what they are."""
    at: int
    layers: list[dict]
    optimizer: list[tuple[optimizer.Check, dict]]


def planned_probes(framework: str, certified: list[Workload], workdir: Path
                   ) -> tuple[list[dict], list[tuple[Workload, int, Checks]]]:
    """Every probe of the framework's certified workloads, in order, and for each workload where its weights probe
    and its checks are among them. Each execution's probes are written in a folder of their own, for a probe's files
    are named by workload and precision alone; the layers' and the optimiser's definitions are checked in float32
    whatever the precision (see the module's docstring), once per execution and workload."""
    requests: list[dict] = []
    planned = []
    shared: dict[tuple[str, str], Checks] = {}
    for workload in certified:
        folder = probe_folder(framework, workdir) / executions.of_recipe(framework, workload.recipe)
        folder.mkdir(exist_ok=True)
        weights_at = len(requests)
        requests.append(weights_request(workload, folder, False))
        key = (folder.name, workload.name)
        if key not in shared:
            shared[key] = Checks(len(requests), layer_checks.requests(in_float32(workload), folder),
                                 optimizer_requests(workload, folder))
            requests += shared[key].layers + [request for _, request in shared[key].optimizer]
        planned.append((workload, weights_at, shared[key]))
    return requests, planned


def certify(frameworks: list[str], workloads: list[Workload], store: Store, workdir: Path,
            progress: Callable[[dict], None], reference: dict[str, tuple[dict, dict]] | None = None) -> list[dict]:
    """Certifies every framework x workload pair against the reference and stores each certificate, each in the
    execution and precision its workload's recipe holds, else the framework's defaults (executions.as_run,
    precisions.as_run). One probe process per framework and precision serves all the workloads (run_probes).
    `reference`, the reference's probes (reference_probes) of these workloads, when already at hand."""
    for framework in [envs.REFERENCE, *frameworks]:
        envs.require(framework)
    if reference is None:
        reference = reference_probes(workloads, workdir)
    results = []
    for framework in frameworks:
        certified = [precisions.as_run(executions.as_run(w, framework, w.recipe.get("execution")), framework,
                                       w.recipe.get("precision")) for w in workloads]
        requests, planned = planned_probes(framework, certified, workdir)
        arrays = run_probes(framework, requests, workdir)
        for workload, weights_at, (checks_at, checks, optimizer_checks) in planned:
            same, exact, float32 = reference[reference_key(workload)]
            start = canonical_init(certified_model(workload), SEED)
            precision = precisions.of_recipe(workload.recipe)
            candidate = arrays[weights_at]
            rows = compare(same, candidate, start, exact, workload.recipe["optimizer"], precision)
            rows += precision_checks.rows(precision, candidate, float32)
            for request, output in zip(checks, arrays[checks_at:], strict=False):
                rows += layer_checks.rows(request, output["output"])
            after_checks = checks_at + len(checks)
            for (check, _), output in zip(optimizer_checks, arrays[after_checks:], strict=False):
                rows += optimizer.rows(check, output)
            cert = certificate(framework, workload, rows)
            store.save_certificate(cert)
            progress(cert)
            results.append(cert)
    return results
