"""Equivalence certificates: a framework trains the same model as the reference, or dlbench says so.

For a workload, both frameworks load the same canonical weights with dropout off, and on one fixed
batch their outputs, loss, the gradient of every weight, and every weight after a few optimiser
steps are compared in canonical layout. A tensor passes when its largest absolute deviation,
relative to the scale of what it measures, is within the float32 tolerance of its kind. The scale of
an output is its largest magnitude. A gradient's is the largest gradient of its layer: a bias feeding
a BatchNorm has a true gradient of zero, so its own magnitude is rounding noise. Weights after the
steps are measured against the steps themselves (the layer's largest change from the start), not
against the weights, which would hide a wrong update in the weights' size.
"""
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dlbench import envs, sources
from dlbench.models.init import canonical_init
from dlbench.models.ir import input_vocab
from dlbench.runner import REFERENCE, worker_environment
from dlbench.store import Store
from dlbench.workloads import Workload

BATCH = 16  # BatchNorm over fewer values (cnn-svhn ends at 2x2) turns rounding noise into chaos
STEPS = 3
SEED = 0
# Largest deviation allowed, relative to the reference tensor's largest magnitude, by kind of tensor.
TOLERANCES = {"output": 1e-4, "loss": 1e-4, "grad": 1e-3, "after": 1e-3}
ABSOLUTE_FLOOR = 1e-7  # a deviation this small passes whatever the tensor's scale (tensors near zero)
NOISE_FACTOR = 3.0  # beyond tolerance, a tensor still passes within this many times the reference's own error


class CertifyError(RuntimeError):
    pass


def without_dropout(model: dict) -> dict:
    return dict(model, layers=[dict(layer, rate=0.0) if layer["type"] == "dropout" else layer
                               for layer in model["layers"]])


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


def _request(workload: Workload, folder: Path, exact: bool) -> dict:
    """One probe's request: the fixed batch written next to it, the recipe at the batch's size."""
    name = f"{workload.name}{'-float64' if exact else ''}"
    model = without_dropout(workload.model())
    x, y = fixed_batch(model, workload.study_meta)
    np.save(folder / f"{name}-x.npy", x)
    np.save(folder / f"{name}-y.npy", y)
    out = folder / f"{name}.npz"
    for stale in (out, out.with_name(out.name + ".error")):
        stale.unlink(missing_ok=True)
    training = dict(workload.recipe, batch_size=len(x), **({"dtype": "float64"} if exact else {}))
    return {"name": f"{workload.name}{' (float64)' if exact else ''}", "model": model, "recipe": training,
            "task": workload.study_meta["task"], "x": str(folder / f"{name}-x.npy"),
            "y": str(folder / f"{name}-y.npy"), "seed": SEED, "steps": STEPS, "out": str(out)}


def probe_many(framework: str, probes: list[tuple[Workload, bool]], workdir: Path) -> list[dict[str, np.ndarray]]:
    """Runs dlbench.probe once in the framework's environment for every (workload, exact) probe, in
    order; `exact` asks for float64 (the reference can). Compiled code is shared by every probe of one
    workdir (its compile cache): certification times nothing, so a warm cache changes no verdict."""
    env = envs.require(framework)
    recipe = envs.get_recipe(framework)
    folder = workdir / framework
    folder.mkdir(parents=True, exist_ok=True)
    requests = [dict(_request(workload, folder, exact), adapter=recipe.adapter) for workload, exact in probes]
    (folder / "requests.json").write_text(json.dumps(requests))
    variables = dict(recipe.worker_env, DLBENCH_COMPILE_CACHE=str(workdir / "compile-cache"))
    done = subprocess.run([str(env.python), "-m", "dlbench.probe", str(folder / "requests.json")],
                          capture_output=True, text=True, cwd=folder, timeout=1800 * len(requests),
                          env=worker_environment(folder, 1, variables))
    arrays = []
    for request in requests:
        out, error = Path(request["out"]), Path(request["out"] + ".error")
        if not out.is_file():
            detail = error.read_text() if error.is_file() else done.stderr
            raise CertifyError(f"{framework} {request['name']}: the probe failed (exit {done.returncode}):\n"
                               f"{detail[-3000:]}")
        with np.load(out) as loaded:
            arrays.append(dict(loaded))
    return arrays


