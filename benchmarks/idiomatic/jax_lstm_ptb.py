"""lstm-ptb the way Flax's tutorials write it: a flax.nnx Module (Embed, two nnx.RNN over
OptimizedLSTMCell, Dropout, Linear per step), optax's adadelta, an nnx.jit train step.

python jax_lstm_ptb.py --data DIR --epochs N --threads T --seed S --batch-size B --learning-rate LR
prints one JSON line per epoch: {"epoch", "train_time_s", "loss"}.
"""
import argparse
import json
import os
import time


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=1.0)
    return parser.parse_args()


args = parse()
os.environ["PJRT_NPROC"] = str(args.threads)  # XLA's CPU thread pool, read when the client starts
if args.threads == 1:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402


class LanguageModel(nnx.Module):
    def __init__(self, vocab, *, rngs):
        self.embed = nnx.Embed(vocab, 200, rngs=rngs)
        self.lstm1 = nnx.RNN(nnx.OptimizedLSTMCell(200, 200, rngs=rngs), rngs=rngs)
        self.lstm2 = nnx.RNN(nnx.OptimizedLSTMCell(200, 200, rngs=rngs), rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)
        self.linear = nnx.Linear(200, vocab, rngs=rngs)

    def __call__(self, tokens):
        x = self.lstm2(self.lstm1(self.embed(tokens)))
        return self.linear(self.dropout(x))


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

    model = LanguageModel(meta["vocab_size"], rngs=nnx.Rngs(args.seed))
    optimizer = nnx.Optimizer(model, optax.adadelta(args.learning_rate, rho=0.95, eps=1e-6), wrt=nnx.Param)
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
