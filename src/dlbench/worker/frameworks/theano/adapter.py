"""Theano 1.0.5 adapter: the IR as one symbolic graph over theano.shared weights, trained by compiled
theano.function steps; no Lasagne. Optimisers are written out as update lists over shared slots,
with the formulas of the TensorFlow adapter (torch's).

The package: layers.py holds the layer table (each IR kind's symbolic build over its canonical shared
weights) and Model, which applies it; optimizers.py the update lists; losses.py the loss terms and the
batch sums; this module Theano's configuration (flags, threads, BLAS, scan), weights in and out, the
compiled functions and the loops.

Scan. Theano runs a scan through its compiled Cython loop (scan_perform_ext, built into the compile
folder) where that builds, else through the Op's Python loop. It does not build on Python 3.11+
(longintrepr.h moved), where Theano's import of it fails with a compile error instead of an
ImportError; there the module is marked missing before Theano is imported, which makes Theano take
the Python loop. The recipe's Python 3.10 builds it. An adapter of a recurrent model loads the
extension when it is built, records "c" or "python" in versions()["theano-scan"] ("none" for a model
without scan), and every compiled function is checked to have run its scans that way.

BLAS. Theano links its gemm (dense layers, CorrMM convolutions) against blas.ldflags. numpy's wheel
bundles an ILP64 OpenBLAS with suffixed symbols (sgemm_64_), which Theano cannot link; scipy's
wheel (< 1.14) bundles a plain LP64 OpenBLAS (sgemm_), which it can: linked through a symlink in
the compile folder. Measured on 2 cores, one thread, a cnn-mnist-sized conv step: 0.45 s against
0.56 s with Theano's fallback (empty ldflags: gemm through numpy's C API). Without scipy's library
the fallback is used; versions()["theano-blas"] says which.

Threads and files. THEANO_FLAGS is set before Theano is imported: openmp on when the cell has more
than one thread (OpenMP then runs Theano's large elementwise loops and CorrMM's batch loop with
OMP_NUM_THREADS threads, which OpenBLAS reads too; measured at 2 threads, cnn-mnist steady epochs
3.8 s on against 4.1 s off), base_compiledir under HOME, which the harness
points into the run's folder (temporary files follow TMPDIR, also there); processes that time
nothing share one compile folder instead (base.compile_cache). The thread count is taken
at import from DLBENCH_THREADS.

Compilation happens on the first train_epoch / evaluate / predict / loss_and_gradients call, so a
graph's compile time lands in the first epoch (Theano's own import, which builds its small runtime
modules into a cold compile folder, lands in the worker's import time). The compile folder is
cold in every run, so gcc.cxxflags=-g0 drops the debug information Theano asks g++ for: measured on
2 cores, first epochs of 53 s against 61 s (cnn-mnist) and 100 s against 113 s (lstm-imdb), the
steady epochs and results unchanged.
"""
from __future__ import annotations

import ctypes
import glob
import importlib
import os
import sys
from typing import Dict, List

import numpy as np

from dlbench.worker.base import (
    SEQUENCE_LOSSES,
    BaseAdapter,
    Split,
    batch_slices,
    compile_cache,
    finish_metrics,
    lookup,
    thread_budget,
)

SCAN_EXT = "theano.scan_module.scan_perform_ext"
THREADS = thread_budget()
# HOME is in the run's folder; certification probes share one cache (base.compile_cache)
COMPILE_DIR = compile_cache(os.path.join(os.path.expanduser("~"), ".theano"))


def scipy_openblas(link_dir: str) -> str:
    """blas.ldflags for the LP64 OpenBLAS in scipy's wheel, or "" (Theano's numpy-based fallback)."""
    site = os.path.dirname(os.path.dirname(os.path.abspath(np.__file__)))
    for path in sorted(glob.glob(os.path.join(site, "scipy.libs", "libopenblas*.so*"))):
        try:
            if not hasattr(ctypes.CDLL(path), "sgemm_"):
                continue
        except OSError:
            continue
        os.makedirs(link_dir, exist_ok=True)
        # -lopenblas finds the first link; the compiled module then needs the library's own soname
        for name in ("libopenblas.so", os.path.basename(path)):
            link = os.path.join(link_dir, name)
            try:
                os.symlink(path, link)
            except FileExistsError:  # made before, or by a process sharing this compile folder
                pass
        return "-L%s -lopenblas" % link_dir
    return ""


