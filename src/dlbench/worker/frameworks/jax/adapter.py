"""JAX adapter: the IR as a Flax (linen) module, optimised with optax, trained by jitted steps.

Weights live in canonical layout already: Flax's Conv (HWIO) and Dense ((in, out)) kernels are the
canonical ones, Embed's table is (vocab, dim), and the LSTM and BatchNorm are small Flax modules of
our own that hold the canonical matrices (the LSTM runs one jax.lax.scan over the canonical fused
i, f, g, o kernel; the BatchNorm updates its moving variance with the unbiased batch variance, as the
reference does, which Flax's nn.BatchNorm does not).

Each split is copied to the device once (pixels stay uint8 until a batch is gathered); an epoch's
order travels once; the train step finds its batch from a position it carries on the device and
accumulates loss and counts there, so nothing comes back to the host until the epoch ends.
The train step does not donate its state (donate_argnums): measured on the 2-core machine, donating
(params, statistics, optimiser state, key) made steady epochs 20 % slower for lstm-ptb (500 windows:
0.83-0.89 s against 0.67-0.71 s) and 10 % for cnn-mnist (digits-28: 2.50-2.53 s against 2.26-2.28 s),
with the same losses; Flax's own tutorials do not donate either.

Threads: XLA's CPU client is configured before jax is imported, from DLBENCH_THREADS: PJRT_NPROC
sizes its intra-op thread pool, and with one thread Eigen's own multi-threading is switched off too
(--xla_cpu_multi_thread_eigen=false). The persistent compilation cache stays off (JAX's default).
"""
from __future__ import annotations

import functools
import os

from dlbench.worker.base import thread_budget  # numpy alone, before the framework


def _configure_threads() -> int:
    """Must run before jax is imported: XLA reads these when it creates its CPU client."""
    threads = thread_budget()
    os.environ["PJRT_NPROC"] = str(threads)  # the CPU client's intra-op thread pool size
    if threads == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_cpu_multi_thread_eigen" not in flags:
            os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false").strip()
    return threads


THREADS = _configure_threads()

from typing import Dict  # noqa: E402

import flax  # noqa: E402
import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxlib  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from dlbench.shared.ir import ATTENTION_PARTS, all_shapes, param_shapes  # noqa: E402
from dlbench.shared.protocol import PAD_ID  # noqa: E402
from dlbench.worker.base import (  # noqa: E402
    BaseAdapter,
    Split,
    batch_slices,
    finish_metrics,
    lookup,
    not_built,
)

jax.config.update("jax_enable_x64", False)  # float32 everywhere, as the other adapters
# full float32 matmuls and convolutions on GPU too (no TF32), so results compare with the CPU's
jax.config.update("jax_default_matmul_precision", "highest")

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


class LSTM(nn.Module):
    units: int
    return_sequences: bool

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", _zeros_init, (x.shape[-1], 4 * self.units))
        recurrent = self.param("recurrent_kernel", _zeros_init, (self.units, 4 * self.units))
        bias = self.param("bias", _zeros_init, (4 * self.units,))
        out, _ = lstm_scan(x, kernel, recurrent, bias)
        return out if self.return_sequences else out[:, -1]


class Seq2Seq(nn.Module):
    source_len: int
    source_vocab: int
    target_vocab: int
    embed_dim: int
    units: int

    @nn.compact
    def __call__(self, x):
        source_table = self.param("source_embeddings", _zeros_init, (self.source_vocab, self.embed_dim))
        target_table = self.param("target_embeddings", _zeros_init, (self.target_vocab, self.embed_dim))
        weights = {}
        for part in ("encoder_", "decoder_"):
            weights[part] = (self.param(part + "kernel", _zeros_init, (self.embed_dim, 4 * self.units)),
                             self.param(part + "recurrent_kernel", _zeros_init, (self.units, 4 * self.units)),
                             self.param(part + "bias", _zeros_init, (4 * self.units,)))
        _, state = lstm_scan(jnp.take(source_table, x[:, :self.source_len], axis=0), *weights["encoder_"])
        out, _ = lstm_scan(jnp.take(target_table, x[:, self.source_len:], axis=0), *weights["decoder_"], state)
        return out


