"""Chainer adapter: the IR as a chainer.Chain of Chainer's own links, trained define-by-run as
Chainer's examples do (cleargrads, forward, backward, optimizer.update) with its optimizers.

Layouts (canonical -> Chainer): images arrive NHWC and are transposed once to NCHW before the
first spatial layer, and back to NHWC before Flatten (and to_sequence), so dense kernels keep the
canonical flatten order (and a ViT's patches their row-major steps). Conv kernels HWIO ->
Convolution2D's W (out, in, kh, kw); dense kernels (in, out) -> Linear's W (out, in); embeddings
unchanged. TensorFlow's 'same' padding is Chainer's symmetric
`pad` where that is symmetric, else an explicit F.pad (zeros for conv, -inf for max pooling);
max pooling runs with cover_all=False (Chainer's default True adds an extra output window).

LSTM: Chainer's L.LSTM holds `upward` = Linear(in, 4u) with one bias and `lateral` = Linear(u, 4u)
without one: exactly the canonical kernel, recurrent kernel and single bias, so no second bias has
to be pinned at zero. Its 4u pre-activations are interleaved the way F.lstm reads them: row
4 * unit + gate, gates in the order (a, i, f, o), a being the cell candidate g; the canonical blocks
(i, f, g, o) are permuted into that order on import and back on export. The layer runs our own
loop over time with F.lstm on those two links: the input projection of all steps is one matmul,
each step adds h @ lateral. Measured on the project's 2-core machine, shared and loaded (lstm-ptb
shapes: batch 20, 30 steps, 2 layers of 200, forward + backward): this loop 0.18-0.20 s a batch
against 0.51-0.61 s for L.NStepLSTM with one BLAS thread (0.12 s against 0.44 s with two).
NStepLSTM's CPU path restacks its eight weight matrices and biases at every step and runs two
matmuls per step; it would also hold two biases per layer where the canonical layout has one.

Transformer pieces: a residual block's layers are child links of the model like any other (their names carry
the block's prefix); attention is written with F.matmul and F.softmax (Chainer 7 has no attention link or fused
kernel); the tied output is F.linear over the embedding link's own W, so that one Parameter gets both uses'
gradients, and holds only its bias.

Optimisers: MomentumSGD + the WeightDecay hook (coupled L2 added to the gradient) is the
reference's SGD exactly (velocity kept as -lr times torch's, the same arithmetic); AdaDelta is the
reference's Adadelta with lr 1 (Chainer's has no learning rate: another lr is refused). Chainer's
Adam puts epsilon outside the bias correction of the second moment (eps * sqrt(1 - beta2^t) in the
reference's terms, 30x the reference's at step 1), which moves parameters with small gradients
visibly differently; the reference's Adam is written out as a Chainer UpdateRule instead, with Chainer's
Adam's eta (a schedule's multiplier, set by an optimizer hook before each update) and weight_decay_rate
(AdamW's decoupled decay, which Chainer scales by eta but not by the learning rate).

Threads: Chainer computes with numpy on the CPU, so the threads are the BLAS's; threadpoolctl sets
them from the `threads` argument and threads_used() reports what the BLAS library says it uses.
Caches: Chainer writes files only for its datasets (CHAINER_DATASET_ROOT, default ~/.chainer under
HOME, which the worker points into the run's folder); this adapter downloads none.
Device: CPU only. The recipe installs no CuPy (Chainer 7 supports CuPy up to v7/v8, none of which
runs on current GPUs), so device "gpu" is refused.
"""
from __future__ import annotations

import math
from typing import Dict, List, Tuple

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import threadpoolctl
from chainer import optimizer_hooks

from dlbench.shared import schedule as schedules
from dlbench.shared.ir import all_shapes, block_shapes, infer_shapes, same_padding
from dlbench.shared.protocol import PAD_ID
from dlbench.worker.base import (
    BaseAdapter,
    Split,
    batch_slices,
    finish_metrics,
    from_out_in_layout,
    lookup,
    not_built,
    to_out_in_layout,
)

