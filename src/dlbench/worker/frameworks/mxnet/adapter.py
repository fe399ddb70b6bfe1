"""MXNet 1.9 adapter: the IR as Gluon HybridBlocks, hybridized, trained under autograd.record.

Layouts. Images arrive NHWC (canonical); MXNet's CPU convolution and pooling are NCHW only, so
activations are transposed once to NCHW before the first spatial layer and back to NHWC before Flatten
or to_sequence (a ViT's patches, then a C-order reshape), which keeps dense weights in the canonical
flatten order. Conv kernels are OIHW in MXNet (canonical HWIO), Dense weights (out, in) (canonical (in,
out)). Gluon's LSTM is MXNet's fused RNN operator with gates in the canonical order i, f, g, o and two
biases (i2h, h2h): the canonical bias is i2h's, and h2h's stays zero and untrained (grad_req null), as
the PyTorch adapter keeps torch's second bias, so the bias takes one optimiser step, not two.
TensorFlow-style 'same' padding, which is asymmetric when odd, is an explicit pad (zeros before a conv,
-inf before a max-pool).

Transformer pieces: a residual block is a HybridBlock around a Net of its own layers (their names carry
the block's prefix, and by_name holds them like any other); attention is batch_dot and softmax in a
hybridizable block (Attention says why not MXNet's fused self-attention operators); the tied output is a
Dense built on the embedding's parameters, as GluonNLP ties its decoders: one Parameter, both uses' gradients.

BatchNorm: MXNet's operator normalises with the batch statistics, but it would move its moving
variance with the biased batch variance; the reference (torch) uses the unbiased one. The operator
runs with momentum 1 (moving statistics untouched), the block also outputs the batch mean and
biased variance, and the adapter moves the statistics after each training step with the unbiased
variance and the IR's (Keras's) momentum.

Optimisers are written out with nd operators, as the reference defines them (torch's formulas):
MXNet's own differ (SGD's momentum folds the learning rate in; Adam applies its bias correction to
the learning rate, which moves epsilon; Adadelta has no learning rate), and its embeddings'
row-sparse lazy updates would skip rows, where the reference moves every row. Embeddings therefore
keep dense gradients (sparse_grad False, Gluon's default), and every row takes every step.

Compilation: hybridize() only marks the blocks; the first call of a hybridized block builds its
graph (CachedOp), so that cost lands in the first train_epoch (and the first predict or evaluate).
With static_alloc and static_shape a graph keeps its memory between calls; a new input shape (the
last, smaller batch) builds its plan once.
Nothing is fetched to the host inside an epoch: the loss and counts are summed on the engine and
read once at its end; synchronise() is mx.nd.waitall().

Threads: MXNet's engine reads MXNET_CPU_WORKER_NTHREADS at import (the recipe sets 1, its default:
one engine thread runs the operators in order), and each operator runs OpenMP threads. Their count
is fixed when MXNet loads: the engine's thread inherits OMP_NUM_THREADS, which the adapter sets from
the cell's budget (DLBENCH_THREADS) before importing mxnet, with MXNET_OMP_MAX_THREADS, MXNet's cap
for its own operators. Measured: a convolution ran 1.6x CPU per wall second with OMP_NUM_THREADS=2
and 1.0x with 1, whatever MXNet's runtime call MXSetNumOMPThreads said, so the adapter does not
rely on that call; an adapter asked for another count in the same process refuses.
MXNET_HOME (datasets, model zoo) is pointed into the run's cache folder, where HOME already is.
"""
from __future__ import annotations

import os

from dlbench.worker.base import thread_budget  # numpy alone, before the framework


def _configure_before_import() -> int:
    """The OpenMP thread count, and MXNet's cache folder: both read when mxnet is imported."""
    threads = thread_budget()
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MXNET_OMP_MAX_THREADS"] = str(threads)
    if os.environ.get("XDG_CACHE_HOME"):
        os.environ.setdefault("MXNET_HOME", os.path.join(os.environ["XDG_CACHE_HOME"], "mxnet"))
    return threads


THREADS = _configure_before_import()

import math  # noqa: E402
from typing import Dict, List  # noqa: E402

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon, nd  # noqa: E402
from mxnet.gluon import nn, rnn  # noqa: E402

from dlbench.shared import schedule as schedules  # noqa: E402
from dlbench.shared.ir import WEIGHTED, all_shapes, block_shapes, infer_shapes, same_padding  # noqa: E402
from dlbench.shared.protocol import PAD_ID  # noqa: E402
from dlbench.worker.base import (  # noqa: E402
    BaseAdapter,
    Split,
    batch_slices,
    finish_metrics,
    from_out_in_layout,
    lookup,
    not_built,
    recipe_dtype,
    to_out_in_layout,
)

