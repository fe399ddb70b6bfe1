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

The serving path (adapter.serving(), what an inference cell times) is certified beside them: its outputs
on the same batch as stored (uint8 pixels, token ids), in one call, against the reference's forward
outputs (the tensor "serving").

Dropout, off in those comparisons, is checked on its own: each dropout layer's rate, scaling and
independence of masks, from the framework's output of that layer alone in training mode
(dropout_requests, dropout_rows). So is each normalisation layer's epsilon, on inputs of its scale
(epsilon_requests, epsilon_rows: BatchNorm's and the layer and RMS normalisations').
"""
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dlbench.harness.certification import optimizer
from dlbench.harness.certification.certified_model import certified_model, without_dropout, workload_digest
from dlbench.harness.environments import envs, sources
from dlbench.harness.environments.process import worker_environment
from dlbench.harness.plan.workloads import Workload
from dlbench.harness.store import Store
from dlbench.shared import ir
from dlbench.shared.detection import pipeline
from dlbench.shared.initializers import canonical_init
from dlbench.shared.ir import input_vocab

BATCH = 16  # BatchNorm over fewer values (cnn-svhn ends at 2x2) turns rounding noise into chaos
STEPS = 3
SEED = 0
# Largest deviation allowed, relative to the reference tensor's largest magnitude, by kind of tensor.
TOLERANCES = {"output": 1e-4, "serving": 1e-4, "loss": 1e-4, "grad": 1e-3, "after": 1e-3}
# Dropout (dropout_rows): each dropout layer's rate, on this many elements of ones in training mode. The
# share of zeros has a binomial standard deviation of at most 0.001 there; it may stray DROPOUT_Z of them
# (a correct layer fails one check in about 1.7 million), and a rate off by a tenth of itself fails.
DROPOUT_ELEMENTS = 2 ** 18
DROPOUT_Z = 5.0
DROPOUT_SCALE_TOLERANCE = 1e-5  # kept values 1/(1-rate), up to float32 rounding of the scale
DROPOUT_SHAPES = {1: (128,), 2: (8, 32), 3: (4, 4, 16)}  # an input of each rank the workloads drop out
# BatchNorm's epsilon is added to variances that, in the workloads, are far larger: it is checked on its own,
# on inputs of this shape whose moving variances are of its scale (batchnorm_rows)
BATCHNORM_SHAPE = (2, 2, 4)
# Layer and RMS normalisation's epsilon likewise (norm_rows), on (steps, features) inputs of this shape whose
# variance (mean square) over the features is of epsilon's scale
LAYER_NORM_SHAPE = (4, 8)
ABSOLUTE_FLOOR = 1e-7  # a deviation this small passes whatever the tensor's scale (tensors near zero)
NOISE_FACTOR = 3.0  # beyond tolerance, a tensor still passes within this many times the reference's own error
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


def detector_request(workload: Workload, folder: Path, exact: bool) -> dict:
    """A detector's probe: one image of seeded pixels with two boxes, and fixed proposals (seeded boxes
    inside the image), so that the RPN's anchors and the head's RoIs are sampled once, here, and every
    framework computes the four losses on the same sample."""
    name = f"{workload.name}{'-float64' if exact else ''}"
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
    """One probe's request: the fixed batch written next to it, the recipe at the batch's size."""
    if workload.study_meta["task"] == "detection":
        return detector_request(workload, folder, exact)
    name = f"{workload.name}{'-float64' if exact else ''}"
    model = without_dropout(workload.model())
    x, y = fixed_batch(model, workload.study_meta)
    np.save(folder / f"{name}-x.npy", x)
    np.save(folder / f"{name}-y.npy", y)
    out = folder / f"{name}.npz"
    for stale in (out, out.with_name(out.name + ".error")):
        stale.unlink(missing_ok=True)
    training = dict(constant_rate(workload.recipe), batch_size=len(x), **({"dtype": "float64"} if exact else {}))
    return {"name": f"{workload.name}{' (float64)' if exact else ''}", "model": model, "recipe": training,
            "task": workload.study_meta["task"], "x": str(folder / f"{name}-x.npy"),
            "y": str(folder / f"{name}-y.npy"), "seed": SEED, "steps": STEPS, "out": str(out)}


def dropout_model(rate: float, shape: tuple[int, ...]) -> dict:
    """One dropout layer on an input of `shape`, then a dense layer that the identity passes through
    (an image is flattened first): the model's output in training mode is the dropout layer's."""
    layers = [ir.dropout(rate), *([ir.flatten()] if len(shape) == 3 else []), ir.dense(_dropout_units(shape))]
    return ir.model(shape, "float32", layers)


def _dropout_units(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape)) if len(shape) == 3 else shape[-1]


def dropout_requests(workload: Workload, folder: Path) -> list[dict]:
    """A dropout probe for each dropout layer of the workload: its rate, on an input of its rank."""
    requests = []
    for layer, in_shape, _ in ir.all_shapes(workload.model()):  # a residual block's own layers too
        if layer["type"] != "dropout" or layer["rate"] == 0:
            continue
        shape = DROPOUT_SHAPES[len(in_shape)]
        units, count = _dropout_units(shape), DROPOUT_ELEMENTS // int(np.prod(shape))
        name = f"{workload.name}-{layer['name']}-dropout"
        x, weights, out = folder / f"{name}-x.npy", folder / f"{name}-weights.npz", folder / f"{name}.npz"
        np.save(x, np.ones((count, *shape), np.float32))
        np.savez(weights, **{"dense_1/kernel": np.eye(units, dtype=np.float32),
                             "dense_1/bias": np.zeros(units, np.float32)})
        for stale in (out, out.with_name(out.name + ".error")):
            stale.unlink(missing_ok=True)
        requests.append({
            "kind": "dropout", "name": f"{workload.name} {layer['name']} (dropout)", "layer": layer["name"],
            "rate": layer["rate"], "shape": list(shape), "model": dropout_model(layer["rate"], shape),
            "recipe": dict(constant_rate(workload.recipe), batch_size=count), "task": workload.study_meta["task"],
            "x": str(x),
            "weights": str(weights), "seed": SEED, "out": str(out)})
    return requests


def dropout_rows(request: dict, output: np.ndarray) -> list[dict]:
    """The dropout layer's output on ones, judged: the share of zeros is its rate within DROPOUT_Z
    binomial standard deviations; every kept value is 1/(1-rate); no line along any axis is dropped
    whole more often than independent masks would drop it (channel-wise or time-shared masks would)."""
    rate, shape = request["rate"], tuple(request["shape"])
    values = np.asarray(output, np.float64).reshape(-1, *shape)
    dropped = values == 0
    prefix = f"dropout/{request['layer']}/"
    share = float(dropped.mean())
    allowed = DROPOUT_Z * np.sqrt(rate * (1 - rate) / dropped.size)
    rows = [_dropout_row(prefix + "zeros", abs(share - rate), rate, allowed)]
    scale = 1 / (1 - rate)
    kept = values[~dropped]
    rows.append(_dropout_row(prefix + "scale", float(np.max(np.abs(kept - scale), initial=0.0)), scale,
                             DROPOUT_SCALE_TOLERANCE * scale))
    # For each axis, the share of lines along it that are all zeros, over what independent masks allow;
    # the row shows the axis that comes closest to failing.
    lines = []
    for axis in range(1, values.ndim):
        whole = dropped.all(axis=axis)
        expected = rate ** shape[axis - 1]
        lines.append((float(whole.mean()) - expected, DROPOUT_Z * np.sqrt(expected * (1 - expected) / whole.size)))
    excess, allowed = max(lines, key=lambda line: line[0] - line[1])
    rows.append(_dropout_row(prefix + "independence", max(excess, 0.0), rate, allowed))
    return rows


def _dropout_row(tensor: str, deviation: float, scale: float, allowed: float) -> dict:
    allowed = max(allowed, ABSOLUTE_FLOOR * scale)  # independent masks all but never drop a long line whole
    return {"tensor": tensor, "kind": "dropout", "tolerance": allowed / scale, "max_abs": deviation,
            "max_rel": deviation / scale, "passed": bool(deviation <= allowed)}


def constant_rate(recipe: dict) -> dict:
    """The recipe without its learning-rate schedule: the few steps of the other probes run at the base rate
    (a schedule's first update has rate 0); the optimiser certificate's schedule check certifies the schedule."""
    return {key: value for key, value in recipe.items() if key != "schedule"}


def optimizer_requests(workload: Workload, folder: Path) -> list[tuple[optimizer.Check, dict]]:
    """The optimiser certificate's probes of the workload's recipe (certification/optimizer.py)."""
    return optimizer.requests(workload.name, workload.recipe["optimizer"], folder, workload.recipe.get("schedule"))


def batchnorm_requests(workload: Workload, folder: Path) -> list[dict]:
    """A BatchNorm probe for each BatchNorm layer of the workload: the layer alone (with its momentum and
    epsilon), then an identity dense layer, in inference mode on BATCHNORM_SHAPE inputs, from moving
    variances of epsilon's scale, where epsilon dominates (batchnorm_rows)."""
    requests = []
    for layer, _, _ in ir.all_shapes(workload.model()):  # a residual block's own layers too
        if layer["type"] != "batchnorm":
            continue
        name = f"{workload.name}-{layer['name']}-batchnorm"
        rng = np.random.RandomState(SEED)
        channels, units = BATCHNORM_SHAPE[-1], int(np.prod(BATCHNORM_SHAPE))
        weights = {"batchnorm_1/gamma": rng.uniform(0.5, 1.5, channels),
                   "batchnorm_1/beta": rng.uniform(-0.1, 0.1, channels),
                   "batchnorm_1/moving_mean": rng.uniform(-0.1, 0.1, channels),
                   "batchnorm_1/moving_var": layer["epsilon"] * rng.uniform(0.5, 2.0, channels),
                   "dense_1/kernel": np.eye(units), "dense_1/bias": np.zeros(units)}
        x = rng.standard_normal((BATCH, *BATCHNORM_SHAPE))
        requests.append(_layer_request(workload, folder / name, layer, "batchnorm", batchnorm_model(layer), x, weights))
    return requests


def _layer_request(workload: Workload, stem: Path, layer: dict, check: str, model: dict, x: np.ndarray,
                   weights: dict) -> dict:
    """An inference probe of one layer's check: its inputs and weights written beside `stem` (float32), an
    earlier output of the same name removed, the request the worker runs."""
    x_file, weights_file = stem.with_name(f"{stem.name}-x.npy"), stem.with_name(f"{stem.name}-weights.npz")
    out = stem.with_name(f"{stem.name}.npz")
    np.save(x_file, x.astype(np.float32))
    np.savez(weights_file, **{key: value.astype(np.float32) for key, value in weights.items()})
    for stale in (out, out.with_name(out.name + ".error")):
        stale.unlink(missing_ok=True)
    return {"kind": "inference", "name": f"{workload.name} {layer['name']} ({check})", "layer": layer["name"],
            "model": model, "recipe": dict(constant_rate(workload.recipe), batch_size=BATCH),
            "task": workload.study_meta["task"], "x": str(x_file), "weights": str(weights_file), "seed": SEED,
            "out": str(out)}


def batchnorm_model(layer: dict) -> dict:
    """The BatchNorm check's model: a BatchNorm layer with `layer`'s settings, then an identity dense layer."""
    return ir.model(BATCHNORM_SHAPE, "float32", [ir.batchnorm(layer["momentum"], layer["epsilon"]), ir.flatten(),
                                                 ir.dense(int(np.prod(BATCHNORM_SHAPE)))])


def batchnorm_rows(request: dict, output: np.ndarray) -> list[dict]:
    """The BatchNorm layer's inference output against gamma (x - moving_mean) / sqrt(moving_var + epsilon)
    + beta in float64, relative to its largest magnitude, at the outputs' tolerance."""
    epsilon = request["model"]["layers"][0]["epsilon"]
    with np.load(request["weights"]) as loaded:
        w = {key.split("/")[1]: loaded[key].astype(np.float64) for key in loaded.files if key.startswith("batchnorm")}
    x = np.load(request["x"]).astype(np.float64)
    expected = w["gamma"] * (x - w["moving_mean"]) / np.sqrt(w["moving_var"] + epsilon) + w["beta"]
    expected = expected.reshape(len(x), -1)
    deviation = _max_abs(np.asarray(output).reshape(expected.shape), expected)
    scale = float(np.max(np.abs(expected)))
    return [{"tensor": f"batchnorm/{request['layer']}/inference", "kind": "output", "tolerance": TOLERANCES["output"],
             "max_abs": deviation, "max_rel": deviation / scale,
             "passed": bool(deviation / scale <= TOLERANCES["output"])}]


def epsilon_requests(workload: Workload, folder: Path) -> list[dict]:
    """The epsilon checks of the workload's normalisation layers: BatchNorm's, then the layer and RMS
    normalisations'."""
    return batchnorm_requests(workload, folder) + norm_requests(workload, folder)


def epsilon_model(layer: dict) -> dict:
    """The epsilon check's model for a BatchNorm, layer- or RMS-normalisation layer with `layer`'s settings."""
    return batchnorm_model(layer) if layer["type"] == "batchnorm" else norm_model(layer)


def epsilon_rows(request: dict, output: np.ndarray) -> list[dict]:
    """An epsilon check's output judged by its layer type's formula."""
    if request["model"]["layers"][0]["type"] == "batchnorm":
        return batchnorm_rows(request, output)
    return norm_rows(request, output)


# the normalisations over the last axis whose epsilon norm_requests checks, by type: their constructor
NORMS = {"layer_norm": ir.layer_norm, "rms_norm": ir.rms_norm}


def norm_requests(workload: Workload, folder: Path) -> list[dict]:
    """A probe for each layer or RMS normalisation of the workload: the layer alone (with its epsilon), then an
    identity dense layer, in inference mode on LAYER_NORM_SHAPE inputs whose variance over the features (a
    layer normalisation's) or mean square (an RMS normalisation's: no offset added) is of epsilon's scale
    (0.25 to 4 times it), where epsilon dominates; in a model its input's can be so much larger that a wrong
    epsilon hides in float32's rounding (norm_rows)."""
    requests = []
    for layer, _, _ in ir.all_shapes(workload.model()):
        kind = layer["type"]
        if kind not in NORMS:
            continue
        name = f"{workload.name}-{layer['name']}-{kind.replace('_', '-')}"
        rng = np.random.RandomState(SEED)
        steps, features = LAYER_NORM_SHAPE
        weights = {f"{kind}_1/gamma": rng.uniform(0.5, 1.5, features),
                   "dense_1/kernel": np.eye(steps * features), "dense_1/bias": np.zeros(steps * features)}
        offset = np.zeros((BATCH, steps, 1))
        if kind == "layer_norm":
            weights[f"{kind}_1/beta"] = rng.uniform(-0.1, 0.1, features)
            offset = rng.uniform(-0.1, 0.1, (BATCH, steps, 1))
        spread = np.sqrt(layer["epsilon"] * rng.uniform(0.25, 4.0, (BATCH, steps, 1)))
        x = offset + spread * rng.standard_normal((BATCH, *LAYER_NORM_SHAPE))
        requests.append(_layer_request(workload, folder / name, layer, kind, norm_model(layer), x, weights))
    return requests


def norm_model(layer: dict) -> dict:
    """The normalisation check's model: a layer of `layer`'s type with its epsilon, then an identity dense layer."""
    norm = NORMS[layer["type"]](layer["epsilon"])
    return ir.model(LAYER_NORM_SHAPE, "float32", [norm, ir.flatten(), ir.dense(int(np.prod(LAYER_NORM_SHAPE)))])


def norm_rows(request: dict, output: np.ndarray) -> list[dict]:
    """The normalisation's output against its formula over the last axis in float64, relative to its largest
    magnitude, at the outputs' tolerance: (x - mean) / sqrt(var + epsilon) * gamma + beta (biased variance) for
    a layer normalisation, x / sqrt(mean(x^2) + epsilon) * gamma for an RMS normalisation."""
    layer = request["model"]["layers"][0]
    kind, epsilon = layer["type"], layer["epsilon"]
    with np.load(request["weights"]) as loaded:
        w = {key.split("/")[1]: loaded[key].astype(np.float64) for key in loaded.files if key.startswith(kind)}
    x = np.load(request["x"]).astype(np.float64)
    if kind == "layer_norm":
        centred = x - x.mean(axis=-1, keepdims=True)
        expected = centred / np.sqrt((centred ** 2).mean(axis=-1, keepdims=True) + epsilon) * w["gamma"] + w["beta"]
    elif kind == "rms_norm":
        expected = x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + epsilon) * w["gamma"]
    else:
        raise ValueError(f"no epsilon formula for layer type {kind!r}")
    expected = expected.reshape(len(x), -1)
    deviation = _max_abs(np.asarray(output).reshape(expected.shape), expected)
    scale = float(np.max(np.abs(expected)))
    return [{"tensor": f"{kind}/{request['layer']}/inference", "kind": "output",
             "tolerance": TOLERANCES["output"], "max_abs": deviation, "max_rel": deviation / scale,
             "passed": bool(deviation / scale <= TOLERANCES["output"])}]


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
    """Runs dlbench.worker.probe once in the framework's environment for every request, in order. Compiled
    code is shared by every probe of one workdir (its compile cache): certification times nothing, so
    a warm cache changes no verdict. A failed probe raises CertifyError, or, when `failures` is a dict,
    gives empty arrays and its error's last line under its index there (power.py's changed models)."""
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


