"""Checks of one layer's settings on a model of that layer alone, where the whole model's comparison (probes.py)
cannot see them. Each is a request for the worker's probe (dlbench.worker.probe) and the rows that judge its
output against the layer's formula in float64:

- "dropout": a dropout layer's rate, scaling and independence of masks, from its output on ones in training
  mode (the whole-model probes run with dropout off: certified_model.without_dropout);
- "attention_dropout": attention's dropout likewise, on the attention weights it drops (attention_dropout_model);
- "batchnorm", "layer_norm", "rms_norm": a normalisation's epsilon, on inputs of its scale, where it dominates (in
  a model, inputs can be so much larger that a wrong epsilon hides in float32's rounding);
- "activation": an activation function on a grid of inputs, element by element (the exact GELU against its tanh
  form strays by 1.6 to 2.2 times the outputs' tolerance in a model, 18 times this check's).

`requests` gives a workload's checks, `rows` judges one check's output, `rebuilt` makes a check's request again
from a changed layer (power.py, which runs a changed reference against the true rows).
"""
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy.special import erf

from dlbench.harness.certification.terms import ABSOLUTE_FLOOR, BATCH, SEED, TOLERANCES, constant_rate, max_abs
from dlbench.harness.plan.workloads import Workload
from dlbench.shared import ir

# Dropout (dropout_rows): each dropout layer's rate, on this many elements of ones in training mode. The share of
# zeros has a binomial standard deviation of at most 0.001 there; it may stray DROPOUT_Z of them (a correct layer
# fails one check in about 1.7 million), and a rate off by a tenth of itself fails.
DROPOUT_ELEMENTS = 2 ** 18
DROPOUT_Z = 5.0
DROPOUT_SCALE_TOLERANCE = 1e-5  # kept values 1/(1-rate), up to float32 rounding of the scale
DROPOUT_SHAPES = {1: (128,), 2: (8, 32), 3: (4, 4, 16)}  # an input of each rank the workloads drop out
# Attention's dropout is checked on this many steps: a power of two, so that uniform attention weights 1/steps
# are exact in float32
ATTENTION_STEPS = 8
# BatchNorm's epsilon is added to variances that, in the workloads, are far larger: it is checked on its own,
# on inputs of this shape whose moving variances are of its scale (batchnorm_rows)
BATCHNORM_SHAPE = (2, 2, 4)
# Layer and RMS normalisation's epsilon likewise (norm_rows), on (steps, features) inputs of this shape whose
# variance (mean square) over the features is of epsilon's scale
LAYER_NORM_SHAPE = (4, 8)
# An activation is checked on this grid of inputs, as (ACTIVATION_ROWS, ACTIVATION_GRID / ACTIVATION_ROWS) samples
ACTIVATION_GRID = np.linspace(-8.0, 8.0, 4096)
ACTIVATION_ROWS = 64
ACTIVATIONS = {  # each IR activation's formula in float64
    "relu": lambda x: np.maximum(x, 0.0),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "gelu": lambda x: x * 0.5 * (1.0 + erf(x / np.sqrt(2.0))),
}


def requests(workload: Workload, folder: Path) -> list[dict]:
    """Every layer check of the workload, in a fixed order: dropout's, the normalisations' epsilon, activations."""
    return (dropout_requests(workload, folder) + batchnorm_requests(workload, folder)
            + norm_requests(workload, folder) + activation_requests(workload, folder))


def rows(request: dict, output: np.ndarray) -> list[dict]:
    """A check's output judged by its layer's formula."""
    return _lookup(ROWS, "layer check", request["check"])(request, output)


def rebuilt(request: dict, layer: dict) -> dict:
    """The check's request with its model made from `layer`, the checked layer with (maybe) changed settings."""
    return dict(request, model=_lookup(MODELS, "layer check", request["check"])(layer, request))


# ---- dropout ----------------------------------------------------------------------------------------------------

