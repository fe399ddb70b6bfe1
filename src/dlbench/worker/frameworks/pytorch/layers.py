"""PyTorch's layer table: one LayerEntry per IR kind (`LAYERS`), the IR as an nn.Module (build_module).

Every entry's `build(layer, in_shape, by_name)` returns the layer's nn.Module (in_shape the canonical input
shape without the batch; by_name the modules built so far that hold weights, by IR layer name). Every entry's
`weights` is a NativeWeights: `params(module)` gives the built module's torch Parameters (and BatchNorm's
running buffers) by canonical key, `layout` converts them from and to the canonical ones (worker/base's OIHW
convolutions, OUT_IN (out, in) kernels, or AS_CANONICAL).

Images arrive NHWC (canonical); they are permuted once to NCHW before the first spatial layer and
back to NHWC before Flatten or to_sequence, so dense weights keep the canonical flatten order and a
sequence's steps the canonical row-major order.
"""
from __future__ import annotations

from typing import Dict

import torch
import torch.nn.functional as F
from torch import nn

from dlbench.shared.ir import ATTENTION_PARTS, block_shapes, infer_shapes, same_padding
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


class Permute(nn.Module):
    def __init__(self, *dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.permute(*self.dims)


class SamePad(nn.Module):
    """TensorFlow-style 'same' padding, asymmetric when the total is odd (torch pads symmetrically)."""

    def __init__(self, in_hw, kernel: int, stride: int, value: float):
        super().__init__()
        top, bottom = same_padding(in_hw[0], kernel, stride)
        left, right = same_padding(in_hw[1], kernel, stride)
        self.pads = (left, right, top, bottom)
        self.value = value

    def forward(self, x):
        return F.pad(x, self.pads, value=self.value)


def canonical_lstm(in_features: int, units: int) -> nn.LSTM:
    """torch's LSTM adds two biases; the IR has one. The second stays zero and untrained: trained, it
    would take its own optimiser step (and weight decay) beside the first, moving the canonical bias
    twice as far as every other framework's."""
    lstm = nn.LSTM(in_features, units, batch_first=True)
    lstm.bias_hh_l0.requires_grad_(False)
    return lstm


class LSTMLayer(nn.Module):
    def __init__(self, in_features: int, units: int, return_sequences: bool):
        super().__init__()
        self.lstm = canonical_lstm(in_features, units)
        self.return_sequences = return_sequences

    def forward(self, x):
        out, _ = self.lstm(x)
        return out if self.return_sequences else out[:, -1]


class Seq2Seq(nn.Module):
    def __init__(self, layer: dict):
        super().__init__()
        self.source_len = layer["source_len"]
        self.source_embedding = nn.Embedding(layer["source_vocab"], layer["embed_dim"])
        self.target_embedding = nn.Embedding(layer["target_vocab"], layer["embed_dim"])
        self.encoder = canonical_lstm(layer["embed_dim"], layer["units"])
        self.decoder = canonical_lstm(layer["embed_dim"], layer["units"])

    def forward(self, x):
        _, state = self.encoder(self.source_embedding(x[:, :self.source_len]))
        out, _ = self.decoder(self.target_embedding(x[:, self.source_len:]), state)
        return out


class Residual(nn.Module):
    """y = x + f(x), f the block's own layers."""

    def __init__(self, inner: nn.Sequential):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return x + self.inner(x)


class Attention(nn.Module):
    """Multi-head self-attention through torch's fused scaled_dot_product_attention (its default scale is
    1 / sqrt(dk); is_causal masks every later key; dropout_p drops attention weights, inverted). The query,
    key and value projections run as one matmul over their weights stacked, as nn.MultiheadAttention's
    in_proj does; each stays a Parameter of its own, the canonical weight it maps to."""

    def __init__(self, features: int, layer: dict):
        super().__init__()
        self.heads, self.causal, self.dropout = layer["heads"], layer["causal"], layer["dropout"]
        self.query, self.key, self.value, self.output = (nn.Linear(features, features) for _ in ATTENTION_PARTS)

    def forward(self, x):
        batch, steps, features = x.shape
        # head h owns features h*dk .. (h+1)*dk - 1: (batch, steps, heads, dk) -> (batch, heads, steps, dk)
        parts = (self.query, self.key, self.value)
        stacked = F.linear(x, torch.cat([part.weight for part in parts]), torch.cat([part.bias for part in parts]))
        q, k, v = (projected.view(batch, steps, self.heads, -1).transpose(1, 2)
                   for projected in stacked.split(features, dim=2))
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                             is_causal=self.causal)
        return self.output(out.transpose(1, 2).reshape(batch, steps, features))


