"""Chainer's loss terms, as the reference's (pytorch/losses.py) define them."""
from __future__ import annotations

import chainer.functions as F
import numpy as np

from dlbench.shared.protocol import PAD_ID
from dlbench.worker.base import not_built


def loss_terms(loss: str, logits, labels: np.ndarray):
    """The batch's mean loss (a Variable), its weight, right predictions and predictions made, as
    pytorch/losses.loss_terms defines them."""
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
