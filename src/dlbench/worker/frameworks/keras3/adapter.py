"""Keras 3 adapter, one module for the three backends (KERAS_BACKEND = tensorflow, jax or torch, chosen
by the environment's recipe before Keras is imported).

The IR becomes a functional keras.Model of Keras layers, channels_last throughout, whose weights are
the canonical ones as they stand: HWIO conv kernels, (in, out) dense kernels, and LSTM kernels
(in, 4u) / (u, 4u) with one bias and Keras's gate order i, f, c, o (= i, f, g, o).
An activation that directly follows a Conv2D or Dense becomes that layer's `activation` argument, as
Keras programs write it: one layer call fewer per activation. On keras-torch (2 cores, epochs of
1,536 images alternating with the idiomatic program in one process, glibc's allocator kept from
returning memory so that page faults do not blur the figure) cnn-mnist went from 95.6-98.3 % of the
program's speed to 99.3-99.5 %.

Self-attention is keras.layers.MultiHeadAttention(use_causal_mask=...), whose maths is the IR's (per-head
biased projections, scores times 1/sqrt(dk), the causal mask, dropout on the attention weights in training);
its kernels are the canonical (d, d) ones reshaped in C order to (d, heads, dk) and (heads, dk, d) (the
projection biases to (heads, dk)), so get/set weights and the gradients reshape. Without dropout it runs
ops.dot_product_attention(is_causal=...), each backend's fused kernel. Learned positions and the tied
output (x E^T + b on the Embedding's own variable, listed once by Keras) are two small layers below.

Training drives Keras's own compiled train step (trainer.train_function, which fit calls, as compile()
resolved it: a tf.function, a jax.jit of train_step, torch's eager train_step) over batches that every
framework's adapter forms alike: the split converted to the backend's tensors once (the first epoch takes
it), each batch gathered on the device by the epoch's order, base.batch_slices' consecutive batches with
the last one smaller (run_train_function). fit itself builds, every call and so inside the epoch's clock,
a data adapter with a host copy of the split, on TensorFlow a tf.data pipeline and its iterators, and a
callback list: on keras-tensorflow 40-85 ms an epoch, +20-28 % of a quick-suite cnn-mnist epoch on a 2-core
AMD EPYC (issue 46), which no other framework pays. feed_matches_fit() below trains a twin by

    model.fit(x[order], y[order], batch_size=bs, shuffle=False, epochs=1, verbose=0)

whose ArrayDataAdapter forms the same slices with shuffle=False (keras/src/trainers/data_adapters/
array_data_adapter.py: _get_iterator), and compares (tests/test_adapters.py: test_keras_feed_trains_as_fit):
SGD + L2 BatchNorm CNN, Adadelta LSTM language model, Adam masked seq2seq, AdamW with warm-up and cosine,
3 epochs of 21 samples in batches of 8: weight difference 0.0 on all three backends (keras 3.15.1), the
same epoch sums and optimiser iterations.

Pixels stay uint8 until a batch: a small trainer model wraps the float model and divides by the
split's input scale on the device. The epoch's metric sums (batch mean loss x batch weight, weight,
right, made) are accumulated in a Keras Metric updated from compute_loss, so nothing leaves the
device before the epoch ends; fit's own loss tracker weighs batches by samples, which is right for
every loss but the masked one (weight = unmasked tokens).

Where Keras differs from the reference (PyTorch) semantics, it is corrected here:
- SGD: Keras m = momentum*m - lr*g; p += m equals torch's v = momentum*v + g; p -= lr*v for a constant
  lr (m = -lr*v), so keras.optimizers.SGD is used as it is. Keras's weight_decay is decoupled, so the
  coupled L2 (g + wd*p, before momentum) is added to the gradient in update_step (CoupledL2): the
  reported loss stays the data loss, as torch's.
- Adam: Keras adds epsilon to sqrt(v) before v's bias correction (p -= lr*sqrt(1-b2^t)/(1-b1^t) * m /
  (sqrt(v) + eps)); torch after it (p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)). TorchAdam
  applies torch's formula. AdamW is TorchAdam with Keras's own decoupled weight_decay (p -= lr_t * wd * p
  before each update, as keras.optimizers.AdamW and torch's AdamW), and a schedule is Keras's CosineDecay
  with warm-up, evaluated at the optimizer's iterations before each update counts itself.
- Adadelta: Keras's formula is torch's (checked in keras 3.15 source, generic and torch-parallel).
- BatchNormalization: Keras updates the moving variance with the biased batch variance; BatchNorm
  below updates it with the unbiased one (n/(n-1)), as torch does, and normalises with the biased one.
"""
from __future__ import annotations

import itertools
import os
from typing import Dict

import numpy as np

from dlbench.shared.ir import WEIGHTLESS, all_shapes, param_shapes
from dlbench.shared.protocol import PAD_ID
from dlbench.worker.base import (
    BaseAdapter,
    Split,
    batch_slices,
    finish_metrics,
    lookup,
    not_built,
    thread_budget,
)

BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")

# Thread knobs that must be set before the backend starts.
_SINGLE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
if BACKEND == "jax" and thread_budget() == 1:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _SINGLE_THREAD_XLA).strip()

