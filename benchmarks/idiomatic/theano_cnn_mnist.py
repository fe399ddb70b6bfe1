"""cnn-mnist the way Theano's tutorials (deeplearning.net's LeNet) write it: shared variables, a
symbolic graph of conv2d, pool_2d and dot, T.grad, and one compiled theano.function whose updates
take the SGD step (momentum, coupled L2).

python theano_cnn_mnist.py --data DIR --epochs N --threads T --seed S --batch-size B --learning-rate LR
prints one JSON line per epoch: {"epoch", "train_time_s", "loss"}.
"""
import argparse
import glob
import json
import os
import time

import numpy as np


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    return parser.parse_args()


def theano_flags(threads):
    """THEANO_FLAGS as the dlbench adapter sets them: OpenMP when more than one thread, and gemm from
    the LP64 OpenBLAS in scipy's wheel (numpy's is ILP64, which Theano cannot link)."""
    flags = ["device=cpu", "floatX=float32", f"openmp={threads > 1}"]
    site = os.path.dirname(os.path.dirname(np.__file__))
    found = sorted(glob.glob(os.path.join(site, "scipy.libs", "libopenblas*.so*")))
    if found:
        folder = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"theano-openblas-{os.getpid()}")
        os.makedirs(folder, exist_ok=True)
        for name in ("libopenblas.so", os.path.basename(found[0])):
            os.symlink(found[0], os.path.join(folder, name))
        flags.append(f"blas.ldflags=-L{folder} -lopenblas")
    if os.environ.get("DLBENCH_COMPILE_CACHE"):
        flags.append("base_compiledir=" + os.environ["DLBENCH_COMPILE_CACHE"])
    os.environ["THEANO_FLAGS"] = ",".join(filter(None, [os.environ.get("THEANO_FLAGS")] + flags))
    os.environ["OMP_NUM_THREADS"] = str(threads)


args = parse()
theano_flags(args.threads)

import theano  # noqa: E402
import theano.tensor as T  # noqa: E402
from theano.sandbox.rng_mrg import MRG_RandomStreams  # noqa: E402
from theano.tensor.nnet import conv2d  # noqa: E402
from theano.tensor.signal.pool import pool_2d  # noqa: E402

rng = np.random.RandomState(args.seed)
srng = MRG_RandomStreams(args.seed + 1)


def weight(shape, fan_in, fan_out):
    bound = np.sqrt(6.0 / (fan_in + fan_out))  # Glorot's uniform
    return theano.shared(rng.uniform(-bound, bound, shape).astype(np.float32), borrow=True)


def bias(size):
    return theano.shared(np.zeros(size, np.float32), borrow=True)


def dropout(h, rate):
    return h * srng.binomial(h.shape, p=1 - rate, dtype="float32") / np.float32(1 - rate)


def main():
    with open(os.path.join(args.data, "meta.json")) as handle:
        meta = json.load(handle)
    # NHWC uint8 on disk -> NCHW float32, Theano's layout, once
    x_train = np.load(os.path.join(args.data, "x_train.npy")).transpose(0, 3, 1, 2)
    x_train = np.ascontiguousarray(x_train, dtype=np.float32) / np.float32(meta["input_scale"])
    y_train = np.load(os.path.join(args.data, "y_train.npy")).astype(np.int32)
    height, width, channels = meta["input_shape"]
    flat = (height - 4) // 2 * ((width - 4) // 2) * 64

    w1, b1 = weight((32, channels, 3, 3), channels * 9, 32 * 9), bias(32)
    w2, b2 = weight((64, 32, 3, 3), 32 * 9, 64 * 9), bias(64)
    w3, b3 = weight((flat, 128), flat, 128), bias(128)
    w4, b4 = weight((128, meta["num_classes"]), 128, meta["num_classes"]), bias(meta["num_classes"])
    params = [w1, b1, w2, b2, w3, b3, w4, b4]

    x, y = T.tensor4("x"), T.ivector("y")
    h = T.nnet.relu(conv2d(x, w1) + b1.dimshuffle("x", 0, "x", "x"))
    h = T.nnet.relu(conv2d(h, w2) + b2.dimshuffle("x", 0, "x", "x"))
    h = dropout(pool_2d(h, ws=(2, 2), ignore_border=True), 0.25)
    h = dropout(T.nnet.relu(T.dot(h.flatten(2), w3) + b3), 0.5)
    probabilities = T.nnet.softmax(T.dot(h, w4) + b4)
    loss = T.nnet.categorical_crossentropy(probabilities, y).mean()

    updates = []
    lr, momentum, decay = np.float32(args.learning_rate), np.float32(0.5), np.float32(1e-6)
    for p, g in zip(params, T.grad(loss, params), strict=True):
        velocity = theano.shared(np.zeros(p.get_value().shape, np.float32))
        v = momentum * velocity + g + decay * p
        updates += [(velocity, v), (p, p - lr * v)]
    train = theano.function([x, y], loss, updates=updates)

    for epoch in range(1, args.epochs + 1):
        order = np.random.RandomState([args.seed, epoch]).permutation(len(x_train))
        tic = time.perf_counter()
        total = 0.0
        for start in range(0, len(order), args.batch_size):
            index = order[start:start + args.batch_size]
            total += float(train(x_train[index], y_train[index])) * len(index)
        train_time = time.perf_counter() - tic
        print(json.dumps({"epoch": epoch, "train_time_s": train_time, "loss": total / len(order)}), flush=True)


if __name__ == "__main__":
    main()
