"""Keras 3's layer table, one module for the three backends: each IR layer kind's build and its weights.

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

The LLaMA pieces: rms_norm is keras.layers.RMSNormalization (ops.rms_normalization: x * rsqrt(mean(x^2) +
epsilon) * scale, torch's fused F.rms_norm on keras-torch), its `scale` the canonical gamma; swiglu is three
bias-free Dense layers, the gate's taking keras.activations.silu as its activation argument, their outputs
multiplied; grouped_query_attention is GroupedQueryAttention below (keras.layers.GroupedQueryAttention has no
place for rotary embeddings between its projections and its scores), whose kernels are laid out as that layer's
((d, heads, dk), (d, kv_heads, dk), (heads, dk, d): the canonical ones reshaped in C order, as attention's).

BatchNormalization: Keras updates the moving variance with the biased batch variance; BatchNorm below
updates it with the unbiased one (n/(n-1)), as torch does, and normalises with the biased one.

The table (`LAYERS`, base.LayerEntry per IR kind): `build(layer, x, scope)` applies the kind to the Keras
tensor x and returns (its output, what it built: the Keras layer, a tuple of them, or None); `weights(built)`
returns the built layer's Keras variables keyed by canonical parameter name (shared/ir.param_shapes), each
holding its canonical weight as it stands or, for attention and grouped-query attention, the same elements
in C order in another shape,
which the adapter's set/get weights reshape.

Imported by adapter.py after the backend's thread settings (KERAS_BACKEND and the threads are fixed there).
"""
from __future__ import annotations

import contextlib
import math
from collections import namedtuple
from typing import Dict

import keras
from keras import ops

from dlbench.shared.ir import ATTENTION_PARTS, all_shapes, param_shapes
from dlbench.worker.base import LayerEntry, lookup, not_built, rotary_tables

# ---- the custom layers ------------------------------------------------------------------------


class BatchNorm(keras.layers.BatchNormalization):
    """Keras's BatchNormalization, except that in training the moving variance takes the UNBIASED batch
    variance (x n/(n-1), n = elements per channel) as torch's does; normalisation uses the biased one."""

    def call(self, inputs, training=None, mask=None):
        # renorm: Keras 3.13 added batch renormalisation (Keras 3.12 has no such attribute); never asked for here
        if not (training and self.trainable) or mask is not None or getattr(self, "renorm", False):
            return super().call(inputs, training=training, mask=mask)
        # in float32 whatever the policy, its variables (autocast=False) cast to it, as Keras's own call does
        inputs = ops.cast(inputs, "float32")
        moving_mean, moving_variance, gamma, beta = (
            ops.cast(v, "float32") for v in (self.moving_mean, self.moving_variance, self.gamma, self.beta))
        mean, variance = self._moments(inputs, mask)
        count = ops.cast(ops.size(inputs), "float32") / float(inputs.shape[-1])
        unbiased = variance * (count / (count - 1.0))
        momentum = self.momentum
        self.moving_mean.assign(moving_mean * momentum + mean * (1.0 - momentum))
        self.moving_variance.assign(moving_variance * momentum + unbiased * (1.0 - momentum))
        outputs = ops.batch_normalization(inputs, mean, variance, axis=self.axis, offset=beta,
                                          scale=gamma, epsilon=self.epsilon)
        return ops.cast(outputs, self.compute_dtype)


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
        # the Embedding's table is read outside its own layer: cast here, where the policy computes in bfloat16 or
        # float16 (Keras's autocast scope of this layer would cast it too; the cast says so whatever the backend)
        return ops.matmul(inputs, ops.transpose(in_compute_dtype(self, self.embedding.embeddings))) + self.bias


class InFloat32(keras.initializers.Initializer):
    """An initializer drawn in float32, then cast to the variable's type: the LSTM's recurrent kernel's (Keras's
    orthogonal initializer, whose QR decomposition fails in bfloat16 on keras-jax: jaxlib's LAPACK has no bfloat16).
    The wrapped initializer keeps its own seed, so the draws are those it would make."""

    def __init__(self, initializer):
        self.initializer = initializer

    def __call__(self, shape, dtype=None):
        return ops.cast(self.initializer(shape, dtype="float32"), dtype)


def recurrent_init_in_float32(lstm_layer):
    """The LSTM layer with its cell's recurrent initializer drawn in float32 (InFloat32) where its variables are not
    float32; a float32 layer as it is."""
    cell = lstm_layer.cell
    if cell.variable_dtype != "float32":
        cell.recurrent_initializer = InFloat32(cell.recurrent_initializer)
    return lstm_layer


