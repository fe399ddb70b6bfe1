"""JAX's layer table: each IR kind's build, as Flax (linen) modules applied inside IRModel, and where its
canonical weights live in the Flax variables.

Weights live in canonical layout already: Flax's Conv (HWIO) and Dense ((in, out)) kernels are the
canonical ones, Embed's table is (vocab, dim), LayerNorm's and RMSNorm's scale is gamma, and the LSTM,
BatchNorm, the attentions and SwiGLU are small Flax modules of our own that hold the canonical matrices
(the LSTM runs one jax.lax.scan over the canonical fused i, f, g, o kernel; the BatchNorm updates its
moving variance with the unbiased batch variance, as the reference does, which Flax's nn.BatchNorm does
not). A kind's `weights` is therefore no conversion, only a place: canonical key -> (collection, key
inside the layer's variables).

Precision: IRModel's `dtype` is the compute type and `param_dtype` the parameters' (adapter.py says how each
precision sets them; float32 both by default). Flax's own modules take both as they are (nn.Dense, nn.Conv,
nn.Embed cast inputs and parameters to `dtype`; nn.LayerNorm and nn.RMSNorm compute their statistics and the
normalisation in float32 whatever `dtype` is, and return `dtype`); the modules of our own cast their parameters
and input to `dtype` (`compute`), so the attentions, their rotary tables, the LSTM's scan and SwiGLU compute in
it, and the BatchNorm follows nn.BatchNorm's convention (statistics and normalisation in float32, the output in
`dtype`), its moving statistics kept in `param_dtype` (nn.BatchNorm keeps them float32: in "bfloat16" every
stored tensor is bfloat16 here, as Keras's and PyTorch's bfloat16 models keep theirs).

Imported by adapter.py once it has configured XLA's CPU threads (which must happen before jax loads).
"""
from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dlbench.shared.ir import ATTENTION_PARTS
from dlbench.worker.base import LayerEntry, lookup, rotary_tables

# jax.nn.gelu defaults to the tanh approximation: the IR's gelu is the exact (erf) form
ACTIVATIONS = {"relu": jax.nn.relu, "sigmoid": jax.nn.sigmoid, "tanh": jnp.tanh,
               "gelu": functools.partial(jax.nn.gelu, approximate=False)}
PADDINGS = {"same": "SAME", "valid": "VALID"}  # lax's SAME is TensorFlow's (the odd pixel after), the IR's


