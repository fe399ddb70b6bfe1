"""MXNet 1.9's layers: the IR's layer kinds as Gluon HybridBlocks, one `LAYERS` entry per kind (its
build, and its weights: the built block's Gluon Parameters by canonical name, with their layout).

Every entry's `build(layer, in_shape, built)` returns the kind's blocks in order (an explicit pad and its
core, or one block); `built` collects what the adapter needs besides the network (`Built`). Every entry's
`weights` is a NativeWeights: `params(block)` gives the last of those blocks' Parameters keyed by canonical
name (shared/ir.param_shapes), `layout` converts them canonical to Gluon's and back (worker/base's OIHW, OUT_IN
or AS_CANONICAL, which PyTorch and Chainer share).

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
The LLaMA pieces are HybridBlocks of F ops too: RMSNorm and SwiGLU (Gluon's nn.Swish as silu), as MXNet 1.9 has
no RMS normalisation or silu operator, and GroupedQueryAttention, Attention's batch_dot and softmax with each
key/value head's query heads stacked, and the rotary tables as Parameters out of training (each class says why).

BatchNorm: MXNet's operator normalises with the batch statistics, but it would move its moving
variance with the biased batch variance; the reference (torch) uses the unbiased one. The operator
runs with momentum 1 (moving statistics untouched), the block also outputs the batch mean and
biased variance, and the adapter moves the statistics after each training step with the unbiased
variance and the IR's (Keras's) momentum.

Loaded through adapter.py, which fixes MXNet's OpenMP threads before mxnet is imported.
"""
from __future__ import annotations

import math
from typing import Dict, List

import mxnet as mx
import numpy as np
from mxnet import gluon, nd
from mxnet.gluon import nn, rnn

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


def causal_mask(F, steps: int, dtype):
    """The (steps, steps) scores to add for a causal attention: -inf for every key after the query's own step,
    0 elsewhere, in the model's dtype."""
    positions = F.arange(steps)
    later = F.broadcast_greater(F.reshape(positions, shape=(1, -1)), F.reshape(positions, shape=(-1, 1)))
    mask = F.where(later, F.full(shape=(steps, steps), val=float("-inf")), F.zeros(shape=(steps, steps)))
    return F.cast(mask, dtype=dtype)


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
        if self.causal:
            scores = F.broadcast_add(scores, F.expand_dims(causal_mask(F, self.steps, self._dtype()), axis=0))
        weights = F.softmax(scores, axis=-1)
        if self.rate > 0:
            weights = F.Dropout(weights, p=self.rate)
        out = F.reshape(F.batch_dot(weights, v), shape=(-4, -1, self.heads, 0, 0))
        out = F.reshape(F.transpose(out, axes=(0, 2, 1, 3)), shape=(0, 0, -3))
        return self.output(out)

    def _dtype(self):
        return self.query.weight.dtype  # float64 under certification (cast)


class RMSNorm(gluon.HybridBlock):
    """x / sqrt(mean(x^2) + epsilon) * gamma over the last axis, written with F ops: MXNet 1.9 has no RMS
    normalisation operator (its LayerNorm always takes the mean out)."""

    def __init__(self, features: int, epsilon: float):
        super(RMSNorm, self).__init__()
        self.epsilon = epsilon
        with self.name_scope():
            self.gamma = self.params.get("gamma", shape=(features,), init="ones")

    def hybrid_forward(self, F, x, gamma):
        scale = F.rsqrt(F.mean(F.square(x), axis=-1, keepdims=True) + self.epsilon)
        return F.broadcast_mul(F.broadcast_mul(x, scale), gamma)


class SwiGLU(gluon.HybridBlock):
    """down(silu(gate(x)) * up(x)), three bias-free Dense; silu is Gluon's nn.Swish with beta 1, x * sigmoid(x)
    (MXNet 1.9's Activation operator has no silu)."""

    def __init__(self, features: int, hidden: int):
        super(SwiGLU, self).__init__()
        with self.name_scope():
            self.gate = nn.Dense(hidden, use_bias=False, flatten=False, in_units=features, prefix="gate_")
            self.up = nn.Dense(hidden, use_bias=False, flatten=False, in_units=features, prefix="up_")
            self.down = nn.Dense(features, use_bias=False, flatten=False, in_units=hidden, prefix="down_")
            self.silu = nn.Swish(beta=1.0)

    def hybrid_forward(self, F, x):
        return self.down(self.silu(self.gate(x)) * self.up(x))