class SwiGLU(nn.Module):
    """LLaMA's feed-forward block, down(silu(gate(x)) * up(x)), three bias-free nn.Linear (torch's F.silu)."""

    def __init__(self, features: int, hidden: int):
        super().__init__()
        self.gate, self.up = nn.Linear(features, hidden, bias=False), nn.Linear(features, hidden, bias=False)
        self.down = nn.Linear(hidden, features, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def rotate(x, cos, sin):
    """x (batch, heads, steps, dk) rotated by position: x cos + rotate_half(x) sin (Hugging Face's LLaMA)."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class GroupedQueryAttention(nn.Module):
    """LLaMA's attention: bias-free projections, rotary embeddings on queries and keys, and torch's fused
    scaled_dot_product_attention with enable_gqa (query head h reads key/value head h // (heads / kv_heads),
    as repeat_interleave would lay them out)."""

    def __init__(self, features: int, layer: dict, steps: int):
        super().__init__()
        self.heads, self.kv_heads, self.causal = layer["heads"], layer["kv_heads"], layer["causal"]
        size = features // self.heads
        self.query = nn.Linear(features, features, bias=False)
        self.key = nn.Linear(features, self.kv_heads * size, bias=False)
        self.value = nn.Linear(features, self.kv_heads * size, bias=False)
        self.output = nn.Linear(features, features, bias=False)
        # float64 buffers, not weights: the adapter's module.to(dtype) casts them with the weights (float64 kept
        # exact for the certificate's reference)
        cos, sin = (torch.from_numpy(table) for table in rotary_tables(steps, size, layer["rope_base"]))
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        batch, steps, features = x.shape
        cos, sin = self.cos[:steps], self.sin[:steps]
        q = rotate(self.query(x).view(batch, steps, self.heads, -1).transpose(1, 2), cos, sin)
        k = rotate(self.key(x).view(batch, steps, self.kv_heads, -1).transpose(1, 2), cos, sin)
        v = self.value(x).view(batch, steps, self.kv_heads, -1).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, enable_gqa=True)
        return self.output(out.transpose(1, 2).reshape(batch, steps, features))


class PositionalEmbedding(nn.Module):
    def __init__(self, max_len: int, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(max_len, features))

    def forward(self, x):
        return x + self.weight[:x.shape[1]]


class SequenceMean(nn.Module):
    """(batch, steps, features) -> (batch, features): the mean over the steps (torch has no module for it)."""

    def forward(self, x):
        return x.mean(dim=1)


class TiedOutput(nn.Module):
    """Logits x E^T + b sharing the embedding's Parameter itself (weight tying as PyTorch's
    word_language_model example does it): autograd sums both uses into its one gradient."""

    def __init__(self, embedding: nn.Embedding):
        super().__init__()
        self.weight = embedding.weight
        self.bias = nn.Parameter(torch.zeros(embedding.num_embeddings))

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


ACTIVATIONS = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh,
               "gelu": lambda: nn.GELU(approximate="none")}  # the exact (erf) form


# ---- build: (layer, in_shape, by_name) -> nn.Module ---------------------------------------------

def _padded(core: nn.Module, layer: dict, in_shape, size: int, pad_value: float) -> nn.Module:
    padding = layer["padding"]
    if padding == "valid":
        return core
    if padding == "same":
        return nn.Sequential(SamePad(in_shape[:2], size, layer["stride"], pad_value), core)
    raise not_built("padding", padding)


def _conv2d(layer: dict, in_shape, by_name) -> nn.Module:
    core = nn.Conv2d(in_shape[-1], layer["filters"], layer["kernel"], stride=layer["stride"])
    return _padded(core, layer, in_shape, layer["kernel"], 0.0)


def _maxpool2d(layer: dict, in_shape, by_name) -> nn.Module:
    core = nn.MaxPool2d(layer["pool"], stride=layer["stride"])
    return _padded(core, layer, in_shape, layer["pool"], float("-inf"))


def _batchnorm(layer: dict, in_shape, by_name) -> nn.Module:
    norm = nn.BatchNorm2d if len(in_shape) == 3 else nn.BatchNorm1d
    # torch's momentum weighs the new batch; the IR's (Keras's) weighs the running value
    return norm(in_shape[-1], eps=layer["epsilon"], momentum=1.0 - layer["momentum"])


def _layer_norm(layer: dict, in_shape, by_name) -> nn.Module:  # over the last axis, biased variance
    return nn.LayerNorm(in_shape[-1], eps=layer["epsilon"])


def _activation(layer: dict, in_shape, by_name) -> nn.Module:
    return lookup(ACTIVATIONS, "activation", layer["fn"])()


def _dropout(layer: dict, in_shape, by_name) -> nn.Module:
    return nn.Dropout(layer["rate"])


def _flatten(layer: dict, in_shape, by_name) -> nn.Module:
    return nn.Flatten()


def _dense(layer: dict, in_shape, by_name) -> nn.Module:
    return nn.Linear(in_shape[-1], layer["units"])


def _embedding(layer: dict, in_shape, by_name) -> nn.Module:
    return nn.Embedding(layer["vocab"], layer["dim"])


def _lstm(layer: dict, in_shape, by_name) -> nn.Module:
    return LSTMLayer(in_shape[-1], layer["units"], layer["return_sequences"])


def _seq2seq(layer: dict, in_shape, by_name) -> nn.Module:
    return Seq2Seq(layer)


def _residual(layer: dict, in_shape, by_name) -> nn.Module:
    inner, inner_channels_first = _build_layers(block_shapes(layer, in_shape), by_name)
    if inner_channels_first:
        inner.append(Permute(0, 2, 3, 1))
    return Residual(nn.Sequential(*inner))


def _attention(layer: dict, in_shape, by_name) -> nn.Module:
    return Attention(in_shape[-1], layer)


def _rms_norm(layer: dict, in_shape, by_name) -> nn.Module:  # over the last axis, no mean taken out
    return nn.RMSNorm(in_shape[-1], eps=layer["epsilon"])


def _swiglu(layer: dict, in_shape, by_name) -> nn.Module:
    return SwiGLU(in_shape[-1], layer["hidden"])


def _grouped_query_attention(layer: dict, in_shape, by_name) -> nn.Module:
    return GroupedQueryAttention(in_shape[-1], layer, in_shape[0])


def _positional_embedding(layer: dict, in_shape, by_name) -> nn.Module:
    return PositionalEmbedding(layer["max_len"], in_shape[-1])


def _tied_output(layer: dict, in_shape, by_name) -> nn.Module:
    return TiedOutput(by_name[layer["embedding"]])  # the IR puts the embedding before it


def _to_sequence(layer: dict, in_shape, by_name) -> nn.Module:
    return nn.Flatten(1, 2)  # NHWC (batch, H, W, C) -> (batch, H * W, C), row by row


def _sequence_mean(layer: dict, in_shape, by_name) -> nn.Module:
    return SequenceMean()


# ---- weights: the built module -> canonical key -> its torch tensor ----------------------------

def _kernel_and_bias(module: nn.Module) -> Dict[str, torch.Tensor]:
    return {"kernel": module.weight, "bias": module.bias}


def _batchnorm_params(module: nn.Module) -> Dict[str, torch.Tensor]:
    return {"gamma": module.weight, "beta": module.bias,
            "moving_mean": module.running_mean, "moving_var": module.running_var}


def _layer_norm_params(module: nn.Module) -> Dict[str, torch.Tensor]:
    return {"gamma": module.weight, "beta": module.bias}


def _embedding_params(module: nn.Module) -> Dict[str, torch.Tensor]:
    return {"embeddings": module.weight}


def _lstm_params(prefix: str, lstm: nn.LSTM) -> Dict[str, torch.Tensor]:
    """torch keeps two biases; the canonical one is their sum ("..._hh" marks torch's second, kept 0)."""
    return {prefix + "kernel": lstm.weight_ih_l0, prefix + "recurrent_kernel": lstm.weight_hh_l0,
            prefix + "bias": lstm.bias_ih_l0, prefix + "bias_hh": lstm.bias_hh_l0}


def _lstm_layer_params(module: LSTMLayer) -> Dict[str, torch.Tensor]:
    return _lstm_params("", module.lstm)


def _seq2seq_params(module: Seq2Seq) -> Dict[str, torch.Tensor]:
    return {"source_embeddings": module.source_embedding.weight,
            "target_embeddings": module.target_embedding.weight,
            **_lstm_params("encoder_", module.encoder), **_lstm_params("decoder_", module.decoder)}


def _attention_params(module: Attention) -> Dict[str, torch.Tensor]:
    return {part + suffix: getattr(getattr(module, part), attribute) for part in ATTENTION_PARTS
            for suffix, attribute in (("_kernel", "weight"), ("_bias", "bias"))}


def _rms_norm_params(module: nn.RMSNorm) -> Dict[str, torch.Tensor]:
    return {"gamma": module.weight}


def _swiglu_params(module: SwiGLU) -> Dict[str, torch.Tensor]:
    return {"gate_kernel": module.gate.weight, "up_kernel": module.up.weight, "down_kernel": module.down.weight}


def _grouped_query_attention_params(module: GroupedQueryAttention) -> Dict[str, torch.Tensor]:
    return {part + "_kernel": getattr(module, part).weight for part in ATTENTION_PARTS}


def _tied_output_params(module: TiedOutput) -> Dict[str, torch.Tensor]:
    return {"bias": module.bias}  # its kernel is the embedding's table, exported there


LAYERS = {
    "conv2d": LayerEntry(_conv2d, NativeWeights(_kernel_and_bias, OIHW)),
    "maxpool2d": LayerEntry(_maxpool2d, None),
    "batchnorm": LayerEntry(_batchnorm, NativeWeights(_batchnorm_params, AS_CANONICAL)),
    "layer_norm": LayerEntry(_layer_norm, NativeWeights(_layer_norm_params, AS_CANONICAL)),
    "activation": LayerEntry(_activation, None),
    "dropout": LayerEntry(_dropout, None),
    "flatten": LayerEntry(_flatten, None),
    "dense": LayerEntry(_dense, NativeWeights(_kernel_and_bias, OUT_IN)),
    "embedding": LayerEntry(_embedding, NativeWeights(_embedding_params, AS_CANONICAL)),
    "lstm": LayerEntry(_lstm, NativeWeights(_lstm_layer_params, OUT_IN)),
    "seq2seq": LayerEntry(_seq2seq, NativeWeights(_seq2seq_params, OUT_IN)),
    "residual": LayerEntry(_residual, None),
    "attention": LayerEntry(_attention, NativeWeights(_attention_params, OUT_IN)),
    "positional_embedding": LayerEntry(_positional_embedding, NativeWeights(_embedding_params, AS_CANONICAL)),
    "tied_output": LayerEntry(_tied_output, NativeWeights(_tied_output_params, AS_CANONICAL)),
    "to_sequence": LayerEntry(_to_sequence, None),
    "sequence_mean": LayerEntry(_sequence_mean, None),
    "rms_norm": LayerEntry(_rms_norm, NativeWeights(_rms_norm_params, AS_CANONICAL)),
    "swiglu": LayerEntry(_swiglu, NativeWeights(_swiglu_params, OUT_IN)),
    "grouped_query_attention": LayerEntry(_grouped_query_attention,
                                          NativeWeights(_grouped_query_attention_params, OUT_IN)),
}
REFUSED = {}


def torch_params(kind: str, module: nn.Module) -> Dict[str, torch.Tensor]:
    """The weighted layer's tensors by canonical key (its table entry's weights)."""
    return native_weights(LAYERS, kind).params(module)


def layout(kind: str) -> Layout:
    """The canonical <-> native conversion of a weighted kind's weights (its table entry's)."""
    return native_weights(LAYERS, kind).layout


# ---- the model --------------------------------------------------------------------------------

def build_module(spec: dict) -> "tuple[nn.Sequential, Dict[str, nn.Module]]":
    """The model, and the module that holds each weighted IR layer's parameters, by layer name (a residual
    block's own layers included)."""
    by_name = {}
    modules, channels_first = _build_layers(infer_shapes(spec), by_name)
    if channels_first:
        modules.append(Permute(0, 2, 3, 1))
    return nn.Sequential(*modules), by_name


def _build_layers(shapes, by_name: Dict[str, nn.Module]) -> "tuple[list, bool]":
    """The modules of these (layer, in shape, out shape), and whether they leave activations NCHW."""
    modules = []
    channels_first = False
    for layer, in_shape, _ in shapes:
        kind = layer["type"]
        entry = lookup(LAYERS, "layer type", kind)
        if kind in ("conv2d", "maxpool2d", "batchnorm") and len(in_shape) == 3 and not channels_first:
            modules.append(Permute(0, 3, 1, 2))
            channels_first = True
        # back to NHWC before Flatten and to_sequence (the canonical orders), and before a residual
        # block, whose layers take NHWC
        if kind in ("flatten", "to_sequence", "residual") and channels_first:
            modules.append(Permute(0, 2, 3, 1))
            channels_first = False
        module = entry.build(layer, in_shape, by_name)
        modules.append(module)
        if entry.weights is not None:  # set_weights finds them by name
            by_name[layer["name"]] = module[-1] if isinstance(module, nn.Sequential) else module
    return modules, channels_first