# ---- blocks -------------------------------------------------------------------------------------

class Transpose(gluon.HybridBlock):
    def __init__(self, axes):
        super(Transpose, self).__init__()
        self.axes = axes

    def hybrid_forward(self, F, x):
        return F.transpose(x, axes=self.axes)


class SamePad(gluon.HybridBlock):
    """TensorFlow's 'same' padding of an NCHW activation, the odd pixel after (MXNet pads symmetrically)."""

    def __init__(self, in_hw, size: int, stride: int, value: float):
        super(SamePad, self).__init__()
        top, bottom = same_padding(in_hw[0], size, stride)
        left, right = same_padding(in_hw[1], size, stride)
        self.width = (0, 0, 0, 0, top, bottom, left, right)
        self.value = value

    def hybrid_forward(self, F, x):
        return F.pad(x, mode="constant", pad_width=self.width, constant_value=self.value)


class BatchNorm(gluon.HybridBlock):
    """Normalises over axis 1 with the batch statistics in training and the moving ones in
    evaluation (the operator reads the mode at run time); returns the output and the batch's mean
    and biased variance, which the adapter folds into the moving statistics (see the module's doc)."""

    def __init__(self, channels: int, epsilon: float, spatial: bool):
        super(BatchNorm, self).__init__()
        self.epsilon = epsilon
        self.axes = (0, 2, 3) if spatial else (0,)
        with self.name_scope():
            self.gamma = self.params.get("gamma", shape=(channels,), init="ones")
            self.beta = self.params.get("beta", shape=(channels,), init="zeros")
            self.running_mean = self.params.get("running_mean", shape=(channels,), init="zeros",
                                                grad_req="null", differentiable=False)
            self.running_var = self.params.get("running_var", shape=(channels,), init="ones",
                                               grad_req="null", differentiable=False)

    def hybrid_forward(self, F, x, gamma, beta, running_mean, running_var):
        out = F.BatchNorm(x, gamma, beta, running_mean, running_var, eps=self.epsilon, momentum=1.0,
                          fix_gamma=False, use_global_stats=False, axis=1)
        data = F.BlockGrad(x)
        mean = F.mean(data, axis=self.axes, keepdims=True)
        variance = F.mean(F.square(F.broadcast_sub(data, mean)), axis=self.axes)
        return out, F.reshape(mean, shape=(-1,)), variance


def canonical_lstm(in_features: int, units: int) -> rnn.LSTM:
    """Gluon's fused LSTM with its second bias (h2h) held at zero and out of training (see the doc)."""
    lstm = rnn.LSTM(units, layout="NTC", input_size=in_features)
    lstm.l0_h2h_bias.grad_req = "null"
    return lstm


def run_lstm(F, lstm: rnn.LSTM, x, states=None):
    """Outputs (batch, time, units) and final [h, c]; zero initial states when none are given."""
    if states is None:  # what Gluon does itself, done here so that the final states come back
        if F is nd:
            states = lstm.begin_state(x.shape[0], ctx=x.context, dtype=x.dtype)
        else:
            states = lstm.begin_state(0, func=F.zeros)
    return lstm(x, states)


class LSTMLayer(gluon.HybridBlock):
    def __init__(self, in_features: int, units: int, return_sequences: bool):
        super(LSTMLayer, self).__init__()
        self.return_sequences = return_sequences
        with self.name_scope():
            self.lstm = canonical_lstm(in_features, units)

    def hybrid_forward(self, F, x):
        out, _ = run_lstm(F, self.lstm, x)
        if self.return_sequences:
            return out
        return F.reshape(F.slice_axis(out, axis=1, begin=-1, end=None), shape=(0, -1))


class Seq2Seq(gluon.HybridBlock):
    """Encoder from a zero state, its final (h, c) starting the decoder; teacher forcing."""

    def __init__(self, layer: dict):
        super(Seq2Seq, self).__init__()
        self.source_len = layer["source_len"]
        with self.name_scope():
            self.source_embedding = nn.Embedding(layer["source_vocab"], layer["embed_dim"])
            self.target_embedding = nn.Embedding(layer["target_vocab"], layer["embed_dim"])
            self.encoder = canonical_lstm(layer["embed_dim"], layer["units"])
            self.decoder = canonical_lstm(layer["embed_dim"], layer["units"])

    def hybrid_forward(self, F, x):
        source = self.source_embedding(F.slice_axis(x, axis=1, begin=0, end=self.source_len))
        target = self.target_embedding(F.slice_axis(x, axis=1, begin=self.source_len, end=None))
        _, state = run_lstm(F, self.encoder, source)
        out, _ = run_lstm(F, self.decoder, target, state)
        return out


