"""Theano 1.0.5 adapter: the IR as one symbolic graph over theano.shared weights, trained by compiled
theano.function steps; no Lasagne. Optimisers are written out as update lists over shared slots,
with the formulas of the TensorFlow adapter (torch's).

Layouts. Every weight is a shared variable in canonical layout, so import, export and gradients
need no conversion: the graph itself transposes an HWIO conv kernel to Theano's (out, in, kh, kw).
Images arrive NHWC; they are turned NCHW once before the first spatial layer and back to NHWC
before Flatten (and to_sequence), so dense weights keep the canonical flatten order (and a ViT's
patches their row-major steps). conv2d runs with
filter_flip=False: the canonical kernel is a cross-correlation (as in TensorFlow and torch), and
Theano's default flips it into a true convolution. Symmetric 'same' padding goes to conv2d's
border_mode; an odd total (TensorFlow puts the extra pixel after) is padded explicitly, with zeros
for a conv and -inf for a max-pool, whose windows then never pick the padding. ReLU is a switch,
not Theano's relu (0.5 * (x + |x|)), whose gradient at exactly 0 is 0.5 where torch's is 0. The LSTM
is our own cell (gates i, f, g, o; one bias) run over time with theano.scan.

Transformer pieces: a residual block's layers' weights are shared variables like any other (their names
carry the block's prefix) and the block applies them in order; attention is batched_dot and softmax
(Model.attention); the tied output multiplies by the embedding's own shared table, transposed, so that
one variable gets both uses' gradients, and holds only its bias.

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
import math
import os
import sys
from collections import OrderedDict
from typing import Dict, List

import numpy as np

from dlbench.shared.ir import all_shapes, block_shapes, infer_shapes, param_shapes, same_padding
from dlbench.shared.protocol import PAD_ID
from dlbench.worker.base import (
    SEQUENCE_LOSSES,
    BaseAdapter,
    Split,
    batch_slices,
    compile_cache,
    finish_metrics,
    lookup,
    not_built,
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
from theano.sandbox.rng_mrg import MRG_RandomStreams  # noqa: E402
from theano.scan_module.scan_op import Scan  # noqa: E402
from theano.tensor.nnet import conv2d  # noqa: E402
from theano.tensor.signal.pool import pool_2d  # noqa: E402

F32 = np.float32


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


# ---- the model --------------------------------------------------------------------------------

def relu(x):
    return T.switch(x > 0, x, F32(0))


def gelu(x):
    """The exact GELU, x * 0.5 * (1 + erf(x / sqrt(2))), with Theano's erf (Theano 1.0 has no gelu op)."""
    return x * F32(0.5) * (F32(1.0) + T.erf(x * F32(1.0 / math.sqrt(2.0))))


ACTIVATIONS = {"relu": relu, "sigmoid": T.nnet.sigmoid, "tanh": T.tanh, "gelu": gelu}


def pad_hw(x, pads, value: float):
    """NCHW x padded by (top, bottom, left, right) with a constant."""
    top, bottom, left, right = pads
    batch, channels, height, width = x.shape
    out = T.alloc(F32(value), batch, channels, height + top + bottom, width + left + right)
    return T.set_subtensor(out[:, :, top:top + height, left:left + width], x)


def same_pads(in_shape, size: int, stride: int):
    top, bottom = same_padding(in_shape[0], size, stride)
    left, right = same_padding(in_shape[1], size, stride)
    return top, bottom, left, right


def dense(x, kernel, bias, units: int):
    if x.ndim == 2:
        return T.dot(x, kernel) + bias
    flat = T.dot(x.reshape((-1, x.shape[-1])), kernel) + bias
    return flat.reshape([x.shape[i] for i in range(x.ndim - 1)] + [units], ndim=x.ndim)


def embed(table, ids):
    """ids (batch, time) -> (batch, time, dim); a flat lookup has Theano's fast gradient."""
    return table[ids.flatten()].reshape((ids.shape[0], ids.shape[1], table.shape[1]))


