"""Chainer's layer table: one LayerEntry per IR kind (`LAYERS`), the IR as a chainer.Chain of Chainer's own links
(Model).

Every entry's `build(layer, in_shape, links)` returns (link, apply): the Link that holds the layer's weights (None
for a weightless kind), which Model registers as its child named after the IR layer, and apply(x), the layer's
forward pass, which Model's forward calls in order (in_shape the canonical input shape without the batch; links the
weighted layers' links built so far, by IR layer name). Every entry's `weights(link)` returns the link's Chainer
Parameters (and BatchNormalization's moving statistics, plain arrays) by canonical key, with the Layout that
converts them (worker/base's, or CHAINER_LSTM, which also reorders the LSTM's gates).

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

LLaMA's pieces: rms_norm is our RMSNorm link (F.mean, F.square, F.rsqrt: Chainer 7 has no RMS normalisation);
swiglu three bias-free L.Linear with Chainer's F.swish at beta 1 as the silu; grouped_query_attention four bias-free
L.Linear, rotary tables computed once at build time (float64, cast to the Parameters' dtype) and the attention's
own scores and softmax (_attend), each key/value head serving its group of query heads in one F.matmul.
"""
from __future__ import annotations

import math
from typing import Dict, List, Tuple

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np

from dlbench.shared.ir import block_shapes, infer_shapes, same_padding
from dlbench.worker.base import (
    AS_CANONICAL,
    OIHW,
    OUT_IN,
    LayerEntry,
    Layout,
    NativeWeights,
    lookup,
    native_weights,
    not_built,
    rotary_tables,
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



def _lstm_to_native(key: str, value: np.ndarray) -> np.ndarray:
    if not key.endswith("embeddings"):  # a seq2seq block's tables are embeddings, laid out as canonical
        value = gates_to_chainer(value)
    return OUT_IN.to_native(key, value)  # then Linear's (out, in)


def _lstm_to_canonical(key: str, value: np.ndarray) -> np.ndarray:
    value = OUT_IN.to_canonical(key, value)
    return value if key.endswith("embeddings") else gates_from_chainer(value)


CHAINER_LSTM = Layout(_lstm_to_native, _lstm_to_canonical)  # an LSTM's and a seq2seq block's weights

# ---- the links ---------------------------------------------------------------------------------

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


def _padding(layer: dict, in_shape, size: int) -> "tuple[int, int, tuple]":
    """(symmetric pad h, symmetric pad w, explicit pad widths or ()) for a conv or pool layer of this size."""
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


def _heads(x, heads: int):
    """(batch, steps, heads * dk) -> (batch * heads, steps, dk): head h is columns h*dk .. (h+1)*dk - 1."""
    batch, steps = x.shape[:2]
    x = F.reshape(x, (batch, steps, heads, -1))
    return F.reshape(F.transpose(x, (0, 2, 1, 3)), (batch * heads, steps, -1))


def _merge_heads(x, batch: int, heads: int):
    """(batch * heads, steps, dk) -> (batch, steps, heads * dk): _heads undone."""
    steps = x.shape[1]
    x = F.transpose(F.reshape(x, (batch, heads, steps, -1)), (0, 2, 1, 3))
    return F.reshape(x, (batch, steps, -1))


def _attend(q, k, v, causal: bool, rate: float):
    """softmax(q k^T / sqrt(dk)) v for key/value heads k, v (n, steps, dk), each read by the `group` query heads
    stacked step-block after step-block in q (n, group * steps, dk): one F.matmul per product over all of them,
    no key or value copied per query head. Chainer 7 has no attention function or fused kernel: F.matmul,
    F.softmax over the keys, the causal mask a -inf score (F.where, as torch's is_causal), F.dropout on the
    attention weights (inverted, the identity unless chainer.config.train)."""
    steps, size = k.shape[1], k.shape[2]
    scores = F.matmul(q, k, transb=True) * (1.0 / math.sqrt(size))
    if causal:  # key s after query t gets -inf: no step sees a later one (the same rows for every query head)
        earlier = np.tile(np.tril(np.ones((steps, steps), dtype=bool)), (q.shape[1] // steps, 1))
        scores = F.where(np.broadcast_to(earlier, scores.shape), scores,
                         k.xp.full(scores.shape, -np.inf, dtype=scores.dtype))
    weights = F.softmax(scores, axis=-1)
    if rate > 0:
        weights = F.dropout(weights, rate)
    return F.matmul(weights, v)


class Attention(chainer.Chain):
    """Multi-head self-attention as the IR states it, with Chainer's own functions (Chainer 7 has no attention
    link or fused kernel): four L.Linear projections, the heads folded into the batch axis for F.matmul
    (_attend: one query head per key/value head)."""

    PROJECTIONS = ("query", "key", "value", "output")

    def __init__(self, layer: dict, features: int):
        super().__init__()
        self.heads, self.causal, self.rate = layer["heads"], layer["causal"], layer["dropout"]
        with self.init_scope():
            for part in self.PROJECTIONS:
                setattr(self, part, L.Linear(features, features, initialW=ZERO))

    def forward(self, x):
        q, k, v = (_heads(getattr(self, part)(x, n_batch_axes=2), self.heads) for part in self.PROJECTIONS[:3])
        out = _attend(q, k, v, self.causal, self.rate)
        return self.output(_merge_heads(out, x.shape[0], self.heads), n_batch_axes=2)


class RMSNorm(chainer.Link):
    """x / sqrt(mean(x^2) + epsilon) * gamma over the last axis, from F.mean, F.square and F.rsqrt: Chainer 7 has
    no RMS normalisation, and F.normalize's L2 normalisation adds its epsilon to the norm, outside the square
    root, which is another function of epsilon (the certificate's epsilon probe tells them apart)."""

    def __init__(self, features: int, epsilon: float):
        super().__init__()
        self.epsilon = epsilon
        with self.init_scope():
            self.gamma = chainer.Parameter(chainer.initializers.One(), (features,))

    def forward(self, x):
        return x * F.rsqrt(F.mean(F.square(x), axis=-1, keepdims=True) + self.epsilon) * self.gamma


class SwiGLU(chainer.Chain):
    """LLaMA's feed-forward block, down(silu(gate(x)) * up(x)), with three bias-free L.Linear. silu is Chainer's
    own F.swish with its beta held at 1 (x * sigmoid(1 * x)), a build-time constant, not a Parameter: one
    function node where x * F.sigmoid(x) would be two; its backward also sums a gradient for that beta, which
    nothing reads."""

    PROJECTIONS = ("gate", "up", "down")

    def __init__(self, features: int, hidden: int):
        super().__init__()
        self.beta = np.ones((), dtype=chainer.get_dtype())  # the Parameters' dtype (ZERO's, float32)
        with self.init_scope():
            self.gate = L.Linear(features, hidden, nobias=True, initialW=ZERO)
            self.up = L.Linear(features, hidden, nobias=True, initialW=ZERO)
            self.down = L.Linear(hidden, features, nobias=True, initialW=ZERO)

    def forward(self, x):
        axes = x.ndim - 1  # on a sequence: the same projections at every step
        hidden = F.swish(self.gate(x, n_batch_axes=axes), self.beta) * self.up(x, n_batch_axes=axes)
        return self.down(hidden, n_batch_axes=axes)


def rotate(x, cos: np.ndarray, sin: np.ndarray):
    """x (n, steps, dk) rotated by position: x cos + rotate_half(x) sin (Hugging Face's LLaMA), rotate_half(x) =
    (-second half, first half); the tables broadcast over n."""
    first, second = F.split_axis(x, 2, axis=-1)
    return x * cos + F.concat((-second, first), axis=-1) * sin


class GroupedQueryAttention(chainer.Chain):
    """LLaMA's attention: bias-free L.Linear projections (nobias=True), rotary embeddings on queries and keys
    (rotary_tables, rotate), and _attend, the attention's own scores, mask and softmax with no dropout. Query head
    h reads key/value head h // (heads / kv_heads): the query heads are laid out (batch * kv_heads, group * steps,
    dk), each key/value head's group one after the other, so that one F.matmul serves a whole group and no key or
    value is repeated (Chainer 7 has no attention function, grouped or not)."""

    PROJECTIONS = ("query", "key", "value", "output")

    def __init__(self, layer: dict, steps: int, features: int):
        super().__init__()
        self.heads, self.kv_heads, self.causal = layer["heads"], layer["kv_heads"], layer["causal"]
        size = features // self.heads
        tables = rotary_tables(steps, size, layer["rope_base"])  # float64, cast to the Parameters' dtype
        self.cos, self.sin = (table.astype(chainer.get_dtype()) for table in tables)
        with self.init_scope():
            self.query = L.Linear(features, features, nobias=True, initialW=ZERO)
            self.key = L.Linear(features, self.kv_heads * size, nobias=True, initialW=ZERO)
            self.value = L.Linear(features, self.kv_heads * size, nobias=True, initialW=ZERO)
            self.output = L.Linear(features, features, nobias=True, initialW=ZERO)

    def forward(self, x):
        batch, steps, _ = x.shape
        cos, sin = self.cos[:steps], self.sin[:steps]
        q = rotate(_heads(self.query(x, n_batch_axes=2), self.heads), cos, sin)
        k = rotate(_heads(self.key(x, n_batch_axes=2), self.kv_heads), cos, sin)
        v = _heads(self.value(x, n_batch_axes=2), self.kv_heads)
        # (batch * heads, steps, dk) -> (batch * kv_heads, group * steps, dk): head h = g * group + j is block j of g
        out = _attend(F.reshape(q, (batch * self.kv_heads, -1, q.shape[-1])), k, v, self.causal, 0.0)
        return self.output(_merge_heads(F.reshape(out, q.shape), batch, self.heads), n_batch_axes=2)


class PositionalEmbedding(chainer.Link):
    """A learned (max_len, d) table whose first `steps` rows are added to the input."""

    def __init__(self, max_len: int, features: int):
        super().__init__()
        with self.init_scope():
            self.W = chainer.Parameter(ZERO, (max_len, features))

    def forward(self, x):
        return x + F.broadcast_to(self.W[:x.shape[1]], x.shape)


class TiedOutputBias(chainer.Link):
    """The tied output's own parameter, its bias; its kernel is the embedding link's W itself (_tied_output)."""

    def __init__(self, units: int):
        super().__init__()
        with self.init_scope():
            self.b = chainer.Parameter(ZERO, (units,))


# ---- build: (layer, in_shape, links) -> (the link holding its weights or None, apply(x)) ------------

def _conv2d(layer: dict, in_shape, links):
    pad_h, pad_w, widths = _padding(layer, in_shape, layer["kernel"])
    link = L.Convolution2D(in_shape[-1], layer["filters"], layer["kernel"], stride=layer["stride"],
                           pad=(pad_h, pad_w), initialW=ZERO)
    return link, lambda x: link(F.pad(x, widths, "constant", constant_values=0.0) if widths else x)


def _maxpool2d(layer: dict, in_shape, links):
    pad_h, pad_w, widths = _padding(layer, in_shape, layer["pool"])

    def apply(x):
        if widths:
            x = F.pad(x, widths, "constant", constant_values=-np.inf)
        return F.max_pooling_2d(x, layer["pool"], stride=layer["stride"], pad=(pad_h, pad_w), cover_all=False)
    return None, apply


def _batchnorm(layer: dict, in_shape, links):
    # Chainer's decay weighs the running value, as the IR's (Keras's) momentum does; the
    # moving variance follows the unbiased batch variance, as the reference's
    link = L.BatchNormalization(in_shape[-1], decay=layer["momentum"], eps=layer["epsilon"])
    return link, link


def in_float32(link_class, *args, **kwargs):
    """A normalisation link with float32 Parameters whatever chainer.config.dtype says, as mixed16 builds
    BatchNormalization's (build) and computes it (in_float32_applied): its statistics and their gradients are sums
    over many elements, which float16's rounding would swamp (numpy accumulates float16 sums in float16)."""
    with chainer.using_config("dtype", np.float32):
        return link_class(*args, **kwargs)


def in_float32_applied(link, x):
    """link(x) computed in float32 and returned in x's type (float16 under mixed16; float32 unchanged)."""
    if x.dtype == np.float32:
        return link(x)
    return F.cast(link(F.cast(x, np.float32)), x.dtype)


def _layer_norm(layer: dict, in_shape, links):
    link = in_float32(L.LayerNormalization, in_shape[-1], eps=layer["epsilon"])  # the last axis, biased variance

    def apply(x):
        if x.ndim > 2:  # Chainer's layer normalisation takes (rows, features) only
            return F.reshape(in_float32_applied(link, F.reshape(x, (-1, x.shape[-1]))), x.shape)
        return in_float32_applied(link, x)
    return link, apply


def _activation(layer: dict, in_shape, links):
    return None, lookup(ACTIVATIONS, "activation", layer["fn"])


def _dropout(layer: dict, in_shape, links):
    # F.dropout is the identity unless chainer.config.train
    return None, lambda x: F.dropout(x, layer["rate"]) if layer["rate"] > 0 else x


def _flatten(layer: dict, in_shape, links):
    return None, lambda x: F.reshape(x, (x.shape[0], -1))


def _dense(layer: dict, in_shape, links):
    link = L.Linear(in_shape[-1], layer["units"], initialW=ZERO)
    return link, lambda x: link(x, n_batch_axes=x.ndim - 1)  # on a sequence: the same dense at every step


def _embedding(layer: dict, in_shape, links):
    link = L.EmbedID(layer["vocab"], layer["dim"], initialW=ZERO)
    return link, link


def _lstm(layer: dict, in_shape, links):
    link = LSTM(in_shape[-1], layer["units"])

    def apply(x):
        outputs, (h, _) = link(x)
        return F.stack(outputs, axis=1) if layer["return_sequences"] else h
    return link, apply


def _seq2seq(layer: dict, in_shape, links):
    link = Seq2Seq(layer)
    return link, link


def _residual(layer: dict, in_shape, links):
    steps = _steps(block_shapes(layer, tuple(in_shape)), links)  # the block's own links join the model's
    return None, lambda x: x + _run(steps, x)


def _attention(layer: dict, in_shape, links):
    link = Attention(layer, in_shape[-1])
    return link, link


def _rms_norm(layer: dict, in_shape, links):
    link = in_float32(RMSNorm, in_shape[-1], layer["epsilon"])
    return link, lambda x: in_float32_applied(link, x)


def _swiglu(layer: dict, in_shape, links):
    link = SwiGLU(in_shape[-1], layer["hidden"])
    return link, link


def _grouped_query_attention(layer: dict, in_shape, links):
    link = GroupedQueryAttention(layer, in_shape[0], in_shape[-1])
    return link, link


def _positional_embedding(layer: dict, in_shape, links):
    link = PositionalEmbedding(layer["max_len"], in_shape[-1])
    return link, link


def _tied_output(layer: dict, in_shape, links):
    link, embedding = TiedOutputBias(layer["units"]), links[layer["embedding"]]  # the IR puts the embedding first
    # x E^T + b with the embedding's own W: its gradient sums both uses
    return link, lambda x: F.linear(x, embedding.W, link.b, n_batch_axes=x.ndim - 1)


def _to_sequence(layer: dict, in_shape, links):
    # NHWC (H, W, C) -> (H * W, C): step r * W + c is row r, column c
    return None, lambda x: F.reshape(x, (x.shape[0], -1, x.shape[-1]))


def _sequence_mean(layer: dict, in_shape, links):
    return None, lambda x: F.mean(x, axis=1)


# ---- weights: the built link -> canonical key -> the Chainer Parameter (or, for moving statistics, the ndarray) --

def _kernel_and_bias(link) -> Dict[str, object]:
    return {"kernel": link.W, "bias": link.b}


def _batchnorm_arrays(link) -> Dict[str, object]:
    return {"gamma": link.gamma, "beta": link.beta, "moving_mean": link.avg_mean, "moving_var": link.avg_var}


def _layer_norm_arrays(link) -> Dict[str, object]:
    return {"gamma": link.gamma, "beta": link.beta}


def _embedding_arrays(link) -> Dict[str, object]:
    return {"embeddings": link.W}


def _lstm_arrays(prefix: str, lstm: LSTM) -> Dict[str, chainer.Parameter]:
    return {prefix + "kernel": lstm.upward.W, prefix + "recurrent_kernel": lstm.lateral.W,
            prefix + "bias": lstm.upward.b}


def _lstm_layer_arrays(link: LSTM) -> Dict[str, object]:
    return _lstm_arrays("", link)


def _seq2seq_arrays(link: Seq2Seq) -> Dict[str, object]:
    arrays = {"source_embeddings": link.source_embedding.W, "target_embeddings": link.target_embedding.W}
    arrays.update(_lstm_arrays("encoder_", link.encoder))
    arrays.update(_lstm_arrays("decoder_", link.decoder))
    return arrays


def _attention_arrays(link: Attention) -> Dict[str, object]:
    return dict(kv for part in Attention.PROJECTIONS for kv in (
        (part + "_kernel", getattr(link, part).W), (part + "_bias", getattr(link, part).b)))


def _rms_norm_arrays(link: RMSNorm) -> Dict[str, object]:
    return {"gamma": link.gamma}


def _swiglu_arrays(link: SwiGLU) -> Dict[str, object]:
    return {part + "_kernel": getattr(link, part).W for part in SwiGLU.PROJECTIONS}


def _grouped_query_attention_arrays(link: GroupedQueryAttention) -> Dict[str, object]:
    return {part + "_kernel": getattr(link, part).W for part in GroupedQueryAttention.PROJECTIONS}


def _tied_output_arrays(link: TiedOutputBias) -> Dict[str, object]:
    return {"bias": link.b}  # its kernel is the embedding's table, exported there


LAYERS = {
    "conv2d": LayerEntry(_conv2d, NativeWeights(_kernel_and_bias, OIHW)),
    "maxpool2d": LayerEntry(_maxpool2d, None),
    "batchnorm": LayerEntry(_batchnorm, NativeWeights(_batchnorm_arrays, AS_CANONICAL)),
    "layer_norm": LayerEntry(_layer_norm, NativeWeights(_layer_norm_arrays, AS_CANONICAL)),
    "activation": LayerEntry(_activation, None),
    "dropout": LayerEntry(_dropout, None),
    "flatten": LayerEntry(_flatten, None),
    "dense": LayerEntry(_dense, NativeWeights(_kernel_and_bias, OUT_IN)),
    "embedding": LayerEntry(_embedding, NativeWeights(_embedding_arrays, AS_CANONICAL)),
    "lstm": LayerEntry(_lstm, NativeWeights(_lstm_layer_arrays, CHAINER_LSTM)),
    "seq2seq": LayerEntry(_seq2seq, NativeWeights(_seq2seq_arrays, CHAINER_LSTM)),
    "residual": LayerEntry(_residual, None),
    "attention": LayerEntry(_attention, NativeWeights(_attention_arrays, OUT_IN)),
    "rms_norm": LayerEntry(_rms_norm, NativeWeights(_rms_norm_arrays, AS_CANONICAL)),
    "swiglu": LayerEntry(_swiglu, NativeWeights(_swiglu_arrays, OUT_IN)),  # Linear's W (out, in)
    "grouped_query_attention": LayerEntry(_grouped_query_attention,
                                          NativeWeights(_grouped_query_attention_arrays, OUT_IN)),
    "positional_embedding": LayerEntry(_positional_embedding, NativeWeights(_embedding_arrays, AS_CANONICAL)),
    "tied_output": LayerEntry(_tied_output, NativeWeights(_tied_output_arrays, AS_CANONICAL)),
    "to_sequence": LayerEntry(_to_sequence, None),
    "sequence_mean": LayerEntry(_sequence_mean, None),
}
REFUSED = {}


def native_arrays(kind: str, link) -> Dict[str, object]:
    """Canonical key -> the Chainer Parameter (or, for moving statistics, the ndarray) holding it (its table
    entry's weights)."""
    return native_weights(LAYERS, kind).params(link)


def layout(kind: str) -> Layout:
    """The canonical <-> native conversion of a weighted kind's weights (its table entry's)."""
    return native_weights(LAYERS, kind).layout


# ---- the model ---------------------------------------------------------------------------------

SPATIAL = ("conv2d", "maxpool2d", "batchnorm")


def _to_nchw(x):
    return F.transpose(x, (0, 3, 1, 2))  # NHWC -> NCHW


def _to_nhwc(x):
    return F.transpose(x, (0, 2, 3, 1))  # back to NHWC: the canonical flatten and sequence order


def _steps(shapes, links: Dict[str, chainer.Link]) -> list:
    """The forward pass of these (layer, in shape, out shape) as functions applied in order, the transposes
    between NHWC and NCHW included; each weighted layer's link is added to `links` by layer name."""
    steps = []
    channels_first = False
    for layer, in_shape, _ in shapes:
        kind = layer["type"]
        entry = lookup(LAYERS, "layer type", kind)
        if kind in SPATIAL and len(in_shape) == 3 and not channels_first:
            steps.append(_to_nchw)
            channels_first = True
        if kind in ("flatten", "to_sequence") and channels_first:
            steps.append(_to_nhwc)
            channels_first = False
        link, apply = entry.build(layer, tuple(in_shape), links)
        if link is not None:
            links[layer["name"]] = link
        steps.append(apply)
    if channels_first:
        steps.append(_to_nhwc)
    return steps


def _run(steps: list, x):
    for step in steps:
        x = step(x)
    return x


class Model(chainer.Chain):
    """The IR's layers in order; each weighted layer, a residual block's own included, is a child link named after
    the IR layer (the block's prefix keeps the names unique)."""

    def __init__(self, spec: dict):
        super().__init__()
        shapes = infer_shapes(spec)
        self.layers = [(layer, tuple(in_shape)) for layer, in_shape, _ in shapes]
        links = {}
        self.steps = _steps(shapes, links)
        with self.init_scope():
            for name, link in links.items():
                setattr(self, name, link)

    def forward(self, x):
        return _run(self.steps, x)
