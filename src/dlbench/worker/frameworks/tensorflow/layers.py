"""TensorFlow's layer table (issue #42): one LayerEntry per IR layer kind, written in tf.nn ops over
canonical variables, and the tf.Module (Model) that holds a model's variables and applies its layers
through the table. No Keras layers.

TensorFlow's native layouts are the canonical ones (NHWC activations, HWIO conv kernels, (in, out) dense
kernels, LSTM kernels (in, 4u) / (u, 4u) with gates i, f, g, o), so weights move in and out unchanged. The
LSTM is our own cell run over time with tf.scan (a graph while-loop), not an unrolled Python loop.
Multi-head self-attention is written out in tf ops (batched matmuls over the heads, the causal mask as -inf
scores, tf.nn.softmax, stateless dropout on the weights in training): core TensorFlow has no fused attention
op (Keras's MultiHeadAttention is the keras adapter's). Grouped-query attention (LLaMA's) shares that code: its
query heads reshaped into (batch, kv_heads, group, steps, dk) against keys and values of (batch, kv_heads, 1,
steps, dk), so tf.matmul's batch broadcasting gives each group its key/value head without copying it, after
rotary embeddings from cos/sin tables made once in numpy (float64) and baked into the graph as constants.
RMS normalisation is written in tf ops as layer normalisation is (core TensorFlow has no op for it), SwiGLU's
gate uses tf.nn.silu. A residual block's layers hold their variables under their own prefixed names; the tied
output reads the embedding's variable itself, so its gradient sums both uses.

The table's entries:
- build(model, layer, in_shape, w, x, training) -> the layer's output: applies the kind to x inside the
  model's call (traced once into the adapter's tf.function), with w its own variables keyed by canonical
  name ({} for a weightless kind); `model` gives the others (a residual block's inner layers, the tied
  output's embedding) and the dropout generator.
- weights(layer, in_shape) -> OrderedDict canonical name -> tf.Variable: the kind's native parameters.
  They are the canonical ones in name, shape and layout, so every weighted kind shares canonical_variables
  and set_weights / get_weights assign and read them as they are.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Dict

import tensorflow as tf

from dlbench.shared.ir import all_shapes, block_shapes, infer_shapes, param_shapes
from dlbench.worker.base import LayerEntry, lookup, rotary_tables

STATISTICS = tf.float32  # the type normalisation statistics are computed in, whatever the compute dtype
ACTIVATIONS = {"relu": tf.nn.relu, "sigmoid": tf.sigmoid, "tanh": tf.tanh,
               "gelu": lambda x: tf.nn.gelu(x, approximate=False)}  # the exact (erf) form
PADDINGS = {"same": "SAME", "valid": "VALID"}  # TensorFlow's 'same' is the IR's (shared/ir.py same_padding)


def canonical_variables(layer, in_shape, dtype=tf.float32) -> "OrderedDict[str, tf.Variable]":
    """A weighted kind's native parameters, keyed by canonical name: a tf.Variable of each of param_shapes'
    shapes in the precision's variable dtype (zeros until set_weights), moving statistics not trainable."""
    variables = OrderedDict()  # type: OrderedDict[str, tf.Variable]
    for key, shape in param_shapes(layer, in_shape).items():
        name = layer["name"] + "/" + key
        variables[key] = tf.Variable(tf.zeros(shape, dtype), name=name.replace("/", "."),
                                     trainable=not key.startswith("moving_"))
    return variables


# ---- helpers of several kinds -------------------------------------------------------------------

