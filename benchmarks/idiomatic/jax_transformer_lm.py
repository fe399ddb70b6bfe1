"""transformer-lm the way Flax's tutorials write a small GPT: a flax.nnx Module of nnx.Embed (tokens and
positions), pre-LN blocks of nnx.LayerNorm, nnx.MultiHeadAttention(is_causal=True), an nnx.Linear MLP with
the exact GELU and nnx.Dropout, the logits through the token table's `attend` plus a bias (weight tying);
optax.adamw over optax.warmup_cosine_decay_schedule, an nnx.jit train step. Flax's default initialisation.

The recipe of dlbench's transformer-lm: width 128, dropout 0.1, 4 blocks of 4 heads and an MLP of 512, layer
norm eps 1e-5, AdamW (betas 0.9/0.999, eps 1e-6, weight decay 0.01 on every parameter), the learning rate 0 at
the first update, rising linearly over round(5 % of the updates), then a cosine to a tenth of it at the last.

Modes: execution compiled only (nnx.jit, how JAX programs run). Precisions the Flax way, every module built
with `dtype` (compute) and `param_dtype` (parameters): `--precision bfloat16` both bfloat16 (so optax's state
and the gradients too), `--precision mixed-bfloat16` bfloat16 compute over float32 parameters (Flax's layers
cast their inputs and parameters on use; the gradients come back float32 through the casts). In both the logits
are cast to float32 for the loss, and nnx.LayerNorm computes its statistics in float32 (its default).
mixed-float16 is not run here: CPUs have no float16 arithmetic to measure.

python jax_transformer_lm.py --data DIR --epochs N --threads T --seed S --batch-size B --learning-rate LR
    [--execution compiled] [--precision float32|bfloat16|mixed-bfloat16]
prints one JSON line per epoch: {"epoch", "train_time_s", "loss"}.
"""
import argparse
import json
import math
import os
import time

# precision -> (compute dtype, parameters' dtype), by name: jax is imported after the arguments are read
PRECISIONS = {"float32": ("float32", "float32"), "bfloat16": ("bfloat16", "bfloat16"),
              "mixed-bfloat16": ("bfloat16", "float32")}


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--execution", choices=("compiled",), default="compiled")
    parser.add_argument("--precision", choices=tuple(PRECISIONS), default="float32")
    return parser.parse_args()


args = parse()
os.environ["PJRT_NPROC"] = str(args.threads)  # XLA's CPU thread pool, read when the client starts
if args.threads == 1:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

WIDTH, HEADS, BLOCKS, MLP, DROPOUT = 128, 4, 4, 512, 0.1
COMPUTE, PARAMS = (jnp.dtype(name) for name in PRECISIONS[args.precision])
TYPES = {"dtype": COMPUTE, "param_dtype": PARAMS}  # every module is built in the precision's types


class Block(nnx.Module):
    def __init__(self, *, rngs):
        self.ln1 = nnx.LayerNorm(WIDTH, epsilon=1e-5, rngs=rngs, **TYPES)
        self.attention = nnx.MultiHeadAttention(HEADS, WIDTH, decode=False, rngs=rngs, **TYPES)
        self.ln2 = nnx.LayerNorm(WIDTH, epsilon=1e-5, rngs=rngs, **TYPES)
        self.up = nnx.Linear(WIDTH, MLP, rngs=rngs, **TYPES)
        self.down = nnx.Linear(MLP, WIDTH, rngs=rngs, **TYPES)
        self.dropout = nnx.Dropout(DROPOUT, rngs=rngs)

    def __call__(self, x):
        x = x + self.dropout(self.attention(self.ln1(x), is_causal=True))
        return x + self.dropout(self.down(jax.nn.gelu(self.up(self.ln2(x)), approximate=False)))


class GPT(nnx.Module):
    def __init__(self, vocab, context, *, rngs):
        self.token = nnx.Embed(vocab, WIDTH, rngs=rngs, **TYPES)
        self.position = nnx.Embed(context, WIDTH, rngs=rngs, **TYPES)
        self.dropout = nnx.Dropout(DROPOUT, rngs=rngs)
        self.blocks = nnx.List([Block(rngs=rngs) for _ in range(BLOCKS)])
        self.ln = nnx.LayerNorm(WIDTH, epsilon=1e-5, rngs=rngs, **TYPES)
        self.bias = nnx.Param(jnp.zeros((vocab,), PARAMS))

    def __call__(self, tokens):
        steps = tokens.shape[1]
        x = self.dropout(self.token(tokens) + self.position(jnp.arange(steps)))
        for block in self.blocks:
            x = block(x)
        logits = self.token.attend(self.ln(x)) + self.bias[...].astype(COMPUTE)  # tied: logits x E^T + b
        return logits.astype(jnp.float32)  # the loss in float32, whatever the compute type


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        logits = model(x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def main():
    with open(os.path.join(args.data, "meta.json")) as handle:
        meta = json.load(handle)
    x_train = np.load(os.path.join(args.data, "x_train.npy")).astype(np.int32)
    y_train = np.load(os.path.join(args.data, "y_train.npy")).astype(np.int32)

    model = GPT(meta["vocab_size"], meta["seq_len"], rngs=nnx.Rngs(args.seed))
    total_steps = args.epochs * math.ceil(len(x_train) / args.batch_size)
    warmup_steps = min(round(0.05 * total_steps), total_steps - 1)
    schedule = optax.warmup_cosine_decay_schedule(0.0, args.learning_rate, warmup_steps, total_steps,
                                                  end_value=0.1 * args.learning_rate)
    tx = optax.adamw(schedule, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    model.train()  # dropout on

    for epoch in range(1, args.epochs + 1):
        order = np.random.RandomState([args.seed, epoch]).permutation(len(x_train))
        tic = time.perf_counter()
        losses = []
        for start in range(0, len(order), args.batch_size):
            index = order[start:start + args.batch_size]
            losses.append((train_step(model, optimizer, x_train[index], y_train[index]), len(index)))
        jax.block_until_ready(nnx.state(model))
        train_time = time.perf_counter() - tic
        loss = sum(float(value) * count for value, count in losses) / len(order)
        print(json.dumps({"epoch": epoch, "train_time_s": train_time, "loss": loss}), flush=True)


if __name__ == "__main__":
    main()