if BACKEND == "tensorflow":
    import tensorflow as tf

    def _configure_tf_threads(threads: int) -> None:
        """Intra-op = the budget, inter-op = 1 (a training step is a chain of dependent ops); settable only
        before TensorFlow's runtime starts, so first at import (DLBENCH_THREADS), then checked."""
        config = tf.config.threading
        try:
            config.set_intra_op_parallelism_threads(threads)
            config.set_inter_op_parallelism_threads(1)
        except RuntimeError:
            raise RuntimeError("TensorFlow's runtime already runs with %d intra-op threads; %d cannot be set "
                               "in the same process" % (config.get_intra_op_parallelism_threads(), threads)) from None

    _configure_tf_threads(thread_budget())
elif BACKEND == "jax":
    import jax
    import jax.numpy as jnp
    import jaxlib
elif BACKEND == "torch":
    import torch
else:
    raise RuntimeError("KERAS_BACKEND=%r: this adapter supports tensorflow, jax and torch" % BACKEND)

import keras  # noqa: E402  (after the backend's thread settings)
from keras import ops  # noqa: E402

if keras.backend.backend() != BACKEND:
    raise RuntimeError("Keras runs the %r backend, KERAS_BACKEND asks for %r" % (keras.backend.backend(), BACKEND))


# ---- layers -----------------------------------------------------------------------------------

class BatchNorm(keras.layers.BatchNormalization):
    """Keras's BatchNormalization, except that in training the moving variance takes the UNBIASED batch
    variance (x n/(n-1), n = elements per channel) as torch's does; normalisation uses the biased one."""

    def call(self, inputs, training=None, mask=None):
        # renorm: Keras 3.13 added batch renormalisation (Keras 3.12 has no such attribute); never asked for here
        if not (training and self.trainable) or mask is not None or getattr(self, "renorm", False):
            return super().call(inputs, training=training, mask=mask)
        inputs = ops.cast(inputs, "float32")
        mean, variance = self._moments(inputs, mask)
        count = ops.cast(ops.size(inputs), "float32") / float(inputs.shape[-1])
        unbiased = variance * (count / (count - 1.0))
        momentum = self.momentum
        self.moving_mean.assign(self.moving_mean * momentum + mean * (1.0 - momentum))
        self.moving_variance.assign(self.moving_variance * momentum + unbiased * (1.0 - momentum))
        outputs = ops.batch_normalization(inputs, mean, variance, axis=self.axis, offset=self.beta,
                                          scale=self.gamma, epsilon=self.epsilon)
        return ops.cast(outputs, self.compute_dtype)


def _lstm_vars(prefix: str, layer) -> Dict[str, object]:
    cell = layer.cell
    return {prefix + "kernel": cell.kernel, prefix + "recurrent_kernel": cell.recurrent_kernel,
            prefix + "bias": cell.bias}


def exact_gelu(x):
    """The IR's gelu, the exact (erf) form: stated here, not left to keras.activations.gelu's default."""
    return keras.activations.gelu(x, approximate=False)


# the Keras activation of each IR activation: its name, or for gelu the exact form's function
ACTIVATIONS = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "gelu": exact_gelu}
PADDINGS = ("same", "valid")  # Keras's 'same' is TensorFlow's, the IR's (shared/ir.py same_padding)


def keras_activation(fn: str):
    """The Keras activation of an IR activation; one it does not list is refused, never handed to Keras by
    name (Keras knows activations the IR does not)."""
    return lookup(ACTIVATIONS, "activation", fn)


def keras_padding(padding: str) -> str:
    if padding not in PADDINGS:
        raise not_built("padding", padding)
    return padding


def folded_activation(layers, index: int):
    """The activation that directly follows layer `index` (a Conv2D or Dense), which takes it as its
    `activation` argument, as Keras programs write it; None when no activation follows."""
    following = layers[index + 1] if index + 1 < len(layers) else None
    if following is None or following["type"] != "activation":
        return None
    return keras_activation(following["fn"])


class PositionalEmbedding(keras.layers.Layer):
    """A learned (max_len, features) table whose first `steps` rows are added to a (steps, features) input
    (Keras has no such layer of its own; keras_hub's PositionEmbedding is this, without the addition)."""

    def __init__(self, max_len: int, **kwargs):
        super().__init__(**kwargs)
        self.max_len = max_len

    def build(self, input_shape):
        self.embeddings = self.add_weight(shape=(self.max_len, input_shape[-1]), initializer="glorot_uniform",
                                          name="embeddings")

    def call(self, inputs):
        return inputs + self.embeddings[:inputs.shape[-2]]


class TiedOutput(keras.layers.Layer):
    """logits = x E^T + b, E the given Embedding layer's own table: one variable used twice, so its
    gradient sums both uses (Keras's weights lists hold it once). The bias is this layer's only weight."""

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding

    def build(self, input_shape):
        self.bias = self.add_weight(shape=(self.embedding.input_dim,), initializer="zeros", name="bias")

    def call(self, inputs):
        return ops.matmul(inputs, ops.transpose(self.embedding.embeddings)) + self.bias


ATTENTION_PARTS = ("query", "key", "value", "output")


