"""The contract every framework adapter implements, and the pieces they all share.

Worker side: Python 3.8, numpy alone. An adapter module defines `Adapter`, a subclass of
`BaseAdapter`, and imports its framework; nothing here does.
"""
from __future__ import annotations

import math
import os
import time
from collections import namedtuple
from typing import Dict, Iterator

import numpy as np

from dlbench.shared import schedule as schedules
from dlbench.shared.ir import LOSSES
from dlbench.shared.recipe import OPTIMIZER_SETTINGS

# the losses over a sequence's tokens (labels (batch, steps)), whose metrics add perplexity
SEQUENCE_LOSSES = ("sequence_softmax_cross_entropy", "masked_sequence_softmax_cross_entropy")
DEVICES = ("cpu", "gpu")  # a cell's device; every adapter's device code has a branch for each
PIXEL_SCALE = 255.0  # every image dataset's input_scale (its meta): uint8 pixels -> [0, 1]


def not_built(what: str, name: str) -> NotImplementedError:
    """The error for a layer type, activation, padding or loss the IR declares, an optimizer OPTIMIZER_SETTINGS
    names, or a learning-rate schedule shared/schedule.py names, that an adapter has no code for (its
    build, its weights' mapping or its metrics): raised, so that no other one ever stands in for it. Every
    dispatch on such a name lists its known cases and ends in this, never in a default branch."""
    return NotImplementedError("%s %r: this adapter does not build it" % (what, name))


def lookup(table: dict, what: str, name: str):
    """table[name], else not_built's error naming it."""
    if name not in table:
        raise not_built(what, name)
    return table[name]


class LayerEntry(namedtuple("LayerEntry", "build weights")):
    """One IR layer kind in one framework, an entry of the package's layer table (`LAYERS` in its layers.py,
    keyed by the kind): `build` makes or applies the layer the framework's way; `weights` maps the built
    layer's native parameters to the canonical names and layouts of shared/ir.param_shapes and back, and is
    None exactly for the kinds without weights (ir.WEIGHTLESS). A kind the table lacks is refused by name
    (`lookup`), and one the framework cannot build is listed in the package's `REFUSED` with the reason;
    tests/test_adapter_tables.py holds every package to the IR's kinds."""


# How an adapter runs its framework (a recipe's "execution"): op by op from Python ("eager"), as a graph the
# framework builds and runs whole without a compiler of its own ("graph": tf.function without XLA, MXNet's
# hybridize), or compiled ("compiled": torch.compile, XLA through tf.function(jit_compile=True) or jax.jit,
# Theano's functions). docs/architecture.md has the table of what each means in each framework.
EXECUTIONS = ("eager", "graph", "compiled")

# The number formats an adapter trains and serves in (a recipe's "precision"): float32 throughout; bfloat16 weights,
# optimiser state and compute ("bfloat16"); float32 weights and optimiser with the forward and backward computed in
# bfloat16 or float16 by the framework's own mixed-precision mechanism ("mixed-bfloat16", "mixed-float16"). In
# every one the logits are cast to float32 before the loss, as Keras's losses and torch.autocast's float32 list do,
# weights go in and out as float32 canonical arrays (a bfloat16 weight exactly as stored), and predictions come
# back as float32. docs/architecture.md has the table of each framework's mechanism.
PRECISIONS = ("float32", "bfloat16", "mixed-bfloat16", "mixed-float16")
# mixed-float16's dynamic loss scaling, the same in every framework (Keras's LossScaleOptimizer defaults, which
# torch's GradScaler is given): the loss is multiplied by the scale before the backward pass, the gradients
# divided by it; a step whose gradients hold an inf or nan is skipped and the scale halved; after this many
# finite steps in a row it doubles.
LOSS_SCALE = {"initial": 2.0 ** 15, "growth_interval": 2000, "growth_factor": 2.0, "backoff_factor": 0.5}


