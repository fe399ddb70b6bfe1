"""Theano's layer table: each IR kind's symbolic build over canonical theano.shared weights, and Model, which
applies the table's builds in order.

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
(attend); the tied output multiplies by the embedding's own shared table, transposed, so that
one variable gets both uses' gradients, and holds only its bias.

The LLaMA pieces are written out in the graph too, as layer_norm and attention are (Theano 1.0 has no RMS
normalisation, silu or attention op): rms_norm from sqr, mean and sqrt; swiglu's silu as x * sigmoid(x);
grouped-query attention on attend, its queries reshaped so that a key/value head's query heads share its keys
and values uncopied, the rotary cos/sin tables numpy constants of floatX computed once at build time.

Imported by adapter.py once it has set THEANO_FLAGS and imported Theano.
"""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import theano
import theano.tensor as T
from theano.sandbox.rng_mrg import MRG_RandomStreams
from theano.tensor.nnet import conv2d
from theano.tensor.signal.pool import pool_2d

from dlbench.shared.ir import all_shapes, block_shapes, infer_shapes, param_shapes, same_padding
from dlbench.worker.base import LayerEntry, lookup, not_built, rotary_tables

F32 = np.float32

# the kinds that take an image channels first (NCHW), and those that need it back NHWC (the canonical order)
CHANNELS_FIRST = ("conv2d", "maxpool2d", "batchnorm")
CHANNELS_LAST = ("flatten", "to_sequence")
SCANNED = ("lstm", "seq2seq")  # the kinds whose graph runs theano.scan


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
    """x (..., in) times the (in, out) kernel, plus the bias unless it is None (the LLaMA pieces have none)."""
    flat = T.dot(x if x.ndim == 2 else x.reshape((-1, x.shape[-1])), kernel)
    if bias is not None:
        flat = flat + bias
    if x.ndim == 2:
        return flat
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


def layer_norm(x, gamma, beta, epsilon):
    """Over the last axis, with the biased variance (Theano 1.0 has no layer normalisation op)."""
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    variance = T.sqr(centered).mean(axis=-1, keepdims=True)
    return centered / T.sqrt(variance + F32(epsilon)) * gamma + beta


def rms_norm(x, gamma, epsilon):
    """Over the last axis, no mean taken out and no offset (Theano 1.0 has no RMS normalisation op)."""
    return x / T.sqrt(T.sqr(x).mean(axis=-1, keepdims=True) + F32(epsilon)) * gamma


def silu(x):
    """x * sigmoid(x) with Theano's exact sigmoid (Theano 1.0 has no silu/swish op; its ultra_fast_sigmoid and
    hard_sigmoid are approximations)."""
    return x * T.nnet.sigmoid(x)


def rotate(x, cos, sin, size: int):
    """x (batch, steps, heads, dk) rotated by its step: x cos + rotate_half(x) sin (Hugging Face's LLaMA), the
    (steps, dk) tables broadcast over the batch and the heads."""
    half = size // 2
    halves = T.concatenate([-x[:, :, :, half:], x[:, :, :, :half]], axis=3)
    return x * cos.dimshuffle("x", 0, "x", 1) + halves * sin.dimshuffle("x", 0, "x", 1)


