"""transformer-lm in PyTorch as its guides write a small GPT: nn.Module blocks of nn.LayerNorm, a causal
self-attention through F.scaled_dot_product_attention(is_causal=True), an nn.GELU MLP and nn.Dropout, the
output nn.Linear sharing the token embedding's Parameter (weight tying), torch.optim.AdamW with a LambdaLR
warm-up and cosine, trained by a plain loop over batches of windows. PyTorch's default initialisation except
for the tied embedding: uniform in +-0.1, as PyTorch's word_language_model example and its nn.Transformer
language-model tutorial set theirs (the default N(0, 1) table, tied, starts the logits at a standard deviation
near sqrt(128) and the loss near 50).

The recipe of dlbench's transformer-lm: width 128, learned positions over the window, dropout 0.1, 4 pre-LN
blocks of 4 causal heads and an MLP of 512 (exact GELU), layer norm eps 1e-5, a final layer norm, logits
x E^T + b; AdamW (betas 0.9/0.999, eps 1e-6, weight decay 0.01 on every parameter), the learning rate 0 at
the first update, rising linearly over round(5 % of the updates), then a cosine to a tenth of it at the last;
cross-entropy averaged over every token of a batch; the batches follow dlbench's order.

Modes, as PyTorch's own recipes make them: `--execution compiled` trains `torch.compile(model)` (inductor's
default mode, the tutorial's one line; the first epoch holds the compilation); `--precision bfloat16` casts
the model (`model.to(torch.bfloat16)`: weights, gradients and AdamW's state) and computes in bfloat16, the
logits cast to float32 for the loss; `--precision mixed-bfloat16` keeps float32 weights and runs forward and
loss under `torch.autocast("cpu", dtype=torch.bfloat16)` (the AMP recipe; no GradScaler, which only float16
needs), the backward pass outside it. mixed-float16 is not run here: CPUs have no float16 arithmetic to measure.
Contract (arguments, output): benchmarks/idiomatic/README.md.
"""
import argparse
import contextlib
import json
import math
import os
import time

parser = argparse.ArgumentParser()
for name, kind in (("--data", str), ("--epochs", int), ("--threads", int), ("--seed", int),
                   ("--batch-size", int), ("--learning-rate", float)):
    parser.add_argument(name, type=kind, required=True)
parser.add_argument("--execution", choices=("eager", "compiled"), default="eager")
parser.add_argument("--precision", choices=("float32", "bfloat16", "mixed-bfloat16"), default="float32")
args = parser.parse_args()  # before torch's import: a mode this program lacks is refused at once

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

torch.set_num_threads(args.threads)
torch.manual_seed(args.seed)

with open(os.path.join(args.data, "meta.json")) as handle:
    meta = json.load(handle)
x_train = torch.from_numpy(np.load(os.path.join(args.data, "x_train.npy"))).long()
y_train = torch.from_numpy(np.load(os.path.join(args.data, "y_train.npy"))).long()
vocab, context = meta["vocab_size"], meta["seq_len"]
WIDTH, HEADS, BLOCKS, MLP, DROPOUT = 128, 4, 4, 512, 0.1


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        batch, steps, width = x.shape
        q, k, v = (part.view(batch, steps, HEADS, -1).transpose(1, 2) for part in self.qkv(x).split(width, dim=2))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(batch, steps, width))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH, eps=1e-5)
        self.attention = CausalSelfAttention()
        self.ln2 = nn.LayerNorm(WIDTH, eps=1e-5)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, MLP), nn.GELU(), nn.Linear(MLP, WIDTH))
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, x):
        x = x + self.dropout(self.attention(self.ln1(x)))
        return x + self.dropout(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.token = nn.Embedding(vocab, WIDTH)
        self.position = nn.Embedding(context, WIDTH)
        self.dropout = nn.Dropout(DROPOUT)
        self.blocks = nn.Sequential(*(Block() for _ in range(BLOCKS)))
        self.ln = nn.LayerNorm(WIDTH, eps=1e-5)
        self.head = nn.Linear(WIDTH, vocab)
        self.head.weight = self.token.weight  # tied: one Parameter, both uses' gradients summed into it
        nn.init.uniform_(self.token.weight, -0.1, 0.1)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.dropout(self.token(tokens) + self.position(positions))
        return self.head(self.ln(self.blocks(x)))


model = GPT()
if args.precision == "bfloat16":
    model.to(torch.bfloat16)  # before the optimiser: its state is created in its parameters' type
optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, betas=(0.9, 0.999), eps=1e-6,
                              weight_decay=0.01)
# the module the loop calls: the model, or its compiled twin (the same parameters), compiled at its first call
forward = torch.compile(model) if args.execution == "compiled" else model
total_steps = args.epochs * math.ceil(len(x_train) / args.batch_size)
warmup_steps = min(round(0.05 * total_steps), total_steps - 1)


def lr_factor(step):
    if step < warmup_steps:
        return step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)


def autocast():
    """mixed-bfloat16's autocast region, else none."""
    if args.precision == "mixed-bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


for epoch in range(1, args.epochs + 1):
    order = torch.from_numpy(np.random.RandomState([args.seed, epoch]).permutation(len(x_train)))
    model.train()
    total = 0.0
    start = time.perf_counter()
    for first in range(0, len(order), args.batch_size):
        batch = order[first:first + args.batch_size]
        optimizer.zero_grad()
        with autocast():
            # float32 logits for the loss (bfloat16's are the model's output; autocast keeps the loss in float32)
            logits = forward(x_train[batch]).float()
            loss = F.cross_entropy(logits.reshape(-1, vocab), y_train[batch].reshape(-1))
        loss.backward()
        optimizer.step()
        scheduler.step()
        total += loss.item() * len(batch)
    seconds = time.perf_counter() - start
    print(json.dumps({"epoch": epoch, "train_time_s": seconds, "loss": total / len(order)}), flush=True)