def reference_probes(workloads: list[Workload], workdir: Path) -> dict[str, tuple[dict, dict]]:
    """The reference's probes of each workload, in float32 and float64, from one process."""
    arrays = probe_many(envs.REFERENCE, [(w, exact) for w in workloads for exact in (False, True)], workdir)
    return {w.name: (served_as_forward(arrays[2 * i]), served_as_forward(arrays[2 * i + 1]))
            for i, w in enumerate(workloads)}


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


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0))


NORMALISING = ("adam", "adamw")  # optimisers whose step divides the gradient by its own size plus epsilon


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
    rounding = max(_max_abs(candidate[key], exact[key]), _max_abs(reference[key], exact[key]))
    epsilon = config["epsilon"]
    return STEPS * config["lr"] * epsilon / (np.abs(exact[key]) + epsilon) ** 2 * rounding


def compare(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray],
            start: dict[str, np.ndarray] | None = None, exact: dict[str, np.ndarray] | None = None,
            optimizer_config: dict | None = None) -> list[dict]:
    """One row per reference tensor; a tensor the candidate lacks or shapes differently fails.
    `start` holds the canonical weights the steps began from; `exact`, the reference in float64;
    `optimizer_config`, the recipe's optimiser that made the steps."""
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
                allowance = amplified_rounding(name, reference, candidate, exact, optimizer_config)
                if allowance is not None and not row["passed"]:
                    each = np.abs(got.astype(np.float64) - exact[name])
                    row.update(amplified_rounding=float(allowance.max()),
                               passed=bool(np.all(each <= NOISE_FACTOR * (noise + allowance))))
        rows.append(row)
    return rows