def dropout_model(rate: float, shape: tuple[int, ...]) -> dict:
    """One dropout layer on an input of `shape`, then a dense layer that the identity passes through (an image
    is flattened first): the model's output in training mode is the dropout layer's."""
    layers = [ir.dropout(rate), *([ir.flatten()] if len(shape) == 3 else []), ir.dense(_dropout_units(shape))]
    return ir.model(shape, "float32", layers)


def _dropout_units(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape)) if len(shape) == 3 else shape[-1]


def attention_dropout_model(heads: int, rate: float) -> dict:
    """Attention of `heads` heads over ATTENTION_STEPS steps of heads x ATTENTION_STEPS features, not causal, with
    dropout `rate`, then an identity dense layer. With zero query and key kernels every attention weight is
    1 / steps; with identity value and output kernels, and step j's input the one-hot of j in every head's
    columns, output (i, h * steps + j) is head h's weight of key j for query i after dropout."""
    features = heads * ATTENTION_STEPS
    return ir.model((ATTENTION_STEPS, features), "float32",
                    [ir.attention(heads, causal=False, dropout=rate), ir.dense(features)])


def dropout_requests(workload: Workload, folder: Path) -> list[dict]:
    """A dropout check for each dropout layer of the workload, on an input of its rank, and for each attention
    layer that drops its weights."""
    found = []
    for layer, in_shape, _ in ir.all_shapes(workload.model()):  # a residual block's own layers too
        if layer["type"] == "dropout" and layer["rate"] > 0:
            found.append(_dropout_request(workload, folder, layer, DROPOUT_SHAPES[len(in_shape)]))
        elif layer["type"] == "attention" and layer["dropout"] > 0:
            found.append(_attention_dropout_request(workload, folder, layer))
    return found


def _dropout_request(workload: Workload, folder: Path, layer: dict, shape: tuple[int, ...]) -> dict:
    units, count = _dropout_units(shape), DROPOUT_ELEMENTS // int(np.prod(shape))
    stem = folder / f"{workload.name}-{layer['name']}-dropout"
    weights = {"dense_1/kernel": np.eye(units), "dense_1/bias": np.zeros(units)}
    request = _request(workload, stem, layer, "dropout", dropout_model(layer["rate"], shape),
                       np.ones((count, *shape)), weights)
    return dict(request, kind="dropout", rate=layer["rate"], shape=list(shape), kept=1.0)


def _attention_dropout_request(workload: Workload, folder: Path, layer: dict) -> dict:
    heads, steps = layer["heads"], ATTENTION_STEPS
    features = heads * steps
    count = DROPOUT_ELEMENTS // (steps * features)
    x = np.zeros((count, steps, features))
    for head in range(heads):
        x[:, np.arange(steps), head * steps + np.arange(steps)] = 1.0
    weights = {f"attention_1/{part}_{kind}": (np.eye(features) if part in ("value", "output") else
                                              np.zeros((features, features))) if kind == "kernel" else
               np.zeros(features) for part in ir.ATTENTION_PARTS for kind in ("kernel", "bias")}
    weights.update({"dense_1/kernel": np.eye(features), "dense_1/bias": np.zeros(features)})
    stem = folder / f"{workload.name}-{layer['name']}-attention-dropout"
    request = _request(workload, stem, layer, "attention_dropout", attention_dropout_model(heads, layer["dropout"]),
                       x, weights)
    # output (query, head, key), each kept weight 1 / steps before dropout's scaling
    return dict(request, kind="dropout", rate=layer["dropout"], shape=[steps, heads, steps], kept=1.0 / steps)


