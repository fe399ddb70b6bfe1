"""lstm-ptb the way Theano's tutorials (deeplearning.net's LSTM) write it: shared variables, the input
projection of every step as one dot and theano.scan over the steps, T.grad, and one compiled
theano.function whose updates take the Adadelta step.

python theano_lstm_ptb.py --data DIR --epochs N --threads T --seed S --batch-size B --learning-rate LR
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
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=1.0)
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

rng = np.random.RandomState(args.seed)
srng = MRG_RandomStreams(args.seed + 1)


def weight(shape, fan_in, fan_out):
    bound = np.sqrt(6.0 / (fan_in + fan_out))  # Glorot's uniform
    return theano.shared(rng.uniform(-bound, bound, shape).astype(np.float32), borrow=True)


def bias(size):
    return theano.shared(np.zeros(size, np.float32), borrow=True)


def dropout(h, rate):
    return h * srng.binomial(h.shape, p=1 - rate, dtype="float32") / np.float32(1 - rate)


def lstm(x, w, u, b, units):
    """x (time, batch, features) -> h (time, batch, units); gates i, f, g, o in one matrix."""
    def step(z_x, h, c):
        z = z_x + T.dot(h, u)
        i, f = T.nnet.sigmoid(z[:, :units]), T.nnet.sigmoid(z[:, units:2 * units])
        g, o = T.tanh(z[:, 2 * units:3 * units]), T.nnet.sigmoid(z[:, 3 * units:])
        c = f * c + i * g
        return o * T.tanh(c), c

    zeros = T.zeros((x.shape[1], units), dtype="float32")
    (h, _), _ = theano.scan(step, sequences=T.dot(x, w) + b, outputs_info=[zeros, zeros])
    return h


def main():
    with open(os.path.join(args.data, "meta.json")) as handle:
        meta = json.load(handle)
    x_train = np.load(os.path.join(args.data, "x_train.npy")).astype(np.int32)
    y_train = np.load(os.path.join(args.data, "y_train.npy")).astype(np.int32)
    vocab, units = meta["vocab_size"], 200

    embeddings = theano.shared(rng.uniform(-0.05, 0.05, (vocab, units)).astype(np.float32), borrow=True)

    def gates():
        return weight((units, 4 * units), units, 4 * units)

    w1, u1, b1 = gates(), gates(), bias(4 * units)
    w2, u2, b2 = gates(), gates(), bias(4 * units)
    w3, b3 = weight((units, vocab), units, vocab), bias(vocab)
    params = [embeddings, w1, u1, b1, w2, u2, b2, w3, b3]

    x, y = T.imatrix("x"), T.imatrix("y")  # (batch, time) token ids
    h = embeddings[x.T.flatten()].reshape((x.shape[1], x.shape[0], units))  # (time, batch, units)
    h = dropout(lstm(lstm(h, w1, u1, b1, units), w2, u2, b2, units), 0.5)
    logits = T.dot(h.reshape((-1, units)), w3) + b3
    loss = T.nnet.categorical_crossentropy(T.nnet.softmax(logits), y.T.flatten()).mean()

    updates = []
    rho, eps, one = np.float32(0.95), np.float32(1e-6), np.float32(1)
    for p, g in zip(params, T.grad(loss, params), strict=True):
        square_avg = theano.shared(np.zeros(p.get_value().shape, np.float32))
        delta_avg = theano.shared(np.zeros(p.get_value().shape, np.float32))
        v = rho * square_avg + (one - rho) * T.sqr(g)
        d = T.sqrt(delta_avg + eps) / T.sqrt(v + eps) * g
        updates += [(square_avg, v), (delta_avg, rho * delta_avg + (one - rho) * T.sqr(d)),
                    (p, p - np.float32(args.learning_rate) * d)]
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