def build_model(spec: dict):
    """The functional model (float pixels or int ids -> logits) and every canonical weight's variable.
    A variable may hold its canonical weight in another shape of the same C-order elements (attention's
    kernels (d, heads, dk) and (heads, dk, d) for the canonical (d, d)): canonical_shapes gives the IR's."""
    float_inputs = spec["input_dtype"].startswith("float")
    inputs = keras.Input(shape=tuple(spec["input_shape"]), dtype="float32" if float_inputs else "int32")
    variables = {}  # "layer/param" -> keras Variable, in canonical order
    outputs = build_layers(spec["layers"], inputs, variables, {})
    return keras.Model(inputs, outputs, name="dlbench"), variables


def canonical_shapes(spec: dict) -> Dict[str, tuple]:
    """Each canonical weight's shape, by "layer/param" (every layer, a residual block's own included)."""
    return {layer["name"] + "/" + key: tuple(shape) for layer, in_shape, _ in all_shapes(spec)
            for key, shape in param_shapes(layer, in_shape).items()}


def build_layers(layers, x, variables: dict, built: dict):
    """Applies the IR's `layers` to the Keras tensor x; records their variables and, by name, the layers
    built (a tied output finds its embedding there)."""
    L = keras.layers
    for index, layer in enumerate(layers):
        kind, name = layer["type"], layer["name"]
        if kind == "activation" and index and layers[index - 1]["type"] in ("conv2d", "dense"):
            continue  # taken by the layer before it (see folded_activation)
        if kind == "seq2seq":
            x = seq2seq(layer, x, variables)
            continue
        if kind == "residual":  # y = x + f(x), f the block's own layers
            x = L.Add(name=name)([x, build_layers(layer["layers"], x, variables, built)])
            continue
        if kind == "attention":
            x = attention(layer, x, variables)
            continue
        if kind == "conv2d":
            module = L.Conv2D(layer["filters"], layer["kernel"], strides=layer["stride"],
                              padding=keras_padding(layer["padding"]), activation=folded_activation(layers, index),
                              name=name)
        elif kind == "maxpool2d":
            module = L.MaxPooling2D(layer["pool"], strides=layer["stride"], padding=keras_padding(layer["padding"]),
                                    name=name)
        elif kind == "batchnorm":
            module = BatchNorm(momentum=layer["momentum"], epsilon=layer["epsilon"], name=name)
        elif kind == "layer_norm":  # over the last axis, biased variance (ops.moments); rms_scaling stays off
            module = L.LayerNormalization(axis=-1, epsilon=layer["epsilon"], name=name)
        elif kind == "activation":
            module = L.Activation(keras_activation(layer["fn"]), name=name)
        elif kind == "dropout":
            module = L.Dropout(layer["rate"], name=name)
        elif kind == "flatten":
            module = L.Flatten(name=name)
        elif kind == "to_sequence":  # NHWC in C order: step r * W + c is row r, column c
            height, width, channels = x.shape[1:]
            module = L.Reshape((height * width, channels), name=name)
        elif kind == "sequence_mean":
            module = L.GlobalAveragePooling1D(data_format="channels_last", name=name)
        elif kind == "dense":
            module = L.Dense(layer["units"], activation=folded_activation(layers, index), name=name)
        elif kind == "embedding":
            module = L.Embedding(layer["vocab"], layer["dim"], name=name)
        elif kind == "lstm":
            module = L.LSTM(layer["units"], return_sequences=layer["return_sequences"], name=name)
        elif kind == "positional_embedding":
            module = PositionalEmbedding(layer["max_len"], name=name)
        elif kind == "tied_output":
            module = TiedOutput(built[layer["embedding"]], name=name)
        else:
            raise not_built("layer type", kind)
        x = module(x)
        built[name] = module
        if kind in ("conv2d", "dense"):
            variables[name + "/kernel"], variables[name + "/bias"] = module.kernel, module.bias
        elif kind == "batchnorm":
            variables.update([(name + "/gamma", module.gamma), (name + "/beta", module.beta),
                              (name + "/moving_mean", module.moving_mean),
                              (name + "/moving_var", module.moving_variance)])
        elif kind == "layer_norm":
            variables.update([(name + "/gamma", module.gamma), (name + "/beta", module.beta)])
        elif kind in ("embedding", "positional_embedding"):
            variables[name + "/embeddings"] = module.embeddings
        elif kind == "tied_output":  # its kernel is the embedding's table, already listed under the embedding
            variables[name + "/bias"] = module.bias
        elif kind == "lstm":
            variables.update((name + "/" + k, v) for k, v in _lstm_vars("", module).items())
        elif kind not in WEIGHTLESS:  # else set_weights would pass its weights by unseen
            raise not_built("weights of layer type", kind)
    return x


