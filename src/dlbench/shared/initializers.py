"""Canonical initial weights, generated in numpy from the seed, so every framework starts alike.

Worker side (Python 3.8, numpy >= 1.17). Glorot-uniform kernels, zero biases; LSTM recurrent
kernels orthogonal with forget-gate bias 1; embeddings uniform(-0.05, 0.05); BatchNorm gamma 1,
beta 0, moving mean 0, moving variance 1; layer normalisation's gamma (scale) 1, beta (offset) 0, RMS
normalisation's gamma 1.
Each weight draws from its own stream, keyed by the seed and the weight's position, so one layer's
shape never shifts another's values. The streams are
numpy's legacy RandomState, whose output numpy promises never to change: framework environments
hold numpy versions years apart and must still draw identical weights.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from dlbench.shared.ir import IRError, all_shapes, param_shapes


def glorot_uniform(rng, shape, fan_in: int, fan_out: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape)


def orthogonal(rng, rows: int, cols: int) -> np.ndarray:
    """A (rows, cols) matrix with orthonormal rows or columns (Saxe et al.; Keras's Orthogonal)."""
    flat = rng.standard_normal((max(rows, cols), min(rows, cols)))
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    return q.T if rows < cols else q


def _layer_weights(rng, layer: dict, key: str, shape) -> np.ndarray:
    """The initial value of one canonical weight, by its layer's type and its key. Every weighted type is
    named: a new one (or a new key of a known one) raises instead of taking another type's rule."""
    kind = layer["type"]
    if kind in ("batchnorm", "layer_norm", "rms_norm"):
        if key in ("gamma", "moving_var"):
            return np.ones(shape)
        if key in ("beta", "moving_mean"):
            return np.zeros(shape)
    elif kind in ("embedding", "positional_embedding"):
        if key == "embeddings":
            return rng.uniform(-0.05, 0.05, size=shape)
    elif kind == "tied_output":
        if key == "bias":
            return np.zeros(shape)
    elif kind in ("conv2d", "dense", "attention", "swiglu", "grouped_query_attention"):
        if key.endswith("bias"):
            return np.zeros(shape)
        if kind == "conv2d" and key == "kernel":
            receptive = shape[0] * shape[1]
            return glorot_uniform(rng, shape, receptive * shape[2], receptive * shape[3])
        if kind != "conv2d" and key.endswith("kernel"):  # (in, out)
            return glorot_uniform(rng, shape, shape[0], shape[1])
    elif kind in ("lstm", "seq2seq"):  # seq2seq: its two tables, then an lstm's weights per prefix
        if key.endswith("bias"):
            value = np.zeros(shape)
            units = layer["units"]
            value[units:2 * units] = 1.0  # forget gate (second quarter) starts open
            return value
        if key.endswith("embeddings"):
            return rng.uniform(-0.05, 0.05, size=shape)
        if key.endswith("recurrent_kernel"):
            return orthogonal(rng, shape[0], shape[1])
        if key.endswith("kernel"):
            return glorot_uniform(rng, shape, shape[0], shape[1])
    raise IRError("canonical_init has no rule for weight %r of layer type %r" % (key, kind))


def canonical_init(spec: dict, seed: int) -> Dict[str, np.ndarray]:
    """"layer_name/param" -> float32 array in canonical layout."""
    weights = {}
    for index, (layer, in_shape, _) in enumerate(all_shapes(spec)):
        for position, (key, shape) in enumerate(param_shapes(layer, in_shape).items()):
            rng = np.random.RandomState([seed, index, position])
            weights[layer["name"] + "/" + key] = _layer_weights(rng, layer, key, shape).astype(np.float32)
    return weights