class Attention(gluon.HybridBlock):
    """Multi-head self-attention as the IR states it, the way GluonNLP writes it for a hybridized graph:
    Dense projections, the heads folded into the batch axis, F.batch_dot for the scores and the weighted
    values, F.softmax over the keys, the causal mask a -inf score added, F.Dropout on the attention weights
    (inverted, active in training mode only). MXNet 1.9's fused self-attention operators
    (contrib.interleaved_matmul_selfatt_*) take one interleaved QKV projection in (steps, batch, d) layout and
    have no causal mask of their own; this keeps the four canonical projections as they are."""

    PROJECTIONS = ("query", "key", "value", "output")

    def __init__(self, layer: dict, in_shape):
        super(Attention, self).__init__()
        self.heads, self.rate, self.steps = layer["heads"], layer["dropout"], in_shape[0]
        self.causal = layer["causal"]
        self.scale = 1.0 / math.sqrt(in_shape[1] // layer["heads"])
        with self.name_scope():
            for part in self.PROJECTIONS:
                setattr(self, part, nn.Dense(in_shape[1], flatten=False, in_units=in_shape[1], prefix=part + "_"))

    def _split(self, F, x):
        """(batch, steps, d) -> (batch * heads, steps, dk): head h is columns h*dk .. (h+1)*dk - 1."""
        x = F.transpose(F.reshape(x, shape=(0, 0, self.heads, -1)), axes=(0, 2, 1, 3))
        return F.reshape(x, shape=(-3, 0, 0))

    def hybrid_forward(self, F, x):
        q, k, v = (self._split(F, getattr(self, part)(x)) for part in self.PROJECTIONS[:3])
        scores = F.batch_dot(q, k, transpose_b=True) * self.scale
        if self.causal:  # -inf for every key after the query's own step
            steps = F.arange(self.steps)
            later = F.broadcast_greater(F.reshape(steps, shape=(1, -1)), F.reshape(steps, shape=(-1, 1)))
            mask = F.where(later, F.full(shape=(self.steps, self.steps), val=float("-inf")),
                           F.zeros(shape=(self.steps, self.steps)))
            scores = F.broadcast_add(scores, F.cast(F.expand_dims(mask, axis=0), dtype=self._dtype()))
        weights = F.softmax(scores, axis=-1)
        if self.rate > 0:
            weights = F.Dropout(weights, p=self.rate)
        out = F.reshape(F.batch_dot(weights, v), shape=(-4, -1, self.heads, 0, 0))
        out = F.reshape(F.transpose(out, axes=(0, 2, 1, 3)), shape=(0, 0, -3))
        return self.output(out)

    def _dtype(self):
        return self.query.weight.dtype  # float64 under certification (cast)


class PositionalEmbedding(gluon.HybridBlock):
    """A learned (max_len, d) table whose first `steps` rows are added to the input."""

    def __init__(self, max_len: int, in_shape):
        super(PositionalEmbedding, self).__init__()
        self.steps = in_shape[0]
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(max_len, in_shape[1]))

    def hybrid_forward(self, F, x, weight):
        rows = F.slice_axis(weight, axis=0, begin=0, end=self.steps)
        return F.broadcast_add(x, F.expand_dims(rows, axis=0))


class ToSequence(gluon.HybridBlock):
    """(batch, H, W, C) -> (batch, H * W, C), an NHWC activation's positions row by row: reshape's -3 merges
    the two spatial axes, 0 keeps the batch and the channels."""

    def hybrid_forward(self, F, x):
        return F.reshape(x, shape=(0, -3, 0))


class SequenceMean(gluon.HybridBlock):
    """(batch, steps, features) -> (batch, features), the mean over the steps."""

    def hybrid_forward(self, F, x):
        return F.mean(x, axis=1)


class Residual(gluon.HybridBlock):
    """y = x + f(x), f a Net of the block's own layers; passes on the batch statistics of its BatchNorms."""

    def __init__(self, net: "Net"):
        super(Residual, self).__init__()
        with self.name_scope():
            self.net = net

    def hybrid_forward(self, F, x):
        outputs = self.net(x)
        return [x + outputs[0]] + list(outputs[1:])