def seq2seq(layer: dict, x, variables: dict):
    """Encoder LSTM over the source, whose final (h, c) starts the decoder LSTM; teacher forcing."""
    L, name, source_len = keras.layers, layer["name"], layer["source_len"]
    source_embedding = L.Embedding(layer["source_vocab"], layer["embed_dim"], name=name + "_source_embedding")
    target_embedding = L.Embedding(layer["target_vocab"], layer["embed_dim"], name=name + "_target_embedding")
    encoder = L.LSTM(layer["units"], return_state=True, name=name + "_encoder")
    decoder = L.LSTM(layer["units"], return_sequences=True, name=name + "_decoder")
    _, h, c = encoder(source_embedding(x[:, :source_len]))
    x = decoder(target_embedding(x[:, source_len:]), initial_state=[h, c])
    variables[name + "/source_embeddings"] = source_embedding.embeddings
    variables[name + "/target_embeddings"] = target_embedding.embeddings
    for prefix, lstm in (("encoder_", encoder), ("decoder_", decoder)):
        variables.update((name + "/" + k, v) for k, v in _lstm_vars(prefix, lstm).items())
    return x


def attention(layer: dict, x, variables: dict):
    """keras.layers.MultiHeadAttention as a self-attention, the IR's maths exactly: per-head projections
    with biases (kernels (d, heads, dk), the canonical (d, d) with head h's columns h*dk.. reshaped in C
    order; output kernel (heads, dk, d), the canonical rows h*dk..), scores scaled by 1/sqrt(dk), the causal
    mask, dropout on the attention weights in training only. Without dropout it calls
    ops.dot_product_attention(is_causal=...), each backend's fused attention."""
    size = x.shape[-1] // layer["heads"]
    module = keras.layers.MultiHeadAttention(layer["heads"], size, dropout=layer["dropout"], name=layer["name"])
    x = module(x, x, use_causal_mask=layer["causal"])
    denses = (module.query_dense, module.key_dense, module.value_dense, module.output_dense)
    for part, dense in zip(ATTENTION_PARTS, denses):
        variables[layer["name"] + "/" + part + "_kernel"] = dense.kernel
        variables[layer["name"] + "/" + part + "_bias"] = dense.bias
    return x


# ---- losses and metric sums -------------------------------------------------------------------

def masked_sequence_loss(y_true, y_pred):
    """Mean cross-entropy over the tokens whose label is not PAD_ID (torch's ignore_index mean)."""
    per_token = ops.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)
    kept = ops.cast(ops.not_equal(y_true, PAD_ID), per_token.dtype)
    return ops.sum(per_token * kept) / ops.sum(kept)


def make_loss(name: str):
    if name == "sigmoid_cross_entropy":
        return keras.losses.BinaryCrossentropy(from_logits=True)  # on the squeezed (batch,) logits
    if name == "masked_sequence_softmax_cross_entropy":
        return masked_sequence_loss  # a scalar: Keras's reduction leaves it as it is
    if name in ("softmax_cross_entropy", "sequence_softmax_cross_entropy"):
        # over every label position: samples, or samples x steps for the language model
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    raise not_built("loss", name)


def first_maximum(scores):
    """argmax over the last axis (the first maximum) as the backend's own adapter takes it, its fastest exact
    form (docs/fairness.md, "One bookkeeping rule"): torch's max(-1).indices, the JAX adapter's max, compare
    and min (a NaN counts as the maximum, as in jnp.argmax), TensorFlow's argmax. On lstm-ptb's logits
    (600 x 2,000, 2 busy cores, medians): keras-jax 2.6 ms against ops.argmax's 8.6, keras-torch 5.1
    against 14.6; on TensorFlow neither top_k (1.6 ms) nor max-compare-min (3.6) beat argmax (2.2) clearly."""
    if BACKEND == "torch":
        return torch.max(scores, -1).indices
    if BACKEND == "jax":
        top = jnp.max(scores, axis=-1, keepdims=True)
        positions = jax.lax.broadcasted_iota("int32", scores.shape, scores.ndim - 1)
        hit = (scores == top) | jnp.isnan(scores)
        return jnp.min(jnp.where(hit, positions, scores.shape[-1]), axis=-1)
    return ops.argmax(scores, axis=-1)


def batch_terms(name: str, y_true, y_pred):
    """(weight, right, made) of one batch as finish_metrics sums them (see pytorch.loss_terms)."""
    labels = ops.cast(y_true, "int32")
    batch = ops.cast(ops.shape(labels)[0], "float32")
    if name == "sigmoid_cross_entropy":
        right = ops.sum(ops.cast(ops.equal(ops.greater(y_pred, 0.0), ops.equal(labels, 1)), "float32"))
        return batch, right, batch
    hits = ops.equal(ops.cast(first_maximum(y_pred), "int32"), labels)
    if name == "masked_sequence_softmax_cross_entropy":
        kept = ops.not_equal(labels, PAD_ID)
        count = ops.sum(ops.cast(kept, "float32"))
        return count, ops.sum(ops.cast(ops.logical_and(hits, kept), "float32")), count
    if name in ("softmax_cross_entropy", "sequence_softmax_cross_entropy"):
        return batch, ops.sum(ops.cast(hits, "float32")), ops.cast(ops.size(labels), "float32")
    raise not_built("loss", name)


class EpochSums(keras.metrics.Metric):
    """loss x weight, weight, right and made, summed over the batches since the last reset."""

    def __init__(self, name="epoch_sums", **kwargs):
        super().__init__(name=name, **kwargs)
        self.sums = self.add_variable(shape=(4,), initializer="zeros", name="sums")

    def update_state(self, loss, weight, right, made):
        loss = ops.stop_gradient(ops.cast(loss, "float32"))
        self.sums.assign_add(ops.stack([loss * weight, weight, right, made]))

    def result(self):
        return self.sums[0] / self.sums[1]