def lstm_scan(x, kernel, recurrent, bias, state=None):
    """x (batch, time, features) -> hidden states (time, batch, units) and final (h, c). The input
    projection of every step is one matmul before the loop; the loop only adds h @ recurrent."""
    units = recurrent.shape[0]
    batch, steps = tf.shape(x)[0], tf.shape(x)[1]
    projected = tf.reshape(tf.matmul(tf.reshape(x, [-1, x.shape[-1]]), kernel) + bias, [batch, steps, 4 * units])
    if state is None:
        zeros = tf.zeros([batch, units], dtype=x.dtype)
        state = (zeros, zeros)

    def step(carry, z_x):
        h, c = carry
        z = z_x + tf.matmul(h, recurrent)
        i, f, g, o = tf.split(z, 4, axis=1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        return tf.sigmoid(o) * tf.tanh(c), c

    hs, cs = tf.scan(step, tf.transpose(projected, [1, 0, 2]), initializer=state)
    return hs, (hs[-1], cs[-1])


def dense(x, kernel, bias=None):
    """x (..., in) @ kernel (in, out) (+ bias): bias None for the bias-free projections of swiglu and
    grouped_query_attention."""
    if len(x.shape) == 2:
        y = tf.matmul(x, kernel)
        return y if bias is None else y + bias
    flat = tf.matmul(tf.reshape(x, [-1, x.shape[-1]]), kernel)
    if bias is not None:
        flat = flat + bias
    return tf.reshape(flat, tf.concat([tf.shape(x)[:-1], [kernel.shape[1]]], axis=0))


def heads_first(t, steps, heads, size):
    """(batch, steps, heads * size) -> (batch, heads, steps, size): head h the columns h*size .. (h+1)*size - 1."""
    return tf.transpose(tf.reshape(t, [-1, steps, heads, size]), [0, 2, 1, 3])


def heads_last(t, steps, features):
    """(batch, heads, steps, size) -> (batch, steps, heads * size): the heads concatenated."""
    return tf.reshape(tf.transpose(t, [0, 2, 1, 3]), [-1, steps, features])


def attention_weights(q, k, size, causal, steps):
    """softmax(q k^T / sqrt(size)) over the keys, q (..., steps, size) and k (..., steps, size) whose leading
    axes broadcast (tf.matmul's batch broadcasting), the causal mask as -inf scores."""
    scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(size))
    if causal:  # lower triangle: a query sees its own step and the earlier ones
        allowed = tf.linalg.band_part(tf.ones([steps, steps], tf.bool), -1, 0)
        scores = tf.where(allowed, scores, tf.constant(-math.inf, scores.dtype))
    return tf.nn.softmax(scores, axis=-1)


def rotate(t, cos, sin):
    """t (batch, heads, steps, size) rotated by position: t cos + rotate_half(t) sin, rotate_half(t) = (-second
    half, first half) (Hugging Face's LLaMA); cos and sin (steps, size) broadcast over batch and heads."""
    first, second = tf.split(t, 2, axis=-1)
    return t * cos + tf.concat([-second, first], axis=-1) * sin


# ---- each kind's build: build(model, layer, in_shape, w, x, training) -> output ---------------------

def build_conv2d(model, layer, in_shape, w, x, training):
    padding = lookup(PADDINGS, "padding", layer["padding"])
    y = tf.nn.conv2d(x, w["kernel"], strides=layer["stride"], padding=padding)
    return tf.nn.bias_add(y, w["bias"])


def build_maxpool2d(model, layer, in_shape, w, x, training):
    # TensorFlow's 'same' leaves the padding out of the max: -inf padding
    padding = lookup(PADDINGS, "padding", layer["padding"])
    return tf.nn.max_pool2d(x, ksize=layer["pool"], strides=layer["stride"], padding=padding)