class BatchNorm(nn.Module):
    """Normalises with the batch's biased variance in training; the moving variance takes the unbiased
    one (n / (n - 1)); momentum as the IR states it (moving = momentum * moving + (1 - momentum) * batch)."""
    momentum: float
    epsilon: float

    @nn.compact
    def __call__(self, x, train: bool):
        channels = x.shape[-1]
        gamma = self.param("gamma", nn.initializers.ones, (channels,))
        beta = self.param("beta", nn.initializers.zeros, (channels,))
        moving_mean = self.variable("batch_stats", "moving_mean", jnp.zeros, (channels,), jnp.float32)
        moving_var = self.variable("batch_stats", "moving_var", jnp.ones, (channels,), jnp.float32)
        if train:
            axes = tuple(range(x.ndim - 1))
            mean = jnp.mean(x, axis=axes)
            var = jnp.mean(jnp.square(x - mean), axis=axes)
            if not self.is_initializing():
                n = x.size // channels
                m = self.momentum
                moving_mean.value = m * moving_mean.value + (1.0 - m) * mean
                moving_var.value = m * moving_var.value + (1.0 - m) * var * (n / max(n - 1, 1))
        else:
            mean, var = moving_mean.value, moving_var.value
        return (x - mean) * (gamma * jax.lax.rsqrt(var + self.epsilon)) + beta


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


def max_pool(x, layer: dict):
    pool, stride, padding = layer["pool"], layer["stride"], lookup(PADDINGS, "padding", layer["padding"])
    if pool == stride and padding == "VALID":
        return window_max(x, pool)
    return nn.max_pool(x, (pool, pool), strides=(stride, stride), padding=padding)


def jax_device(device: str):
    """The jax device of a cell's "cpu" or "gpu", or an error naming what jax found."""
    platform = "gpu" if device == "gpu" else "cpu"
    if platform == "cpu":
        try:
            jax.config.update("jax_platforms", "cpu")  # a CPU cell leaves any GPU alone
        except Exception:  # backends already started (a second adapter in this process)
            pass
    try:
        return jax.devices(platform)[0]
    except RuntimeError as error:
        raise RuntimeError("device %s requested, but jax %s (jaxlib %s) finds none: %s"
                           % (device, jax.__version__, jaxlib.__version__, error)) from error


class Attention(nn.Module):
    """Multi-head self-attention over the canonical (d, d) projections. Without dropout in play it is
    jax.nn.dot_product_attention (JAX's fused attention: is_causal masks every later key, scale 1 / sqrt(dk));
    that has no dropout, so training with a rate goes through Flax's nn.dot_product_attention, which drops
    the attention weights (inverted), each weight its own draw (broadcast_dropout off)."""
    heads: int
    causal: bool
    dropout: float

    @nn.compact
    def __call__(self, x, train: bool):
        batch, steps, features = x.shape
        weights = {}
        for part in ATTENTION_PARTS:
            weights[part] = (self.param(part + "_kernel", _zeros_init, (features, features)),
                             self.param(part + "_bias", _zeros_init, (features,)))
        # head h owns features h*dk .. (h+1)*dk - 1: (batch, steps, heads, dk), the layout both functions take
        q, k, v = ((x @ weights[part][0] + weights[part][1]).reshape(batch, steps, self.heads, -1)
                   for part in ATTENTION_PARTS[:3])
        if train and self.dropout > 0:
            mask = nn.make_causal_mask(jnp.ones((batch, steps))) if self.causal else None
            out = nn.dot_product_attention(q, k, v, mask=mask, broadcast_dropout=False,
                                           dropout_rng=self.make_rng("dropout"), dropout_rate=self.dropout,
                                           deterministic=False)
        else:
            out = jax.nn.dot_product_attention(q, k, v, is_causal=self.causal)
        kernel, bias = weights["output"]
        return out.reshape(batch, steps, features) @ kernel + bias


class PositionalEmbedding(nn.Module):
    max_len: int

    @nn.compact
    def __call__(self, x):
        table = self.param("embeddings", _zeros_init, (self.max_len, x.shape[-1]))
        return x + table[:x.shape[1]]


class Bias(nn.Module):
    """A tied output's own weight: its kernel is the embedding's table (nn.Embed.attend)."""
    units: int

    @nn.compact
    def __call__(self, x):
        return x + self.param("bias", _zeros_init, (self.units,))