def lstm_scan(x, kernel, recurrent, bias, units: int, state=None):
    """x (batch, time, features) -> hidden states (time, batch, units) and the final (h, c). The
    input projection of every step is one matmul before the loop; the loop adds h @ recurrent."""
    steps = x.dimshuffle(1, 0, 2)
    projected = dense(steps, kernel, bias, 4 * units)
    if state is None:
        zeros = T.zeros((x.shape[0], units), dtype="float32")
        state = (zeros, zeros)

    def step(z_x, h, c, recurrent_kernel):
        z = z_x + T.dot(h, recurrent_kernel)
        i = T.nnet.sigmoid(z[:, :units])
        f = T.nnet.sigmoid(z[:, units:2 * units])
        g = T.tanh(z[:, 2 * units:3 * units])
        o = T.nnet.sigmoid(z[:, 3 * units:])
        c = f * c + i * g
        return o * T.tanh(c), c

    (hs, cs), _ = theano.scan(step, sequences=projected, outputs_info=list(state), non_sequences=[recurrent],
                              strict=True)
    return hs, (hs[-1], cs[-1])


class Model(object):
    """The IR's layers over canonical shared weights: self.weights["layer/param"] -> shared."""

    def __init__(self, spec: dict, seed: int):
        self.layers = [(layer, tuple(in_shape)) for layer, in_shape, _ in infer_shapes(spec)]
        self.blocks = {}  # a residual block's name -> its own (layer, input shape)s, in order
        self.weights = OrderedDict()  # type: OrderedDict
        for layer, in_shape, _ in all_shapes(spec):  # a residual block's own layers too
            if layer["type"] == "residual":
                self.blocks[layer["name"]] = [(inner, tuple(shape)) for inner, shape, _
                                              in block_shapes(layer, tuple(in_shape))]
            for key, shape in param_shapes(layer, in_shape).items():
                name = layer["name"] + "/" + key
                self.weights[name] = theano.shared(np.zeros(shape, np.float32), name=name)
        self.trainable_names = [n for n in self.weights if not n.rsplit("/", 1)[1].startswith("moving_")]
        self.rng = MRG_RandomStreams(seed + 1)  # dropout masks (MRG refuses seed 0)

    def __call__(self, x, training: bool):
        """Symbolic logits, and the updates of BatchNorm's moving statistics (training only)."""
        updates = []  # type: List
        return self.sequence(self.layers, x, training, updates), updates

    def sequence(self, layers, x, training: bool, updates: list):
        channels_first = False
        for layer, in_shape in layers:
            kind = layer["type"]
            if kind in ("conv2d", "maxpool2d", "batchnorm") and len(in_shape) == 3 and not channels_first:
                x, channels_first = x.dimshuffle(0, 3, 1, 2), True
            if kind in ("flatten", "to_sequence") and channels_first:
                x, channels_first = x.dimshuffle(0, 2, 3, 1), False
            x = self.apply(layer, in_shape, x, training, updates)
        if channels_first:
            x = x.dimshuffle(0, 2, 3, 1)
        return x

    def apply(self, layer, in_shape, x, training, updates):
        kind = layer["type"]
        w = {key.split("/", 1)[1]: var for key, var in self.weights.items() if key.startswith(layer["name"] + "/")}
        if kind == "residual":
            return x + self.sequence(self.blocks[layer["name"]], x, training, updates)
        if kind == "attention":
            return self.attention(layer, in_shape, x, w, training)
        if kind == "positional_embedding":
            return x + w["embeddings"][:in_shape[0]].dimshuffle("x", 0, 1)
        if kind == "tied_output":  # x E^T + b on the embedding's own shared table: its gradient sums both uses
            return dense(x, self.weights[layer["embedding"] + "/embeddings"].T, w["bias"], layer["units"])
        if kind == "conv2d":
            return self.conv(layer, in_shape, x, w)
        if kind == "maxpool2d":
            if layer["padding"] == "same":
                pads = same_pads(in_shape, layer["pool"], layer["stride"])
            elif layer["padding"] == "valid":
                pads = (0,) * 4
            else:
                raise not_built("padding", layer["padding"])
            if any(pads):
                x = pad_hw(x, pads, -np.inf)
            size, stride = layer["pool"], layer["stride"]
            return pool_2d(x, ws=(size, size), stride=(stride, stride), ignore_border=True, mode="max")
        if kind == "batchnorm":
            return batchnorm(layer, w, x, training, updates)
        if kind == "layer_norm":
            return layer_norm(x, w["gamma"], w["beta"], layer["epsilon"])
        if kind == "activation":
            return lookup(ACTIVATIONS, "activation", layer["fn"])(x)
        if kind == "dropout":
            return self.dropout(x, layer["rate"], training)
        if kind == "flatten":
            return x.reshape((x.shape[0], int(np.prod(in_shape))))  # NHWC in C order: the canonical one
        if kind == "to_sequence":  # NHWC (H, W, C) -> (H * W, C) in C order: step r * W + c is row r, column c
            return x.reshape((x.shape[0], in_shape[0] * in_shape[1], in_shape[2]))
        if kind == "sequence_mean":
            return x.mean(axis=1)
        if kind == "dense":
            return dense(x, w["kernel"], w["bias"], layer["units"])
        if kind == "embedding":
            return embed(w["embeddings"], x)
        if kind == "lstm":
            hs, (h, _) = lstm_scan(x, w["kernel"], w["recurrent_kernel"], w["bias"], layer["units"])
            return hs.dimshuffle(1, 0, 2) if layer["return_sequences"] else h
        if kind != "seq2seq":
            raise not_built("layer type", kind)
        # seq2seq: the encoder's final (h, c) starts the decoder; teacher forcing
        source_len, units = layer["source_len"], layer["units"]
        source = embed(w["source_embeddings"], x[:, :source_len])
        target = embed(w["target_embeddings"], x[:, source_len:])
        _, state = lstm_scan(source, w["encoder_kernel"], w["encoder_recurrent_kernel"], w["encoder_bias"], units)
        hs, _ = lstm_scan(target, w["decoder_kernel"], w["decoder_recurrent_kernel"], w["decoder_bias"], units, state)
        return hs.dimshuffle(1, 0, 2)

    def dropout(self, x, rate: float, training: bool):
        """Inverted dropout in training; the identity otherwise."""
        if not training or rate == 0:
            return x
        keep = 1.0 - rate
        mask = self.rng.binomial(x.shape, p=keep, dtype="float32")
        return x * mask / F32(keep)

    def attention(self, layer, in_shape, x, w, training: bool):
        """Multi-head self-attention as the IR states it, with Theano's own ops (Theano 1.0 has no attention op):
        the heads folded into the batch axis for batched_dot, softmax over the keys (Theano's softmax takes
        rows), the causal mask a -inf score (switch), dropout on the attention weights in training."""
        steps, features = in_shape
        heads = layer["heads"]
        size = features // heads

        def split(t):  # (batch, steps, d) -> (batch * heads, steps, dk): head h is columns h*dk .. (h+1)*dk - 1
            t = t.reshape((t.shape[0], steps, heads, size)).dimshuffle(0, 2, 1, 3)
            return t.reshape((-1, steps, size))

        q, k, v = (split(dense(x, w[part + "_kernel"], w[part + "_bias"], features))
                   for part in ("query", "key", "value"))
        scores = T.batched_dot(q, k.dimshuffle(0, 2, 1)) * F32(1.0 / math.sqrt(size))
        if layer["causal"]:  # -inf for every key after the query's own step
            earlier = T.constant(np.tril(np.ones((steps, steps), dtype="int8")))
            scores = T.switch(earlier.dimshuffle("x", 0, 1), scores, F32(-np.inf))
        weights = T.nnet.softmax(scores.reshape((-1, steps))).reshape(scores.shape)
        weights = self.dropout(weights, layer["dropout"], training)
        out = T.batched_dot(weights, v).reshape((-1, heads, steps, size)).dimshuffle(0, 2, 1, 3)
        return dense(out.reshape((-1, steps, features)), w["output_kernel"], w["output_bias"], features)

    @staticmethod
    def conv(layer, in_shape, x, w):
        size, stride = layer["kernel"], layer["stride"]
        border = "valid"
        if layer["padding"] == "same":
            top, bottom, left, right = same_pads(in_shape, size, stride)
            if top == bottom and left == right:
                border = (top, left)
            else:
                x = pad_hw(x, (top, bottom, left, right), 0.0)
        elif layer["padding"] != "valid":
            raise not_built("padding", layer["padding"])
        kernel = w["kernel"].dimshuffle(3, 2, 0, 1)  # HWIO -> OIHW
        y = conv2d(x, kernel, filter_shape=(layer["filters"], in_shape[-1], size, size), border_mode=border,
                   subsample=(stride, stride), filter_flip=False)
        return y + w["bias"].dimshuffle("x", 0, "x", "x")