def share_of_tolerance(row: dict) -> float:
    if row["max_abs"] is None:
        return float("inf")
    return 0.0 if row["max_abs"] <= ABSOLUTE_FLOOR else row["max_rel"] / row["tolerance"]


def certificate(framework: str, workload: Workload, rows: list[dict]) -> dict:
    worst = max(rows, key=lambda row: (not row["passed"], share_of_tolerance(row)))
    env, reference_env = envs.require(framework), envs.require(envs.REFERENCE)
    return {
        "framework": envs.framework_name(framework), "framework_version": env.version(),
        "framework_env": env.packages_digest(),
        "reference": envs.REFERENCE, "reference_version": reference_env.version(), "workload": workload.name,
        "passed": all(r["passed"] for r in rows), "worst_tensor": worst["tensor"],
        "worst_scaled_deviation": worst["max_rel"], "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "deviations": rows, "worker_source": sources.framework_source(framework),
        "reference_source": sources.framework_source(envs.REFERENCE), "workload_digest": workload_digest(workload),
    }


def certify(frameworks: list[str], workloads: list[Workload], store: Store, workdir: Path,
            progress: Callable[[dict], None], reference: dict[str, tuple[dict, dict]] | None = None) -> list[dict]:
    """Certifies every framework x workload pair against the reference and stores each certificate.
    One probe process per framework serves all the workloads. `reference`, the reference's probes
    (reference_probes) of these workloads, when already at hand."""
    for framework in [envs.REFERENCE, *frameworks]:
        envs.require(framework)
    if reference is None:
        reference = reference_probes(workloads, workdir)
    results = []
    for framework in frameworks:
        folder = probe_folder(framework, workdir)
        dropout = {workload.name: dropout_requests(workload, folder) for workload in workloads}
        optimizer_checks = {workload.name: optimizer_requests(workload, folder) for workload in workloads}
        batchnorm = {workload.name: epsilon_requests(workload, folder) for workload in workloads}
        weight_probes = [weights_request(workload, folder, False) for workload in workloads]
        arrays = run_probes(framework, weight_probes + [r for w in workloads for r in dropout[w.name]]
                            + [r for w in workloads for r in batchnorm[w.name]]
                            + [r for w in workloads for _, r in optimizer_checks[w.name]], workdir)
        outputs = iter(arrays[len(workloads):])
        dropout_outputs = [[next(outputs) for _ in dropout[w.name]] for w in workloads]
        batchnorm_outputs = [[next(outputs) for _ in batchnorm[w.name]] for w in workloads]
        for workload, candidate, dropped, normed in zip(workloads, arrays[:len(workloads)], dropout_outputs,
                                                         batchnorm_outputs, strict=True):
            float32, exact = reference[workload.name]
            start = canonical_init(certified_model(workload), SEED)
            rows = compare(float32, candidate, start, exact, workload.recipe["optimizer"])
            for request, output in zip(dropout[workload.name], dropped, strict=True):
                rows += dropout_rows(request, output["output"])
            for request, output in zip(batchnorm[workload.name], normed, strict=True):
                rows += epsilon_rows(request, output["output"])
            for check, _ in optimizer_checks[workload.name]:
                rows += optimizer.rows(check, next(outputs))
            cert = certificate(framework, workload, rows)
            store.save_certificate(cert)
            progress(cert)
            results.append(cert)
    return results