class Trainer(keras.Model):
    """What fit and evaluate run: the float model behind the input scaling (uint8 pixels -> [0, 1] on the
    device), the sigmoid loss's logits squeezed to (batch,), and the epoch sums taken in compute_loss."""

    def __init__(self, core, scale, loss_name: str, **kwargs):
        super().__init__(**kwargs)
        self.core = core
        self.scale = scale
        self.loss_name = loss_name
        self.epoch_sums = EpochSums()

    def call(self, x, training=False):
        if self.scale:
            x = ops.divide(ops.cast(x, "float32"), float(self.scale))
        out = self.core(x, training=training)
        return ops.squeeze(out, -1) if self.loss_name == "sigmoid_cross_entropy" else out

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x, y, y_pred, sample_weight, training=training)
        self.epoch_sums.update_state(loss, *batch_terms(self.loss_name, y, y_pred))
        return loss


class Served(keras.Model):
    """What serving() calls: the float model in inference mode behind the input scaling (uint8 pixels ->
    [0, 1] on the device), its outputs as predict gives them."""

    def __init__(self, core, scale, **kwargs):
        super().__init__(**kwargs)
        self.core = core
        self.scale = scale

    def call(self, x, training=False):
        if self.scale:
            x = ops.divide(ops.cast(x, "float32"), float(self.scale))
        return self.core(x, training=False)


# ---- optimisers -------------------------------------------------------------------------------

def dense_gradient(gradient):
    """TensorFlow hands embedding gradients over as IndexedSlices with one row per token occurrence,
    repeats included; Keras's element-wise ops (ops.square among them) then act on each occurrence
    before the rows are summed, so Adam's v took the sum of squares where the reference squares the
    sum. Densified, every optimiser sees the one summed gradient, as in the reference.
    (keras.ops.convert_to_tensor returns IndexedSlices unchanged.)"""
    if BACKEND == "tensorflow" and isinstance(gradient, tf.IndexedSlices):
        return tf.convert_to_tensor(gradient)
    return gradient


class DenseGradients(object):
    """Mixin: every update step takes a dense gradient (see dense_gradient)."""

    def update_step(self, gradient, variable, learning_rate):
        return super().update_step(dense_gradient(gradient), variable, learning_rate)


class CoupledL2(object):
    """Mixin: coupled L2 as torch's weight_decay, g = grad + wd * p before the optimiser's own update
    (Keras's weight_decay is decoupled). The loss stays the data loss."""

    coupled_l2 = 0.0

    def update_step(self, gradient, variable, learning_rate):
        gradient = ops.add(gradient, ops.multiply(ops.cast(variable, gradient.dtype), self.coupled_l2))
        return super().update_step(gradient, variable, learning_rate)


class TorchAdam(keras.optimizers.Adam):
    """Adam with torch's epsilon placement: p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)."""

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        gradient = ops.cast(gradient, dtype)
        step = ops.cast(self.iterations + 1, dtype)
        correction1 = 1.0 - ops.power(ops.cast(self.beta_1, dtype), step)
        correction2 = 1.0 - ops.power(ops.cast(self.beta_2, dtype), step)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1.0 - self.beta_1))  # torch's lerp
        self.assign(v, ops.add(ops.multiply(v, self.beta_2), ops.multiply(ops.square(gradient), 1.0 - self.beta_2)))
        denominator = ops.add(ops.divide(ops.sqrt(v), ops.sqrt(correction2)), self.epsilon)
        self.assign_sub(variable, ops.multiply(ops.divide(lr, correction1), ops.divide(m, denominator)))


class CoupledL2Parallel(object):
    """Mixin: CoupledL2 for Keras's torch optimisers, which update all variables at once in
    _parallel_update_step (torch._foreach_* ops) and never call update_step."""

    coupled_l2 = 0.0

    def _parallel_update_step(self, grads, variables, learning_rate):
        grads = torch._foreach_add(grads, [variable.value for variable in variables], alpha=self.coupled_l2)
        return super()._parallel_update_step(grads, variables, learning_rate)


def backend_class(cls, kwargs: dict):
    """The class Keras builds for `cls` on this backend. On torch, keras.optimizers.SGD and Adadelta
    build their "parallel" versions (a few multi-tensor torch ops per step, where the generic update_step
    runs several ops per variable from Python), but a subclass of them is built as itself: deriving from
    the class Keras picks keeps that fast path, as an idiomatic Keras program gets it."""
    return type(cls(learning_rate=1.0, **kwargs))


