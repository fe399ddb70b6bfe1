"""Theano's loss terms, as pytorch.loss_terms defines them, and the per-batch sums a compiled step returns.

Imported by adapter.py once it has set THEANO_FLAGS and imported Theano.
"""
from __future__ import annotations

import theano.tensor as T

from dlbench.shared.protocol import PAD_ID
from dlbench.worker.base import not_built
from dlbench.worker.frameworks.theano.layers import F32


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