def reference_probes(workloads: list[Workload], workdir: Path) -> dict[str, tuple[dict, dict]]:
    """The reference's probes of each workload, in float32 and float64, from one process."""
    arrays = probe_many(REFERENCE, [(w, exact) for w in workloads for exact in (False, True)], workdir)
    return {w.name: (arrays[2 * i], arrays[2 * i + 1]) for i, w in enumerate(workloads)}


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


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0))


def compare(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray],
            start: dict[str, np.ndarray] | None = None, exact: dict[str, np.ndarray] | None = None) -> list[dict]:
    """One row per reference tensor; a tensor the candidate lacks or shapes differently fails.
    `start` holds the canonical weights the steps began from; `exact`, the reference in float64."""
    rows = []
    scale_of = scales(reference, start)
    for name, expected in reference.items():
        kind = name.split("/")[0]
        row = {"tensor": name, "kind": kind, "tolerance": TOLERANCES[kind], "max_abs": None, "max_rel": None}
        got = candidate.get(name)
        if got is None or got.shape != expected.shape:
            row.update(passed=False, problem="missing" if got is None else f"shape {got.shape} != {expected.shape}")
        else:
            deviation = _max_abs(got, expected)
            scale = scale_of[name]
            relative = deviation / scale if scale > 0 else (0.0 if deviation == 0 else float("inf"))
            row.update(max_abs=deviation, max_rel=relative,
                       passed=bool(deviation <= ABSOLUTE_FLOOR or relative <= TOLERANCES[kind]))
            if exact is not None and not row["passed"]:
                # Where float32 itself is unstable (BatchNorm of near-constant channels, near-ties in
                # pooling), judge by the exact result: no further from it than the reference is.
                noise, off = _max_abs(expected, exact[name]), _max_abs(got, exact[name])
                row.update(reference_error=noise, error=off, passed=bool(off <= NOISE_FACTOR * noise))
        rows.append(row)
    return rows


def _share_of_tolerance(row: dict) -> float:
    if row["max_abs"] is None:
        return float("inf")
    return 0.0 if row["max_abs"] <= ABSOLUTE_FLOOR else row["max_rel"] / row["tolerance"]


def certificate(framework: str, workload: Workload, rows: list[dict]) -> dict:
    worst = max(rows, key=lambda row: (not row["passed"], _share_of_tolerance(row)))
    env, reference_env = envs.require(framework), envs.require(REFERENCE)
    return {
        "framework": framework, "framework_version": env.version(), "framework_env": env.packages_digest(),
        "reference": REFERENCE, "reference_version": reference_env.version(), "workload": workload.name,
        "passed": all(r["passed"] for r in rows), "worst_tensor": worst["tensor"],
        "worst_scaled_deviation": worst["max_rel"], "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "deviations": rows, "worker_source": sources.framework_source(framework),
        "reference_source": sources.framework_source(REFERENCE),
    }


def certify(frameworks: list[str], workloads: list[Workload], store: Store, workdir: Path,
            progress: Callable[[dict], None], reference: dict[str, tuple[dict, dict]] | None = None) -> list[dict]:
    """Certifies every framework x workload pair against the reference and stores each certificate.
    One probe process per framework serves all the workloads. `reference`, the reference's probes
    (reference_probes) of these workloads, when already at hand."""
    for framework in [REFERENCE, *frameworks]:
        envs.require(framework)
    if reference is None:
        reference = reference_probes(workloads, workdir)
    results = []
    for framework in frameworks:
        candidates = probe_many(framework, [(workload, False) for workload in workloads], workdir)
        for workload, candidate in zip(workloads, candidates, strict=True):
            float32, exact = reference[workload.name]
            start = canonical_init(without_dropout(workload.model()), SEED)
            cert = certificate(framework, workload, compare(float32, candidate, start, exact))
            store.save_certificate(cert)
            progress(cert)
            results.append(cert)
    return results