class Table(mx.init.Initializer):
    """Writes a fixed float64 table into a Parameter in the Parameter's own dtype (rounded once, from float64)."""

    def __init__(self, table: np.ndarray):
        super(Table, self).__init__()
        self.table = table

    def _init_weight(self, _, arr):
        arr[:] = nd.array(self.table, ctx=arr.context, dtype=arr.dtype)


class GroupedQueryAttention(gluon.HybridBlock):
    """LLaMA's attention as the IR states it, in Attention's way (F.batch_dot, F.softmax, the causal mask added):
    bias-free Dense projections, rotary embeddings on queries and keys, `kv_heads` key/value heads. MXNet 1.9 has
    no fused attention with grouped heads (nor rotary embeddings), so the grouping is a reshape: the `group`
    query heads that share a key/value head are stacked along the steps axis, one batch_dot per key/value head
    (no copy of the keys and values repeated per query head).

    The rotary cos and sin tables depend only on the steps (fixed per model) and dk: made once here in float64,
    held as Parameters out of training (grad_req null, as BatchNorm's running statistics) so that the hybridized
    graph takes them as inputs and `cast` gives them the model's dtype; cast sets them again from the float64
    tables, as Parameter.cast alone would widen float32-rounded values."""

    PROJECTIONS = ("query", "key", "value", "output")

    def __init__(self, layer: dict, in_shape):
        super(GroupedQueryAttention, self).__init__()
        self.steps, features = in_shape[0], in_shape[1]
        self.heads, self.kv_heads, self.causal = layer["heads"], layer["kv_heads"], layer["causal"]
        self.size = features // self.heads
        self.group = self.heads // self.kv_heads
        self.scale = 1.0 / math.sqrt(self.size)
        self.tables = rotary_tables(self.steps, self.size, layer["rope_base"])
        widths = (features, self.kv_heads * self.size, self.kv_heads * self.size, features)
        with self.name_scope():
            for part, width in zip(self.PROJECTIONS, widths):
                setattr(self, part, nn.Dense(width, use_bias=False, flatten=False, in_units=features,
                                             prefix=part + "_"))
            self.cos, self.sin = (self.params.get(name, shape=table.shape, init=Table(table), grad_req="null",
                                                  differentiable=False)
                                  for name, table in zip(("cos", "sin"), self.tables))

    def cast(self, dtype):
        super(GroupedQueryAttention, self).cast(dtype)
        for param, table in zip((self.cos, self.sin), self.tables):
            if param._data is not None:  # initialised: its data was only converted (not yet: Table writes it)
                param.set_data(nd.array(table, dtype=dtype))

    def _heads(self, F, x, heads: int, cos, sin):
        """(batch, steps, heads * dk) -> (batch, heads, steps, dk), rotated when cos and sin are given:
        x cos + rotate_half(x) sin, rotate_half(u) = (-u_second, u_first) (Hugging Face's LLaMA)."""
        x = F.transpose(F.reshape(x, shape=(0, 0, heads, -1)), axes=(0, 2, 1, 3))
        if cos is None:
            return x
        half = self.size // 2
        turned = F.concat(-F.slice_axis(x, axis=-1, begin=half, end=None),
                          F.slice_axis(x, axis=-1, begin=0, end=half), dim=-1)
        return F.broadcast_add(F.broadcast_mul(x, cos), F.broadcast_mul(turned, sin))

    def hybrid_forward(self, F, x, cos, sin):
        cos, sin = (F.reshape(table, shape=(1, 1, self.steps, self.size)) for table in (cos, sin))
        # query head h = g * group + j: (batch, heads, steps, dk) -> (batch * kv_heads, group * steps, dk)
        q = F.reshape(self._heads(F, self.query(x), self.heads, cos, sin),
                      shape=(-1, self.group * self.steps, self.size))
        k = F.reshape(self._heads(F, self.key(x), self.kv_heads, cos, sin), shape=(-3, 0, 0))
        v = F.reshape(self._heads(F, self.value(x), self.kv_heads, None, None), shape=(-3, 0, 0))
        scores = F.batch_dot(q, k, transpose_b=True) * self.scale  # (batch * kv_heads, group * steps, steps)
        if self.causal:  # each query head of the group takes the same mask
            mask = F.tile(causal_mask(F, self.steps, self.query.weight.dtype), reps=(self.group, 1))
            scores = F.broadcast_add(scores, F.expand_dims(mask, axis=0))
        weights = F.softmax(scores, axis=-1)
        out = F.reshape(F.batch_dot(weights, v), shape=(-1, self.heads, self.steps, self.size))
        out = F.reshape(F.transpose(out, axes=(0, 2, 1, 3)), shape=(0, 0, -3))
        return self.output(out)


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
    """The IR's layers in order; returns the logits and the batch statistics of every BatchNorm. Under AMP (the
    adapter's mixed-bfloat16) the last layer computes in bfloat16: `float32_logits` casts its logits back, as AMP's
    own casts do, before the loss or the caller sees them."""

    def __init__(self, layers: list):
        super(Net, self).__init__()
        self.layers = layers
        self.float32_logits = False
        for index, block in enumerate(layers):
            self.register_child(block, "layer%d" % index)

    def hybrid_forward(self, F, x):
        stats = []
        for block in self.layers:
            x = block(x)
            if isinstance(block, (BatchNorm, Residual)):
                x, more = x[0], list(x[1:])
                stats += more
        if self.float32_logits:
            x = F.amp_cast(x, dtype="float32")
        return [x] + stats