def recipe_precision(recipe: dict) -> str:
    """The number format the recipe asks for (PRECISIONS): its "precision", float32 where it names none."""
    return recipe.get("precision", "float32")


def recipe_dtype(recipe: dict) -> str:
    """The float type the recipe asks for: its "dtype", float32 where it names none."""
    return recipe.get("dtype", "float32")


class Layout(namedtuple("Layout", "to_native to_canonical")):
    """How one layer kind's canonical weights become a framework's and back: each a function (canonical key,
    array) -> array."""


class NativeWeights(namedtuple("NativeWeights", "params layout")):
    """A LayerEntry's weights in a framework whose layouts differ from the canonical ones: `params(built layer)`
    gives its native tensors by canonical key, `layout` (a Layout) converts them."""


def _as_is(key: str, value: np.ndarray) -> np.ndarray:
    return value


def _kernels_transposed(key: str, value: np.ndarray) -> np.ndarray:
    return value.T if key.endswith("kernel") else value  # every (in, out) kernel <-> (out, in); its own inverse


def _hwio_to_oihw(key: str, value: np.ndarray) -> np.ndarray:
    return value.transpose(3, 2, 0, 1) if key == "kernel" else value


def _oihw_to_hwio(key: str, value: np.ndarray) -> np.ndarray:
    return value.transpose(2, 3, 1, 0) if key == "kernel" else value


# the layouts of the frameworks that keep kernels (out, in) and convolutions OIHW (PyTorch, MXNet's Gluon,
# Chainer); the LSTM's fused gates i, f, g, o stay in that order (PyTorch's and MXNet's own; Chainer reorders them)
AS_CANONICAL = Layout(_as_is, _as_is)
OUT_IN = Layout(_kernels_transposed, _kernels_transposed)
OIHW = Layout(_hwio_to_oihw, _oihw_to_hwio)


def native_weights(table: dict, kind: str) -> NativeWeights:
    """The NativeWeights of `kind`'s entry in a layer table; a kind without weights has none to map."""
    weights = lookup(table, "weights of layer type", kind).weights
    if weights is None:
        raise not_built("weights of layer type", kind)
    return weights


def rotary_tables(steps: int, size: int, base: float) -> "tuple[np.ndarray, np.ndarray]":
    """cos and sin of grouped_query_attention's rotary angles (shared/ir.py), (steps, dk) in float64: for step t and
    pair i < dk / 2 the angle t * base ** (-2 i / dk), in column i and again in column i + dk / 2 (the "rotate
    half" pairing). Every adapter builds its tables from these, once per model, in its own type and layout."""
    inverse = base ** (-np.arange(0, size, 2, dtype=np.float64) / size)
    angles = np.outer(np.arange(steps, dtype=np.float64), inverse)
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles), np.sin(angles)


def sibling_module(adapter_path: str, name: str) -> str:
    """The module `name` in the package of the adapter `adapter_path` ("package.adapter:Adapter" ->
    "package.name"): each framework's detector and GEMM peak live beside its adapter."""
    return "%s.%s" % (adapter_path.partition(":")[0].rpartition(".")[0], name)


def thread_budget() -> int:
    """The cell's thread count, for frameworks that fix theirs when they load: DLBENCH_THREADS, which
    the harness sets for every worker; the machine's cores where it is unset or not a positive integer."""
    try:
        threads = int(os.environ.get("DLBENCH_THREADS") or 0)
    except ValueError:
        threads = 0
    return threads if threads > 0 else (os.cpu_count() or 1)


def compile_cache(default):
    """Where a framework keeps the code it compiles: DLBENCH_COMPILE_CACHE, which the harness sets for
    processes that time nothing (certification probes, tests) so that they compile once, and for the
    measured runs of a suite with compile_cache: shared (each run records whether it found it warm); else
    `default`, inside the run's own folder, cold in every measured run."""
    return os.environ.get("DLBENCH_COMPILE_CACHE") or default