def rotate(x, cos, sin):
    """x (batch, steps, heads, dk) rotated by position: x cos + rotate_half(x) sin (Hugging Face's LLaMA)."""
    first, second = ops.split(x, 2, axis=-1)
    return x * cos + ops.concatenate([-second, first], axis=-1) * sin


class GroupedQueryAttention(keras.layers.Layer):
    """LLaMA's self-attention: bias-free projections (EinsumDense, the equations and kernel shapes of
    keras.layers.GroupedQueryAttention), rotary embeddings on queries and keys, then ops.dot_product_attention,
    each backend's fused attention (jax.nn.dot_product_attention, torch's scaled_dot_product_attention, an XLA-style
    einsum on TensorFlow), given the kv_heads key/value heads as they are: the jax backend groups the query heads
    itself, the torch and TensorFlow backends repeat each key/value head for its consecutive query heads, so query
    head h reads key/value head h // (heads / kv_heads). Keras's own layer is not used: it has no hook between its
    projections and the scores for the rotations. The rotations' cos/sin tables depend only on the steps (fixed
    by the model's input shape) and dk: computed once when the layer is built (float64, then cast to the layer's
    compute dtype) and held as the backend's constant tensors, not variables."""

    def __init__(self, heads: int, kv_heads: int, causal: bool, rope_base: float, **kwargs):
        super().__init__(**kwargs)
        self.heads, self.kv_heads, self.causal, self.rope_base = heads, kv_heads, causal, rope_base

    def build(self, input_shape):
        steps, features = input_shape[-2], input_shape[-1]
        size = features // self.heads
        self.scale = 1.0 / math.sqrt(size)

        def projection(equation, output_shape, name):
            return keras.layers.EinsumDense(equation, output_shape=output_shape, bias_axes=None, name=name,
                                            dtype=self.dtype_policy)
        self.query_dense = projection("bqm,muh->bquh", (None, self.heads, size), "query")
        self.key_dense = projection("bkm,mvh->bkvh", (None, self.kv_heads, size), "key")
        self.value_dense = projection("bkm,mvh->bkvh", (None, self.kv_heads, size), "value")
        self.output_dense = projection("bquh,uhm->bqm", (None, features), "attention_output")
        for dense_layer in (self.query_dense, self.key_dense, self.value_dense):
            dense_layer.build(input_shape)
        self.output_dense.build((None, None, self.heads, size))
        cos, sin = (table[:, None, :] for table in rotary_tables(steps, size, self.rope_base))  # an axis for the heads
        self.cos = ops.convert_to_tensor(cos, dtype=self.compute_dtype)
        self.sin = ops.convert_to_tensor(sin, dtype=self.compute_dtype)

    def call(self, inputs):
        steps = inputs.shape[-2]
        cos, sin = self.cos[:steps], self.sin[:steps]
        query = rotate(self.query_dense(inputs), cos, sin)
        key = rotate(self.key_dense(inputs), cos, sin)
        value = self.value_dense(inputs)
        if self.kv_heads == 1 < self.heads:
            # multi-query: Keras's TensorFlow backend repeats the key/value heads only when there are several,
            # and its einsum does not broadcast a single one (keras 3.15.1), so it is repeated here, on every backend
            key, value = ops.repeat(key, self.heads, axis=2), ops.repeat(value, self.heads, axis=2)
        out = ops.dot_product_attention(query, key, value, scale=self.scale, is_causal=self.causal)
        return self.output_dense(out)

    def compute_output_shape(self, input_shape):
        return input_shape


# ---- activations and paddings -----------------------------------------------------------------

def exact_gelu(x):
    """The IR's gelu, the exact (erf) form: stated here, not left to keras.activations.gelu's default."""
    return keras.activations.gelu(x, approximate=False)


# the Keras activation of each IR activation: its name, or for gelu the exact form's function
ACTIVATIONS = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "gelu": exact_gelu}
PADDINGS = ("same", "valid")  # Keras's 'same' is TensorFlow's, the IR's (shared/ir.py same_padding)
FOLDING = ("conv2d", "dense")  # the kinds that take the activation following them as their own argument


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


# ---- the model --------------------------------------------------------------------------------

class Scope(namedtuple("Scope", "layers index built variables")):
    """Where a layer is built: the list of layers it is in and its index there (a Conv2D or Dense takes the
    activation after it, which then builds nothing), what the layers before it built, by name (a tied output
    finds its embedding there), and the variables recorded so far (a residual block's own layers add theirs)."""