class IRModel(nn.Module):
    layers: tuple  # the IR's layer dicts, in order

    @nn.compact
    def __call__(self, x, train: bool):
        return self._layers(self.layers, x, train, {})

    def _layers(self, layers, x, train: bool, embeddings: dict):
        """Applies these layers in order; `embeddings` collects the nn.Embed modules by layer name, for
        tied outputs to attend with (the table itself, so its gradient sums both uses)."""
        for layer in layers:
            kind, name = layer["type"], layer["name"]
            if kind == "conv2d":
                size, stride = layer["kernel"], layer["stride"]
                x = nn.Conv(layer["filters"], (size, size), strides=(stride, stride),
                            padding=lookup(PADDINGS, "padding", layer["padding"]), name=name)(x)
            elif kind == "maxpool2d":
                x = max_pool(x, layer)
            elif kind == "batchnorm":
                x = BatchNorm(layer["momentum"], layer["epsilon"], name=name)(x, train)
            elif kind == "layer_norm":
                # over the last axis, biased variance; Flax's default epsilon (1e-6) replaced by the IR's. Its
                # default one-pass variance E[x^2] - E[x]^2 (use_fast_variance) is kept: the mean of squared
                # deviations, a second pass, made transformer-lm's steady epochs 38 % slower on the 2-core Intel
                # machine (1.08 s against 0.78 s, 320 lee-news-lm windows), the certificates passing either way
                x = nn.LayerNorm(epsilon=layer["epsilon"], name=name)(x)
            elif kind == "activation":
                x = lookup(ACTIVATIONS, "activation", layer["fn"])(x)
            elif kind == "dropout":
                x = nn.Dropout(layer["rate"], deterministic=not train)(x)
            elif kind == "flatten":
                x = x.reshape((x.shape[0], -1))  # NHWC in C order: the canonical flatten
            elif kind == "to_sequence":
                n, height, width, channels = x.shape  # NHWC in C order: step r * W + c is row r, column c
                x = x.reshape((n, height * width, channels))
            elif kind == "sequence_mean":
                x = jnp.mean(x, axis=1)
            elif kind == "dense":
                x = nn.Dense(layer["units"], name=name)(x)
            elif kind == "embedding":
                embeddings[name] = nn.Embed(layer["vocab"], layer["dim"], name=name)
                x = embeddings[name](x)
            elif kind == "lstm":
                x = LSTM(layer["units"], layer["return_sequences"], name=name)(x)
            elif kind == "residual":
                x = x + self._layers(layer["layers"], x, train, embeddings)
            elif kind == "attention":
                x = Attention(layer["heads"], layer["causal"], layer["dropout"], name=name)(x, train)
            elif kind == "positional_embedding":
                x = PositionalEmbedding(layer["max_len"], name=name)(x)
            elif kind == "tied_output":
                x = Bias(layer["units"], name=name)(embeddings[layer["embedding"]].attend(x))
            elif kind != "seq2seq":
                raise not_built("layer type", kind)
            else:
                x = Seq2Seq(layer["source_len"], layer["source_vocab"], layer["target_vocab"], layer["embed_dim"],
                            layer["units"], name=name)(x)
        return x


def _locate(kind: str, key: str) -> "tuple[str, str]":
    """Where a canonical weight lives in the Flax variables: (collection, key inside the layer)."""
    if kind == "batchnorm" and key.startswith("moving_"):
        return "batch_stats", key
    if kind == "embedding":
        return "params", "embedding"  # nn.Embed's name for the table
    if kind == "layer_norm":
        return "params", {"gamma": "scale", "beta": "bias"}[key]  # nn.LayerNorm's names
    if kind in ("conv2d", "dense", "batchnorm", "lstm", "seq2seq", "attention", "positional_embedding",
                "tied_output"):
        return "params", key  # the canonical names and layouts are the modules' own
    raise not_built("weights of layer type", kind)


def learning_rate(config: dict, schedule=None):
    """The optimiser's learning rate: the recipe's number, or an optax schedule of the update count (from 0)."""
    if schedule is None:
        return config["lr"]
    if schedule["name"] != "warmup_cosine":
        raise not_built("schedule", schedule["name"])
    # from 0 up to lr over warmup_steps, then cosine to end_value over decay_steps - warmup_steps
    return optax.warmup_cosine_decay_schedule(0.0, config["lr"], schedule["warmup_steps"], schedule["total_steps"],
                                              end_value=schedule["final_lr_fraction"] * config["lr"])


