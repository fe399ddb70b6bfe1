"""MXNet 1.9 losses: the network and its loss in one hybridized graph (`Objective`), and the per-batch
loss and accuracy sums the adapter adds up on the engine.

Nothing is fetched to the host inside an epoch: each batch's sums are formed on the engine (`batch_sums`)
and the adapter reads their total once at the epoch's end.

Loaded through adapter.py, which fixes MXNet's OpenMP threads before mxnet is imported.
"""
from __future__ import annotations

import numpy as np
from mxnet import gluon, nd

from dlbench.shared.protocol import PAD_ID
from dlbench.worker.base import not_built
from dlbench.worker.frameworks.mxnet.layers import Net


class Objective(gluon.HybridBlock):
    """(mean loss, right predictions, kept tokens, batch statistics...) of a batch. The weight and the
    predictions made follow from the batch's shape on the host; only the masked loss needs a count."""

    def __init__(self, net: Net, loss: str):
        super(Objective, self).__init__()
        self.loss = loss
        with self.name_scope():
            self.net = net

    def hybrid_forward(self, F, x, y):
        outputs = self.net(x)
        logits, stats = outputs[0], outputs[1:]
        if self.loss == "sigmoid_cross_entropy":
            z = F.reshape(logits, shape=(-1,))
            # log(1 + exp(-|z|)) + max(z, 0) - z y: stable for every z
            per_sample = F.relu(z) - z * y + F.Activation(-F.abs(z), act_type="softrelu")
            right = F.sum(F.broadcast_equal(z > 0, y))
            return [F.mean(per_sample), right, F.sum(F.ones_like(y))] + list(stats)
        per_token = -F.pick(F.log_softmax(logits, axis=-1), y, axis=-1)
        hits = F.broadcast_equal(F.argmax(logits, axis=-1), y)
        if self.loss == "masked_sequence_softmax_cross_entropy":
            kept = y != PAD_ID
            count = F.sum(kept)
            value = F.sum(per_token * kept) / F.maximum(count, 1.0)  # no tokens kept: 0, as divide_no_nan
            return [value, F.sum(hits * kept), count] + list(stats)
        if self.loss in ("softmax_cross_entropy", "sequence_softmax_cross_entropy"):
            return [F.mean(per_token), F.sum(hits), F.sum(F.ones_like(y))] + list(stats)
        raise not_built("loss", self.loss)


def batch_sums(loss_name: str, loss, right, count, y_shape, ctx) -> nd.NDArray:
    """(loss x weight, weight, right, made), as base.finish_metrics sums them, in float64 on the
    engine: no host sync per batch. Weight and predictions made follow from the labels' shape,
    but for the masked loss, whose both are the kept tokens."""
    if loss_name == "masked_sequence_softmax_cross_entropy":
        terms = nd.concat(loss * count, count, right, count, dim=0)
    else:
        weight, made = float(y_shape[0]), float(np.prod(y_shape))
        terms = nd.concat(loss * weight, nd.full((1,), weight, ctx=ctx, dtype=loss.dtype), right,
                          nd.full((1,), made, ctx=ctx, dtype=loss.dtype), dim=0)
    return terms.astype(np.float64)