# Keras's dtype policy of each precision (base.PRECISIONS); float32 builds as it always did, under no policy of its own
POLICIES = {"float32": None, "bfloat16": "bfloat16", "mixed-bfloat16": "mixed_bfloat16",
            "mixed-float16": "mixed_float16"}


@contextlib.contextmanager
def dtype_policy(name):
    """Keras's global dtype policy set to `name` (None: left as it is) while the model is built, so that every layer
    built takes it as its own (Keras layers read the global policy when they are made, and keep it), then restored:
    several models of different precisions may be built in one process (tests, certification probes)."""
    if name is None:
        yield
        return
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def in_compute_dtype(layer, tensor):
    """tensor cast to the layer's compute dtype where it has another (a variable that Keras does not autocast,
    a float32 table); as it is otherwise, so float32 models run the ops they always ran."""
    if keras.backend.standardize_dtype(tensor.dtype) != layer.compute_dtype:
        return ops.cast(tensor, layer.compute_dtype)
    return tensor


def build_model(spec: dict, precision: str = "float32"):
    """The functional model (float pixels or int ids -> logits) and every canonical weight's variable.
    A variable may hold its canonical weight in another shape of the same C-order elements (attention's
    kernels (d, heads, dk) and (heads, dk, d) for the canonical (d, d)): canonical_shapes gives the IR's.
    Every layer takes the precision's dtype policy (POLICIES); in a reduced precision the logits leave through a
    float32 linear Activation, as Keras's mixed-precision guide ends a model, so that the loss, the metrics and the
    predictions see float32 (the bfloat16 or float16 logits cast, nothing recomputed)."""
    float_inputs = spec["input_dtype"].startswith("float")
    with dtype_policy(lookup(POLICIES, "precision", precision)):
        inputs = keras.Input(shape=tuple(spec["input_shape"]), dtype="float32" if float_inputs else "int32")
        variables = {}  # "layer/param" -> keras Variable, in canonical order
        outputs = build_layers(spec["layers"], inputs, variables, {})
        if precision != "float32":
            outputs = keras.layers.Activation("linear", dtype="float32", name="logits_float32")(outputs)
        return keras.Model(inputs, outputs, name="dlbench"), variables


def canonical_shapes(spec: dict) -> Dict[str, tuple]:
    """Each canonical weight's shape, by "layer/param" (every layer, a residual block's own included)."""
    return {layer["name"] + "/" + key: tuple(shape) for layer, in_shape, _ in all_shapes(spec)
            for key, shape in param_shapes(layer, in_shape).items()}


def build_layers(layers, x, variables: dict, built: dict):
    """Applies the IR's `layers` to the Keras tensor x, each by its kind's entry in LAYERS; records their
    variables by "layer/param" and, by name, what each one built."""
    for index, layer in enumerate(layers):
        entry = lookup(LAYERS, "layer type", layer["type"])
        x, built[layer["name"]] = entry.build(layer, x, Scope(layers, index, built, variables))
        if entry.weights is not None:
            variables.update((layer["name"] + "/" + key, variable)
                             for key, variable in entry.weights(built[layer["name"]]).items())
    return x


# ---- each kind's build and weights --------------------------------------------------------------

def applied(module, x):
    return module(x), module


def conv2d(layer: dict, x, scope: Scope):
    return applied(keras.layers.Conv2D(
        layer["filters"], layer["kernel"], strides=layer["stride"], padding=keras_padding(layer["padding"]),
        activation=folded_activation(scope.layers, scope.index), name=layer["name"]), x)


def dense(layer: dict, x, scope: Scope):
    return applied(keras.layers.Dense(layer["units"], activation=folded_activation(scope.layers, scope.index),
                                      name=layer["name"]), x)


def kernel_and_bias(module) -> dict:
    return {"kernel": module.kernel, "bias": module.bias}


def maxpool2d(layer: dict, x, scope: Scope):
    return applied(keras.layers.MaxPooling2D(layer["pool"], strides=layer["stride"],
                                             padding=keras_padding(layer["padding"]), name=layer["name"]), x)


def batchnorm(layer: dict, x, scope: Scope):
    return applied(BatchNorm(momentum=layer["momentum"], epsilon=layer["epsilon"], name=layer["name"]), x)


def batchnorm_weights(module) -> dict:
    return {"gamma": module.gamma, "beta": module.beta, "moving_mean": module.moving_mean,
            "moving_var": module.moving_variance}


