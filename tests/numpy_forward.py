"""An independent numpy forward pass of the IR in canonical layout (float64, dropout off, BatchNorm
with its moving statistics): the yardstick that tells whether an adapter honours the layout. A layer type,
activation or padding it has no rule for raises the adapters' "does not build it" error (worker/base.py's
not_built), never computes another's."""

import math

import numpy as np

from dlbench.shared.ir import same_padding
from dlbench.worker.base import lookup, not_built  # the adapters' refusal, so a test asks all alike


def _pad_same(x, kernel, stride, value):
    (top, bottom), (left, right) = (same_padding(x.shape[i], kernel, stride) for i in (1, 2))
    return np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=value)


def _windows(x, kernel, stride):
    """Yields (i, j, view) where view[:, r, c] is input pixel (r*stride + i, c*stride + j)."""
    height = (x.shape[1] - kernel) // stride + 1
    width = (x.shape[2] - kernel) // stride + 1
    for i in range(kernel):
        for j in range(kernel):
            yield i, j, x[:, i:i + stride * (height - 1) + 1:stride, j:j + stride * (width - 1) + 1:stride]


def _padded(x, size, stride, padding, value):
    """x as a layer of this padding reads it; a padding added to the IR must be taught here."""
    if padding == "same":
        return _pad_same(x, size, stride, value)
    if padding == "valid":
        return x
    raise not_built("padding", padding)


def conv2d(x, kernel, bias, stride, padding):
    size = kernel.shape[0]
    x = _padded(x, size, stride, padding, 0.0)
    out = sum(view @ kernel[i, j] for i, j, view in _windows(x, size, stride))
    return out + bias


def maxpool2d(x, pool, stride, padding):
    x = _padded(x, pool, stride, padding, -np.inf)
    return np.max(np.stack([view for _, _, view in _windows(x, pool, stride)]), axis=0)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    """The exact GELU, x * 0.5 * (1 + erf(x / sqrt(2))), with the standard library's erf."""
    return x * 0.5 * (1 + _erf(x / math.sqrt(2)))


def lstm(x, kernel, recurrent, bias, return_sequences, state=None):
    """Returns the outputs (all steps, or the last) and the final (h, c)."""
    units = recurrent.shape[0]
    h, c = state if state is not None else (np.zeros((x.shape[0], units)), np.zeros((x.shape[0], units)))
    outputs = []
    for t in range(x.shape[1]):
        z = x[:, t] @ kernel + h @ recurrent + bias
        i, f, g, o = (z[:, k * units:(k + 1) * units] for k in range(4))
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return (np.stack(outputs, axis=1) if return_sequences else h), (h, c)


def seq2seq(x, layer, w):
    source, target = x[:, :layer["source_len"]], x[:, layer["source_len"]:]
    lstm_weights = [[w[part + key] for key in ("kernel", "recurrent_kernel", "bias")]
                    for part in ("encoder_", "decoder_")]
    _, state = lstm(w["source_embeddings"][source], *lstm_weights[0], False)
    out, _ = lstm(w["target_embeddings"][target], *lstm_weights[1], True, state)
    return out