def learning_rate(config: dict, schedule=None):
    """The recipe's learning rate, or its schedule as a Keras LearningRateSchedule of the optimizer's
    iterations (from 0, read before each update increments them)."""
    if schedule is None:
        return config["lr"]
    if schedule["name"] != "warmup_cosine":
        raise not_built("schedule", schedule["name"])
    if config["name"] == "sgd" and config["momentum"]:
        raise ValueError("keras adapter: momentum SGD with a learning-rate schedule: Keras's SGD keeps lr inside "
                         "its velocity (m = momentum*m - lr*g), the reference's does not, so a changing lr "
                         "differs; not built")
    # from initial_learning_rate 0 up to warmup_target over warmup_steps, then cosine to alpha * warmup_target
    # over decay_steps
    return keras.optimizers.schedules.CosineDecay(
        0.0, schedule["total_steps"] - schedule["warmup_steps"], alpha=schedule["final_lr_fraction"],
        warmup_target=config["lr"], warmup_steps=schedule["warmup_steps"])


def make_optimizer(config: dict, schedule=None):
    name = config["name"]
    coupled = float(config.get("weight_decay") or 0.0)
    if name == "sgd":
        cls, kwargs = keras.optimizers.SGD, {"momentum": config["momentum"], "nesterov": config["nesterov"]}
    elif name == "adam":
        cls, kwargs = TorchAdam, {"beta_1": config["beta1"], "beta_2": config["beta2"], "epsilon": config["epsilon"]}
    elif name == "adadelta":
        cls, kwargs = keras.optimizers.Adadelta, {"rho": config["rho"], "epsilon": config["epsilon"]}
    elif name == "adamw":
        # keras.optimizers.AdamW is Adam with Keras's own decoupled weight_decay (p -= lr_t * wd * p before
        # each update), torch's AdamW's; TorchAdam keeps torch's epsilon placement
        cls, kwargs = TorchAdam, {"beta_1": config["beta1"], "beta_2": config["beta2"], "epsilon": config["epsilon"],
                                  "weight_decay": config["weight_decay"]}
        coupled = 0.0
    else:
        raise not_built("optimizer", name)
    cls = backend_class(cls, kwargs)
    if coupled:
        mixin = CoupledL2Parallel if hasattr(cls, "_parallel_update_step") else CoupledL2
        cls = type("CoupledL2" + cls.__name__, (mixin, cls), {"coupled_l2": coupled})
    cls = type("Dense" + cls.__name__, (DenseGradients, cls), {})
    return cls(learning_rate=learning_rate(config, schedule), **kwargs)


# ---- the training feed ------------------------------------------------------------------------

def gather(tensor, index):
    """The rows of a split's tensor at a batch's positions in the epoch's order: one gather on the device."""
    if BACKEND == "tensorflow":
        return tf.gather(tensor, index)
    return tensor[index]


JAX_STATE = ("trainable_variables", "non_trainable_variables", "optimizer_variables", "metrics_variables")


def run_train_function(trainer: Trainer, batches) -> None:
    """One epoch of Keras's own compiled train step, trainer.train_function as compile() resolved it for the
    backend (a tf.function, a jax.jit of train_step, torch's eager train_step), over the (x, y) batches as
    fit drives it (keras/src/backend/*/trainer.py, keras 3.15): the metrics reset, the model built and the
    function made on the first call; on jax the state (variables, optimiser slots, metric sums) threaded
    through the steps and written back to the variables after the last, on torch the module in training
    mode. What fit builds around it every call is left out of the clock: the data adapter with its host
    copy of the split, on tensorflow a tf.data pipeline and its iterators, and the callback list."""
    batches = iter(batches)
    first = next(batches)
    if trainer.train_function is None:  # the first epoch: fit's build and function, once
        if BACKEND == "tensorflow":
            trainer._maybe_symbolic_build(data_batch=first)
        else:
            trainer._symbolic_build(data_batch=first)
        trainer.make_train_function()
    trainer.reset_metrics()
    batches = itertools.chain((first,), batches)
    if BACKEND == "jax":
        state = trainer._get_jax_state(**dict.fromkeys(JAX_STATE, True), purge_model_variables=True)
        trainer._jax_state_synced = False
        try:
            for batch in batches:
                _, state = trainer.train_function(state, iter((batch,)))
        finally:  # the variables take the state back, as fit's jax_state_sync after an epoch
            trainer._jax_state = dict(zip(JAX_STATE, state))
            trainer.jax_state_sync()
            trainer._jax_state = None
    elif BACKEND == "torch":
        trainer.train()
        for batch in batches:
            trainer.train_function((batch,))
        trainer.eval()
    else:
        for batch in batches:
            trainer.train_function((batch,))
    trainer.optimizer.finalize_variable_values(trainer.trainable_weights)  # as fit ends (moving averages)


# ---- the adapter ------------------------------------------------------------------------------

def _check_device(device: str) -> str:
    """The keras.device name for the cell; a clear error when a GPU is asked for and none is seen."""
    if device != "gpu":
        if BACKEND == "tensorflow" and tf.config.list_physical_devices("GPU"):
            try:  # keep TensorFlow from claiming GPU memory for a CPU cell
                tf.config.set_visible_devices([], "GPU")
            except RuntimeError:
                pass  # runtime already started; keras.device("cpu:0") still pins the work
        return "cpu" if BACKEND == "torch" else "cpu:0"  # torch: "cpu:0" would copy every Parameter
    if BACKEND == "tensorflow":
        found = bool(tf.config.list_physical_devices("GPU"))
        what = "TensorFlow %s (built with CUDA: %s)" % (tf.__version__, tf.test.is_built_with_cuda())
    elif BACKEND == "jax":
        try:
            found = bool(jax.devices("gpu"))
        except RuntimeError:
            found = False
        what = "JAX %s (devices: %s)" % (jax.__version__, jax.devices())
    else:
        found = torch.cuda.is_available()
        what = "torch %s (CUDA build: %s)" % (torch.__version__, torch.version.cuda)
    if not found:
        raise RuntimeError("device gpu requested, but %s sees no GPU" % what)
    return "cuda" if BACKEND == "torch" else "gpu:0"