def make_optimizer(config: dict, schedule=None) -> optax.GradientTransformation:
    """optax chains with the reference's (torch's) formulas; see the module docstring of base. `schedule`:
    the recipe's learning-rate schedule, None for a constant rate."""
    name = config["name"]
    lr = learning_rate(config, schedule)
    if name == "sgd":
        # optax's trace: v = momentum * v + g; then p -= lr * v: torch's non-Nesterov SGD. Coupled L2
        # goes into the gradient before the momentum, so add_decayed_weights comes first.
        momentum = config["momentum"] or None
        steps = [optax.sgd(lr, momentum=momentum, nesterov=config["nesterov"])]
        if config["weight_decay"]:
            steps.insert(0, optax.add_decayed_weights(config["weight_decay"]))
        return optax.chain(*steps)
    if name == "adam":
        # m_hat / (sqrt(v_hat + eps_root) + eps): torch's formula when eps_root = 0
        return optax.adam(lr, b1=config["beta1"], b2=config["beta2"], eps=config["epsilon"], eps_root=0.0)
    if name == "adamw":
        # -lr_t * (adam's step + weight_decay * p): torch's AdamW, whose decay p -= lr_t * wd * p comes first
        return optax.adamw(lr, b1=config["beta1"], b2=config["beta2"], eps=config["epsilon"], eps_root=0.0,
                           weight_decay=config["weight_decay"])
    # optax's adadelta: v = rho v + (1-rho) g^2; d = sqrt(u + eps) / sqrt(v + eps) g; u = rho u + (1-rho) d^2;
    # p -= lr d: torch's formula
    if name == "adadelta":
        return optax.adadelta(lr, rho=config["rho"], eps=config["epsilon"])
    raise not_built("optimizer", name)


def first_argmax(scores):
    """jnp.argmax over the last axis (the first maximum; a NaN counts as the maximum, as there), written
    as a max, a compare and a min: XLA's CPU runs each as a vectorised loop, where its argmax is one
    scalar loop. Measured on the 2-core machine, lstm-ptb (logits of 20 x 30 x 2,000 a step): steady
    epochs of 0.58-0.61 s against 0.69-0.73 s with jnp.argmax, the same losses and accuracies."""
    top = jnp.max(scores, axis=-1, keepdims=True)
    positions = jax.lax.broadcasted_iota(jnp.int32, scores.shape, scores.ndim - 1)
    hit = (scores == top) | jnp.isnan(scores)
    return jnp.min(jnp.where(hit, positions, scores.shape[-1]), axis=-1)


def loss_terms(loss: str, logits, labels):
    """The batch's mean loss, its weight, right predictions and predictions made, as pytorch.loss_terms."""
    if loss == "sigmoid_cross_entropy":
        logits = logits.squeeze(-1)
        value = jnp.mean(optax.sigmoid_binary_cross_entropy(logits, labels.astype(logits.dtype)))
        count = jnp.int32(labels.shape[0])
        return value, count, jnp.sum((logits > 0) == (labels != 0)), count
    flat = logits.reshape((-1, logits.shape[-1]))
    flat_labels = labels.reshape(-1)
    per_token = optax.softmax_cross_entropy_with_integer_labels(flat, flat_labels)
    right = first_argmax(flat) == flat_labels
    if loss == "masked_sequence_softmax_cross_entropy":
        kept = flat_labels != PAD_ID
        count = jnp.sum(kept)
        value = jnp.sum(jnp.where(kept, per_token, 0.0)) / jnp.maximum(count, 1)
        return value, count, jnp.sum(right & kept), count
    if loss in ("softmax_cross_entropy", "sequence_softmax_cross_entropy"):
        return jnp.mean(per_token), jnp.int32(labels.shape[0]), jnp.sum(right), jnp.int32(flat_labels.size)
    raise not_built("loss", loss)


def _add_sums(sums, loss, weight, right, made):
    """(loss x weight in float32, then weight, right, made as exact int32 counts)."""
    loss_sum, counts = sums
    counts = counts + jnp.stack([jnp.asarray(v, jnp.int32) for v in (weight, right, made)])
    return loss_sum + loss * weight.astype(jnp.float32), counts


def _zero_sums():
    return jnp.zeros((), jnp.float32), jnp.zeros((3,), jnp.int32)


