"""lstm-ptb the way Gluon's tutorials write it: a HybridBlock (Embedding, a two-layer rnn.LSTM, Dropout,
Dense per step), hybridized with static_alloc and static_shape (Gluon's performance guide),
gluon.Trainer with adadelta, autograd.record and backward.

python mxnet_lstm_ptb.py --data DIR --epochs N --threads T --seed S --batch-size B --learning-rate LR
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
os.environ["OMP_NUM_THREADS"] = str(args.threads)  # MXNet's operators read it when mxnet loads
os.environ["MXNET_OMP_MAX_THREADS"] = str(args.threads)

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon, nd  # noqa: E402
from mxnet.gluon import nn, rnn  # noqa: E402


class LanguageModel(gluon.HybridBlock):
    def __init__(self, vocab, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embedding = nn.Embedding(vocab, 200)
            self.lstm = rnn.LSTM(200, num_layers=2, layout="NTC", input_size=200)
            self.dropout = nn.Dropout(0.5)
            self.decoder = nn.Dense(vocab, flatten=False, in_units=200)

    def hybrid_forward(self, F, x):
        return self.decoder(self.dropout(self.lstm(self.embedding(x))))


def main():
    with open(os.path.join(args.data, "meta.json")) as handle:
        meta = json.load(handle)
    x_train = np.load(os.path.join(args.data, "x_train.npy")).astype(np.float32)  # token ids, as Embedding takes
    y_train = np.load(os.path.join(args.data, "y_train.npy")).astype(np.float32)
    mx.random.seed(args.seed)
    ctx = mx.cpu()

    net = LanguageModel(meta["vocab_size"])
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)
    # MXNet's AdaDelta has no learning rate (the recipe's is 1.0)
    trainer = gluon.Trainer(net.collect_params(), "adadelta", {"rho": 0.95, "epsilon": 1e-6})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()  # mean over the steps of each window

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
