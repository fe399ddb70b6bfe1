"""PyTorch's loss terms and the per-batch sums that base.finish_metrics turns into an epoch's metrics."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from dlbench.shared.protocol import PAD_ID
from dlbench.worker.base import not_built


def loss_terms(loss: str, logits: torch.Tensor, labels: torch.Tensor):
    """The batch's mean loss, its weight, right predictions and predictions made (tensors: no host
    sync), as base.finish_metrics sums them."""
    if loss == "sigmoid_cross_entropy":
        logits = logits.squeeze(-1)
        value = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
        return value, len(labels), ((logits > 0) == labels.bool()).sum(), len(labels)
    flat = logits.reshape(-1, logits.shape[-1])
    flat_labels = labels.reshape(-1)
    right = flat.max(-1).indices == flat_labels  # argmax's first maximum, 2.4x faster on the CPU here
    if loss == "masked_sequence_softmax_cross_entropy":
        kept = flat_labels != PAD_ID
        count = kept.sum()
        return F.cross_entropy(flat, flat_labels, ignore_index=PAD_ID), count, (right & kept).sum(), count
    if loss in ("softmax_cross_entropy", "sequence_softmax_cross_entropy"):
        return F.cross_entropy(flat, flat_labels), len(labels), right.sum(), flat_labels.numel()
    raise not_built("loss", loss)


def batch_sums(loss, weight, right, made) -> torch.Tensor:
    """(loss x weight, weight, right, made) on the loss's device, in float64 so long epochs sum exactly."""
    return torch.stack([torch.as_tensor(value, dtype=torch.float64, device=loss.device)
                        for value in (loss * weight, weight, right, made)])