def layer_norm(layer: dict, x, scope: Scope):
    # over the last axis, biased variance (ops.moments); rms_scaling stays off
    return applied(keras.layers.LayerNormalization(axis=-1, epsilon=layer["epsilon"], name=layer["name"]), x)


def layer_norm_weights(module) -> dict:
    return {"gamma": module.gamma, "beta": module.beta}


def activation(layer: dict, x, scope: Scope):
    if scope.index and scope.layers[scope.index - 1]["type"] in FOLDING:
        return x, None  # taken by the layer before it (see folded_activation)
    return applied(keras.layers.Activation(keras_activation(layer["fn"]), name=layer["name"]), x)


def dropout(layer: dict, x, scope: Scope):
    return applied(keras.layers.Dropout(layer["rate"], name=layer["name"]), x)


def flatten(layer: dict, x, scope: Scope):
    return applied(keras.layers.Flatten(name=layer["name"]), x)


def to_sequence(layer: dict, x, scope: Scope):
    height, width, channels = x.shape[1:]  # NHWC in C order: step r * W + c is row r, column c
    return applied(keras.layers.Reshape((height * width, channels), name=layer["name"]), x)


def sequence_mean(layer: dict, x, scope: Scope):
    return applied(keras.layers.GlobalAveragePooling1D(data_format="channels_last", name=layer["name"]), x)


def residual(layer: dict, x, scope: Scope):
    """y = x + f(x), f the block's own layers (which record their own variables)."""
    return applied(keras.layers.Add(name=layer["name"]),
                   [x, build_layers(layer["layers"], x, scope.variables, scope.built)])


def embedding(layer: dict, x, scope: Scope):
    return applied(keras.layers.Embedding(layer["vocab"], layer["dim"], name=layer["name"]), x)


def positional_embedding(layer: dict, x, scope: Scope):
    return applied(PositionalEmbedding(layer["max_len"], name=layer["name"]), x)


def embeddings(module) -> dict:
    return {"embeddings": module.embeddings}


def tied_output(layer: dict, x, scope: Scope):
    return applied(TiedOutput(scope.built[layer["embedding"]], name=layer["name"]), x)


def tied_output_weights(module) -> dict:
    return {"bias": module.bias}  # its kernel is the embedding's table, already listed under the embedding


def lstm(layer: dict, x, scope: Scope):
    module = keras.layers.LSTM(layer["units"], return_sequences=layer["return_sequences"], name=layer["name"])
    return applied(recurrent_init_in_float32(module), x)


def _lstm_vars(prefix: str, layer) -> Dict[str, object]:
    cell = layer.cell
    return {prefix + "kernel": cell.kernel, prefix + "recurrent_kernel": cell.recurrent_kernel,
            prefix + "bias": cell.bias}


def lstm_weights(module) -> dict:
    return _lstm_vars("", module)


def seq2seq(layer: dict, x, scope: Scope):
    """Encoder LSTM over the source, whose final (h, c) starts the decoder LSTM; teacher forcing."""
    L, name, source_len = keras.layers, layer["name"], layer["source_len"]
    source_embedding = L.Embedding(layer["source_vocab"], layer["embed_dim"], name=name + "_source_embedding")
    target_embedding = L.Embedding(layer["target_vocab"], layer["embed_dim"], name=name + "_target_embedding")
    encoder = recurrent_init_in_float32(L.LSTM(layer["units"], return_state=True, name=name + "_encoder"))
    decoder = recurrent_init_in_float32(L.LSTM(layer["units"], return_sequences=True, name=name + "_decoder"))
    _, h, c = encoder(source_embedding(x[:, :source_len]))
    x = decoder(target_embedding(x[:, source_len:]), initial_state=[h, c])
    return x, (source_embedding, target_embedding, encoder, decoder)


def seq2seq_weights(parts) -> dict:
    source_embedding, target_embedding, encoder, decoder = parts
    variables = {"source_embeddings": source_embedding.embeddings, "target_embeddings": target_embedding.embeddings}
    for prefix, lstm_layer in (("encoder_", encoder), ("decoder_", decoder)):
        variables.update(_lstm_vars(prefix, lstm_layer))
    return variables