def dropout_rows(request: dict, output: np.ndarray) -> list[dict]:
    """The dropped values (the output over the value each kept one had before dropout), judged: the share of
    zeros is the rate within DROPOUT_Z binomial standard deviations; every kept value is 1/(1-rate); no line
    along any axis is dropped whole more often than independent masks would drop it (channel-wise, time- or
    head-shared masks would)."""
    rate, shape = request["rate"], tuple(request["shape"])
    values = np.asarray(output, np.float64).reshape(-1, *shape) / request["kept"]
    dropped = values == 0
    prefix = f"dropout/{request['layer']}/"
    share = float(dropped.mean())
    allowed = DROPOUT_Z * np.sqrt(rate * (1 - rate) / dropped.size)
    found = [_dropout_row(prefix + "zeros", abs(share - rate), rate, allowed)]
    scale = 1 / (1 - rate)
    kept = values[~dropped]
    found.append(_dropout_row(prefix + "scale", float(np.max(np.abs(kept - scale), initial=0.0)), scale,
                              DROPOUT_SCALE_TOLERANCE * scale))
    # For each axis, the share of lines along it that are all zeros, over what independent masks allow;
    # the row shows the axis that comes closest to failing.
    lines = []
    for axis in range(1, values.ndim):
        whole = dropped.all(axis=axis)
        expected = rate ** shape[axis - 1]
        lines.append((float(whole.mean()) - expected, DROPOUT_Z * np.sqrt(expected * (1 - expected) / whole.size)))
    excess, allowed = max(lines, key=lambda line: line[0] - line[1])
    found.append(_dropout_row(prefix + "independence", max(excess, 0.0), rate, allowed))
    return found


def _dropout_row(tensor: str, deviation: float, scale: float, allowed: float) -> dict:
    allowed = max(allowed, ABSOLUTE_FLOOR * scale)  # independent masks all but never drop a long line whole
    return {"tensor": tensor, "kind": "dropout", "tolerance": allowed / scale, "max_abs": deviation,
            "max_rel": deviation / scale, "passed": bool(deviation <= allowed)}


# ---- the normalisations' epsilon ----------------------------------------------------------------------------------

def batchnorm_requests(workload: Workload, folder: Path) -> list[dict]:
    """A BatchNorm check for each BatchNorm layer of the workload: the layer alone (with its momentum and
    epsilon), then an identity dense layer, in inference mode on BATCHNORM_SHAPE inputs, from moving
    variances of epsilon's scale, where epsilon dominates (batchnorm_rows)."""
    found = []
    for layer, _, _ in ir.all_shapes(workload.model()):  # a residual block's own layers too
        if layer["type"] != "batchnorm":
            continue
        rng = np.random.RandomState(SEED)
        channels, units = BATCHNORM_SHAPE[-1], int(np.prod(BATCHNORM_SHAPE))
        weights = {"batchnorm_1/gamma": rng.uniform(0.5, 1.5, channels),
                   "batchnorm_1/beta": rng.uniform(-0.1, 0.1, channels),
                   "batchnorm_1/moving_mean": rng.uniform(-0.1, 0.1, channels),
                   "batchnorm_1/moving_var": layer["epsilon"] * rng.uniform(0.5, 2.0, channels),
                   "dense_1/kernel": np.eye(units), "dense_1/bias": np.zeros(units)}
        x = rng.standard_normal((BATCH, *BATCHNORM_SHAPE))
        stem = folder / f"{workload.name}-{layer['name']}-batchnorm"
        found.append(_request(workload, stem, layer, "batchnorm", batchnorm_model(layer), x, weights))
    return found


def batchnorm_model(layer: dict, request: dict | None = None) -> dict:
    """The BatchNorm check's model: a BatchNorm layer with `layer`'s settings, then an identity dense layer."""
    return ir.model(BATCHNORM_SHAPE, "float32", [ir.batchnorm(layer["momentum"], layer["epsilon"]), ir.flatten(),
                                                 ir.dense(int(np.prod(BATCHNORM_SHAPE)))])


def batchnorm_rows(request: dict, output: np.ndarray) -> list[dict]:
    """The BatchNorm layer's inference output against gamma (x - moving_mean) / sqrt(moving_var + epsilon)
    + beta in float64, relative to its largest magnitude, at the outputs' tolerance."""
    epsilon = request["model"]["layers"][0]["epsilon"]
    w = _weights_of(request, "batchnorm")
    x = np.load(request["x"]).astype(np.float64)
    expected = w["gamma"] * (x - w["moving_mean"]) / np.sqrt(w["moving_var"] + epsilon) + w["beta"]
    return [_output_row(f"batchnorm/{request['layer']}/inference", output, expected.reshape(len(x), -1))]