# MXNet's Activation has no gelu; Gluon's GELU (LeakyReLU act_type 'gelu') is the exact (erf) form
ACTIVATIONS = {"relu": lambda: nn.Activation("relu"), "sigmoid": lambda: nn.Activation("sigmoid"),
               "tanh": lambda: nn.Activation("tanh"), "gelu": nn.GELU}


# ---- each kind's build: build(layer, in_shape, built) -> its blocks in order -------------------------

class Built(object):
    """What building collects besides the blocks: the block holding each weighted IR layer's parameters by
    layer name (a residual block's own layers included), and the BatchNorm layers (with the positions each
    averages over per sample: height x width for images) in the order their statistics come out."""

    def __init__(self):
        self.by_name = {}  # type: Dict[str, gluon.HybridBlock]
        self.norms = []  # type: List[tuple]


def _padded(layer: dict, in_shape, core: gluon.HybridBlock, size: int, pad_value: float) -> List[gluon.HybridBlock]:
    if layer["padding"] == "valid":
        return [core]
    if layer["padding"] == "same":
        return [SamePad(in_shape[:2], size, layer["stride"], pad_value), core]
    raise not_built("padding", layer["padding"])


def _conv2d(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    core = nn.Conv2D(layer["filters"], layer["kernel"], strides=layer["stride"], in_channels=in_shape[-1])
    return _padded(layer, in_shape, core, layer["kernel"], 0.0)


def _maxpool2d(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    core = nn.MaxPool2D(layer["pool"], strides=layer["stride"])
    return _padded(layer, in_shape, core, layer["pool"], float("-inf"))


def _batchnorm(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    built.norms.append((layer, int(np.prod(in_shape[:-1]))))  # values per channel and sample
    return [BatchNorm(in_shape[-1], layer["epsilon"], spatial=len(in_shape) == 3)]


def _layer_norm(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    # over the last axis, biased variance
    return [nn.LayerNorm(axis=-1, epsilon=layer["epsilon"], in_channels=in_shape[-1])]


def _activation(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [lookup(ACTIVATIONS, "activation", layer["fn"])()]


def _dropout(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [nn.Dropout(layer["rate"])]


def _flatten(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [nn.Flatten()]


def _to_sequence(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [ToSequence()]


def _sequence_mean(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [SequenceMean()]


def _dense(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [nn.Dense(layer["units"], flatten=False, in_units=in_shape[-1])]


def _embedding(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [nn.Embedding(layer["vocab"], layer["dim"])]


def _lstm(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [LSTMLayer(in_shape[-1], layer["units"], layer["return_sequences"])]


def _seq2seq(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [Seq2Seq(layer)]


def _residual(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [Residual(_build(block_shapes(layer, in_shape), built))]


def _attention(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [Attention(layer, in_shape)]


def _rms_norm(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [RMSNorm(in_shape[-1], layer["epsilon"])]


def _swiglu(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [SwiGLU(in_shape[-1], layer["hidden"])]


def _grouped_query_attention(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [GroupedQueryAttention(layer, in_shape)]


def _positional_embedding(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    return [PositionalEmbedding(layer["max_len"], in_shape)]


def _tied_output(layer: dict, in_shape, built: Built) -> List[gluon.HybridBlock]:
    # weight tying as GluonNLP ties a decoder: a Dense built on the embedding's ParameterDict takes its
    # weight (vocab, dim), the same Parameter (gradients of both uses summed), and adds its own bias
    table = built.by_name[layer["embedding"]].params
    return [nn.Dense(layer["units"], flatten=False, in_units=in_shape[-1], params=table)]


# ---- each weighted kind's weights: weights(block) -> {canonical name: Gluon Parameter} ----------------

def _kernel_and_bias(block) -> Dict[str, gluon.Parameter]:
    return {"kernel": block.weight, "bias": block.bias}


def _batchnorm_params(block: BatchNorm) -> Dict[str, gluon.Parameter]:
    return {"gamma": block.gamma, "beta": block.beta, "moving_mean": block.running_mean,
            "moving_var": block.running_var}


def _layer_norm_params(block) -> Dict[str, gluon.Parameter]:
    return {"gamma": block.gamma, "beta": block.beta}


def _embeddings(block) -> Dict[str, gluon.Parameter]:
    return {"embeddings": block.weight}


def _lstm_params(prefix: str, lstm: rnn.LSTM) -> Dict[str, gluon.Parameter]:
    """"..._hh" marks Gluon's second bias, kept at zero: the canonical bias is the sum of the two."""
    return {prefix + "kernel": lstm.l0_i2h_weight, prefix + "recurrent_kernel": lstm.l0_h2h_weight,
            prefix + "bias": lstm.l0_i2h_bias, prefix + "bias_hh": lstm.l0_h2h_bias}


def _lstm_layer_params(block: LSTMLayer) -> Dict[str, gluon.Parameter]:
    return _lstm_params("", block.lstm)


def _seq2seq_params(block: Seq2Seq) -> Dict[str, gluon.Parameter]:
    params = {"source_embeddings": block.source_embedding.weight,
              "target_embeddings": block.target_embedding.weight}
    params.update(_lstm_params("encoder_", block.encoder))
    params.update(_lstm_params("decoder_", block.decoder))
    return params


def _attention_params(block: Attention) -> Dict[str, gluon.Parameter]:
    return dict(pair for part in Attention.PROJECTIONS for pair in (
        (part + "_kernel", getattr(block, part).weight), (part + "_bias", getattr(block, part).bias)))


def _rms_norm_params(block: RMSNorm) -> Dict[str, gluon.Parameter]:
    return {"gamma": block.gamma}


def _swiglu_params(block: SwiGLU) -> Dict[str, gluon.Parameter]:
    return {"gate_kernel": block.gate.weight, "up_kernel": block.up.weight, "down_kernel": block.down.weight}


def _grouped_query_attention_params(block: GroupedQueryAttention) -> Dict[str, gluon.Parameter]:
    return {part + "_kernel": getattr(block, part).weight for part in GroupedQueryAttention.PROJECTIONS}


def _tied_output_params(block) -> Dict[str, gluon.Parameter]:
    return {"bias": block.bias}  # its weight is the embedding's, exported there


# ---- the table ------------------------------------------------------------------------------------

LAYERS = {
    "conv2d": LayerEntry(_conv2d, NativeWeights(_kernel_and_bias, OIHW)),
    "maxpool2d": LayerEntry(_maxpool2d, None),
    "batchnorm": LayerEntry(_batchnorm, NativeWeights(_batchnorm_params, AS_CANONICAL)),
    "layer_norm": LayerEntry(_layer_norm, NativeWeights(_layer_norm_params, AS_CANONICAL)),
    "activation": LayerEntry(_activation, None),
    "dropout": LayerEntry(_dropout, None),
    "flatten": LayerEntry(_flatten, None),
    "dense": LayerEntry(_dense, NativeWeights(_kernel_and_bias, OUT_IN)),
    "embedding": LayerEntry(_embedding, NativeWeights(_embeddings, AS_CANONICAL)),
    "lstm": LayerEntry(_lstm, NativeWeights(_lstm_layer_params, OUT_IN)),
    "seq2seq": LayerEntry(_seq2seq, NativeWeights(_seq2seq_params, OUT_IN)),
    "residual": LayerEntry(_residual, None),
    "attention": LayerEntry(_attention, NativeWeights(_attention_params, OUT_IN)),
    "positional_embedding": LayerEntry(_positional_embedding, NativeWeights(_embeddings, AS_CANONICAL)),
    "tied_output": LayerEntry(_tied_output, NativeWeights(_tied_output_params, AS_CANONICAL)),
    "to_sequence": LayerEntry(_to_sequence, None),
    "sequence_mean": LayerEntry(_sequence_mean, None),
    "rms_norm": LayerEntry(_rms_norm, NativeWeights(_rms_norm_params, AS_CANONICAL)),
    "swiglu": LayerEntry(_swiglu, NativeWeights(_swiglu_params, OUT_IN)),
    "grouped_query_attention": LayerEntry(_grouped_query_attention,
                                          NativeWeights(_grouped_query_attention_params, OUT_IN)),
}
REFUSED = {}  # type: Dict[str, str]

# MXNet's CPU convolution, pooling and BatchNorm (over axis 1) take an image channels-first: a transpose goes
# before the first of them, and one back before the kinds that read an image's positions channels-last
CHANNELS_FIRST = ("conv2d", "maxpool2d", "batchnorm")
CHANNELS_LAST = ("flatten", "to_sequence", "residual")


def build_net(spec: dict):
    """The network, the block holding each weighted IR layer's parameters by layer name (a residual block's own
    layers included), and the BatchNorm layers (with the positions each averages over per sample: height x width
    for images) in the order their statistics come out."""
    built = Built()
    net = _build(infer_shapes(spec), built)
    return net, built.by_name, built.norms


def _build(shapes, built: Built) -> Net:
    blocks = []
    channels_first = False
    for layer, in_shape, _ in shapes:
        kind = layer["type"]
        if kind in CHANNELS_FIRST and len(in_shape) == 3 and not channels_first:
            blocks.append(Transpose((0, 3, 1, 2)))
            channels_first = True
        if kind in CHANNELS_LAST and channels_first:
            blocks.append(Transpose((0, 2, 3, 1)))
            channels_first = False
        entry = lookup(LAYERS, "layer type", kind)
        made = entry.build(layer, in_shape, built)
        blocks += made
        if entry.weights is not None:  # set_weights finds them by name
            built.by_name[layer["name"]] = made[-1]
    if channels_first:
        blocks.append(Transpose((0, 2, 3, 1)))
    return Net(blocks)


def gluon_params(kind: str, block) -> Dict[str, gluon.Parameter]:
    """The Gluon Parameters of a built layer of this kind by canonical name (its entry's weights); a kind
    without weights has none to map."""
    return native_weights(LAYERS, kind).params(block)


def layout(kind: str) -> Layout:
    """The canonical <-> native conversion of a weighted kind's weights (its table entry's)."""
    return native_weights(LAYERS, kind).layout