def layer_norm(x, gamma, beta, epsilon):
    """Over the last axis, with the biased variance (Theano 1.0 has no layer normalisation op)."""
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    variance = T.sqr(centered).mean(axis=-1, keepdims=True)
    return centered / T.sqrt(variance + F32(epsilon)) * gamma + beta


def batchnorm(layer, w, x, training, updates):
    """Over the batch (and the image's positions); moving statistics as pytorch.py keeps them."""
    axes = (0, 2, 3) if x.ndim == 4 else (0,)
    pattern = ("x", 0, "x", "x") if x.ndim == 4 else ("x", 0)
    eps = F32(layer["epsilon"])
    gamma, beta = w["gamma"].dimshuffle(pattern), w["beta"].dimshuffle(pattern)
    if not training:
        scale = (w["gamma"] / T.sqrt(w["moving_var"] + eps)).dimshuffle(pattern)
        return (x - w["moving_mean"].dimshuffle(pattern)) * scale + beta
    mean = x.mean(axis=axes)
    centered = x - mean.dimshuffle(pattern)
    variance = T.sqr(centered).mean(axis=axes)  # biased: what normalises the batch
    count = T.cast(T.prod([x.shape[a] for a in axes]), "float32")
    unbiased = variance * count / T.maximum(count - 1, 1)  # what the moving variance follows (as torch)
    momentum = F32(layer["momentum"])
    rest = F32(1.0 - layer["momentum"])
    updates.append((w["moving_mean"], momentum * w["moving_mean"] + rest * mean))
    updates.append((w["moving_var"], momentum * w["moving_var"] + rest * unbiased))
    return centered / T.sqrt(variance + eps).dimshuffle(pattern) * gamma + beta