# the normalisations over the last axis whose epsilon norm_requests checks, by type: their constructor
NORMS = {"layer_norm": ir.layer_norm, "rms_norm": ir.rms_norm}


def norm_requests(workload: Workload, folder: Path) -> list[dict]:
    """A check for each layer or RMS normalisation of the workload: the layer alone (with its epsilon), then an
    identity dense layer, in inference mode on LAYER_NORM_SHAPE inputs whose variance over the features (a
    layer normalisation's) or mean square (an RMS normalisation's: no offset added) is of epsilon's scale
    (0.25 to 4 times it), where epsilon dominates (norm_rows)."""
    found = []
    for layer, _, _ in ir.all_shapes(workload.model()):
        kind = layer["type"]
        if kind not in NORMS:
            continue
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
        stem = folder / f"{workload.name}-{layer['name']}-{kind.replace('_', '-')}"
        found.append(_request(workload, stem, layer, kind, norm_model(layer), x, weights))
    return found


def norm_model(layer: dict, request: dict | None = None) -> dict:
    """The normalisation check's model: a layer of `layer`'s type with its epsilon, then an identity dense layer."""
    norm = _lookup(NORMS, "normalisation", layer["type"])(layer["epsilon"])
    return ir.model(LAYER_NORM_SHAPE, "float32", [norm, ir.flatten(), ir.dense(int(np.prod(LAYER_NORM_SHAPE)))])


def norm_rows(request: dict, output: np.ndarray) -> list[dict]:
    """The normalisation's output against its formula over the last axis in float64, relative to its largest
    magnitude, at the outputs' tolerance: (x - mean) / sqrt(var + epsilon) * gamma + beta (biased variance) for
    a layer normalisation, x / sqrt(mean(x^2) + epsilon) * gamma for an RMS normalisation."""
    kind, epsilon = request["check"], request["model"]["layers"][0]["epsilon"]
    w = _weights_of(request, kind)
    x = np.load(request["x"]).astype(np.float64)
    if kind == "layer_norm":
        centred = x - x.mean(axis=-1, keepdims=True)
        expected = centred / np.sqrt((centred ** 2).mean(axis=-1, keepdims=True) + epsilon) * w["gamma"] + w["beta"]
    else:  # rms_norm: rows() reaches here for NORMS' two kinds alone
        expected = x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + epsilon) * w["gamma"]
    return [_output_row(f"{kind}/{request['layer']}/inference", output, expected.reshape(len(x), -1))]


def _weights_of(request: dict, prefix: str) -> dict[str, np.ndarray]:
    """The checked layer's weights in the request's file, by their own names, in float64."""
    with np.load(request["weights"]) as loaded:
        return {key.split("/")[1]: loaded[key].astype(np.float64) for key in loaded.files if key.startswith(prefix)}


def _output_row(tensor: str, output: np.ndarray, expected: np.ndarray) -> dict:
    """An inference output against its float64 formula, relative to its largest magnitude, at the outputs'
    tolerance."""
    deviation = max_abs(np.asarray(output).reshape(expected.shape), expected)
    scale = float(np.max(np.abs(expected)))
    return {"tensor": tensor, "kind": "output", "tolerance": TOLERANCES["output"], "max_abs": deviation,
            "max_rel": deviation / scale, "passed": bool(deviation / scale <= TOLERANCES["output"])}


# ---- activations --------------------------------------------------------------------------------------------------

def activation_requests(workload: Workload, folder: Path) -> list[dict]:
    """A check for each activation function the workload uses, named after its first layer: the function alone,
    then an identity dense layer, in inference mode on ACTIVATION_GRID (activation_rows)."""
    found = {}
    for layer, _, _ in ir.all_shapes(workload.model()):
        if layer["type"] == "activation" and layer["fn"] not in found:
            x = ACTIVATION_GRID.reshape(ACTIVATION_ROWS, -1)
            units = x.shape[1]
            weights = {"dense_1/kernel": np.eye(units), "dense_1/bias": np.zeros(units)}
            stem = folder / f"{workload.name}-{layer['fn']}-activation"
            request = _request(workload, stem, layer, "activation", activation_model(layer), x, weights)
            found[layer["fn"]] = dict(request, fn=layer["fn"])
    return list(found.values())


