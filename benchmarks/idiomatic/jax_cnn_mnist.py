"""cnn-mnist the way Flax's MNIST tutorial writes it: a flax.nnx Module, optax, an nnx.jit train step.

python jax_cnn_mnist.py --data DIR --epochs N --threads T --seed S --batch-size B --learning-rate LR
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
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    return parser.parse_args()


args = parse()
os.environ["PJRT_NPROC"] = str(args.threads)  # XLA's CPU thread pool, read when the client starts
if args.threads == 1:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402


class CNN(nnx.Module):
    def __init__(self, height, width, channels, classes, *, rngs):
        self.conv1 = nnx.Conv(channels, 32, kernel_size=(3, 3), padding="VALID", rngs=rngs)
        self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), padding="VALID", rngs=rngs)
        self.dropout1 = nnx.Dropout(0.25, rngs=rngs)
        self.linear1 = nnx.Linear((height - 4) // 2 * ((width - 4) // 2) * 64, 128, rngs=rngs)
        self.dropout2 = nnx.Dropout(0.5, rngs=rngs)
        self.linear2 = nnx.Linear(128, classes, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.conv1(x))
        x = nnx.relu(self.conv2(x))
        x = self.dropout1(nnx.max_pool(x, window_shape=(2, 2), strides=(2, 2)))
        x = x.reshape(x.shape[0], -1)
        x = self.dropout2(nnx.relu(self.linear1(x)))
        return self.linear2(x)


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
    x_train = np.load(os.path.join(args.data, "x_train.npy")).astype(np.float32) / np.float32(meta["input_scale"])
    y_train = np.load(os.path.join(args.data, "y_train.npy")).astype(np.int32)
    height, width, channels = meta["input_shape"]

    model = CNN(height, width, channels, meta["num_classes"], rngs=nnx.Rngs(args.seed))
    tx = optax.chain(optax.add_decayed_weights(1e-6), optax.sgd(args.learning_rate, momentum=0.5))
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