class Net(gluon.HybridBlock):
    """The IR's layers in order; returns the logits and the batch statistics of every BatchNorm."""

    def __init__(self, layers: list):
        super(Net, self).__init__()
        self.layers = layers
        for index, block in enumerate(layers):
            self.register_child(block, "layer%d" % index)

    def hybrid_forward(self, F, x):
        stats = []
        for block in self.layers:
            x = block(x)
            if isinstance(block, (BatchNorm, Residual)):
                x, more = x[0], list(x[1:])
                stats += more
        return [x] + stats


# MXNet's Activation has no gelu; Gluon's GELU (LeakyReLU act_type 'gelu') is the exact (erf) form
ACTIVATIONS = {"relu": lambda: nn.Activation("relu"), "sigmoid": lambda: nn.Activation("sigmoid"),
               "tanh": lambda: nn.Activation("tanh"), "gelu": nn.GELU}


def _spatial(layer: dict, in_shape) -> List[gluon.HybridBlock]:
    kind, stride = layer["type"], layer["stride"]
    if kind == "conv2d":
        size, pad_value = layer["kernel"], 0.0
        core = nn.Conv2D(layer["filters"], size, strides=stride, in_channels=in_shape[-1])
    elif kind == "maxpool2d":
        size, pad_value = layer["pool"], float("-inf")
        core = nn.MaxPool2D(size, strides=stride)
    else:
        raise not_built("layer type", kind)
    if layer["padding"] == "valid":
        return [core]
    if layer["padding"] == "same":
        return [SamePad(in_shape[:2], size, stride, pad_value), core]
    raise not_built("padding", layer["padding"])


def build_net(spec: dict):
    """The network, the block holding each weighted IR layer's parameters by layer name (a residual block's own
    layers included), and the BatchNorm layers (with the positions each averages over per sample: height x width
    for images) in the order their statistics come out."""
    by_name = {}
    norms = []
    net = _build(infer_shapes(spec), by_name, norms)
    return net, by_name, norms


def _build(shapes, by_name: dict, norms: list) -> Net:
    blocks = []
    channels_first = False
    for layer, in_shape, _ in shapes:
        kind = layer["type"]
        if kind in ("conv2d", "maxpool2d", "batchnorm") and len(in_shape) == 3 and not channels_first:
            blocks.append(Transpose((0, 3, 1, 2)))
            channels_first = True
        if kind in ("flatten", "to_sequence", "residual") and channels_first:
            blocks.append(Transpose((0, 2, 3, 1)))
            channels_first = False
        if kind in ("conv2d", "maxpool2d"):
            made = _spatial(layer, in_shape)
        elif kind == "batchnorm":
            made = [BatchNorm(in_shape[-1], layer["epsilon"], spatial=len(in_shape) == 3)]
            norms.append((layer, int(np.prod(in_shape[:-1]))))  # values per channel and sample
        elif kind == "layer_norm":  # over the last axis, biased variance
            made = [nn.LayerNorm(axis=-1, epsilon=layer["epsilon"], in_channels=in_shape[-1])]
        elif kind == "activation":
            made = [lookup(ACTIVATIONS, "activation", layer["fn"])()]
        elif kind == "dropout":
            made = [nn.Dropout(layer["rate"])]
        elif kind == "flatten":
            made = [nn.Flatten()]
        elif kind == "to_sequence":
            made = [ToSequence()]
        elif kind == "sequence_mean":
            made = [SequenceMean()]
        elif kind == "dense":
            made = [nn.Dense(layer["units"], flatten=False, in_units=in_shape[-1])]
        elif kind == "embedding":
            made = [nn.Embedding(layer["vocab"], layer["dim"])]
        elif kind == "lstm":
            made = [LSTMLayer(in_shape[-1], layer["units"], layer["return_sequences"])]
        elif kind == "seq2seq":
            made = [Seq2Seq(layer)]
        elif kind == "residual":
            made = [Residual(_build(block_shapes(layer, in_shape), by_name, norms))]
        elif kind == "attention":
            made = [Attention(layer, in_shape)]
        elif kind == "positional_embedding":
            made = [PositionalEmbedding(layer["max_len"], in_shape)]
        elif kind == "tied_output":
            # weight tying as GluonNLP ties a decoder: a Dense built on the embedding's ParameterDict takes its
            # weight (vocab, dim), the same Parameter (gradients of both uses summed), and adds its own bias
            table = by_name[layer["embedding"]].params
            made = [nn.Dense(layer["units"], flatten=False, in_units=in_shape[-1], params=table)]
        else:
            raise not_built("layer type", kind)
        blocks += made
        if kind in WEIGHTED:  # set_weights finds them by name
            by_name[layer["name"]] = made[-1]
    if channels_first:
        blocks.append(Transpose((0, 2, 3, 1)))
    return Net(blocks)