def activation_model(layer: dict, request: dict | None = None) -> dict:
    """The activation check's model: `layer`'s function, then an identity dense layer."""
    units = ACTIVATION_GRID.size // ACTIVATION_ROWS
    return ir.model((units,), "float32", [ir.activation(layer["fn"]), ir.dense(units)])


def activation_rows(request: dict, output: np.ndarray) -> list[dict]:
    """The function's outputs against its formula in float64, each deviation relative to its input's magnitude
    (at least 1): float32's rounding of a correct function is about 1e-7 of it, and the tolerance, 1e-5, is
    18 times below how far the tanh form of GELU strays from the exact one."""
    x = np.load(request["x"]).astype(np.float64)
    expected = _lookup(ACTIVATIONS, "activation", request["fn"])(x)
    each = np.abs(np.asarray(output, np.float64).reshape(x.shape) - expected) / np.maximum(np.abs(x), 1.0)
    worst = float(each.max())
    return [{"tensor": f"activation/{request['fn']}", "kind": "activation", "tolerance": TOLERANCES["activation"],
             "max_abs": worst, "max_rel": worst, "passed": bool(worst <= TOLERANCES["activation"])}]


# ---- the requests ------------------------------------------------------------------------------------------------

def _request(workload: Workload, stem: Path, layer: dict, check: str, model: dict, x: np.ndarray,
             weights: dict) -> dict:
    """An inference probe of one layer's check: its inputs and weights written beside `stem` (float32), an
    earlier output of the same name removed, the request the worker runs."""
    x_file, weights_file = stem.with_name(f"{stem.name}-x.npy"), stem.with_name(f"{stem.name}-weights.npz")
    out = stem.with_name(f"{stem.name}.npz")
    np.save(x_file, x.astype(np.float32))
    np.savez(weights_file, **{key: value.astype(np.float32) for key, value in weights.items()})
    for stale in (out, out.with_name(out.name + ".error")):
        stale.unlink(missing_ok=True)
    recipe, task = dict(constant_rate(workload.recipe), batch_size=BATCH), workload.study_meta["task"]
    if task == "detection":  # a detector's losses need its image pipeline: a layer alone is a classifier's
        recipe, task = dict(recipe, loss="softmax_cross_entropy"), "classification"
    return {"kind": "inference", "check": check, "name": f"{workload.name} {layer['name']} ({check})",
            "layer": layer["name"], "model": model, "recipe": recipe, "task": task, "x": str(x_file),
            "weights": str(weights_file), "seed": SEED, "out": str(out)}


def _lookup(table: dict, what: str, name: str):
    """table[name]; a name the table lacks raises, naming what it knows (never a default)."""
    if name not in table:
        raise ValueError(f"{what} {name!r} has no entry here; known: {', '.join(sorted(table))}")
    return table[name]


def _dropout_check_model(layer: dict, request: dict) -> dict:
    return dropout_model(layer["rate"], tuple(request["shape"]))


def _attention_dropout_check_model(layer: dict, request: dict) -> dict:
    """The check's heads stay the request's (its inputs' width): the check is of the layer's dropout."""
    return attention_dropout_model(request["shape"][1], layer["dropout"])


# each check's model from its layer, and its judge
MODELS: dict[str, Callable[[dict, dict], dict]] = {
    "dropout": _dropout_check_model, "attention_dropout": _attention_dropout_check_model,
    "batchnorm": batchnorm_model, "layer_norm": norm_model, "rms_norm": norm_model, "activation": activation_model}
ROWS: dict[str, Callable[[dict, np.ndarray], list[dict]]] = {
    "dropout": dropout_rows, "attention_dropout": dropout_rows, "batchnorm": batchnorm_rows,
    "layer_norm": norm_rows, "rms_norm": norm_rows, "activation": activation_rows}
