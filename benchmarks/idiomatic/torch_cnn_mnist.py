"""cnn-mnist in PyTorch as PyTorch's own examples train it: an nn.Sequential, torch.optim.SGD and a plain
loop over batches of tensors held in memory (the dataset is small, so no DataLoader).

The recipe of dlbench's cnn-mnist: SGD, momentum 0.5, L2 1e-6 (torch's coupled weight_decay), softmax
cross-entropy; the batches follow dlbench's order (numpy RandomState([seed, epoch])).
Contract (arguments, output): benchmarks/idiomatic/README.md.
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
for name, kind in (("--data", str), ("--epochs", int), ("--threads", int), ("--seed", int),
                   ("--batch-size", int), ("--learning-rate", float)):
    parser.add_argument(name, type=kind, required=True)
args = parser.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(args.seed)

with open(os.path.join(args.data, "meta.json")) as handle:
    meta = json.load(handle)
# NHWC uint8 pixels -> NCHW floats in [0, 1], once
x_train = torch.from_numpy(np.load(os.path.join(args.data, "x_train.npy"))).permute(0, 3, 1, 2).float()
x_train = (x_train / meta["input_scale"]).contiguous()
y_train = torch.from_numpy(np.load(os.path.join(args.data, "y_train.npy"))).long()
height, width, channels = meta["input_shape"]

model = nn.Sequential(
    nn.Conv2d(channels, 32, 3), nn.ReLU(),
    nn.Conv2d(32, 64, 3), nn.ReLU(),
    nn.MaxPool2d(2), nn.Dropout(0.25),
    nn.Flatten(),
    nn.Linear(64 * ((height - 4) // 2) * ((width - 4) // 2), 128), nn.ReLU(), nn.Dropout(0.5),
    nn.Linear(128, meta["num_classes"]),
)
optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.5, weight_decay=1e-6)

for epoch in range(1, args.epochs + 1):
    order = torch.from_numpy(np.random.RandomState([args.seed, epoch]).permutation(len(x_train)))
    model.train()
    total = 0.0
    start = time.perf_counter()
    for first in range(0, len(order), args.batch_size):
        batch = order[first:first + args.batch_size]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x_train[batch]), y_train[batch])
        loss.backward()
        optimizer.step()
        total += loss.item() * len(batch)
    seconds = time.perf_counter() - start
    print(json.dumps({"epoch": epoch, "train_time_s": seconds, "loss": total / len(order)}), flush=True)