class Adapter(BaseAdapter):
    name = "keras"

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        if BACKEND == "tensorflow":
            _configure_tf_threads(threads)
        elif BACKEND == "torch":
            torch.set_num_threads(threads)
        self.device_name = _check_device(device)
        keras.utils.set_random_seed(seed)  # Python, numpy and backend seeds: the dropout layers' seeds
        self.loss_name = recipe["loss"]
        self.loss = make_loss(self.loss_name)
        self.float_inputs = model["input_dtype"].startswith("float")
        with keras.device(self.device_name):
            self.core, self.variables = build_model(model)
        self.shapes = canonical_shapes(model)
        self.trainable = [key for key in self.variables if "/moving_" not in key]
        self.optimizer = make_optimizer(recipe["optimizer"], recipe.get("schedule"))
        self._trainers = {}  # input scale -> compiled Trainer (the weights and optimizer are shared)
        self._arrays = {}  # id of a Split -> (the split, x, y in memory)
        self._tensors = {}  # id of a Split -> (the split, x, y as the backend's tensors on the device)

    # ---- facts ----

    def versions(self):
        out = {"keras": keras.__version__, "numpy": np.__version__}
        if BACKEND == "tensorflow":
            out["tensorflow"] = tf.__version__
        elif BACKEND == "jax":
            out.update(jax=jax.__version__, jaxlib=jaxlib.__version__)
        else:
            out["torch"] = torch.__version__
        return out

    def threads_used(self):
        if BACKEND == "tensorflow":
            return tf.config.threading.get_intra_op_parallelism_threads()
        if BACKEND == "torch":
            return torch.get_num_threads()
        # XLA's CPU client: one thread with the single-thread flags, else a pool over the schedulable CPUs
        if _SINGLE_THREAD_XLA in os.environ.get("XLA_FLAGS", ""):
            return 1
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

    # ---- weights ----

    def set_weights(self, weights):
        for key, variable in self.variables.items():
            variable.assign(np.asarray(weights[key], dtype=np.float32).reshape(variable.shape))

    def get_weights(self):
        return {key: np.array(ops.convert_to_numpy(variable)).reshape(self.shapes[key])
                for key, variable in self.variables.items()}

    # ---- training ----

    def _trainer(self, scale) -> Trainer:
        scale = float(scale) if (self.float_inputs and scale) else None
        if scale not in self._trainers:
            with keras.device(self.device_name):
                trainer = Trainer(self.core, scale, self.loss_name)
                trainer.compile(optimizer=self.optimizer, loss=self.loss)
            self._trainers[scale] = trainer
        return self._trainers[scale]

    def _arrays_of(self, data: Split):
        """Inputs and labels in memory, read once per split (pixels stay uint8)."""
        key = id(data)
        if key not in self._arrays:  # holding the split keeps its id from being reused
            x = np.array(data.x)
            if not self.float_inputs:
                x = x.astype(np.int32, copy=False)
            self._arrays[key] = (data, x, np.array(data.y).astype(np.int32, copy=False))
        return self._arrays[key][1:]

    def _tensors_of(self, data: Split):
        """Inputs and labels as the backend's tensors on the cell's device, converted once per split (in the
        first epoch, which takes every conversion and compilation in every framework) from the split itself,
        so that no second copy stays in host memory (pixels stay uint8)."""
        key = id(data)
        if key not in self._tensors:  # holding the split keeps its id from being reused
            x = np.array(data.x) if self.float_inputs else np.array(data.x, dtype=np.int32)
            with keras.device(self.device_name):
                x, y = ops.convert_to_tensor(x), ops.convert_to_tensor(np.array(data.y, dtype=np.int32))
            self._tensors[key] = (data, x, y)
        return self._tensors[key][1:]

    def _sums(self, trainer: Trainer) -> Dict[str, float]:
        return finish_metrics(self.loss_name, *np.asarray(ops.convert_to_numpy(trainer.epoch_sums.sums), np.float64))

    def train_epoch(self, data, order):
        x, y = self._tensors_of(data)
        trainer = self._trainer(data.input_scale)
        with keras.device(self.device_name):
            index = ops.convert_to_tensor(order)
            batches = ((gather(x, index[batch]), gather(y, index[batch]))
                       for batch in batch_slices(len(order), self.recipe["batch_size"]))
            run_train_function(trainer, batches)
        return self._sums(trainer)

    def evaluate(self, data):
        x, y = self._arrays_of(data)
        trainer = self._trainer(data.input_scale)
        with keras.device(self.device_name):
            trainer.evaluate(x, y, batch_size=self.recipe["batch_size"], verbose=0)
        return self._sums(trainer)

    def apply_gradients(self, gradients):
        with keras.device(self.device_name):
            grads = [ops.convert_to_tensor(np.asarray(gradients[key], np.float32).reshape(self.variables[key].shape))
                     for key in self.trainable]
            self.optimizer.apply(grads, [self.variables[key] for key in self.trainable])

    def predict(self, x):
        x = np.ascontiguousarray(x, dtype=np.float32 if self.float_inputs else np.int32)
        with keras.device(self.device_name):
            return np.asarray(self.core.predict(x, batch_size=self.recipe["batch_size"], verbose=0))

    def serving(self):
        """predict_on_batch of a compiled model: Keras's compiled predict step (tf.function, jax.jit, or
        torch's eager step under no_grad, as compile() resolves it for the backend and device, as fit's
        train step) on one batch, without predict()'s per-call data adapter and callbacks."""
        scale = float(self.input_scale) if (self.float_inputs and self.input_scale) else None
        stored = np.uint8 if self.float_inputs else np.int32
        with keras.device(self.device_name):
            served = Served(self.core, scale)
            served.compile()

        def serve(x):
            with keras.device(self.device_name):
                return np.asarray(served.predict_on_batch(np.ascontiguousarray(x, dtype=stored)))
        return serve

    def training_outputs(self, x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        with keras.device(self.device_name):
            return np.array(ops.convert_to_numpy(self.core(x, training=True)))

    def loss_and_gradients(self, data):
        x, y = self._arrays_of(data)
        trainer = self._trainer(data.input_scale)
        keys = self.trainable
        with keras.device(self.device_name):
            if BACKEND == "tensorflow":
                with tf.GradientTape() as tape:
                    loss = self.loss(y, trainer(x, training=True))
                grads = tape.gradient(loss, [self.variables[k].value for k in keys])
                grads = [tf.convert_to_tensor(g).numpy() for g in grads]  # IndexedSlices densified
            elif BACKEND == "jax":
                if not trainer.built:  # stateless_call wants a built model: one inference call builds it
                    trainer(x[:1])
                trainable = trainer.trainable_variables
                place = {id(v): i for i, v in enumerate(trainable)}
                frozen = [v.value for v in trainer.non_trainable_variables]

                def loss_of(values):
                    y_pred, _ = trainer.stateless_call(values, frozen, x, training=True)
                    return self.loss(y, y_pred)

                loss, all_grads = jax.value_and_grad(loss_of)([v.value for v in trainable])
                grads = [np.asarray(all_grads[place[id(self.variables[k])]]) for k in keys]
            else:
                params = [self.variables[k].value for k in keys]
                for param in params:
                    param.grad = None
                loss = self.loss(y, trainer(x, training=True))
                loss.backward()
                grads = [param.grad.detach().cpu().numpy() for param in params]
                for param in params:
                    param.grad = None
        return float(ops.convert_to_numpy(loss)), {k: np.array(g).reshape(self.shapes[k]) for k, g in zip(keys, grads)}

    def synchronise(self):
        if BACKEND == "jax":
            jax.block_until_ready([v.value for v in self.variables.values()])
        elif BACKEND == "torch":
            if torch.cuda.is_available() and self.device_name == "cuda":
                torch.cuda.synchronize()
        elif self.device_name.startswith("gpu") and hasattr(tf.test.experimental, "sync_devices"):
            tf.test.experimental.sync_devices()


def feed_matches_fit(model: dict, recipe: dict, task: str, data: Split, orders) -> dict:
    """An adapter's epochs (train_epoch: Keras's train function over batches gathered on the device) against
    a twin adapter's model.fit(x[order], y[order], batch_size, shuffle=False, epochs=1) over the same orders,
    from the same weights (use a model without dropout, whose masks differ between two models): the largest
    weight difference, each one's epoch metrics and the optimiser's iteration count. A development check
    (tests/adapter_check.py runs it): with shuffle=False, Keras's ArrayDataAdapter forms the slices
    base.batch_slices forms, so equal weights mean the same batches, steps, schedule and metric sums."""
    by_feed, by_fit = (Adapter(model, recipe, task, "cpu", 1, 0) for _ in range(2))
    by_fit.set_weights(by_feed.get_weights())
    feed_metrics = [by_feed.train_epoch(data, order) for order in orders]
    x, y = by_fit._arrays_of(data)
    trainer = by_fit._trainer(data.input_scale)
    fit_metrics = []
    for order in orders:
        with keras.device(by_fit.device_name):
            trainer.fit(x[order], y[order], batch_size=recipe["batch_size"], shuffle=False, epochs=1, verbose=0)
        fit_metrics.append(by_fit._sums(trainer))
    feed_weights, fit_weights = by_feed.get_weights(), by_fit.get_weights()
    return {"max_weight_difference": max(float(np.max(np.abs(feed_weights[k] - fit_weights[k]))) for k in fit_weights),
            "feed_metrics": feed_metrics, "fit_metrics": fit_metrics,
            "feed_iterations": int(ops.convert_to_numpy(by_feed.optimizer.iterations)),
            "fit_iterations": int(ops.convert_to_numpy(by_fit.optimizer.iterations))}