# ---- optimisers: the brief's (torch's) formulas as update lists over shared slots ----------------

def zeros_like(p):
    return theano.shared(np.zeros(p.get_value(borrow=True).shape, np.float32))


def learning_rate(config, schedule):
    """The update's learning rate (float64) and the update list that counts updates: the recipe's constant, or
    its schedule (shared/schedule.py) of a shared update counter, from 0."""
    if schedule is None:
        return np.float64(config["lr"]), []
    if schedule["name"] != "warmup_cosine":
        raise not_built("schedule", schedule["name"])
    k = theano.shared(np.float64(0.0))
    warmup, total = float(schedule["warmup_steps"]), float(schedule["total_steps"])
    final = schedule["final_lr_fraction"]
    warm = k / max(warmup, 1.0)  # taken only while k < warmup
    decayed = final + (1.0 - final) * 0.5 * (1.0 + T.cos(np.pi * T.minimum(1.0, (k - warmup) / (total - warmup))))
    return config["lr"] * T.switch(T.lt(k, warmup), warm, decayed), [(k, k + 1.0)]


def sgd(params, grads, config, schedule=None):
    lr, updates = learning_rate(config, schedule)
    lr, momentum = T.cast(lr, "float32"), F32(config.get("momentum", 0.0))
    nesterov, weight_decay = config.get("nesterov", False), F32(config.get("weight_decay", 0.0))
    for p, g in zip(params, grads):
        if weight_decay:
            g = g + weight_decay * p  # coupled L2, on every trainable weight
        if momentum:
            v = zeros_like(p)
            v_new = momentum * v + g
            updates.append((v, v_new))
            g = g + momentum * v_new if nesterov else v_new
        updates.append((p, p - lr * g))
    return updates