# ---- canonical weights --------------------------------------------------------------------------

def _lstm_params(prefix: str, lstm: rnn.LSTM) -> Dict[str, gluon.Parameter]:
    """"..._hh" marks Gluon's second bias, kept at zero: the canonical bias is the sum of the two."""
    return {prefix + "kernel": lstm.l0_i2h_weight, prefix + "recurrent_kernel": lstm.l0_h2h_weight,
            prefix + "bias": lstm.l0_i2h_bias, prefix + "bias_hh": lstm.l0_h2h_bias}


def gluon_params(kind: str, block) -> Dict[str, gluon.Parameter]:
    if kind == "batchnorm":
        return {"gamma": block.gamma, "beta": block.beta, "moving_mean": block.running_mean,
                "moving_var": block.running_var}
    if kind == "layer_norm":
        return {"gamma": block.gamma, "beta": block.beta}
    if kind in ("embedding", "positional_embedding"):
        return {"embeddings": block.weight}
    if kind == "attention":
        return dict(pair for part in Attention.PROJECTIONS for pair in (
            (part + "_kernel", getattr(block, part).weight), (part + "_bias", getattr(block, part).bias)))
    if kind == "tied_output":  # its weight is the embedding's, exported there
        return {"bias": block.bias}
    if kind == "lstm":
        return _lstm_params("", block.lstm)
    if kind == "seq2seq":
        params = {"source_embeddings": block.source_embedding.weight,
                  "target_embeddings": block.target_embedding.weight}
        params.update(_lstm_params("encoder_", block.encoder))
        params.update(_lstm_params("decoder_", block.decoder))
        return params
    if kind in ("conv2d", "dense"):
        return {"kernel": block.weight, "bias": block.bias}
    raise not_built("weights of layer type", kind)


def learning_rate(config: dict, schedule=None):
    """Each update's learning rate by its number (from 0), a host float as MXNet's lr_scheduler gives its
    optimisers one per update: the recipe's constant, or its schedule's (shared/schedule.py)."""
    if schedule is None:
        return lambda update: config["lr"]
    factor = lookup({"warmup_cosine": schedules.factor}, "schedule", schedule["name"])
    return lambda update: config["lr"] * factor(schedule, update)


class SGD(object):
    def __init__(self, params: List[nd.NDArray], config: dict, schedule=None):
        self.rate, self.updates = learning_rate(config, schedule), 0
        self.momentum = config.get("momentum", 0.0)
        self.nesterov, self.weight_decay = config.get("nesterov", False), config.get("weight_decay", 0.0)
        self.velocity = [nd.zeros_like(p) for p in params] if self.momentum else []

    def step(self, params, grads):
        lr, self.updates = self.rate(self.updates), self.updates + 1
        for k, (p, g) in enumerate(zip(params, grads)):
            if self.weight_decay:
                g = g + self.weight_decay * p  # coupled L2, on every trainable weight
            if self.momentum:
                v = self.velocity[k]
                v *= self.momentum
                v += g
                g = g + self.momentum * v if self.nesterov else v
            p -= lr * g


class Adam(object):
    decoupled_decay = 0.0  # AdamW's: p -= lr_t * weight_decay * p before the step

    def __init__(self, params: List[nd.NDArray], config: dict, schedule=None):
        self.rate = learning_rate(config, schedule)
        self.b1, self.b2, self.eps = config["beta1"], config["beta2"], config["epsilon"]
        self.t = 0
        self.m = [nd.zeros_like(p) for p in params]
        self.v = [nd.zeros_like(p) for p in params]

    def step(self, params, grads):
        lr = self.rate(self.t)
        self.t += 1  # the step count lives on the host: the bias corrections are plain floats
        step_size = lr / (1.0 - self.b1 ** self.t)
        bc2_sqrt = (1.0 - self.b2 ** self.t) ** 0.5
        for p, g, m, v in zip(params, grads, self.m, self.v):
            if self.decoupled_decay:
                p *= 1.0 - lr * self.decoupled_decay
            m *= self.b1
            m += (1.0 - self.b1) * g
            v *= self.b2
            v += (1.0 - self.b2) * nd.square(g)
            denominator = nd.sqrt(v)
            denominator /= bc2_sqrt
            denominator += self.eps
            p -= step_size * m / denominator