def configure() -> str:
    """THEANO_FLAGS before the import: flags already set are kept, ours come last and win. Returns ldflags."""
    if sys.version_info >= (3, 11):  # the Cython scan cannot build there: take Theano's Python loop
        sys.modules[SCAN_EXT] = None
    ldflags = scipy_openblas(os.path.join(COMPILE_DIR, "openblas"))
    own = "device=cpu,floatX=float32,gcc.cxxflags=-g0,base_compiledir=%s,blas.ldflags=%s,openmp=%s" % (
        COMPILE_DIR, ldflags, THREADS > 1)
    inherited = os.environ.get("THEANO_FLAGS")
    os.environ["THEANO_FLAGS"] = (inherited + "," if inherited else "") + own
    os.environ["OMP_NUM_THREADS"] = str(THREADS)
    return ldflags


BLAS_LDFLAGS = configure()

import theano  # noqa: E402  (configured above)
import theano.tensor as T  # noqa: E402
from theano.scan_module.scan_op import Scan  # noqa: E402

from dlbench.worker.frameworks.theano.layers import F32, Model, runs_scan  # noqa: E402
from dlbench.worker.frameworks.theano.losses import batch_sums, loss_terms  # noqa: E402
from dlbench.worker.frameworks.theano.optimizers import OPTIMIZERS  # noqa: E402


def load_scan() -> str:
    """Which loop Theano's scan will run: "c" once the Cython extension is loaded, else "python"."""
    if sys.modules.get(SCAN_EXT, False) is None:
        return "python"
    try:
        importlib.import_module(SCAN_EXT)  # builds it into the compile folder on first use
    except Exception:  # no compiler, or a failed build: make Theano's own import fail the same way
        sys.modules[SCAN_EXT] = None
        return "python"
    return "c"


def scans_run(function) -> List[str]:
    """The loop each Scan node of a compiled function really runs: its thunk's perform is the Op's
    own Python `execute` or the closure over the Cython perform."""
    vm = function.fn
    return ["python" if getattr(thunk.perform, "__name__", "") == "execute" else "c"
            for node, thunk in zip(vm.nodes, vm.thunks) if isinstance(node.op, Scan)]


