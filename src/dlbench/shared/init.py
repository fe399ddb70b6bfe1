"""Canonical initial weights, generated in numpy from the seed, so every framework starts alike.

Worker side (Python 3.8, numpy >= 1.17). Glorot-uniform kernels, zero biases; LSTM recurrent
kernels orthogonal with forget-gate bias 1; embeddings uniform(-0.05, 0.05); BatchNorm gamma 1,
beta 0, moving mean 0, moving variance 1; layer normalisation's gamma (scale) 1, beta (offset) 0.
Each weight draws from its own stream, keyed by the seed and the weight's position, so one layer's
shape never shifts another's values. The streams are
numpy's legacy RandomState, whose output numpy promises never to change: framework environments
hold numpy versions years apart and must still draw identical weights.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from dlbench.shared.ir import all_shapes, param_shapes


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
    kind = layer["type"]
    if key.endswith("bias") or key in ("beta", "moving_mean"):
        value = np.zeros(shape)
        if kind in ("lstm", "seq2seq"):  # forget gate (second quarter) starts open
            units = layer["units"]
            value[units:2 * units] = 1.0
        return value
    if key in ("gamma", "moving_var"):
        return np.ones(shape)
    if key.endswith("embeddings"):
        return rng.uniform(-0.05, 0.05, size=shape)
    if key.endswith("recurrent_kernel"):
        return orthogonal(rng, shape[0], shape[1])
    if kind == "conv2d":
        receptive = shape[0] * shape[1]
        return glorot_uniform(rng, shape, receptive * shape[2], receptive * shape[3])
    return glorot_uniform(rng, shape, shape[0], shape[1])


def canonical_init(spec: dict, seed: int) -> Dict[str, np.ndarray]:
    """"layer_name/param" -> float32 array in canonical layout."""
    weights = {}
    for index, (layer, in_shape, _) in enumerate(all_shapes(spec)):
        for position, (key, shape) in enumerate(param_shapes(layer, in_shape).items()):
            rng = np.random.RandomState([seed, index, position])
            weights[layer["name"] + "/" + key] = _layer_weights(rng, layer, key, shape).astype(np.float32)
    return weights