class AdamW(Adam):
    """The reference's (torch's) AdamW: Adam above with the decoupled decay first. MXNet 1.9's own
    (nd.contrib.adamw_update, w -= eta * (lr * m / (sqrt(v) + eps) + wd * w)) has no bias correction: its
    callers fold it into lr, which moves epsilon, as MXNet's Adam does."""

    def __init__(self, params: List[nd.NDArray], config: dict, schedule=None):
        super().__init__(params, config, schedule)
        self.decoupled_decay = config["weight_decay"]


class Adadelta(object):
    def __init__(self, params: List[nd.NDArray], config: dict, schedule=None):
        self.rate, self.updates = learning_rate(config, schedule), 0
        self.rho, self.eps = config["rho"], config["epsilon"]
        self.square_avg = [nd.zeros_like(p) for p in params]
        self.delta_avg = [nd.zeros_like(p) for p in params]

    def step(self, params, grads):
        lr, self.updates = self.rate(self.updates), self.updates + 1
        for p, g, v, u in zip(params, grads, self.square_avg, self.delta_avg):
            v *= self.rho
            v += (1.0 - self.rho) * nd.square(g)
            d = nd.sqrt(u + self.eps)
            d /= nd.sqrt(v + self.eps)
            d *= g
            u *= self.rho
            u += (1.0 - self.rho) * nd.square(d)
            p -= lr * d


OPTIMIZERS = {"sgd": SGD, "adam": Adam, "adadelta": Adadelta, "adamw": AdamW}


# ---- the objective: the network and its loss in one hybridized graph -----------------------------

class Objective(gluon.HybridBlock):
    """(mean loss, right predictions, kept tokens, batch statistics...) of a batch. The weight and the
    predictions made follow from the batch's shape on the host; only the masked loss needs a count."""

    def __init__(self, net: Net, loss: str):
        super(Objective, self).__init__()
        self.loss = loss
        with self.name_scope():
            self.net = net

    def hybrid_forward(self, F, x, y):
        outputs = self.net(x)
        logits, stats = outputs[0], outputs[1:]
        if self.loss == "sigmoid_cross_entropy":
            z = F.reshape(logits, shape=(-1,))
            # log(1 + exp(-|z|)) + max(z, 0) - z y: stable for every z
            per_sample = F.relu(z) - z * y + F.Activation(-F.abs(z), act_type="softrelu")
            right = F.sum(F.broadcast_equal(z > 0, y))
            return [F.mean(per_sample), right, F.sum(F.ones_like(y))] + list(stats)
        per_token = -F.pick(F.log_softmax(logits, axis=-1), y, axis=-1)
        hits = F.broadcast_equal(F.argmax(logits, axis=-1), y)
        if self.loss == "masked_sequence_softmax_cross_entropy":
            kept = y != PAD_ID
            count = F.sum(kept)
            value = F.sum(per_token * kept) / F.maximum(count, 1.0)  # no tokens kept: 0, as divide_no_nan
            return [value, F.sum(hits * kept), count] + list(stats)
        if self.loss in ("softmax_cross_entropy", "sequence_softmax_cross_entropy"):
            return [F.mean(per_token), F.sum(hits), F.sum(F.ones_like(y))] + list(stats)
        raise not_built("loss", self.loss)


def check_threads(threads: int) -> None:
    """MXNet's OpenMP thread count is fixed at import: a cell asking for another one is refused."""
    if threads != THREADS:
        raise RuntimeError("MXNet's OpenMP runs %d threads, fixed when mxnet was imported (from DLBENCH_THREADS); "
                           "%d cannot be set in the same process" % (THREADS, threads))


DTYPES = {"float32": np.float32, "float64": np.float64}