class Split(object):
    """One split of a prepared dataset: inputs as stored (uint8 pixels or int token ids) and labels."""

    def __init__(self, x: np.ndarray, y: np.ndarray, input_scale=None):
        self.x = x
        self.y = y
        self.input_scale = input_scale  # divide inputs by this to get floats (pixels: 255 -> [0, 1])

    def __len__(self) -> int:
        return len(self.x)


def batch_slices(count: int, batch_size: int) -> Iterator[slice]:
    """Consecutive batches over an epoch's order; the last one may be smaller (nothing is dropped)."""
    for start in range(0, count, batch_size):
        yield slice(start, min(start + batch_size, count))


def epoch_order(seed: int, epoch: int, count: int) -> np.ndarray:
    """The sample order of one epoch: the same for every framework, from the seed alone (legacy
    RandomState: its stream is frozen across numpy versions, so old environments agree)."""
    return np.random.RandomState([seed, epoch]).permutation(count).astype(np.int64)


def finish_metrics(loss: str, loss_sum: float, weight: float, correct: float, predictions: float) -> Dict[str, float]:
    """Metrics from sums an adapter accumulates over batches: loss_sum adds each batch's mean loss
    times its weight (samples; unmasked tokens for the masked loss), and correct counts right
    predictions out of `predictions` (samples, tokens, or unmasked tokens)."""
    mean_loss = loss_sum / weight
    metrics = {"loss": mean_loss, "accuracy": correct / predictions}
    if loss in SEQUENCE_LOSSES:
        metrics["perplexity"] = math.exp(min(mean_loss, 700.0))  # exp overflows past ~709
    elif loss not in ("softmax_cross_entropy", "sigmoid_cross_entropy"):  # a new loss must say its metrics
        raise not_built("loss", loss)
    return metrics


