"""lstm-ptb the way Chainer's PTB example (examples/ptb) writes it: a chainer.Chain of EmbedID, two
stateful L.LSTM links and a Linear, fed one time step at a time, the loss summed over the steps;
AdaDelta and the update loop (cleargrads, forward, backward, update).

python chainer_lstm_ptb.py --data DIR --epochs N --threads T --seed S --batch-size B --learning-rate LR
prints one JSON line per epoch: {"epoch", "train_time_s", "loss"}.
"""
import argparse
import json
import os
import time

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import threadpoolctl


class RNNForLM(chainer.Chain):
    def __init__(self, n_vocab, n_units):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(n_vocab, n_units)
            self.l1 = L.LSTM(n_units, n_units)
            self.l2 = L.LSTM(n_units, n_units)
            self.l3 = L.Linear(n_units, n_vocab)

    def reset_state(self):
        self.l1.reset_state()
        self.l2.reset_state()

    def forward(self, x):
        h = self.l2(self.l1(self.embed(x)))
        return self.l3(F.dropout(h, 0.5))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=1.0)
    args = parser.parse_args()
    threadpoolctl.threadpool_limits(args.threads)  # numpy's BLAS does Chainer's CPU work
    np.random.seed(args.seed)  # Chainer's initialisers and dropout draw from numpy

    with open(os.path.join(args.data, "meta.json")) as handle:
        meta = json.load(handle)
    x_train = np.load(os.path.join(args.data, "x_train.npy")).astype(np.int32)
    y_train = np.load(os.path.join(args.data, "y_train.npy")).astype(np.int32)

    model = RNNForLM(meta["vocab_size"], 200)
    optimizer = chainer.optimizers.AdaDelta(rho=0.95, eps=1e-6)  # Chainer's has no learning rate (1.0)
    optimizer.setup(model)

    for epoch in range(1, args.epochs + 1):
        order = np.random.RandomState([args.seed, epoch]).permutation(len(x_train))
        tic = time.perf_counter()
        total = 0.0
        for start in range(0, len(order), args.batch_size):
            index = order[start:start + args.batch_size]
            x, y = x_train[index], y_train[index]
            model.reset_state()  # every window starts from a zero state
            loss = 0
            for t in range(x.shape[1]):
                loss += F.softmax_cross_entropy(model(x[:, t]), y[:, t])
            loss /= x.shape[1]
            model.cleargrads()
            loss.backward()
            optimizer.update()
            total += float(loss.array) * len(index)
        train_time = time.perf_counter() - tic
        print(json.dumps({"epoch": epoch, "train_time_s": train_time, "loss": total / len(order)}), flush=True)


if __name__ == "__main__":
    main()