ZERO = chainer.initializers.Zero()  # every weight is set from the canonical ones before use
CANONICAL_TO_CHAINER_GATES = (2, 0, 1, 3)  # F.lstm's (a, i, f, o) as positions in (i, f, g, o)


# ---- LSTM gate layout --------------------------------------------------------------------------

def gates_to_chainer(value: np.ndarray) -> np.ndarray:
    """Canonical (..., 4u) with gate blocks i, f, g, o -> Chainer's (..., 4u) interleaved as
    (unit, gate) with gates a, i, f, o."""
    lead, units = value.shape[:-1], value.shape[-1] // 4
    blocks = value.reshape(lead + (4, units))[..., CANONICAL_TO_CHAINER_GATES, :]
    return np.swapaxes(blocks, -1, -2).reshape(lead + (4 * units,))


def gates_from_chainer(value: np.ndarray) -> np.ndarray:
    lead, units = value.shape[:-1], value.shape[-1] // 4
    blocks = np.swapaxes(value.reshape(lead + (units, 4)), -1, -2)
    canonical = np.empty_like(blocks)
    canonical[..., CANONICAL_TO_CHAINER_GATES, :] = blocks
    return canonical.reshape(lead + (4 * units,))


# ---- the model ---------------------------------------------------------------------------------

class LSTM(chainer.Chain):
    """One LSTM layer with L.LSTM's parameters (upward with the bias, lateral without)."""

    def __init__(self, in_size: int, units: int):
        super().__init__()
        self.units = units
        with self.init_scope():
            self.upward = L.Linear(in_size, 4 * units, initialW=ZERO)
            self.lateral = L.Linear(units, 4 * units, initialW=ZERO, nobias=True)

    def forward(self, x, state=None) -> Tuple[List[chainer.Variable], tuple]:
        """x (batch, time, features) -> the hidden state of every step, and the final (h, c)."""
        projected = F.separate(self.upward(x, n_batch_axes=2), axis=1)  # one matmul for all steps
        if state is None:  # from zeros: the first step has no h @ lateral term
            h, c = None, self.xp.zeros((x.shape[0], self.units), dtype=x.dtype)
        else:
            h, c = state
        outputs = []
        for z in projected:
            if h is not None:
                z = z + self.lateral(h)
            c, h = F.lstm(c, z)
            outputs.append(h)
        return outputs, (h, c)


class Seq2Seq(chainer.Chain):
    def __init__(self, layer: dict):
        super().__init__()
        self.source_len = layer["source_len"]
        with self.init_scope():
            self.source_embedding = L.EmbedID(layer["source_vocab"], layer["embed_dim"], initialW=ZERO)
            self.target_embedding = L.EmbedID(layer["target_vocab"], layer["embed_dim"], initialW=ZERO)
            self.encoder = LSTM(layer["embed_dim"], layer["units"])
            self.decoder = LSTM(layer["embed_dim"], layer["units"])

    def forward(self, x):
        _, state = self.encoder(self.source_embedding(x[:, :self.source_len]))
        outputs, _ = self.decoder(self.target_embedding(x[:, self.source_len:]), state)
        return F.stack(outputs, axis=1)  # teacher forcing: the decoder reads the given target


def _padding(layer: dict, in_shape) -> "tuple[int, int, tuple]":
    """(symmetric pad h, symmetric pad w, explicit pad widths or ()) for a conv or pool layer."""
    size = layer[lookup({"conv2d": "kernel", "maxpool2d": "pool"}, "layer type", layer["type"])]
    if layer["padding"] == "valid":
        return 0, 0, ()
    if layer["padding"] != "same":
        raise not_built("padding", layer["padding"])
    (top, bottom), (left, right) = (same_padding(in_shape[i], size, layer["stride"]) for i in (0, 1))
    if top == bottom and left == right:
        return top, left, ()
    return 0, 0, ((0, 0), (0, 0), (top, bottom), (left, right))


