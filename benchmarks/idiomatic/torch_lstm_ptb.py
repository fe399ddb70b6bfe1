"""lstm-ptb in PyTorch as its word_language_model example builds it: nn.Embedding, a two-layer nn.LSTM,
dropout and a per-step nn.Linear decoder, trained by a plain loop over batches of windows.

The recipe of dlbench's lstm-ptb: embedding 200, LSTM 200 x 2 (no dropout between them), dropout 0.5,
Adadelta (rho 0.95, eps 1e-6), cross-entropy averaged over every token of a batch; each window is an
independent sample (no state carried between batches); the batches follow dlbench's order.
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
x_train = torch.from_numpy(np.load(os.path.join(args.data, "x_train.npy"))).long()
y_train = torch.from_numpy(np.load(os.path.join(args.data, "y_train.npy"))).long()
vocab = meta["vocab_size"]


class LanguageModel(nn.Module):
    def __init__(self, vocab, dim=200, units=200):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, units, num_layers=2, batch_first=True)
        self.dropout = nn.Dropout(0.5)
        self.decoder = nn.Linear(units, vocab)

    def forward(self, tokens):
        output, _ = self.lstm(self.embedding(tokens))
        return self.decoder(self.dropout(output))


model = LanguageModel(vocab)
optimizer = torch.optim.Adadelta(model.parameters(), lr=args.learning_rate, rho=0.95, eps=1e-6)

for epoch in range(1, args.epochs + 1):
    order = torch.from_numpy(np.random.RandomState([args.seed, epoch]).permutation(len(x_train)))
    model.train()
    total = 0.0
    start = time.perf_counter()
    for first in range(0, len(order), args.batch_size):
        batch = order[first:first + args.batch_size]
        optimizer.zero_grad()
        logits = model(x_train[batch])
        loss = F.cross_entropy(logits.reshape(-1, vocab), y_train[batch].reshape(-1))
        loss.backward()
        optimizer.step()
        total += loss.item() * len(batch)
    seconds = time.perf_counter() - start
    print(json.dumps({"epoch": epoch, "train_time_s": seconds, "loss": total / len(order)}), flush=True)
