"""cnn-mnist the way Chainer's MNIST example writes it: a chainer.Chain wrapped in L.Classifier,
MomentumSGD with the WeightDecay hook, and the update loop (cleargrads, forward, backward, update).

python chainer_cnn_mnist.py --data DIR --epochs N --threads T --seed S --batch-size B --learning-rate LR
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


class CNN(chainer.Chain):
    def __init__(self, classes):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(None, 32, ksize=3)
            self.conv2 = L.Convolution2D(32, 64, ksize=3)
            self.fc1 = L.Linear(None, 128)
            self.fc2 = L.Linear(128, classes)

    def forward(self, x):
        h = F.relu(self.conv1(x))
        h = F.relu(self.conv2(h))
        h = F.dropout(F.max_pooling_2d(h, 2), 0.25)
        h = F.dropout(F.relu(self.fc1(h)), 0.5)
        return self.fc2(h)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    args = parser.parse_args()
    threadpoolctl.threadpool_limits(args.threads)  # numpy's BLAS does Chainer's CPU work
    np.random.seed(args.seed)  # Chainer's initialisers and dropout draw from numpy

    with open(os.path.join(args.data, "meta.json")) as handle:
        meta = json.load(handle)
    # NHWC uint8 on disk -> NCHW float32, Chainer's layout, once
    x_train = np.load(os.path.join(args.data, "x_train.npy")).transpose(0, 3, 1, 2)
    x_train = np.ascontiguousarray(x_train, dtype=np.float32) / np.float32(meta["input_scale"])
    y_train = np.load(os.path.join(args.data, "y_train.npy")).astype(np.int32)

    model = L.Classifier(CNN(meta["num_classes"]))  # softmax cross-entropy (and accuracy) of the logits
    optimizer = chainer.optimizers.MomentumSGD(lr=args.learning_rate, momentum=0.5)
    optimizer.setup(model)
    optimizer.add_hook(chainer.optimizer_hooks.WeightDecay(1e-6))

    for epoch in range(1, args.epochs + 1):
        order = np.random.RandomState([args.seed, epoch]).permutation(len(x_train))
        tic = time.perf_counter()
        total = 0.0
        for start in range(0, len(order), args.batch_size):
            index = order[start:start + args.batch_size]
            model.cleargrads()
            loss = model(x_train[index], y_train[index])
            loss.backward()
            optimizer.update()
            total += float(loss.array) * len(index)
        train_time = time.perf_counter() - tic
        print(json.dumps({"epoch": epoch, "train_time_s": train_time, "loss": total / len(order)}), flush=True)


if __name__ == "__main__":
    main()