def gelu(x):
    """The exact GELU, x * 0.5 * (1 + erf(x / sqrt(2))): Chainer 7 has no gelu function, F.erf is its own."""
    return x * 0.5 * (1.0 + F.erf(x * (1.0 / math.sqrt(2.0))))


ACTIVATIONS = {"relu": F.relu, "sigmoid": F.sigmoid, "tanh": F.tanh, "gelu": gelu}
SPATIAL = ("conv2d", "maxpool2d", "batchnorm")


class Attention(chainer.Chain):
    """Multi-head self-attention as the IR states it, with Chainer's own functions (Chainer 7 has no attention
    link or fused kernel): four L.Linear projections, the heads folded into the batch axis for F.matmul,
    F.softmax over the keys, the causal mask a -inf score (F.where), F.dropout on the attention weights
    (inverted, the identity unless chainer.config.train)."""

    PROJECTIONS = ("query", "key", "value", "output")

    def __init__(self, layer: dict, features: int):
        super().__init__()
        self.heads, self.causal, self.rate = layer["heads"], layer["causal"], layer["dropout"]
        with self.init_scope():
            for part in self.PROJECTIONS:
                setattr(self, part, L.Linear(features, features, initialW=ZERO))

    def _split(self, x, batch: int, steps: int):
        """(batch, steps, d) -> (batch * heads, steps, dk): head h is columns h*dk .. (h+1)*dk - 1."""
        x = F.reshape(x, (batch, steps, self.heads, -1))
        return F.reshape(F.transpose(x, (0, 2, 1, 3)), (batch * self.heads, steps, -1))

    def forward(self, x):
        batch, steps, features = x.shape
        q, k, v = (self._split(getattr(self, part)(x, n_batch_axes=2), batch, steps)
                   for part in self.PROJECTIONS[:3])
        scores = F.matmul(q, k, transb=True) * (1.0 / math.sqrt(features // self.heads))
        if self.causal:  # key s after query t gets -inf: no step sees a later one
            later = np.broadcast_to(np.tril(np.ones((steps, steps), dtype=bool)), scores.shape)
            scores = F.where(later, scores, self.xp.full(scores.shape, -np.inf, dtype=scores.dtype))
        weights = F.softmax(scores, axis=-1)
        if self.rate > 0:
            weights = F.dropout(weights, self.rate)
        out = F.reshape(F.matmul(weights, v), (batch, self.heads, steps, -1))
        out = F.reshape(F.transpose(out, (0, 2, 1, 3)), (batch, steps, features))
        return self.output(out, n_batch_axes=2)


class PositionalEmbedding(chainer.Link):
    """A learned (max_len, d) table whose first `steps` rows are added to the input."""

    def __init__(self, max_len: int, features: int):
        super().__init__()
        with self.init_scope():
            self.W = chainer.Parameter(ZERO, (max_len, features))

    def forward(self, x):
        return x + F.broadcast_to(self.W[:x.shape[1]], x.shape)


class TiedOutputBias(chainer.Link):
    """The tied output's own parameter, its bias; its kernel is the embedding link's W itself (Model._apply)."""

    def __init__(self, units: int):
        super().__init__()
        with self.init_scope():
            self.b = chainer.Parameter(ZERO, (units,))


class Model(chainer.Chain):
    """The IR's layers in order; each weighted layer, a residual block's own included, is a child link named after
    the IR layer (the block's prefix keeps the names unique)."""

    def __init__(self, spec: dict):
        super().__init__()
        self.layers = [(layer, tuple(in_shape)) for layer, in_shape, _ in infer_shapes(spec)]
        self.blocks = {}  # a residual block's name -> its own (layer, input shape)s, in order
        with self.init_scope():
            for layer, in_shape, _ in all_shapes(spec):
                if layer["type"] == "residual":
                    self.blocks[layer["name"]] = [(inner, tuple(shape)) for inner, shape, _
                                                  in block_shapes(layer, tuple(in_shape))]
                link = self._link(layer, in_shape)
                if link is not None:
                    setattr(self, layer["name"], link)

    @staticmethod
    def _link(layer: dict, in_shape):
        kind = layer["type"]
        if kind == "conv2d":
            pad_h, pad_w, _ = _padding(layer, in_shape)
            return L.Convolution2D(in_shape[-1], layer["filters"], layer["kernel"], stride=layer["stride"],
                                   pad=(pad_h, pad_w), initialW=ZERO)
        if kind == "batchnorm":
            # Chainer's decay weighs the running value, as the IR's (Keras's) momentum does; the
            # moving variance follows the unbiased batch variance, as the reference's
            return L.BatchNormalization(in_shape[-1], decay=layer["momentum"], eps=layer["epsilon"])
        if kind == "layer_norm":  # over the last axis, biased variance
            return L.LayerNormalization(in_shape[-1], eps=layer["epsilon"])
        if kind == "dense":
            return L.Linear(in_shape[-1], layer["units"], initialW=ZERO)
        if kind == "embedding":
            return L.EmbedID(layer["vocab"], layer["dim"], initialW=ZERO)
        if kind == "lstm":
            return LSTM(in_shape[-1], layer["units"])
        if kind == "seq2seq":
            return Seq2Seq(layer)
        if kind == "attention":
            return Attention(layer, in_shape[-1])
        if kind == "positional_embedding":
            return PositionalEmbedding(layer["max_len"], in_shape[-1])
        if kind == "tied_output":
            return TiedOutputBias(layer["units"])
        if kind in ("maxpool2d", "activation", "dropout", "flatten", "to_sequence", "sequence_mean", "residual"):
            return None  # no weights: applied by functions (a block's layers are links of their own)
        raise not_built("layer type", kind)

    def forward(self, x):
        return self._run(self.layers, x)

    def _run(self, layers, x):
        channels_first = False
        for layer, in_shape in layers:
            kind = layer["type"]
            if kind in SPATIAL and len(in_shape) == 3 and not channels_first:
                x = F.transpose(x, (0, 3, 1, 2))  # NHWC -> NCHW
                channels_first = True
            if kind in ("flatten", "to_sequence") and channels_first:
                x = F.transpose(x, (0, 2, 3, 1))  # back to NHWC: the canonical flatten and sequence order
                channels_first = False
            x = self._apply(layer, in_shape, x)
        if channels_first:
            x = F.transpose(x, (0, 2, 3, 1))
        return x

    def _apply(self, layer: dict, in_shape, x):
        kind = layer["type"]
        link = getattr(self, layer["name"], None)
        if kind == "residual":
            return x + self._run(self.blocks[layer["name"]], x)
        if kind == "tied_output":  # x E^T + b with the embedding's own W: its gradient sums both uses
            table = getattr(self, layer["embedding"]).W
            return F.linear(x, table, link.b, n_batch_axes=x.ndim - 1)
        if kind == "conv2d":
            widths = _padding(layer, in_shape)[2]
            return link(F.pad(x, widths, "constant", constant_values=0.0) if widths else x)
        if kind == "maxpool2d":
            pad_h, pad_w, widths = _padding(layer, in_shape)
            if widths:
                x = F.pad(x, widths, "constant", constant_values=-np.inf)
            return F.max_pooling_2d(x, layer["pool"], stride=layer["stride"], pad=(pad_h, pad_w), cover_all=False)
        if kind == "activation":
            return lookup(ACTIVATIONS, "activation", layer["fn"])(x)
        if kind == "dropout":  # F.dropout is the identity unless chainer.config.train
            return F.dropout(x, layer["rate"]) if layer["rate"] > 0 else x
        if kind == "flatten":
            return F.reshape(x, (x.shape[0], -1))
        if kind == "to_sequence":  # NHWC (H, W, C) -> (H * W, C): step r * W + c is row r, column c
            return F.reshape(x, (x.shape[0], -1, x.shape[-1]))
        if kind == "sequence_mean":
            return F.mean(x, axis=1)
        if kind == "dense":
            return link(x, n_batch_axes=x.ndim - 1)  # on a sequence: the same dense at every step
        if kind == "layer_norm" and x.ndim > 2:  # Chainer's layer normalisation takes (rows, features) only
            return F.reshape(link(F.reshape(x, (-1, x.shape[-1]))), x.shape)
        if kind == "lstm":
            outputs, (h, _) = link(x)
            return F.stack(outputs, axis=1) if layer["return_sequences"] else h
        if kind in ("batchnorm", "layer_norm", "embedding", "seq2seq", "attention", "positional_embedding"):
            return link(x)
        raise not_built("layer type", kind)


# ---- canonical weights <-> Chainer's arrays ----------------------------------------------------

def _lstm_arrays(prefix: str, lstm: LSTM) -> Dict[str, chainer.Parameter]:
    return {prefix + "kernel": lstm.upward.W, prefix + "recurrent_kernel": lstm.lateral.W,
            prefix + "bias": lstm.upward.b}


def native_arrays(kind: str, link) -> Dict[str, object]:
    """Canonical key -> the Chainer Parameter (or, for moving statistics, the ndarray) holding it."""
    if kind == "batchnorm":
        return {"gamma": link.gamma, "beta": link.beta, "moving_mean": link.avg_mean, "moving_var": link.avg_var}
    if kind == "layer_norm":
        return {"gamma": link.gamma, "beta": link.beta}
    if kind in ("embedding", "positional_embedding"):
        return {"embeddings": link.W}
    if kind == "attention":
        return dict(kv for part in Attention.PROJECTIONS for kv in (
            (part + "_kernel", getattr(link, part).W), (part + "_bias", getattr(link, part).b)))
    if kind == "tied_output":  # its kernel is the embedding's table, exported there
        return {"bias": link.b}
    if kind == "lstm":
        return _lstm_arrays("", link)
    if kind == "seq2seq":
        arrays = {"source_embeddings": link.source_embedding.W, "target_embeddings": link.target_embedding.W}
        arrays.update(_lstm_arrays("encoder_", link.encoder))
        arrays.update(_lstm_arrays("decoder_", link.decoder))
        return arrays
    if kind in ("conv2d", "dense"):
        return {"kernel": link.W, "bias": link.b}
    raise not_built("weights of layer type", kind)


# the layer types whose weights Chainer holds as the canonical layout has them, or as Linear's (out, in)
# transpose of every (in, out) kernel; conv2d and the LSTMs' are converted apart
def to_chainer_layout(kind: str, key: str, value: np.ndarray) -> np.ndarray:
    if kind in ("lstm", "seq2seq") and not key.endswith("embeddings"):
        value = gates_to_chainer(value)
    return to_out_in_layout(kind, key, value)  # Linear's (out, in), Convolution2D's OIHW


def from_chainer_layout(kind: str, key: str, value: np.ndarray) -> np.ndarray:
    value = from_out_in_layout(kind, key, value)
    if kind in ("lstm", "seq2seq") and not key.endswith("embeddings"):
        value = gates_from_chainer(value)
    return value


# ---- optimisers --------------------------------------------------------------------------------

class TorchAdamRule(chainer.optimizer.UpdateRule):
    """The reference's Adam: epsilon added after the second moment's bias correction."""

    def init_state(self, param):
        self.state["m"] = np.zeros_like(param.data)
        self.state["v"] = np.zeros_like(param.data)

    def update_core_cpu(self, param):
        grad = param.grad
        if grad is None:
            return
        hp, m, v = self.hyperparam, self.state["m"], self.state["v"]
        m += (1.0 - hp.beta1) * (grad - m)
        v *= hp.beta2
        v += (1.0 - hp.beta2) * grad * grad
        step_size = hp.eta * hp.lr / (1.0 - hp.beta1 ** self.t)  # self.t counts this update already
        denominator = np.sqrt(v) / math.sqrt(1.0 - hp.beta2 ** self.t) + hp.eps
        if hp.weight_decay_rate:  # decoupled, scaled by eta as Chainer's Adam scales it
            param.data -= (hp.eta * hp.weight_decay_rate) * param.data
        param.data -= step_size * m / denominator


class TorchAdam(chainer.optimizer.GradientMethod):
    lr = chainer.optimizer.HyperparameterProxy("lr")
    beta1 = chainer.optimizer.HyperparameterProxy("beta1")
    beta2 = chainer.optimizer.HyperparameterProxy("beta2")
    eps = chainer.optimizer.HyperparameterProxy("eps")
    eta = chainer.optimizer.HyperparameterProxy("eta")
    weight_decay_rate = chainer.optimizer.HyperparameterProxy("weight_decay_rate")

    def __init__(self, lr: float, beta1: float, beta2: float, eps: float, weight_decay_rate: float = 0.0):
        """eta and weight_decay_rate as Chainer's Adam has them: every step scaled by the schedule multiplier
        eta (1 without a schedule), param -= eta * (step + weight_decay_rate * param)."""
        super().__init__()
        self.hyperparam.lr, self.hyperparam.beta1 = lr, beta1
        self.hyperparam.beta2, self.hyperparam.eps = beta2, eps
        self.hyperparam.eta, self.hyperparam.weight_decay_rate = 1.0, weight_decay_rate

    def create_update_rule(self):
        return TorchAdamRule(self.hyperparam)


def make_optimizer(config: dict) -> chainer.Optimizer:
    name = config["name"]
    if name == "sgd":
        if config.get("nesterov"):  # Chainer's NesterovAG is another formulation than the reference's
            raise ValueError("chainer adapter: Nesterov momentum is not implemented (no workload uses it)")
        return chainer.optimizers.MomentumSGD(lr=config["lr"], momentum=config.get("momentum", 0.0))
    if name == "adam":
        return TorchAdam(config["lr"], config["beta1"], config["beta2"], config["epsilon"])
    if name == "adamw":
        # Chainer scales the decoupled decay by eta but not by alpha (lr): the rate holds lr * weight_decay,
        # so that eta * rate * param is torch's lr_t * weight_decay * param
        return TorchAdam(config["lr"], config["beta1"], config["beta2"], config["epsilon"],
                         weight_decay_rate=config["lr"] * config["weight_decay"])
    if name != "adadelta":
        raise not_built("optimizer", name)
    if config["lr"] != 1.0:
        raise ValueError("chainer adapter: Chainer's AdaDelta has no learning rate; lr %r is not 1" % config["lr"])
    return chainer.optimizers.AdaDelta(rho=config["rho"], eps=config["epsilon"])


# ---- losses ------------------------------------------------------------------------------------

def loss_terms(loss: str, logits, labels: np.ndarray):
    """The batch's mean loss (a Variable), its weight, right predictions and predictions made, as
    pytorch.loss_terms defines them."""
    scores = logits.array
    if loss == "sigmoid_cross_entropy":
        logits = F.reshape(logits, (-1,))
        value = F.sigmoid_cross_entropy(logits, labels.astype(np.int32))
        right = int(np.count_nonzero((scores.reshape(-1) > 0) == (labels != 0)))
        return value, len(labels), right, len(labels)
    flat = F.reshape(logits, (-1, logits.shape[-1]))
    flat_labels = labels.reshape(-1).astype(np.int32)
    right = scores.reshape(-1, scores.shape[-1]).argmax(axis=-1) == flat_labels
    if loss == "masked_sequence_softmax_cross_entropy":
        kept = flat_labels != PAD_ID
        count = int(np.count_nonzero(kept))
        value = F.softmax_cross_entropy(flat, flat_labels, ignore_label=PAD_ID)  # mean over kept tokens
        return value, count, int(np.count_nonzero(right & kept)), count
    if loss in ("softmax_cross_entropy", "sequence_softmax_cross_entropy"):
        return F.softmax_cross_entropy(flat, flat_labels), len(labels), int(np.count_nonzero(right)), flat_labels.size
    raise not_built("loss", loss)


class WarmupCosine(object):
    """Optimizer hook: before each update, eta (Adam's schedule multiplier) for the update numbered
    optimizer.t (from 0; the update counts itself after the pre-update hooks)."""

    name = "WarmupCosine"
    timing = "pre"
    call_for_each_param = False

    def __init__(self, schedule: dict):
        self.schedule = schedule

    def __call__(self, optimizer):
        optimizer.eta = schedules.factor(self.schedule, optimizer.t)


def optimizer_for(link: chainer.Link, config: dict, schedule=None) -> chainer.Optimizer:
    """make_optimizer's optimiser set up on `link`, with coupled L2 (a WeightDecay hook) when asked, and the
    recipe's learning-rate schedule (a hook setting eta) when it has one."""
    optimizer = make_optimizer(config)
    optimizer.setup(link)
    if config.get("weight_decay") and config["name"] != "adamw":  # adamw's is decoupled: in its update rule
        optimizer.add_hook(optimizer_hooks.WeightDecay(config["weight_decay"]))
    if schedule is not None:
        hook = lookup({"warmup_cosine": WarmupCosine}, "schedule", schedule["name"])
        if not isinstance(optimizer, TorchAdam):
            raise ValueError("chainer adapter: a learning-rate schedule is built for adam and adamw (eta); "
                             "MomentumSGD keeps lr inside its velocity and AdaDelta has no learning rate: %r"
                             % config["name"])
        optimizer.add_hook(hook(schedule))
    return optimizer


def cpu_threads(device: str, threads: int):
    """Refuses a GPU cell; limits BLAS to `threads`. The caller keeps the returned limiter: the setting
    lasts as long as it does."""
    if device != "cpu":
        raise RuntimeError("device %r requested: the chainer environment computes with numpy on the CPU "
                           "(no CuPy)" % device)
    return threadpoolctl.threadpool_limits(limits=threads)


class Adapter(BaseAdapter):
    name = "chainer"

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        self._thread_limit = cpu_threads(device, threads)
        np.random.seed(seed)  # Chainer's dropout masks come from numpy's global generator
        self.model = Model(model)
        self.optimizer = optimizer_for(self.model, recipe["optimizer"], recipe.get("schedule"))
        self.float_inputs = model["input_dtype"].startswith("float")
        self._arrays = {}  # id of a Split -> (the split, x, y) in memory: read once

    def versions(self):
        return {"chainer": chainer.__version__, "numpy": np.__version__}

    def threads_used(self):
        counts = [pool["num_threads"] for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas"]
        return max(counts) if counts else 1  # no BLAS library loaded: numpy runs on this thread alone

    # ---- weights ----

    def _native(self):
        for layer, _, _ in all_shapes(self.model_ir):
            link = getattr(self.model, layer["name"], None)
            if link is not None:
                for key, target in native_arrays(layer["type"], link).items():
                    yield layer, key, target

    def set_weights(self, weights):
        for layer, key, target in self._native():
            value = to_chainer_layout(layer["type"], key, weights[layer["name"] + "/" + key])
            array = target.array if isinstance(target, chainer.Variable) else target
            array[...] = value  # in place: the optimiser's and BatchNorm's references stay valid

    def get_weights(self):
        return {layer["name"] + "/" + key: self._export(layer, key, target) for layer, key, target in self._native()}

    @staticmethod
    def _export(layer, key, target, gradient=False):
        if isinstance(target, chainer.Variable):
            target = target.grad if gradient else target.array
        return np.ascontiguousarray(from_chainer_layout(layer["type"], key, target)).copy()

    # ---- batches ----

    def _in_memory(self, data: Split):
        key = id(data)
        if key not in self._arrays:  # holding the split keeps its id from being reused
            x = np.asarray(data.x)
            self._arrays[key] = (data, np.array(x if self.float_inputs else x.astype(np.int32)),
                                 np.array(data.y).astype(np.int32))
        return self._arrays[key][1:]

    def _inputs(self, x: np.ndarray, scale) -> np.ndarray:
        if not self.float_inputs:
            return x
        x = x.astype(np.float32)
        return x / np.float32(scale) if scale else x

    def _sums(self, data: Split, order: np.ndarray, train: bool) -> Dict[str, float]:
        x_all, y_all = self._in_memory(data)
        loss_name = self.recipe["loss"]
        sums = np.zeros(4, dtype=np.float64)
        with chainer.using_config("train", train), chainer.using_config("enable_backprop", train):
            for batch in batch_slices(len(order), self.recipe["batch_size"]):
                index = order[batch]
                logits = self.model(self._inputs(x_all[index], data.input_scale))
                loss, weight, right, made = loss_terms(loss_name, logits, y_all[index])
                if train:
                    self.model.cleargrads()
                    loss.backward()
                    self.optimizer.update()
                sums += (float(loss.array) * weight, weight, right, made)
        return finish_metrics(loss_name, *sums.tolist())

    # ---- the contract ----

    def train_epoch(self, data, order):
        return self._sums(data, np.asarray(order, dtype=np.int64), train=True)

    def evaluate(self, data):
        return self._sums(data, np.arange(len(data), dtype=np.int64), train=False)

    def loss_and_gradients(self, data):
        x_all, y_all = self._in_memory(data)
        with chainer.using_config("train", True):
            self.model.cleargrads()
            loss = loss_terms(self.recipe["loss"], self.model(self._inputs(x_all, data.input_scale)), y_all)[0]
            loss.backward()
        gradients = {layer["name"] + "/" + key: self._export(layer, key, target, gradient=True)
                     for layer, key, target in self._native() if isinstance(target, chainer.Variable)}
        self.model.cleargrads()
        return float(loss.array), gradients

    def apply_gradients(self, gradients):
        self.model.cleargrads()
        for layer, key, target in self._native():
            if isinstance(target, chainer.Variable):  # moving statistics are plain arrays
                target.grad = np.ascontiguousarray(
                    to_chainer_layout(layer["type"], key, gradients[layer["name"] + "/" + key]), dtype=np.float32)
        self.optimizer.update()
        self.model.cleargrads()

    def predict(self, x):
        inputs = np.ascontiguousarray(x, dtype=np.float32 if self.float_inputs else np.int32)
        with chainer.using_config("train", False), chainer.no_backprop_mode():
            return self.model(inputs).array.copy()

    def serving(self):
        """The model called under chainer.using_config('train', False) and no_backprop_mode, as Chainer's
        guides run inference; pixels scaled on the host, as training scales them."""
        scale = self.input_scale

        def serve(x):
            inputs = self._inputs(np.ascontiguousarray(x), scale) if self.float_inputs else np.asarray(x, np.int32)
            with chainer.using_config("train", False), chainer.no_backprop_mode():
                return self.model(inputs).array.copy()
        return serve

    def training_outputs(self, x):
        inputs = np.ascontiguousarray(x, dtype=np.float32)
        with chainer.using_config("train", True), chainer.no_backprop_mode():
            return self.model(inputs).array.copy()

    def synchronise(self):
        pass  # numpy on the CPU: every operation has finished when it returns