def attention(layer: dict, x, scope: Scope):
    """keras.layers.MultiHeadAttention as a self-attention, the IR's maths exactly: per-head projections
    with biases (kernels (d, heads, dk), the canonical (d, d) with head h's columns h*dk.. reshaped in C
    order; output kernel (heads, dk, d), the canonical rows h*dk..), scores scaled by 1/sqrt(dk), the causal
    mask, dropout on the attention weights in training only. Without dropout it calls
    ops.dot_product_attention(is_causal=...), each backend's fused attention."""
    size = x.shape[-1] // layer["heads"]
    module = keras.layers.MultiHeadAttention(layer["heads"], size, dropout=layer["dropout"], name=layer["name"])
    return module(x, x, use_causal_mask=layer["causal"]), module


def attention_weights(module) -> dict:
    denses = (module.query_dense, module.key_dense, module.value_dense, module.output_dense)
    variables = {}
    for part, dense_layer in zip(ATTENTION_PARTS, denses):
        variables[part + "_kernel"] = dense_layer.kernel
        variables[part + "_bias"] = dense_layer.bias
    return variables


def rms_norm(layer: dict, x, scope: Scope):
    # over the last axis, no mean taken out: x * rsqrt(mean(x^2) + epsilon) * scale
    return applied(keras.layers.RMSNormalization(axis=-1, epsilon=layer["epsilon"], name=layer["name"]), x)


def rms_norm_weights(module) -> dict:
    return {"gamma": module.scale}


def swiglu(layer: dict, x, scope: Scope):
    """down(silu(gate(x)) * up(x)): three bias-free Dense layers, the gate's with keras.activations.silu as its
    activation argument (as the activations that follow a Dense are folded into it), and a Multiply."""
    name, hidden = layer["name"], layer["hidden"]
    gate = keras.layers.Dense(hidden, activation=keras.activations.silu, use_bias=False, name=name + "_gate")
    up = keras.layers.Dense(hidden, use_bias=False, name=name + "_up")
    down = keras.layers.Dense(x.shape[-1], use_bias=False, name=name + "_down")
    product = keras.layers.Multiply(name=name)
    return down(product([gate(x), up(x)])), (gate, up, down)


def swiglu_weights(parts) -> dict:
    gate, up, down = parts
    return {"gate_kernel": gate.kernel, "up_kernel": up.kernel, "down_kernel": down.kernel}


def grouped_query_attention(layer: dict, x, scope: Scope):
    return applied(GroupedQueryAttention(layer["heads"], layer["kv_heads"], layer["causal"], layer["rope_base"],
                                         name=layer["name"]), x)


def grouped_query_attention_weights(module) -> dict:
    denses = (module.query_dense, module.key_dense, module.value_dense, module.output_dense)
    return {part + "_kernel": dense_layer.kernel for part, dense_layer in zip(ATTENTION_PARTS, denses)}


LAYERS = {
    "conv2d": LayerEntry(conv2d, kernel_and_bias),
    "maxpool2d": LayerEntry(maxpool2d, None),
    "batchnorm": LayerEntry(batchnorm, batchnorm_weights),
    "layer_norm": LayerEntry(layer_norm, layer_norm_weights),
    "activation": LayerEntry(activation, None),
    "dropout": LayerEntry(dropout, None),
    "flatten": LayerEntry(flatten, None),
    "to_sequence": LayerEntry(to_sequence, None),
    "sequence_mean": LayerEntry(sequence_mean, None),
    "residual": LayerEntry(residual, None),
    "dense": LayerEntry(dense, kernel_and_bias),
    "embedding": LayerEntry(embedding, embeddings),
    "positional_embedding": LayerEntry(positional_embedding, embeddings),
    "tied_output": LayerEntry(tied_output, tied_output_weights),
    "lstm": LayerEntry(lstm, lstm_weights),
    "seq2seq": LayerEntry(seq2seq, seq2seq_weights),
    "attention": LayerEntry(attention, attention_weights),
    "rms_norm": LayerEntry(rms_norm, rms_norm_weights),
    "swiglu": LayerEntry(swiglu, swiglu_weights),
    "grouped_query_attention": LayerEntry(grouped_query_attention, grouped_query_attention_weights),
}
REFUSED = {}  # Keras 3 builds every kind, on each of its three backends


def fused_attention(layers) -> bool:
    """Whether the IR's layers (residual blocks' own included) reach ops.dot_product_attention: grouped-query attention
    always, Keras's MultiHeadAttention without dropout on its weights (with it, MHA computes its scores itself)."""
    for layer in layers:
        if layer["type"] == "grouped_query_attention" or (layer["type"] == "attention" and not layer["dropout"]):
            return True
        if layer["type"] == "residual" and fused_attention(layer["layers"]):
            return True
    return False