def adam(params, grads, config, schedule=None, decoupled_decay=0.0):
    """Adam; with decoupled_decay, AdamW: p -= lr_t * decoupled_decay * p, then Adam's step."""
    lr, updates = learning_rate(config, schedule)
    b1, b2, eps = config["beta1"], config["beta2"], F32(config["epsilon"])
    step = theano.shared(np.float64(0.0))
    t = step + 1.0
    step_size = T.cast(lr / (1.0 - np.float64(b1) ** t), "float32")  # bias corrections in float64, as torch
    bc2_sqrt = T.cast(T.sqrt(1.0 - np.float64(b2) ** t), "float32")
    kept = T.cast(1.0 - lr * decoupled_decay, "float32")
    updates.append((step, t))
    for p, g in zip(params, grads):
        m, v = zeros_like(p), zeros_like(p)
        m_new = F32(b1) * m + F32(1.0 - b1) * g
        v_new = F32(b2) * v + F32(1.0 - b2) * T.sqr(g)
        decayed = kept * p if decoupled_decay else p
        updates += [(m, m_new), (v, v_new), (p, decayed - step_size * m_new / (T.sqrt(v_new) / bc2_sqrt + eps))]
    return updates


def adamw(params, grads, config, schedule=None):
    return adam(params, grads, config, schedule, decoupled_decay=config["weight_decay"])


def adadelta(params, grads, config, schedule=None):
    lr, updates = learning_rate(config, schedule)
    lr, rho, eps = T.cast(lr, "float32"), F32(config["rho"]), F32(config["epsilon"])
    for p, g in zip(params, grads):
        square_avg, delta_avg = zeros_like(p), zeros_like(p)
        v = rho * square_avg + (F32(1) - rho) * T.sqr(g)
        d = T.sqrt(delta_avg + eps) / T.sqrt(v + eps) * g
        updates += [(square_avg, v), (delta_avg, rho * delta_avg + (F32(1) - rho) * T.sqr(d)), (p, p - lr * d)]
    return updates


OPTIMIZERS = {"sgd": sgd, "adam": adam, "adadelta": adadelta, "adamw": adamw}


def loss_terms(loss: str, logits, labels):
    """The batch's mean loss, its weight, right predictions and predictions made, as
    pytorch.loss_terms defines them (the last three float64)."""
    batch = T.cast(labels.shape[0], "float64")
    if loss == "sigmoid_cross_entropy":
        z = logits[:, 0]
        y = T.cast(labels, "float32")
        value = T.mean(T.maximum(z, F32(0)) - z * y + T.log1p(T.exp(-abs(z))))
        right = T.sum(T.eq(T.gt(z, 0), T.neq(labels, 0)), dtype="float64")
        return value, batch, right, batch
    flat = logits.reshape((-1, logits.shape[-1]))
    flat_labels = labels.flatten()
    # Written as Theano's tutorials write it so that its optimiser fuses softmax, the loss and the argmax
    # into CrossentropySoftmaxArgmax1HotWithBias (-x[y] + max + log(sum exp), stable). A log-softmax written
    # out was not fused: lstm-ptb steps took 92 ms against 85 ms (2 cores).
    per_token = T.nnet.categorical_crossentropy(T.nnet.softmax(flat), flat_labels)
    right = T.eq(T.argmax(flat, axis=-1), flat_labels)
    if loss == "masked_sequence_softmax_cross_entropy":
        kept = T.neq(flat_labels, PAD_ID)
        count = T.sum(kept, dtype="float32")
        value = T.sum(per_token * kept) / T.maximum(count, F32(1))
        count = T.cast(count, "float64")
        return value, count, T.sum(right * kept, dtype="float64"), count
    if loss in ("softmax_cross_entropy", "sequence_softmax_cross_entropy"):
        made = T.cast(flat_labels.shape[0], "float64")
        return T.mean(per_token), batch, T.sum(right, dtype="float64"), made
    raise not_built("loss", loss)


def batch_sums(loss, weight, right, made):
    return T.stack([T.cast(loss, "float64") * weight, weight, right, made])


class Adapter(BaseAdapter):
    name = "theano"

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        if device == "gpu":
            raise RuntimeError("device gpu requested; this recipe installs Theano for the CPU only "
                               "(Theano's GPU backend needs pygpu/libgpuarray, which it does not build)")
        if threads != THREADS:
            raise RuntimeError("Theano took %d threads at import (DLBENCH_THREADS); %d cannot be set afterwards"
                               % (THREADS, threads))
        self.float_inputs = model["input_dtype"].startswith("float")
        recurrent = any(layer["type"] in ("lstm", "seq2seq") for layer in model["layers"])
        self.scan = load_scan() if recurrent else "none"
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
