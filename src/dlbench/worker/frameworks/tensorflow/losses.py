"""TensorFlow's loss terms and the per-batch sums an epoch accumulates on the device."""
from __future__ import annotations

import tensorflow as tf

from dlbench.shared.protocol import PAD_ID
from dlbench.worker.base import not_built


def loss_terms(loss: str, logits, labels):
    """The batch's mean loss, its weight, right predictions and predictions made, as
    pytorch.loss_terms defines them (the last three as float64 tensors)."""
    batch = tf.cast(tf.shape(labels)[0], tf.float64)
    if loss == "sigmoid_cross_entropy":
        logits = tf.squeeze(logits, -1)
        value = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, logits.dtype),
                                                                      logits=logits))
        right = tf.reduce_sum(tf.cast(tf.equal(logits > 0, labels != 0), tf.float64))
        return value, batch, right, batch
    per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    right = tf.equal(tf.argmax(logits, axis=-1, output_type=labels.dtype), labels)
    if loss == "masked_sequence_softmax_cross_entropy":
        kept = tf.not_equal(labels, PAD_ID)
        count = tf.reduce_sum(tf.cast(kept, tf.float32))
        value = tf.math.divide_no_nan(tf.reduce_sum(per_token * tf.cast(kept, tf.float32)), count)
        count = tf.cast(count, tf.float64)
        return value, count, tf.reduce_sum(tf.cast(right & kept, tf.float64)), count
    if loss in ("softmax_cross_entropy", "sequence_softmax_cross_entropy"):
        made = tf.cast(tf.size(labels), tf.float64)
        return tf.reduce_mean(per_token), batch, tf.reduce_sum(tf.cast(right, tf.float64)), made
    raise not_built("loss", loss)


def batch_sums(loss, weight, right, made):
    """One batch's contribution to the epoch's sums (a float64 vector the adapter adds up on the device):
    loss times its weight, the weight, right predictions, predictions made; finish_metrics' arguments."""
    return tf.stack([tf.cast(loss, tf.float64) * weight, weight, right, made])