class Adapter(BaseAdapter):
    name = "theano"
    executions = ("compiled",)  # theano.function compiles every graph; Theano has no other way to run one

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        if device == "gpu":
            raise RuntimeError("device gpu requested; this recipe installs Theano for the CPU only "
                               "(Theano's GPU backend needs pygpu/libgpuarray, which it does not build)")
        if threads != THREADS:
            raise RuntimeError("Theano took %d threads at import (DLBENCH_THREADS); %d cannot be set afterwards"
                               % (THREADS, threads))
        self.float_inputs = model["input_dtype"].startswith("float")
        self.scan = load_scan() if runs_scan(model) else "none"
        self.model = Model(model, seed)
        self.params = [self.model.weights[n] for n in self.model.trainable_names]
        input_type = "float32" if self.float_inputs else "int32"
        self.x = T.TensorType(input_type, (False,) * (1 + len(model["input_shape"])))("x")
        label_rank = 2 if recipe["loss"] in SEQUENCE_LOSSES else 1  # loss_terms refuses a loss it lacks
        self.y = T.TensorType("int32", (False,) * label_rank)("y")
        self._functions = {}  # type: Dict[str, theano.compile.Function]

    def versions(self):
        return {"theano": theano.__version__, "numpy": np.__version__, "theano-scan": self.scan,
                "theano-blas": "scipy-openblas" if BLAS_LDFLAGS else "numpy-c-api",
                "theano-openmp": "on" if theano.config.openmp else "off"}

    def threads_used(self):
        return THREADS

    # ---- weights ----

    def set_weights(self, weights):
        for name, var in self.model.weights.items():
            var.set_value(np.array(weights[name], dtype=np.float32))

    def get_weights(self):
        return {name: var.get_value() for name, var in self.model.weights.items()}

    # ---- compiled functions, built on first use ----

    def _function(self, kind: str):
        if kind not in self._functions:
            self._functions[kind] = self._compile(kind)
        return self._functions[kind]

    def _compile(self, kind: str):
        loss_name = self.recipe["loss"]
        if kind in ("predict", "training_outputs"):
            logits, _ = self.model(self.x, training=kind == "training_outputs")
            function = theano.function([self.x], logits)
        elif kind == "apply_gradients":  # the training step's update list, on gradients given as inputs
            grads = [T.TensorType("float32", p.broadcastable)(name)
                     for p, name in zip(self.params, self.model.trainable_names)]
            updates = lookup(OPTIMIZERS, "optimizer", self.recipe["optimizer"]["name"])(
                self.params, grads, self.recipe["optimizer"], self.recipe.get("schedule"))
            function = theano.function(grads, [], updates=updates)
        elif kind == "evaluate":
            logits, _ = self.model(self.x, training=False)
            function = theano.function([self.x, self.y], batch_sums(*loss_terms(loss_name, logits, self.y)))
        else:
            logits, statistics = self.model(self.x, training=True)
            terms = loss_terms(loss_name, logits, self.y)
            grads = T.grad(terms[0], self.params)
            if kind == "gradients":  # moving statistics left alone: nothing here is a training step
                function = theano.function([self.x, self.y], [terms[0]] + grads)
            else:
                updates = statistics + lookup(OPTIMIZERS, "optimizer", self.recipe["optimizer"]["name"])(
                    self.params, grads, self.recipe["optimizer"], self.recipe.get("schedule"))
                function = theano.function([self.x, self.y], batch_sums(*terms), updates=updates)
        ran = set(scans_run(function))
        if ran - {self.scan}:
            raise RuntimeError("Theano compiled scans running %s; versions() reports %r" % (sorted(ran), self.scan))
        return function

    # ---- the contract ----

    def _inputs(self, x: np.ndarray, scale) -> np.ndarray:
        if not self.float_inputs:
            return np.asarray(x, dtype=np.int32)
        x = np.asarray(x, dtype=np.float32)
        return x / F32(scale) if scale else x

    def _run(self, kind: str, data: Split, order: np.ndarray) -> Dict[str, float]:
        function = self._function(kind)
        sums = np.zeros(4, np.float64)
        for batch in batch_slices(len(order), self.recipe["batch_size"]):
            index = order[batch]
            sums += function(self._inputs(data.x[index], data.input_scale), np.asarray(data.y[index], np.int32))
            if kind == "train":
                self.step_done()
        return finish_metrics(self.recipe["loss"], *sums.tolist())

    def train_epoch(self, data, order):
        return self._run("train", data, np.asarray(order, dtype=np.int64))

    def evaluate(self, data):
        return self._run("evaluate", data, np.arange(len(data), dtype=np.int64))

    def loss_and_gradients(self, data):
        x = self._inputs(np.asarray(data.x), data.input_scale)
        loss, *grads = self._function("gradients")(x, np.asarray(data.y, np.int32))
        return float(loss), {name: np.asarray(g) for name, g in zip(self.model.trainable_names, grads)}

    def apply_gradients(self, gradients):
        self._function("apply_gradients")(*[np.asarray(gradients[name], np.float32)
                                            for name in self.model.trainable_names])

    def predict(self, x):
        return np.asarray(self._function("predict")(self._inputs(x, None)))

    def serving(self):
        """predict's compiled function (the inference-mode graph: no dropout, BatchNorm's moving statistics),
        on pixels scaled on the host as training scales them. Looked up at each call, so that its compilation
        falls in the first call, as other frameworks' tracing does."""
        scale = self.input_scale

        def serve(x):
            return np.asarray(self._function("predict")(self._inputs(x, scale)))
        return serve

    def training_outputs(self, x):
        return np.asarray(self._function("training_outputs")(self._inputs(x, None)))

    def synchronise(self):
        pass  # CPU only: a compiled function returns when its work is done