def build_batchnorm(model, layer, in_shape, w, x, training):
    # statistics and normalisation in float32 when the compute dtype is a half type (as Keras's mixed policy and
    # tf.nn.fused_batch_norm do), the output in the compute dtype; w holds the variables themselves
    compute, x = x.dtype, tf.cast(x, STATISTICS)
    eps = layer["epsilon"]
    beta, gamma = (tf.cast(w[key], STATISTICS) for key in ("beta", "gamma"))
    if not training:
        moving_mean, moving_var = (tf.cast(w[key], STATISTICS) for key in ("moving_mean", "moving_var"))
        return tf.cast(tf.nn.batch_normalization(x, moving_mean, moving_var, beta, gamma, eps), compute)
    axes = list(range(len(x.shape) - 1))
    mean, variance = tf.nn.moments(x, axes=axes)  # biased: what normalises the batch
    n = tf.cast(tf.size(x) // tf.shape(x)[-1], tf.float32)
    unbiased = variance * n / tf.maximum(n - 1.0, 1.0)  # what the moving variance follows (as torch)
    momentum = layer["momentum"]
    for key, value in (("moving_mean", mean), ("moving_var", unbiased)):  # rounded to a bfloat16 variable's type
        moving = w[key]
        moving.assign(tf.cast(momentum * tf.cast(moving, STATISTICS) + (1.0 - momentum) * tf.stop_gradient(value),
                              moving.dtype))
    return tf.cast(tf.nn.batch_normalization(x, mean, variance, beta, gamma, eps), compute)


def build_layer_norm(model, layer, in_shape, w, x, training):
    # over the last axis; tf.nn.moments' variance is the biased one. In float32 for half compute types (as
    # Keras's LayerNormalization under a mixed policy), the output in the compute dtype
    compute, x = x.dtype, tf.cast(x, STATISTICS)
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    beta, gamma = (tf.cast(w[key], STATISTICS) for key in ("beta", "gamma"))
    return tf.cast(tf.nn.batch_normalization(x, mean, variance, beta, gamma, layer["epsilon"]), compute)


def build_rms_norm(model, layer, in_shape, w, x, training):
    # core TensorFlow has no RMS normalisation op (Keras's RMSNormalization is the keras adapter's): written
    # in tf ops as layer_norm's, rsqrt of the mean square over the last axis, no mean taken out, no offset;
    # in float32 for half compute types as layer_norm
    compute, x = x.dtype, tf.cast(x, STATISTICS)
    mean_square = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
    return tf.cast(x * tf.math.rsqrt(mean_square + layer["epsilon"]) * tf.cast(w["gamma"], STATISTICS), compute)


def build_activation(model, layer, in_shape, w, x, training):
    return lookup(ACTIVATIONS, "activation", layer["fn"])(x)


def build_dropout(model, layer, in_shape, w, x, training):
    if not training or layer["rate"] == 0:
        return x
    seed = model.rng.make_seeds(1)[:, 0]
    return tf.nn.experimental.stateless_dropout(x, rate=layer["rate"], seed=seed)


def build_flatten(model, layer, in_shape, w, x, training):
    return tf.reshape(x, [-1, int(math.prod(in_shape))])  # NHWC in C order: the canonical one


def build_dense(model, layer, in_shape, w, x, training):
    return dense(x, w["kernel"], w["bias"])


def build_embedding(model, layer, in_shape, w, x, training):
    # the rows looked up in the variable, then cast (Keras's Embedding under a mixed policy): not the whole table
    return tf.cast(tf.nn.embedding_lookup(w["embeddings"], x), model.compute_dtype)


def build_lstm(model, layer, in_shape, w, x, training):
    hs, (h, _) = lstm_scan(x, w["kernel"], w["recurrent_kernel"], w["bias"])
    return tf.transpose(hs, [1, 0, 2]) if layer["return_sequences"] else h


def build_seq2seq(model, layer, in_shape, w, x, training):
    # the encoder's final (h, c) starts the decoder; teacher forcing
    source_len = layer["source_len"]
    source = tf.nn.embedding_lookup(w["source_embeddings"], x[:, :source_len])
    target = tf.nn.embedding_lookup(w["target_embeddings"], x[:, source_len:])
    _, state = lstm_scan(source, w["encoder_kernel"], w["encoder_recurrent_kernel"], w["encoder_bias"])
    hs, _ = lstm_scan(target, w["decoder_kernel"], w["decoder_recurrent_kernel"], w["decoder_bias"], state)
    return tf.transpose(hs, [1, 0, 2])


def build_residual(model, layer, in_shape, w, x, training):
    y = x
    for inner, inner_shape, _ in block_shapes(layer, in_shape):
        y = model.apply(inner, inner_shape, y, training)
    return x + y


def build_attention(model, layer, in_shape, w, x, training):
    """Multi-head self-attention written out in tf ops (TensorFlow has no fused attention op outside
    Keras): scores of every head in one batched matmul, the causal mask as -inf, softmax over the keys."""
    steps, features = in_shape
    heads = layer["heads"]
    size = features // heads
    q, k, v = (heads_first(dense(x, w[part + "_kernel"], w[part + "_bias"]), steps, heads, size)
               for part in ("query", "key", "value"))
    weights = attention_weights(q, k, size, layer["causal"], steps)
    if training and layer["dropout"] > 0:
        seed = model.rng.make_seeds(1)[:, 0]
        weights = tf.nn.experimental.stateless_dropout(weights, rate=layer["dropout"], seed=seed)
    return dense(heads_last(tf.matmul(weights, v), steps, features), w["output_kernel"], w["output_bias"])


def build_grouped_query_attention(model, layer, in_shape, w, x, training):
    """LLaMA's attention in the same tf ops as attention's (core TensorFlow has no fused attention op, grouped
    or not): bias-free projections, rotary embeddings on queries and keys, then the query heads as (batch,
    kv_heads, group, steps, dk) against keys and values as (batch, kv_heads, 1, steps, dk): query head h = g *
    group + j reads key/value head g = h // group, broadcast by tf.matmul rather than copied (tf.repeat)."""
    steps, features = in_shape
    heads, kv_heads = layer["heads"], layer["kv_heads"]
    size, group = features // heads, heads // kv_heads
    dtype = x.dtype.as_numpy_dtype
    cos, sin = (tf.constant(table.astype(dtype)) for table in rotary_tables(steps, size, layer["rope_base"]))
    q = rotate(heads_first(dense(x, w["query_kernel"]), steps, heads, size), cos, sin)
    k = rotate(heads_first(dense(x, w["key_kernel"]), steps, kv_heads, size), cos, sin)
    v = heads_first(dense(x, w["value_kernel"]), steps, kv_heads, size)
    q = tf.reshape(q, [-1, kv_heads, group, steps, size])
    k, v = k[:, :, tf.newaxis], v[:, :, tf.newaxis]
    weights = attention_weights(q, k, size, layer["causal"], steps)  # no dropout in LLaMA's attention
    out = tf.reshape(tf.matmul(weights, v), [-1, heads, steps, size])
    return dense(heads_last(out, steps, features), w["output_kernel"])


def build_positional_embedding(model, layer, in_shape, w, x, training):
    return x + w["embeddings"][:in_shape[0]]


def build_tied_output(model, layer, in_shape, w, x, training):
    # the embedding's own variable, transposed: one variable, two uses
    return dense(x, tf.transpose(model.read(model.weights[layer["embedding"] + "/embeddings"])), w["bias"])


def build_swiglu(model, layer, in_shape, w, x, training):
    # tf.nn.silu, TensorFlow's own z * sigmoid(z); the gate and up projections as two matmuls, no biases
    gate = tf.nn.silu(dense(x, w["gate_kernel"]))
    return dense(gate * dense(x, w["up_kernel"]), w["down_kernel"])


def build_to_sequence(model, layer, in_shape, w, x, training):
    height, width, channels = in_shape  # NHWC in C order: step r * W + c is row r, column c
    return tf.reshape(x, [-1, height * width, channels])


def build_sequence_mean(model, layer, in_shape, w, x, training):
    return tf.reduce_mean(x, axis=1)


LAYERS = {
    "conv2d": LayerEntry(build_conv2d, canonical_variables),
    "maxpool2d": LayerEntry(build_maxpool2d, None),
    "batchnorm": LayerEntry(build_batchnorm, canonical_variables),
    "layer_norm": LayerEntry(build_layer_norm, canonical_variables),
    "activation": LayerEntry(build_activation, None),
    "dropout": LayerEntry(build_dropout, None),
    "flatten": LayerEntry(build_flatten, None),
    "dense": LayerEntry(build_dense, canonical_variables),
    "embedding": LayerEntry(build_embedding, canonical_variables),
    "lstm": LayerEntry(build_lstm, canonical_variables),
    "seq2seq": LayerEntry(build_seq2seq, canonical_variables),
    "residual": LayerEntry(build_residual, None),
    "attention": LayerEntry(build_attention, canonical_variables),
    "positional_embedding": LayerEntry(build_positional_embedding, canonical_variables),
    "tied_output": LayerEntry(build_tied_output, canonical_variables),
    "to_sequence": LayerEntry(build_to_sequence, None),
    "sequence_mean": LayerEntry(build_sequence_mean, None),
    "rms_norm": LayerEntry(build_rms_norm, canonical_variables),
    "swiglu": LayerEntry(build_swiglu, canonical_variables),
    "grouped_query_attention": LayerEntry(build_grouped_query_attention, canonical_variables),
}
REFUSED: Dict[str, str] = {}  # every IR kind is built

# The kinds whose build is given its variables themselves and casts them its own way: the normalisations (their
# statistics in float32), the embedding (its looked-up rows cast, not the table). Every other kind is given its
# variables cast to the compute dtype.
OWN_CASTS = ("batchnorm", "layer_norm", "rms_norm", "embedding")
# precision (base.PRECISIONS) -> (the variables' dtype, the compute dtype each layer casts its variables and its
# floating inputs to)
DTYPES = {"float32": (tf.float32, tf.float32), "bfloat16": (tf.bfloat16, tf.bfloat16),
          "mixed-bfloat16": (tf.float32, tf.bfloat16), "mixed-float16": (tf.float32, tf.float16)}


class Model(tf.Module):
    """The IR's layers over canonical variables: self.weights["layer/param"] -> tf.Variable, made by each
    weighted kind's entry in the precision's variable dtype; a call applies the layers in order, each by its
    entry's build, in the precision's compute dtype (each layer casts its floating input and its variables to
    it; a no-op in float32), and returns the outputs (logits) in float32."""

    def __init__(self, spec: dict, seed: int, precision: str = "float32"):
        super().__init__(name="dlbench_model")
        self.variable_dtype, self.compute_dtype = lookup(DTYPES, "precision", precision)
        self.layers = [(layer, tuple(in_shape)) for layer, in_shape, _ in infer_shapes(spec)]
        self.weights = {}  # type: Dict[str, tf.Variable]
        for layer, in_shape, _ in all_shapes(spec):  # a residual block's own layers included
            variables = lookup(LAYERS, "layer type", layer["type"]).weights
            made = variables(layer, in_shape, self.variable_dtype) if variables is not None else {}
            for key, var in made.items():
                self.weights[layer["name"] + "/" + key] = var
        self.names = list(self.weights)
        self.trainable_names = [n for n in self.names if self.weights[n].trainable]
        self.rng = tf.random.Generator.from_seed(seed)  # dropout masks, drawn with stateless ops

    def __call__(self, x, training: bool):
        for layer, in_shape in self.layers:
            x = self.apply(layer, in_shape, x, training)
        return tf.cast(x, tf.float32)  # the logits in float32 before any loss, in every precision

    def read(self, var):
        """A variable as the layers compute with it: cast to the compute dtype (the gradient flows back through
        the cast to the variable's own type); the variable itself where the types agree."""
        return tf.cast(var, self.compute_dtype)

    def apply(self, layer, in_shape, x, training):
        if x.dtype.is_floating:
            x = tf.cast(x, self.compute_dtype)
        w = {key.split("/", 1)[1]: var for key, var in self.weights.items() if key.startswith(layer["name"] + "/")}
        if layer["type"] not in OWN_CASTS:
            w = {key: self.read(var) for key, var in w.items()}
        return lookup(LAYERS, "layer type", layer["type"]).build(self, layer, in_shape, w, x, training)