class Adapter(BaseAdapter):
    name = "mxnet"
    dtypes = tuple(DTYPES)

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        check_threads(threads)
        if device == "gpu":
            if mx.context.num_gpus() == 0:
                raise RuntimeError("device gpu requested, but MXNet %s sees no GPU (CUDA build: %s)"
                                   % (mx.__version__, mx.runtime.Features().is_enabled("CUDA")))
            self.ctx = mx.gpu(0)
        else:
            self.ctx = mx.cpu()
        mx.random.seed(seed)  # dropout masks
        self.net, self.by_name, self.norms = build_net(model)
        self.objective = Objective(self.net, recipe["loss"])
        self.objective.initialize(ctx=self.ctx)  # placeholders: set_weights brings the canonical ones
        # float64 only for certification, which measures float32 rounding against it
        self.dtype = lookup(DTYPES, "dtype", recipe_dtype(recipe))
        if self.dtype == np.float64:
            self.objective.cast("float64")
        # marks only: the graphs are built by the first calls. static_alloc and static_shape (Gluon's
        # performance guide, as an idiomatic program runs) keep each graph's memory and shapes from one
        # call to the next instead of planning them again at every batch
        self.objective.hybridize(static_alloc=True, static_shape=True)
        self.trainable = [p for p in self.objective.collect_params().values() if p.grad_req != "null"]
        optimizer = lookup(OPTIMIZERS, "optimizer", recipe["optimizer"]["name"])
        self.optimizer = optimizer([p.data(self.ctx) for p in self.trainable], recipe["optimizer"],
                                   recipe.get("schedule"))
        self.float_inputs = model["input_dtype"].startswith("float")
        self._arrays = {}  # id of a Split -> (the split, x, y on the device): converted once

    def versions(self):
        return {"mxnet": mx.__version__, "numpy": np.__version__}

    def threads_used(self):
        return THREADS

    # ---- weights ----

    def _layer_params(self):
        for layer, _, _ in all_shapes(self.model_ir):
            if layer["name"] in self.by_name:
                yield layer, gluon_params(layer["type"], self.by_name[layer["name"]])

    def set_weights(self, weights):
        for layer, params in self._layer_params():
            for key, param in params.items():
                if key.endswith("bias_hh"):  # Gluon's second LSTM bias; the canonical bias is their sum
                    param.set_data(nd.zeros(param.shape, ctx=self.ctx))
                    continue
                value = to_out_in_layout(layer["type"], key, weights[layer["name"] + "/" + key])
                param.set_data(nd.array(np.ascontiguousarray(value), ctx=self.ctx, dtype=self.dtype))

    def get_weights(self):
        return self._export(gradients=False)

    def apply_gradients(self, gradients):
        native = {}  # Gluon's parameter name -> its gradient in Gluon's layout
        for layer, params in self._layer_params():
            for key, param in params.items():
                if key.startswith("moving_"):
                    continue
                # Gluon's second LSTM bias gets the canonical bias's gradient, as in training
                canonical = key[:-len("_hh")] if key.endswith("bias_hh") else key
                value = to_out_in_layout(layer["type"], canonical, gradients[layer["name"] + "/" + canonical])
                native[param.name] = nd.array(np.ascontiguousarray(value), ctx=self.ctx, dtype=self.dtype)
        self.optimizer.step([p.data(self.ctx) for p in self.trainable], [native[p.name] for p in self.trainable])

    def _export(self, gradients: bool) -> Dict[str, np.ndarray]:
        """Canonical weights, or the gradients of the trainable ones."""
        out = {}
        for layer, params in self._layer_params():
            for key, param in params.items():
                if key.endswith("bias_hh") or (gradients and key.startswith("moving_")):
                    continue
                if gradients:
                    value = param.grad(self.ctx)
                else:
                    value = param.data(self.ctx)
                    if key + "_hh" in params:
                        value = value + params[key + "_hh"].data(self.ctx)
                out[layer["name"] + "/" + key] = from_out_in_layout(layer["type"], key, value.asnumpy()).copy()
        return out

    # ---- data ----

    def _on_device(self, data: Split):
        """Inputs and labels as device arrays, made once per split: pixels stay uint8 until a batch;
        token ids and labels are floats, what MXNet's embedding and pick take (exact below 2**24)."""
        key = id(data)
        if key not in self._arrays:  # holding the split keeps its id from being reused
            x = np.asarray(data.x)
            x = nd.array(x, ctx=self.ctx, dtype=np.uint8 if self.float_inputs else self.dtype)
            y = nd.array(np.asarray(data.y), ctx=self.ctx, dtype=self.dtype)
            self._arrays[key] = (data, x, y)
        return self._arrays[key][1:]

    def _inputs(self, x: nd.NDArray, scale) -> nd.NDArray:
        if not self.float_inputs:
            return x
        x = x.astype(self.dtype)
        return x / scale if scale else x

    # ---- training ----

    def _update_moving_statistics(self, stats, in_count: int) -> None:
        """Moving mean and variance after a training batch, the variance unbiased (as the reference)."""
        for index, (layer, positions) in enumerate(self.norms):
            params = gluon_params("batchnorm", self.by_name[layer["name"]])
            mean, variance = stats[2 * index], stats[2 * index + 1]
            n = in_count * positions
            unbiased = variance * (n / max(n - 1.0, 1.0))
            momentum = layer["momentum"]
            moving_mean, moving_var = params["moving_mean"].data(self.ctx), params["moving_var"].data(self.ctx)
            moving_mean[:] = momentum * moving_mean + (1.0 - momentum) * mean
            moving_var[:] = momentum * moving_var + (1.0 - momentum) * unbiased

    def _forward_backward(self, x, y):
        """The objective's outputs, training mode, with the loss's gradients in the parameters."""
        with autograd.record():
            outputs = self.objective(x, y)
        outputs[0].backward()
        return outputs

    def _train_step(self, x, y):
        outputs = self._forward_backward(x, y)
        self.optimizer.step([p.data(self.ctx) for p in self.trainable], [p.grad(self.ctx) for p in self.trainable])
        if self.norms:
            self._update_moving_statistics(outputs[3:], x.shape[0])
        return outputs[:3]

    def train_epoch(self, data, order):
        x_all, y_all = self._on_device(data)
        order_nd = nd.array(order, ctx=self.ctx, dtype=np.int64)
        sums = nd.zeros(4, ctx=self.ctx, dtype=np.float64)
        for batch in batch_slices(len(order), self.recipe["batch_size"]):
            index = order_nd[batch.start:batch.stop]
            x = self._inputs(nd.take(x_all, index), data.input_scale)
            y = nd.take(y_all, index)
            loss, right, count = self._train_step(x, y)
            sums += self._batch_sums(loss, right, count, y.shape)
        return finish_metrics(self.recipe["loss"], *sums.asnumpy().tolist())  # the epoch's one fetch

    def _batch_sums(self, loss, right, count, y_shape) -> nd.NDArray:
        """(loss x weight, weight, right, made), as base.finish_metrics sums them, in float64 on the
        engine: no host sync per batch. Weight and predictions made follow from the labels' shape,
        but for the masked loss, whose both are the kept tokens."""
        if self.recipe["loss"] == "masked_sequence_softmax_cross_entropy":
            terms = nd.concat(loss * count, count, right, count, dim=0)
        else:
            weight, made = float(y_shape[0]), float(np.prod(y_shape))
            terms = nd.concat(loss * weight, nd.full((1,), weight, ctx=self.ctx, dtype=loss.dtype), right,
                              nd.full((1,), made, ctx=self.ctx, dtype=loss.dtype), dim=0)
        return terms.astype(np.float64)

    def loss_and_gradients(self, data):
        x_all, y_all = self._on_device(data)
        loss = self._forward_backward(self._inputs(x_all, data.input_scale), y_all)[0]
        return float(loss.asscalar()), self._export(gradients=True)

    def evaluate(self, data):
        x_all, y_all = self._on_device(data)
        sums = nd.zeros(4, ctx=self.ctx, dtype=np.float64)
        for batch in batch_slices(len(data), self.recipe["batch_size"]):
            x = self._inputs(x_all[batch.start:batch.stop], data.input_scale)
            y = y_all[batch.start:batch.stop]
            loss, right, count = self.objective(x, y)[:3]  # outside autograd.record: predict mode
            sums += self._batch_sums(loss, right, count, y.shape)
        return finish_metrics(self.recipe["loss"], *sums.asnumpy().tolist())

    def predict(self, x):
        inputs = nd.array(np.ascontiguousarray(x), ctx=self.ctx, dtype=self.dtype)  # token ids too
        return self.net(inputs)[0].asnumpy()

    def serving(self):
        """The hybridized Gluon network (static_alloc, static_shape: its cached graph, one per batch shape)
        under autograd.predict_mode; pixels go to the device as uint8 and are scaled there."""
        scale = self.input_scale

        def serve(x):
            stored = np.uint8 if self.float_inputs else self.dtype  # token ids as floats, as MXNet's embedding takes
            inputs = self._inputs(nd.array(np.ascontiguousarray(x), ctx=self.ctx, dtype=stored), scale)
            with autograd.predict_mode():
                return self.net(inputs)[0].asnumpy()
        return serve

    def training_outputs(self, x):
        inputs = nd.array(np.ascontiguousarray(x), ctx=self.ctx, dtype=self.dtype)
        with autograd.train_mode():
            return self.net(inputs)[0].asnumpy()

    def synchronise(self):
        nd.waitall()
