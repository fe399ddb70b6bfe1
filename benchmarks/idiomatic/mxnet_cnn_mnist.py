"""cnn-mnist the way Gluon's tutorials write it: an nn.HybridSequential, hybridized with static_alloc
and static_shape (Gluon's performance guide), gluon.Trainer, autograd.record and backward.

python mxnet_cnn_mnist.py --data DIR --epochs N --threads T --seed S --batch-size B --learning-rate LR
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
os.environ["OMP_NUM_THREADS"] = str(args.threads)  # MXNet's operators read it when mxnet loads
os.environ["MXNET_OMP_MAX_THREADS"] = str(args.threads)

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon, nd  # noqa: E402
from mxnet.gluon import nn  # noqa: E402


def main():
    with open(os.path.join(args.data, "meta.json")) as handle:
        meta = json.load(handle)
    # NHWC uint8 on disk -> NCHW float32, MXNet's layout, once
    x_train = np.load(os.path.join(args.data, "x_train.npy")).transpose(0, 3, 1, 2)
    x_train = np.ascontiguousarray(x_train, dtype=np.float32) / np.float32(meta["input_scale"])
    y_train = np.load(os.path.join(args.data, "y_train.npy")).astype(np.float32)
    mx.random.seed(args.seed)
    ctx = mx.cpu()

    net = nn.HybridSequential()
    net.add(nn.Conv2D(32, kernel_size=3, activation="relu"),
            nn.Conv2D(64, kernel_size=3, activation="relu"),
            nn.MaxPool2D(pool_size=2),
            nn.Dropout(0.25),
            nn.Flatten(),
            nn.Dense(128, activation="relu"),
            nn.Dropout(0.5),
            nn.Dense(meta["num_classes"]))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": args.learning_rate, "momentum": 0.5, "wd": 1e-6})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    for epoch in range(1, args.epochs + 1):
        order = np.random.RandomState([args.seed, epoch]).permutation(len(x_train))
        tic = time.perf_counter()
        total = nd.zeros((1,), ctx=ctx)
        for start in range(0, len(order), args.batch_size):
            index = order[start:start + args.batch_size]
            data, label = nd.array(x_train[index], ctx=ctx), nd.array(y_train[index], ctx=ctx)
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(len(index))
            total += loss.sum()
        nd.waitall()
        train_time = time.perf_counter() - tic
        print(json.dumps({"epoch": epoch, "train_time_s": train_time, "loss": total.asscalar() / len(order)}),
              flush=True)


if __name__ == "__main__":
    main()