def attention(x, layer, w, name):
    """Multi-head self-attention as the IR states it (shared/ir.py), dropout off."""
    steps, features = x.shape[1:]
    heads = layer["heads"]
    size = features // heads
    q, k, v = (x @ w[name + part + "_kernel"] + w[name + part + "_bias"] for part in ("query", "key", "value"))
    split = [t.reshape(len(x), steps, heads, size).transpose(0, 2, 1, 3) for t in (q, k, v)]
    scores = split[0] @ split[1].transpose(0, 1, 3, 2) / math.sqrt(size)
    if layer["causal"]:
        scores = np.where(np.tril(np.ones((steps, steps), dtype=bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = scores / scores.sum(axis=-1, keepdims=True)
    out = (weights @ split[2]).transpose(0, 2, 1, 3).reshape(len(x), steps, features)
    return out @ w[name + "output_kernel"] + w[name + "output_bias"]


def rotate(x, base):
    """Rotary position embeddings on (batch, heads, steps, dk), the "rotate half" pairing (shared/ir.py): the
    angle of step t and pair i is t * base ** (-2 i / dk), written out here with math.cos and math.sin."""
    steps, size = x.shape[2], x.shape[3]
    half = size // 2
    angles = np.array([[t * base ** (-2.0 * i / size) for i in range(half)] for t in range(steps)])
    cos, sin = np.vectorize(math.cos)(angles), np.vectorize(math.sin)(angles)
    first, second = x[..., :half], x[..., half:]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def grouped_query_attention(x, layer, w, name):
    """Grouped-query attention with rotary embeddings as the IR states it: query head h reads key/value head
    h // (heads / kv_heads); no biases."""
    batch, steps, features = x.shape
    heads, kv_heads = layer["heads"], layer["kv_heads"]
    size = features // heads
    q, k, v = (x @ w[name + part + "_kernel"] for part in ("query", "key", "value"))
    q = rotate(q.reshape(batch, steps, heads, size).transpose(0, 2, 1, 3), layer["rope_base"])
    k = rotate(k.reshape(batch, steps, kv_heads, size).transpose(0, 2, 1, 3), layer["rope_base"])
    v = v.reshape(batch, steps, kv_heads, size).transpose(0, 2, 1, 3)
    group = [h * kv_heads // heads for h in range(heads)]  # = h // (heads / kv_heads)
    scores = q @ k[:, group].transpose(0, 1, 3, 2) / math.sqrt(size)
    if layer["causal"]:
        scores = np.where(np.tril(np.ones((steps, steps), dtype=bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = scores / scores.sum(axis=-1, keepdims=True)
    out = (weights @ v[:, group]).transpose(0, 2, 1, 3).reshape(batch, steps, features)
    return out @ w[name + "output_kernel"]


ACTIVATIONS = {"relu": lambda v: np.maximum(v, 0), "sigmoid": sigmoid, "tanh": np.tanh, "gelu": gelu}


def forward(model, weights, x):
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    x = x.astype(np.float64) if x.dtype.kind == "f" else x
    return _apply(model["layers"], w, x)


def _apply(layers, w, x):
    for layer in layers:
        kind, name = layer["type"], layer["name"] + "/"
        if kind == "residual":
            x = x + _apply(layer["layers"], w, x)
        elif kind == "attention":
            x = attention(x, layer, w, name)
        elif kind == "positional_embedding":
            x = x + w[name + "embeddings"][:x.shape[1]]
        elif kind == "tied_output":
            x = x @ w[layer["embedding"] + "/embeddings"].T + w[name + "bias"]
        elif kind == "conv2d":
            x = conv2d(x, w[name + "kernel"], w[name + "bias"], layer["stride"], layer["padding"])
        elif kind == "maxpool2d":
            x = maxpool2d(x, layer["pool"], layer["stride"], layer["padding"])
        elif kind == "batchnorm":
            scale = w[name + "gamma"] / np.sqrt(w[name + "moving_var"] + layer["epsilon"])
            x = (x - w[name + "moving_mean"]) * scale + w[name + "beta"]
        elif kind == "layer_norm":  # over the last axis, biased variance
            mean = x.mean(axis=-1, keepdims=True)
            variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
            x = (x - mean) / np.sqrt(variance + layer["epsilon"]) * w[name + "gamma"] + w[name + "beta"]
        elif kind == "rms_norm":  # over the last axis, no mean taken out
            x = x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + layer["epsilon"]) * w[name + "gamma"]
        elif kind == "swiglu":
            gate = x @ w[name + "gate_kernel"]
            x = (gate * sigmoid(gate) * (x @ w[name + "up_kernel"])) @ w[name + "down_kernel"]
        elif kind == "grouped_query_attention":
            x = grouped_query_attention(x, layer, w, name)
        elif kind == "activation":
            x = lookup(ACTIVATIONS, "activation", layer["fn"])(x)
        elif kind == "flatten":
            x = x.reshape(len(x), -1)
        elif kind == "to_sequence":  # position (row r, column c) is step r * W + c
            n, height, width, channels = x.shape
            x = np.stack([x[:, r, c] for r in range(height) for c in range(width)], axis=1)
        elif kind == "sequence_mean":
            x = x.mean(axis=1)
        elif kind == "dense":
            x = x @ w[name + "kernel"] + w[name + "bias"]
        elif kind == "embedding":
            x = w[name + "embeddings"][x]
        elif kind == "lstm":
            x, _ = lstm(x, w[name + "kernel"], w[name + "recurrent_kernel"], w[name + "bias"],
                        layer["return_sequences"])
        elif kind == "seq2seq":
            x = seq2seq(x, layer, {k[len(name):]: v for k, v in w.items() if k.startswith(name)})
        elif kind == "dropout":  # off here
            pass
        else:
            raise not_built("layer type", kind)
    return x