class Adapter(BaseAdapter):
    name = "jax"

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        self.jax_device = jax_device(device)
        self.float_inputs = model["input_dtype"].startswith("float")
        self.module = IRModel(tuple(model["layers"]))
        self.loss_name = recipe["loss"]
        self.batch_size = recipe["batch_size"]
        self.tx = make_optimizer(recipe["optimizer"], recipe.get("schedule"))
        self.locations = {}  # canonical name -> (collection, layer, key)
        variables = {"params": {}, "batch_stats": {}}
        for layer, in_shape, _ in all_shapes(model):  # a residual block's own layers too
            for key, shape in param_shapes(layer, in_shape).items():
                collection, inner = _locate(layer["type"], key)
                self.locations[layer["name"] + "/" + key] = (collection, layer["name"], inner)
                fill = np.ones if key in ("gamma", "moving_var") else np.zeros
                variables[collection].setdefault(layer["name"], {})[inner] = fill(shape, np.float32)
        variables = self._put(variables)
        self.params, self.stats = variables["params"], variables["batch_stats"]
        # committed to the device as the step's outputs are: an uncommitted state (jit's output) made the
        # first epoch compile the train step twice (1.9 s more for cnn-mnist on the 2-core machine)
        self.opt_state = self._put(self.tx.init(self.params))
        self.key = self._put(jax.random.PRNGKey(seed))  # dropout masks: split once per step
        self._splits = {}  # id of a Split -> (the split, x, y on the device): copied once
        self._train_steps = {}
        self._eval_steps = {}
        self._predict = jax.jit(self._apply_eval)
        self._grads = jax.jit(self._loss_and_grads, static_argnames=("scale",))

    # ---- plumbing -------------------------------------------------------------------------

    def _put(self, tree):
        return jax.device_put(tree, self.jax_device)

    def _on_device(self, data: Split):
        key = id(data)
        if key not in self._splits:  # holding the split keeps its id from being reused
            x = np.asarray(data.x)
            x = x if self.float_inputs else x.astype(np.int32)
            self._splits[key] = (data, self._put(x), self._put(np.asarray(data.y).astype(np.int32)))
        return self._splits[key][1:]

    def _inputs(self, x, scale):
        if not self.float_inputs:
            return x
        x = x.astype(jnp.float32)
        return x / scale if scale else x

    def _apply_eval(self, params, stats, x):
        return self.module.apply({"params": params, "batch_stats": stats}, x, train=False)

    def _apply_train(self, params, stats, x, key):
        logits, updated = self.module.apply({"params": params, "batch_stats": stats}, x, train=True,
                                            rngs={"dropout": key}, mutable=["batch_stats"])
        return logits, updated.get("batch_stats", stats)

    def _loss_and_grads(self, params, stats, key, x, y, scale=None):
        def objective(p):
            logits, new_stats = self._apply_train(p, stats, self._inputs(x, scale), key)
            terms = loss_terms(self.loss_name, logits, y)
            return terms[0], (new_stats, terms)

        (_, (new_stats, terms)), grads = jax.value_and_grad(objective, has_aux=True)(params)
        return grads, new_stats, terms

    def _train_step(self, size: int, scale):
        """One optimiser step over `size` samples at the carried position of the epoch's order."""
        if (size, scale) not in self._train_steps:
            def step(state, carry, x_all, y_all, order):
                params, stats, opt_state, key = state
                position, sums = carry
                index = jax.lax.dynamic_slice_in_dim(order, position, size)
                key, subkey = jax.random.split(key)
                grads, stats, terms = self._loss_and_grads(params, stats, subkey, x_all[index], y_all[index], scale)
                updates, opt_state = self.tx.update(grads, opt_state, params)
                params = optax.apply_updates(params, updates)
                return (params, stats, opt_state, key), (position + size, _add_sums(sums, *terms))

            # not donated: see the module's doc (donating the state made XLA's CPU steps slower)
            self._train_steps[size, scale] = jax.jit(step)
        return self._train_steps[size, scale]

    def _eval_step(self, size: int, scale):
        if (size, scale) not in self._eval_steps:
            def step(params, stats, carry, x_all, y_all):
                position, sums = carry
                x = jax.lax.dynamic_slice_in_dim(x_all, position, size)
                y = jax.lax.dynamic_slice_in_dim(y_all, position, size)
                logits = self._apply_eval(params, stats, self._inputs(x, scale))
                return position + size, _add_sums(sums, *loss_terms(self.loss_name, logits, y))

            self._eval_steps[size, scale] = jax.jit(step, donate_argnums=(2,))
        return self._eval_steps[size, scale]

    def _start(self):
        return self._put((jnp.zeros((), jnp.int32), _zero_sums()))

    def _finish(self, carry) -> Dict[str, float]:
        loss_sum, counts = jax.device_get(carry[1])  # the epoch's one trip back to the host
        weight, right, made = (float(v) for v in counts)
        return finish_metrics(self.loss_name, float(loss_sum), weight, right, made)

    # ---- the contract ---------------------------------------------------------------------

    def versions(self):
        return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__,
                "optax": optax.__version__, "numpy": np.__version__}

    def threads_used(self):
        return THREADS  # what XLA's CPU client was configured with at import

    def set_weights(self, weights):
        params = jax.device_get(self.params)
        stats = jax.device_get(self.stats)
        trees = {"params": params, "batch_stats": stats}
        for name, (collection, layer, key) in self.locations.items():
            target = trees[collection][layer][key]
            value = np.asarray(weights[name], dtype=np.float32)
            if value.shape != target.shape:
                raise ValueError("weight %s: shape %s, expected %s" % (name, value.shape, target.shape))
            trees[collection][layer][key] = np.array(value)
        self.params, self.stats = self._put(params), self._put(stats)

    def apply_gradients(self, gradients):
        grads = jax.device_get(self.params)
        for name, (collection, layer, key) in self.locations.items():
            if collection == "params":
                grads[layer][key] = np.asarray(gradients[name], dtype=np.float32)
        updates, self.opt_state = self.tx.update(self._put(grads), self.opt_state, self.params)
        self.params = optax.apply_updates(self.params, updates)

    def get_weights(self):
        trees = jax.device_get({"params": self.params, "batch_stats": self.stats})
        return {name: np.array(trees[collection][layer][key])
                for name, (collection, layer, key) in self.locations.items()}

    def loss_and_gradients(self, data):
        x_all, y_all = self._on_device(data)
        self.key, subkey = jax.random.split(self.key)
        grads, self.stats, terms = self._grads(self.params, self.stats, subkey, x_all, y_all, scale=data.input_scale)
        grads = jax.device_get(grads)
        out = {name: np.array(grads[layer][key]) for name, (collection, layer, key) in self.locations.items()
               if collection == "params"}
        return float(terms[0]), out

    def train_epoch(self, data, order):
        x_all, y_all = self._on_device(data)
        order_d = self._put(np.asarray(order).astype(np.int32))
        state = (self.params, self.stats, self.opt_state, self.key)
        carry = self._start()
        for batch in batch_slices(len(order), self.batch_size):
            state, carry = self._train_step(batch.stop - batch.start, data.input_scale)(
                state, carry, x_all, y_all, order_d)
        self.params, self.stats, self.opt_state, self.key = state
        return self._finish(carry)

    def evaluate(self, data):
        x_all, y_all = self._on_device(data)
        carry = self._start()
        for batch in batch_slices(len(data), self.batch_size):
            carry = self._eval_step(batch.stop - batch.start, data.input_scale)(
                self.params, self.stats, carry, x_all, y_all)
        return self._finish(carry)

    def predict(self, x):
        inputs = np.ascontiguousarray(x)
        inputs = inputs.astype(np.float32) if self.float_inputs else inputs.astype(np.int32)
        return np.asarray(self._predict(self.params, self.stats, self._put(inputs)))

    def serving(self):
        """jax.jit of the module's apply with train=False on inputs as stored (pixels scaled inside the
        compiled function); it compiles once per batch shape, at that shape's first call."""
        scale = self.input_scale

        @jax.jit
        def forward(params, stats, x):
            return self._apply_eval(params, stats, self._inputs(x, scale))

        def serve(x):
            inputs = np.ascontiguousarray(x) if self.float_inputs else np.asarray(x, np.int32)
            return np.asarray(forward(self.params, self.stats, self._put(inputs)))
        return serve

    def training_outputs(self, x):
        self.key, key = jax.random.split(self.key)
        inputs = self._put(np.ascontiguousarray(x, dtype=np.float32))
        return np.asarray(self._apply_train(self.params, self.stats, inputs, key)[0])

    def synchronise(self):
        jax.block_until_ready((self.params, self.stats, self.opt_state, self.key))