def attend(model, q, k, v, steps: int, size: int, rows: int, causal: bool, dropout: float, training: bool):
    """Scaled dot-product attention, written out with Theano's own ops (Theano 1.0 has no attention op):
    q (n, rows, dk) against k, v (n, steps, dk) by batched_dot, softmax over the keys (Theano's softmax takes
    rows), the causal mask a -inf score (switch) where query row r is step r % steps (rows = steps, or several
    query heads' steps stacked on one key/value head), dropout on the attention weights in training."""
    scores = T.batched_dot(q, k.dimshuffle(0, 2, 1)) * F32(1.0 / math.sqrt(size))
    if causal:  # -inf for every key after the query's own step
        earlier = T.constant(np.tile(np.tril(np.ones((steps, steps), dtype="int8")), (rows // steps, 1)))
        scores = T.switch(earlier.dimshuffle("x", 0, 1), scores, F32(-np.inf))
    weights = T.nnet.softmax(scores.reshape((-1, steps))).reshape(scores.shape)
    weights = model.dropout(weights, dropout, training)
    return T.batched_dot(weights, v)


# ---- the table ------------------------------------------------------------------------------------
# build(model, layer, in_shape, x, w, training, updates) -> x: the layer applied to the symbolic x, `w` its own
# shared weights by canonical key, `updates` collecting the moving statistics' updates (training only).
# weights(layer, in_shape) -> its shared variables in canonical layout by canonical name ("layer/key").

def canonical_shared(layer, in_shape):
    """The layer's weights as theano.shared variables in canonical layout (zeros until set_weights)."""
    shared = OrderedDict()  # type: OrderedDict
    for key, shape in param_shapes(layer, in_shape).items():
        name = layer["name"] + "/" + key
        shared[name] = theano.shared(np.zeros(shape, np.float32), name=name)
    return shared


def build_conv2d(model, layer, in_shape, x, w, training, updates):
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


def build_maxpool2d(model, layer, in_shape, x, w, training, updates):
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


def build_batchnorm(model, layer, in_shape, x, w, training, updates):
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


def build_layer_norm(model, layer, in_shape, x, w, training, updates):
    return layer_norm(x, w["gamma"], w["beta"], layer["epsilon"])


def build_activation(model, layer, in_shape, x, w, training, updates):
    return lookup(ACTIVATIONS, "activation", layer["fn"])(x)


def build_dropout(model, layer, in_shape, x, w, training, updates):
    return model.dropout(x, layer["rate"], training)


def build_flatten(model, layer, in_shape, x, w, training, updates):
    return x.reshape((x.shape[0], int(np.prod(in_shape))))  # NHWC in C order: the canonical one


def build_to_sequence(model, layer, in_shape, x, w, training, updates):
    # NHWC (H, W, C) -> (H * W, C) in C order: step r * W + c is row r, column c
    return x.reshape((x.shape[0], in_shape[0] * in_shape[1], in_shape[2]))


def build_sequence_mean(model, layer, in_shape, x, w, training, updates):
    return x.mean(axis=1)


def build_dense(model, layer, in_shape, x, w, training, updates):
    return dense(x, w["kernel"], w["bias"], layer["units"])


def build_embedding(model, layer, in_shape, x, w, training, updates):
    return embed(w["embeddings"], x)


def build_lstm(model, layer, in_shape, x, w, training, updates):
    hs, (h, _) = lstm_scan(x, w["kernel"], w["recurrent_kernel"], w["bias"], layer["units"])
    return hs.dimshuffle(1, 0, 2) if layer["return_sequences"] else h


def build_seq2seq(model, layer, in_shape, x, w, training, updates):
    # the encoder's final (h, c) starts the decoder; teacher forcing
    source_len, units = layer["source_len"], layer["units"]
    source = embed(w["source_embeddings"], x[:, :source_len])
    target = embed(w["target_embeddings"], x[:, source_len:])
    _, state = lstm_scan(source, w["encoder_kernel"], w["encoder_recurrent_kernel"], w["encoder_bias"], units)
    hs, _ = lstm_scan(target, w["decoder_kernel"], w["decoder_recurrent_kernel"], w["decoder_bias"], units, state)
    return hs.dimshuffle(1, 0, 2)


def build_residual(model, layer, in_shape, x, w, training, updates):
    inner = [(own, tuple(shape)) for own, shape, _ in block_shapes(layer, tuple(in_shape))]
    return x + model.sequence(inner, x, training, updates)


def build_attention(model, layer, in_shape, x, w, training, updates):
    """Multi-head self-attention as the IR states it (attend): the heads folded into the batch axis."""
    steps, features = in_shape
    heads = layer["heads"]
    size = features // heads

    def split(t):  # (batch, steps, d) -> (batch * heads, steps, dk): head h is columns h*dk .. (h+1)*dk - 1
        t = t.reshape((t.shape[0], steps, heads, size)).dimshuffle(0, 2, 1, 3)
        return t.reshape((-1, steps, size))

    q, k, v = (split(dense(x, w[part + "_kernel"], w[part + "_bias"], features))
               for part in ("query", "key", "value"))
    out = attend(model, q, k, v, steps, size, steps, layer["causal"], layer["dropout"], training)
    out = out.reshape((-1, heads, steps, size)).dimshuffle(0, 2, 1, 3)
    return dense(out.reshape((-1, steps, features)), w["output_kernel"], w["output_bias"], features)


def build_rms_norm(model, layer, in_shape, x, w, training, updates):
    return rms_norm(x, w["gamma"], layer["epsilon"])


def build_swiglu(model, layer, in_shape, x, w, training, updates):
    hidden = layer["hidden"]
    gate, up = dense(x, w["gate_kernel"], None, hidden), dense(x, w["up_kernel"], None, hidden)
    return dense(silu(gate) * up, w["down_kernel"], None, in_shape[-1])


def build_grouped_query_attention(model, layer, in_shape, x, w, training, updates):
    """LLaMA's attention on the same machinery as build_attention (attend), bias-free, rotary embeddings on the
    queries and keys. Grouping by reshaping: the query heads h = g * groups + j (groups = heads / kv_heads) that
    read key/value head g are consecutive, so the queries reshape to (batch * kv_heads, groups * steps, dk), their
    group's steps stacked as rows against the one key/value head's keys, and no key or value is copied per query
    head (as repeat_interleave would); the causal mask is the (steps, steps) one tiled over the groups' rows."""
    steps, features = in_shape
    heads, kv_heads = layer["heads"], layer["kv_heads"]
    size = features // heads
    groups = heads // kv_heads
    tables = rotary_tables(steps, size, layer["rope_base"])  # float64, constants of floatX
    cos, sin = (T.constant(table.astype(theano.config.floatX)) for table in tables)

    def project(part, count):  # (batch, steps, d) -> (batch, steps, count, dk): head h is columns h*dk ..
        return dense(x, w[part + "_kernel"], None, count * size).reshape((x.shape[0], steps, count, size))

    def fold(t, rows):  # (batch, steps, count, dk) -> (batch * kv_heads, rows, dk), a key/value head's block
        return t.dimshuffle(0, 2, 1, 3).reshape((-1, rows, size))

    q = fold(rotate(project("query", heads), cos, sin, size), groups * steps)
    k = fold(rotate(project("key", kv_heads), cos, sin, size), steps)
    v = fold(project("value", kv_heads), steps)
    out = attend(model, q, k, v, steps, size, groups * steps, layer["causal"], 0.0, training)
    out = out.reshape((-1, heads, steps, size)).dimshuffle(0, 2, 1, 3)  # the heads concatenated
    return dense(out.reshape((-1, steps, features)), w["output_kernel"], None, features)


def build_positional_embedding(model, layer, in_shape, x, w, training, updates):
    return x + w["embeddings"][:in_shape[0]].dimshuffle("x", 0, 1)


def build_tied_output(model, layer, in_shape, x, w, training, updates):
    # x E^T + b on the embedding's own shared table: its gradient sums both uses
    return dense(x, model.weights[layer["embedding"] + "/embeddings"].T, w["bias"], layer["units"])


LAYERS = {
    "conv2d": LayerEntry(build_conv2d, canonical_shared),
    "maxpool2d": LayerEntry(build_maxpool2d, None),
    "batchnorm": LayerEntry(build_batchnorm, canonical_shared),
    "layer_norm": LayerEntry(build_layer_norm, canonical_shared),
    "activation": LayerEntry(build_activation, None),
    "dropout": LayerEntry(build_dropout, None),
    "flatten": LayerEntry(build_flatten, None),
    "dense": LayerEntry(build_dense, canonical_shared),
    "embedding": LayerEntry(build_embedding, canonical_shared),
    "lstm": LayerEntry(build_lstm, canonical_shared),
    "seq2seq": LayerEntry(build_seq2seq, canonical_shared),
    "residual": LayerEntry(build_residual, None),
    "attention": LayerEntry(build_attention, canonical_shared),
    "positional_embedding": LayerEntry(build_positional_embedding, canonical_shared),
    "tied_output": LayerEntry(build_tied_output, canonical_shared),
    "to_sequence": LayerEntry(build_to_sequence, None),
    "sequence_mean": LayerEntry(build_sequence_mean, None),
    "rms_norm": LayerEntry(build_rms_norm, canonical_shared),
    "swiglu": LayerEntry(build_swiglu, canonical_shared),
    "grouped_query_attention": LayerEntry(build_grouped_query_attention, canonical_shared),
}
REFUSED = {}


def runs_scan(spec: dict) -> bool:
    """Whether the model's graph runs theano.scan: an LSTM or a seq2seq among its layers."""
    return any(layer["type"] in SCANNED for layer in spec["layers"])


class Model(object):
    """The IR's layers over canonical shared weights: self.weights["layer/param"] -> shared."""

    def __init__(self, spec: dict, seed: int):
        self.layers = [(layer, tuple(in_shape)) for layer, in_shape, _ in infer_shapes(spec)]
        self.weights = OrderedDict()  # type: OrderedDict
        for layer, in_shape, _ in all_shapes(spec):  # a residual block's own layers too
            made = lookup(LAYERS, "layer type", layer["type"]).weights
            if made is not None:
                self.weights.update(made(layer, in_shape))
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
            if kind in CHANNELS_FIRST and len(in_shape) == 3 and not channels_first:
                x, channels_first = x.dimshuffle(0, 3, 1, 2), True
            if kind in CHANNELS_LAST and channels_first:
                x, channels_first = x.dimshuffle(0, 2, 3, 1), False
            x = self.apply(layer, in_shape, x, training, updates)
        if channels_first:
            x = x.dimshuffle(0, 2, 3, 1)
        return x

    def apply(self, layer, in_shape, x, training, updates):
        w = {key.split("/", 1)[1]: var for key, var in self.weights.items() if key.startswith(layer["name"] + "/")}
        return lookup(LAYERS, "layer type", layer["type"]).build(self, layer, in_shape, x, w, training, updates)

    def dropout(self, x, rate: float, training: bool):
        """Inverted dropout in training; the identity otherwise."""
        if not training or rate == 0:
            return x
        keep = 1.0 - rate
        mask = self.rng.binomial(x.shape, p=keep, dtype="float32")
        return x * mask / F32(keep)
