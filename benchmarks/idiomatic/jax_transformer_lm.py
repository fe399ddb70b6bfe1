"""transformer-lm the way Flax's tutorials write a small GPT: a flax.nnx Module of nnx.Embed (tokens and
positions), pre-LN blocks of nnx.LayerNorm, nnx.MultiHeadAttention(is_causal=True), an nnx.Linear MLP with
the exact GELU and nnx.Dropout, the logits through the token table's `attend` plus a bias (weight tying);
optax.adamw over optax.warmup_cosine_decay_schedule, an nnx.jit train step. Flax's default initialisation.

The recipe of dlbench's transformer-lm: width 128, dropout 0.1, 4 blocks of 4 heads and an MLP of 512, layer
norm eps 1e-5, AdamW (betas 0.9/0.999, eps 1e-6, weight decay 0.01 on every parameter), the learning rate 0 at
the first update, rising linearly over round(5 % of the updates), then a cosine to a tenth of it at the last.

python jax_transformer_lm.py --data DIR --epochs N --threads T --seed S --batch-size B --learning-rate LR
prints one JSON line per epoch: {"epoch", "train_time_s", "loss"}.
"""
import argparse
import json
import math
import os
import time


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
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


class Block(nnx.Module):
    def __init__(self, *, rngs):
        self.ln1 = nnx.LayerNorm(WIDTH, epsilon=1e-5, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(HEADS, WIDTH, decode=False, rngs=rngs)
        self.ln2 = nnx.LayerNorm(WIDTH, epsilon=1e-5, rngs=rngs)
        self.up = nnx.Linear(WIDTH, MLP, rngs=rngs)
        self.down = nnx.Linear(MLP, WIDTH, rngs=rngs)
        self.dropout = nnx.Dropout(DROPOUT, rngs=rngs)

    def __call__(self, x):
        x = x + self.dropout(self.attention(self.ln1(x), is_causal=True))
        return x + self.dropout(self.down(jax.nn.gelu(self.up(self.ln2(x)), approximate=False)))


class GPT(nnx.Module):
    def __init__(self, vocab, context, *, rngs):
        self.token = nnx.Embed(vocab, WIDTH, rngs=rngs)
        self.position = nnx.Embed(context, WIDTH, rngs=rngs)
        self.dropout = nnx.Dropout(DROPOUT, rngs=rngs)
        self.blocks = nnx.List([Block(rngs=rngs) for _ in range(BLOCKS)])
        self.ln = nnx.LayerNorm(WIDTH, epsilon=1e-5, rngs=rngs)
        self.bias = nnx.Param(jnp.zeros((vocab,)))

    def __call__(self, tokens):
        steps = tokens.shape[1]
        x = self.dropout(self.token(tokens) + self.position(jnp.arange(steps)))
        for block in self.blocks:
            x = block(x)
        return self.token.attend(self.ln(x)) + self.bias  # tied: logits x E^T + b


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