def lstm_scan(x, kernel, recurrent, bias, state=None):
    """An LSTM over x (batch, time, features) with the canonical fused matrices (gates i, f, g, o):
    the input projection for all steps at once, then one scan over time. Returns the outputs
    (batch, time, units) and the final (h, c)."""
    units = recurrent.shape[0]
    if state is None:
        zeros = jnp.zeros((x.shape[0], units), x.dtype)
        state = (zeros, zeros)
    projected = jnp.einsum("btf,fg->tbg", x, kernel) + bias

    def step(carry, z_in):
        h, c = carry
        z = z_in + h @ recurrent
        i, f, g, o = jnp.split(z, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    state, outputs = jax.lax.scan(step, state, projected)
    return jnp.swapaxes(outputs, 0, 1), state


def _zeros_init(key, shape, dtype=jnp.float32):
    return jnp.zeros(shape, dtype)  # every weight is set from the canonical ones before use


def compute(dtype, *arrays):
    """The arrays in the compute type (a no-op for those already in it: float32 adds nothing)."""
    return tuple(jnp.asarray(a, dtype) for a in arrays)


class LSTM(nn.Module):
    units: int
    return_sequences: bool
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", _zeros_init, (x.shape[-1], 4 * self.units), self.param_dtype)
        recurrent = self.param("recurrent_kernel", _zeros_init, (self.units, 4 * self.units), self.param_dtype)
        bias = self.param("bias", _zeros_init, (4 * self.units,), self.param_dtype)
        out, _ = lstm_scan(*compute(self.dtype, x, kernel, recurrent, bias))
        return out if self.return_sequences else out[:, -1]


class Seq2Seq(nn.Module):
    source_len: int
    source_vocab: int
    target_vocab: int
    embed_dim: int
    units: int
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        source_table, target_table = compute(self.dtype, *(
            self.param(part + "_embeddings", _zeros_init, (vocab, self.embed_dim), self.param_dtype)
            for part, vocab in (("source", self.source_vocab), ("target", self.target_vocab))))
        weights = {}
        for part in ("encoder_", "decoder_"):
            weights[part] = compute(self.dtype, *(
                self.param(part + name, _zeros_init, shape, self.param_dtype)
                for name, shape in (("kernel", (self.embed_dim, 4 * self.units)),
                                    ("recurrent_kernel", (self.units, 4 * self.units)),
                                    ("bias", (4 * self.units,)))))
        _, state = lstm_scan(jnp.take(source_table, x[:, :self.source_len], axis=0), *weights["encoder_"])
        out, _ = lstm_scan(jnp.take(target_table, x[:, self.source_len:], axis=0), *weights["decoder_"], state)
        return out


class BatchNorm(nn.Module):
    """Normalises with the batch's biased variance in training; the moving variance takes the unbiased
    one (n / (n - 1)); momentum as the IR states it (moving = momentum * moving + (1 - momentum) * batch).
    In a reduced precision it computes as nn.BatchNorm does (force_float32_reductions): the statistics and the
    normalisation in float32, the output cast to `dtype`; the moving statistics are stored in `param_dtype`."""
    momentum: float
    epsilon: float
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool):
        channels = x.shape[-1]
        gamma = self.param("gamma", nn.initializers.ones, (channels,), self.param_dtype)
        beta = self.param("beta", nn.initializers.zeros, (channels,), self.param_dtype)
        moving_mean = self.variable("batch_stats", "moving_mean", jnp.zeros, (channels,), self.param_dtype)
        moving_var = self.variable("batch_stats", "moving_var", jnp.ones, (channels,), self.param_dtype)
        wide = jnp.promote_types(self.dtype, jnp.float32)  # float32, as nn.BatchNorm's statistics
        x = jnp.asarray(x, wide)
        gamma, beta = compute(wide, gamma, beta)
        if train:
            axes = tuple(range(x.ndim - 1))
            mean = jnp.mean(x, axis=axes)
            var = jnp.mean(jnp.square(x - mean), axis=axes)
            if not self.is_initializing():
                n = x.size // channels
                m = self.momentum
                moving_mean.value = jnp.asarray(m * moving_mean.value + (1.0 - m) * mean, self.param_dtype)
                moving_var.value = jnp.asarray(m * moving_var.value + (1.0 - m) * var * (n / max(n - 1, 1)),
                                               self.param_dtype)
        else:
            mean, var = compute(wide, moving_mean.value, moving_var.value)
        return jnp.asarray((x - mean) * (gamma * jax.lax.rsqrt(var + self.epsilon)) + beta, self.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def window_max(x, pool: int):
    """Max-pooling of NHWC x in non-overlapping pool x pool windows (stride = pool, valid padding): a
    reshape and a max. Its gradient goes to each window's first maximum in row-major order, where
    XLA's select-and-scatter (nn.max_pool's gradient) and PyTorch send it; written out because
    select-and-scatter is XLA CPU's slow spot: 2x2 pools of frcnn-voc's first map (608x1008x32), forward
    and backward, 0.36 s against 0.05 s here, the same gradients (2-core machine, one thread)."""
    return _windows(x, pool).max(axis=-1)


def _windows(x, pool: int):
    """(N, H // pool, W // pool, C, pool * pool): each window's values, row-major."""
    n, height, width, channels = x.shape
    rows, cols = height // pool, width // pool
    x = x[:, :rows * pool, :cols * pool].reshape(n, rows, pool, cols, pool, channels)
    return x.transpose(0, 1, 3, 5, 2, 4).reshape(n, rows, cols, channels, pool * pool)


def _window_max_forward(x, pool):
    windows = _windows(x, pool)
    peak = windows.max(axis=-1)
    return peak, (windows, peak, x.shape)


def _window_max_backward(pool, saved, gradient):
    windows, peak, shape = saved
    hits = windows == peak[..., None]
    first = hits & (jnp.cumsum(hits, axis=-1) == 1)
    spread = jnp.where(first, gradient[..., None], 0.0).astype(gradient.dtype)
    n, rows, cols, channels, _ = spread.shape
    spread = spread.reshape(n, rows, cols, channels, pool, pool).transpose(0, 1, 4, 2, 5, 3)
    spread = spread.reshape(n, rows * pool, cols * pool, channels)
    # the rows and columns a valid pool leaves out get no gradient
    return (jnp.pad(spread, ((0, 0), (0, shape[1] - rows * pool), (0, shape[2] - cols * pool), (0, 0))),)


window_max.defvjp(_window_max_forward, _window_max_backward)


def fused_attention(q, k, v, causal: bool):
    """jax.nn.dot_product_attention(q, k, v, is_causal=causal) (JAX's fused attention; (batch, steps, heads, dk)
    queries, kv_heads <= heads keys and values), except in float16: there jax asks dot_general for its
    F16_F16_F32 algorithm, which XLA's CPU refuses when it compiles ("The precision 'F16_F16_F32' is not supported
    by dot_general on CPU", jax 0.10.2; jax's fallback for it catches errors at trace time only), so float16 takes
    jax's own XLA steps written out: float32 logits of the float16 products (preferred_element_type, the algorithm
    left to XLA), scaled by 1 / sqrt(dk), the causal mask, a float32 softmax, the probabilities back in float16
    times the values; query head h reads key/value head h // (heads / kv_heads), as there."""
    if q.dtype != jnp.float16:
        return jax.nn.dot_product_attention(q, k, v, is_causal=causal)
    batch, steps, heads, size = q.shape
    kv_heads = k.shape[2]
    q = q.reshape(batch, steps, kv_heads, heads // kv_heads, size)
    logits = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32) * (size ** -0.5)
    if causal:
        seen = jnp.tril(jnp.ones((steps, k.shape[1]), bool))  # key s <= query t
        logits = jnp.where(seen, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    return jnp.einsum("bkgts,bskd->btkgd", probs, v).reshape(batch, steps, heads, size)


class Attention(nn.Module):
    """Multi-head self-attention over the canonical (d, d) projections. Without dropout in play it is
    jax.nn.dot_product_attention (JAX's fused attention: is_causal masks every later key, scale 1 / sqrt(dk));
    that has no dropout, so training with a rate goes through Flax's nn.dot_product_attention, which drops
    the attention weights (inverted), each weight its own draw (broadcast_dropout off)."""
    heads: int
    causal: bool
    dropout: float
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool):
        batch, steps, features = x.shape
        (x,) = compute(self.dtype, x)
        weights = {}
        for part in ATTENTION_PARTS:
            weights[part] = compute(self.dtype, self.param(part + "_kernel", _zeros_init, (features, features),
                                                           self.param_dtype),
                                    self.param(part + "_bias", _zeros_init, (features,), self.param_dtype))
        # head h owns features h*dk .. (h+1)*dk - 1: (batch, steps, heads, dk), the layout both functions take
        q, k, v = ((x @ weights[part][0] + weights[part][1]).reshape(batch, steps, self.heads, -1)
                   for part in ATTENTION_PARTS[:3])
        if train and self.dropout > 0:
            mask = nn.make_causal_mask(jnp.ones((batch, steps))) if self.causal else None
            out = nn.dot_product_attention(q, k, v, mask=mask, broadcast_dropout=False,
                                           dropout_rng=self.make_rng("dropout"), dropout_rate=self.dropout,
                                           deterministic=False)
        else:
            out = fused_attention(q, k, v, self.causal)
        kernel, bias = weights["output"]
        return out.reshape(batch, steps, features) @ kernel + bias


class SwiGLU(nn.Module):
    """LLaMA's feed-forward block, (silu(x Wg) * (x Wu)) Wd with jax.nn.silu, over the canonical bias-free
    kernels held as the module's own parameters (three nn.Dense would nest them a level deeper than the
    adapter's (collection, layer, key) places reach; x @ kernel is all nn.Dense(use_bias=False) computes)."""
    hidden: int
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        features = x.shape[-1]
        gate = self.param("gate_kernel", _zeros_init, (features, self.hidden), self.param_dtype)
        up = self.param("up_kernel", _zeros_init, (features, self.hidden), self.param_dtype)
        down = self.param("down_kernel", _zeros_init, (self.hidden, features), self.param_dtype)
        x, gate, up, down = compute(self.dtype, x, gate, up, down)
        return (jax.nn.silu(x @ gate) * (x @ up)) @ down


def rotate(x, cos, sin):
    """x (batch, steps, heads, dk) rotated by position: x cos + rotate_half(x) sin (Hugging Face's LLaMA)."""
    first, second = jnp.split(x, 2, axis=-1)
    return x * cos + jnp.concatenate([-second, first], axis=-1) * sin


class GroupedQueryAttention(nn.Module):
    """LLaMA's attention over the canonical bias-free projections: rotary embeddings on queries and keys, then
    jax.nn.dot_product_attention (JAX's fused attention, as Attention's) given the kv_heads key/value heads
    as they are: it groups the query heads itself, query head h reading key/value head h // (heads / kv_heads)
    (it reshapes the queries (batch, steps, kv_heads, heads / kv_heads, dk)), so the keys and values are never
    repeated. No dropout in the IR's kind, so no Flax fallback either."""
    heads: int
    kv_heads: int
    causal: bool
    rope_base: float
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        batch, steps, features = x.shape
        size = features // self.heads
        kv_features = self.kv_heads * size
        (x,) = compute(self.dtype, x)
        weights = {part: compute(self.dtype, self.param(part + "_kernel", _zeros_init, (features, columns),
                                                        self.param_dtype))[0]
                   for part, columns in zip(ATTENTION_PARTS, (features, kv_features, kv_features, features))}
        # base.rotary_tables' float64 numpy, an axis for the heads: constants of the jitted steps (JAX and Flax
        # linen have no rotary op), in the compute type
        cos, sin = (jnp.asarray(table[:, None, :], x.dtype) for table in rotary_tables(steps, size, self.rope_base))
        # (batch, steps, heads, dk): head h owns columns h*dk .. (h+1)*dk - 1, the layout the function takes
        q = rotate((x @ weights["query"]).reshape(batch, steps, self.heads, size), cos, sin)
        k = rotate((x @ weights["key"]).reshape(batch, steps, self.kv_heads, size), cos, sin)
        v = (x @ weights["value"]).reshape(batch, steps, self.kv_heads, size)
        out = fused_attention(q, k, v, self.causal)
        return out.reshape(batch, steps, features) @ weights["output"]


class PositionalEmbedding(nn.Module):
    max_len: int
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        table = self.param("embeddings", _zeros_init, (self.max_len, x.shape[-1]), self.param_dtype)
        x, table = compute(self.dtype, x, table)
        return x + table[:x.shape[1]]


class Bias(nn.Module):
    """A tied output's own weight: its kernel is the embedding's table (nn.Embed.attend)."""
    units: int
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        return x + compute(self.dtype, self.param("bias", _zeros_init, (self.units,), self.param_dtype))[0]


# ---- the table -------------------------------------------------------------------------------------
# build(net, layer, x, train, embeddings) -> x: applies the layer to x inside IRModel's compact __call__
# (`net`), so that the Flax modules it makes are the IRModel's, named by the layer (their weights are
# created then); `embeddings` collects the nn.Embed modules by layer name, for tied outputs to attend with.
# weights(key) -> (collection, key inside the layer's variables): where a canonical weight lives.

def build_conv2d(net, layer, x, train, embeddings):
    size, stride = layer["kernel"], layer["stride"]
    return nn.Conv(layer["filters"], (size, size), strides=(stride, stride),
                   padding=lookup(PADDINGS, "padding", layer["padding"]), name=layer["name"], **net.types())(x)


def build_maxpool2d(net, layer, x, train, embeddings):
    pool, stride, padding = layer["pool"], layer["stride"], lookup(PADDINGS, "padding", layer["padding"])
    if pool == stride and padding == "VALID":
        return window_max(x, pool)
    return nn.max_pool(x, (pool, pool), strides=(stride, stride), padding=padding)


def build_batchnorm(net, layer, x, train, embeddings):
    return BatchNorm(layer["momentum"], layer["epsilon"], name=layer["name"], **net.types())(x, train)


def build_layer_norm(net, layer, x, train, embeddings):
    # over the last axis, biased variance; Flax's default epsilon (1e-6) replaced by the IR's. Its
    # default one-pass variance E[x^2] - E[x]^2 (use_fast_variance) is kept: the mean of squared
    # deviations, a second pass, made transformer-lm's steady epochs 38 % slower on the 2-core Intel
    # machine (1.08 s against 0.78 s, 320 lee-news-lm windows), the certificates passing either way
    return nn.LayerNorm(epsilon=layer["epsilon"], name=layer["name"], **net.types())(x)


def build_rms_norm(net, layer, x, train, embeddings):
    # Flax's nn.RMSNorm: x * rsqrt(mean(x^2) + epsilon) * scale over the last axis, its statistics in float32
    # (force_float32_reductions: float32 inputs stay float32); its default epsilon (1e-6) replaced by the IR's
    return nn.RMSNorm(epsilon=layer["epsilon"], name=layer["name"], **net.types())(x)


def build_swiglu(net, layer, x, train, embeddings):
    return SwiGLU(layer["hidden"], name=layer["name"], **net.types())(x)


def build_grouped_query_attention(net, layer, x, train, embeddings):
    return GroupedQueryAttention(layer["heads"], layer["kv_heads"], layer["causal"], layer["rope_base"],
                                 name=layer["name"], **net.types())(x)


def build_activation(net, layer, x, train, embeddings):
    return lookup(ACTIVATIONS, "activation", layer["fn"])(x)


def build_dropout(net, layer, x, train, embeddings):
    return nn.Dropout(layer["rate"], deterministic=not train)(x)


def build_flatten(net, layer, x, train, embeddings):
    return x.reshape((x.shape[0], -1))  # NHWC in C order: the canonical flatten


def build_to_sequence(net, layer, x, train, embeddings):
    n, height, width, channels = x.shape  # NHWC in C order: step r * W + c is row r, column c
    return x.reshape((n, height * width, channels))


def build_sequence_mean(net, layer, x, train, embeddings):
    return jnp.mean(x, axis=1)


def build_dense(net, layer, x, train, embeddings):
    return nn.Dense(layer["units"], name=layer["name"], **net.types())(x)


def build_embedding(net, layer, x, train, embeddings):
    embeddings[layer["name"]] = nn.Embed(layer["vocab"], layer["dim"], name=layer["name"], **net.types())
    return embeddings[layer["name"]](x)


def build_lstm(net, layer, x, train, embeddings):
    return LSTM(layer["units"], layer["return_sequences"], name=layer["name"], **net.types())(x)


def build_seq2seq(net, layer, x, train, embeddings):
    return Seq2Seq(layer["source_len"], layer["source_vocab"], layer["target_vocab"], layer["embed_dim"],
                   layer["units"], name=layer["name"], **net.types())(x)


def build_residual(net, layer, x, train, embeddings):
    return x + net._layers(layer["layers"], x, train, embeddings)


def build_attention(net, layer, x, train, embeddings):
    return Attention(layer["heads"], layer["causal"], layer["dropout"], name=layer["name"], **net.types())(x, train)


def build_positional_embedding(net, layer, x, train, embeddings):
    return PositionalEmbedding(layer["max_len"], name=layer["name"], **net.types())(x)


def build_tied_output(net, layer, x, train, embeddings):
    return Bias(layer["units"], name=layer["name"], **net.types())(embeddings[layer["embedding"]].attend(x))


def as_named(key: str):
    return "params", key  # the canonical names and layouts are the modules' own


def batchnorm_weights(key: str):
    return ("batch_stats", key) if key.startswith("moving_") else ("params", key)


def embedding_weights(key: str):
    return "params", "embedding"  # nn.Embed's name for the table


def layer_norm_weights(key: str):
    return "params", {"gamma": "scale", "beta": "bias"}[key]  # nn.LayerNorm's names


def rms_norm_weights(key: str):
    return "params", {"gamma": "scale"}[key]  # nn.RMSNorm's name


LAYERS = {
    "conv2d": LayerEntry(build_conv2d, as_named),
    "maxpool2d": LayerEntry(build_maxpool2d, None),
    "batchnorm": LayerEntry(build_batchnorm, batchnorm_weights),
    "layer_norm": LayerEntry(build_layer_norm, layer_norm_weights),
    "activation": LayerEntry(build_activation, None),
    "dropout": LayerEntry(build_dropout, None),
    "flatten": LayerEntry(build_flatten, None),
    "dense": LayerEntry(build_dense, as_named),
    "embedding": LayerEntry(build_embedding, embedding_weights),
    "lstm": LayerEntry(build_lstm, as_named),
    "seq2seq": LayerEntry(build_seq2seq, as_named),
    "residual": LayerEntry(build_residual, None),
    "attention": LayerEntry(build_attention, as_named),
    "positional_embedding": LayerEntry(build_positional_embedding, as_named),
    "tied_output": LayerEntry(build_tied_output, as_named),
    "to_sequence": LayerEntry(build_to_sequence, None),
    "sequence_mean": LayerEntry(build_sequence_mean, None),
    "rms_norm": LayerEntry(build_rms_norm, rms_norm_weights),
    "swiglu": LayerEntry(build_swiglu, as_named),
    "grouped_query_attention": LayerEntry(build_grouped_query_attention, as_named),
}
REFUSED = {}


class IRModel(nn.Module):
    layers: tuple  # the IR's layer dicts, in order
    dtype: Any = jnp.float32  # the compute type
    param_dtype: Any = jnp.float32  # the parameters' (and the BatchNorm's moving statistics') type

    @nn.compact
    def __call__(self, x, train: bool):
        """The logits, in float32 whatever the compute type (cast before any loss, as Keras's losses and
        torch.autocast's float32 list do); float inputs enter in the compute type (token ids stay integers)."""
        if jnp.issubdtype(x.dtype, jnp.floating):
            (x,) = compute(self.dtype, x)
        return jnp.asarray(self._layers(self.layers, x, train, {}), jnp.float32)

    def types(self) -> dict:
        """The compute and parameter types every layer's module is built with."""
        return {"dtype": self.dtype, "param_dtype": self.param_dtype}

    def _layers(self, layers, x, train: bool, embeddings: dict):
        """Applies these layers in order, each by its table entry; `embeddings` collects the nn.Embed modules
        by layer name, for tied outputs to attend with (the table itself, so its gradient sums both uses)."""
        for layer in layers:
            x = lookup(LAYERS, "layer type", layer["type"]).build(self, layer, x, train, embeddings)
        return x