class BaseAdapter(object):
    """Builds a framework's native model from the IR and trains it by the recipe.

    Subclasses implement every method below; the worker drives them and reads all clocks itself,
    after calling synchronise(). The one clock an adapter stamps is its first training step's end (step_done)."""

    name = ""
    # time.perf_counter() when the adapter's first training step had finished (step_done); the worker subtracts its
    # first epoch's start, giving the time to the first step: every trace, compilation and first allocation
    first_step_at = None
    # What serving()'s call divides stored pixels by; worker/serve.py sets the served dataset's own.
    input_scale = PIXEL_SCALE
    # The float types a recipe's "dtype" may ask for (certification asks the reference for float64); an
    # adapter that builds float64 says so. Any other is refused: never trained in float32 in its place.
    dtypes = ("float32",)
    # The executions (EXECUTIONS) a recipe's "execution" may ask for, the first the adapter's default (what it
    # ran before the axis existed). Any other is refused: never run in another mode under its name.
    executions = ("eager",)
    # The precisions (PRECISIONS) a recipe's "precision" may ask for, float32 first. Any other is refused: never
    # trained in float32 under its name. A precision other than float32 goes with dtype float32 only.
    precisions = ("float32",)

    def __init__(self, model: dict, recipe: dict, task: str, device: str, threads: int, seed: int):
        if recipe["loss"] not in LOSSES:
            raise ValueError("unknown loss %r; known: %s" % (recipe["loss"], ", ".join(LOSSES)))
        if recipe["optimizer"]["name"] not in OPTIMIZER_SETTINGS:
            raise ValueError("unknown optimizer %r; known: %s" % (recipe["optimizer"]["name"],
                                                                 ", ".join(OPTIMIZER_SETTINGS)))
        if "schedule" in recipe:  # the learning rate's (shared/schedule.py); none: constant
            schedules.validate(recipe["schedule"])
        if recipe_dtype(recipe) not in self.dtypes:
            raise not_built("dtype", recipe_dtype(recipe))
        self.execution = recipe.get("execution", self.executions[0])
        if self.execution not in self.executions:
            raise not_built("execution", self.execution)
        self.precision = recipe_precision(recipe)
        if self.precision not in self.precisions:
            raise not_built("precision", self.precision)
        if self.precision != "float32" and recipe_dtype(recipe) != "float32":
            raise ValueError("precision %r with dtype %r: a reduced precision starts from float32"
                             % (self.precision, recipe_dtype(recipe)))
        if device not in DEVICES:  # the adapters' device code reads anything but "gpu" as the CPU
            raise not_built("device", device)
        self.model_ir = model
        self.recipe = recipe
        self.task = task
        self.device = device
        self.threads = threads
        self.seed = seed

    def versions(self) -> Dict[str, str]:
        """Package name -> version of what the adapter really imported."""
        raise NotImplementedError

    def threads_used(self) -> int:
        raise NotImplementedError

    def set_weights(self, weights: Dict[str, np.ndarray]) -> None:
        raise NotImplementedError

    def get_weights(self) -> Dict[str, np.ndarray]:
        raise NotImplementedError

    def train_epoch(self, data: Split, order: np.ndarray) -> Dict[str, float]:
        """One pass over data in `order`, in batches of the recipe's size; returns loss and accuracy."""
        raise NotImplementedError

    def loss_and_gradients(self, data: Split) -> "tuple[float, Dict[str, np.ndarray]]":
        """The training-mode loss of `data` as one batch, and its gradient for every trainable canonical
        weight (moving statistics excluded), in canonical layout. No optimiser step is taken; a
        training-mode forward may update moving statistics, and a caller that cares restores them."""
        raise NotImplementedError

    def apply_gradients(self, gradients: Dict[str, np.ndarray]) -> None:
        """One optimiser step with these gradients in place of a loss's: every trainable canonical weight's
        (moving statistics excluded), in canonical layout, through the optimiser object and update code
        that train_epoch steps with (the recipe's coupled L2 included). Certification checks each
        optimiser's rule with it on synthetic gradients (optimizer_probe)."""
        raise NotImplementedError

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The model's raw outputs (logits) for a batch of float inputs or token ids, dropout off."""
        raise NotImplementedError

    def training_outputs(self, x: np.ndarray) -> np.ndarray:
        """The model's raw outputs for a batch of float inputs in training mode: dropout on, fresh masks
        from the adapter's seeded generator. No optimiser step. Certification's dropout check calls it
        on models of one dropout layer and a dense layer, which have no moving statistics to update."""
        raise NotImplementedError

    def evaluate(self, data: Split) -> Dict[str, float]:
        """Batched, dropout off, no weight change; returns finish_metrics()."""
        raise NotImplementedError

    def synchronise(self) -> None:
        """Block until queued device work is done, so a clock read after it is true."""
        raise NotImplementedError

    def step_done(self, *outputs) -> None:
        """Called by train_epoch's loop after every training step with what the step returned (state a jitted step
        threads through the loop, which synchronise cannot see). The adapter's first step is waited for and its
        end stamped in first_step_at; every later call returns at once, so the steps after it stay queued."""
        if self.first_step_at is None:
            self.wait_for(outputs)
            self.first_step_at = time.perf_counter()

    def wait_for(self, outputs: tuple) -> None:
        """Block until a step's outputs, and the work queued before them, are done. An adapter whose step leaves
        its result outside what synchronise waits for overrides this."""
        self.synchronise()

    def serving(self):
        """The framework's idiomatic serving path for this model, warmed by nobody yet: a callable f(x) that
        takes a batch of inputs as a split stores them (uint8 pixels, scaled inside by input_scale as
        training scales them; token ids) and returns the model's outputs, those predict returns for the
        scaled batch, as host numpy: nothing of the call is left queued when it returns (worker/serve.py
        times it so)."""
        raise not_built("serving path", self.name or type(self).__name__)
