"""transformer-lm in TensorFlow as TensorFlow's guide "Writing a training loop from scratch" trains a model:
Keras layers (tf.keras, Keras 3 in TensorFlow 2.16+: Embedding, LayerNormalization, MultiHeadAttention with
use_causal_mask, Dense with the exact GELU, Dropout) in a subclassed keras.Model, keras.optimizers.AdamW over a
CosineDecay schedule with its linear warm-up, and a custom loop of a tf.function train step with
tf.GradientTape over a tf.data pipeline. Keras's default initialisation.

The recipe of dlbench's transformer-lm: width 128, learned positions over the window, dropout 0.1, 4 pre-LN
blocks of 4 causal heads (key_dim 32) and an MLP of 512, layer norm eps 1e-5, a final layer norm, logits
x E^T + b through the token embedding's own table (weight tying); AdamW (betas 0.9/0.999, eps 1e-6, weight
decay 0.01 on every variable), the learning rate 0 at the first update, rising linearly over round(5 % of the
updates), then a cosine to a tenth of it at the last; cross-entropy averaged over every token of a batch; the
batches follow dlbench's order (numpy RandomState([seed, epoch])).

Modes: `--execution graph` (the default) is the guide's `@tf.function` step, `--execution compiled` the same
step as `tf.function(jit_compile=True)`, the explicit compilation TensorFlow's XLA guide shows. The
precisions are Keras's dtype policies, set globally before the model is built (the mixed precision guide's
way): `--precision mixed-bfloat16` the policy "mixed_bfloat16" (float32 variables, bfloat16 compute),
`--precision bfloat16` the policy "bfloat16" (variables, AdamW's slots and compute in bfloat16). In both the
logits leave the model through a float32 linear Activation, the guide's advice for a model's last output, so the
loss is float32; LayerNormalization computes in float32 and the Embedding casts the rows it looks up, as Keras's
layers do under any policy. mixed-float16 is not run here: CPUs have no float16 arithmetic to measure.
Under the policy "bfloat16" Keras's AdamW moves no weight (Keras 3.15): it casts beta_2 = 0.999 to the variable's
bfloat16, where it is 1.0, so its bias-corrected step size is 0; the steps' work is all done, the loss stays
where it started (README.md, "Modes").
Contract (arguments, output): benchmarks/idiomatic/README.md.
"""
import argparse
import json
import math
import os
import time

parser = argparse.ArgumentParser()
for name, kind in (("--data", str), ("--epochs", int), ("--threads", int), ("--seed", int),
                   ("--batch-size", int), ("--learning-rate", float)):
    parser.add_argument(name, type=kind, required=True)
parser.add_argument("--execution", choices=("graph", "compiled"), default="graph")
parser.add_argument("--precision", choices=("float32", "bfloat16", "mixed-bfloat16"), default="float32")
args = parser.parse_args()  # before TensorFlow's import: a mode this program lacks is refused at once

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# Keras's policy names: "mixed_bfloat16" with an underscore, "float32" and "bfloat16" as they are
POLICIES = {"float32": "float32", "bfloat16": "bfloat16", "mixed-bfloat16": "mixed_bfloat16"}
tf.config.threading.set_intra_op_parallelism_threads(args.threads)
tf.config.threading.set_inter_op_parallelism_threads(args.threads)
keras = tf.keras
layers = keras.layers
keras.utils.set_random_seed(args.seed)
keras.mixed_precision.set_global_policy(POLICIES[args.precision])  # before any layer is built

with open(os.path.join(args.data, "meta.json")) as handle:
    meta = json.load(handle)
x_train = np.load(os.path.join(args.data, "x_train.npy"))
y_train = np.load(os.path.join(args.data, "y_train.npy"))
WIDTH, HEADS, BLOCKS, MLP, DROPOUT = 128, 4, 4, 512, 0.1


class Block(layers.Layer):
    def __init__(self):
        super().__init__()
        self.ln1 = layers.LayerNormalization(epsilon=1e-5)
        self.attention = layers.MultiHeadAttention(HEADS, key_dim=WIDTH // HEADS)
        self.ln2 = layers.LayerNormalization(epsilon=1e-5)
        self.up = layers.Dense(MLP, activation="gelu")  # Keras 3's gelu is the exact (erf) form
        self.down = layers.Dense(WIDTH)
        self.dropout = layers.Dropout(DROPOUT)

    def call(self, x, training=False):
        h = self.ln1(x)
        x = x + self.dropout(self.attention(h, h, use_causal_mask=True, training=training), training=training)
        return x + self.dropout(self.down(self.up(self.ln2(x))), training=training)


class GPT(keras.Model):
    def __init__(self, vocab, context):
        super().__init__()
        self.token = layers.Embedding(vocab, WIDTH)
        self.position = layers.Embedding(context, WIDTH)
        self.dropout = layers.Dropout(DROPOUT)
        self.blocks = [Block() for _ in range(BLOCKS)]
        self.ln = layers.LayerNormalization(epsilon=1e-5)
        self.bias = self.add_weight(shape=(vocab,), initializer="zeros", name="output_bias")
        self.logits = layers.Activation("linear", dtype="float32")  # the model's output in float32 for the loss

    def call(self, tokens, training=False):
        x = self.token(tokens) + self.position(tf.range(tf.shape(tokens)[1]))
        x = self.dropout(x, training=training)
        for block in self.blocks:
            x = block(x, training=training)
        # tied: logits x E^T + b on the token embedding's own variable, read in the compute type as a Dense reads
        # its kernel (the identity in float32)
        h = self.ln(x)
        table, bias = (tf.cast(variable, h.dtype) for variable in (self.token.embeddings, self.bias))
        return self.logits(tf.matmul(h, table, transpose_b=True) + bias)


model = GPT(meta["vocab_size"], meta["seq_len"])
total_steps = args.epochs * math.ceil(len(x_train) / args.batch_size)
warmup_steps = min(round(0.05 * total_steps), total_steps - 1)
schedule = keras.optimizers.schedules.CosineDecay(0.0, total_steps - warmup_steps, alpha=0.1,
                                                  warmup_target=args.learning_rate, warmup_steps=warmup_steps)
optimizer = keras.optimizers.AdamW(learning_rate=schedule, weight_decay=0.01, beta_1=0.9, beta_2=0.999,
                                   epsilon=1e-6)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    return loss


# graph: the guide's @tf.function; compiled: the same through XLA
train_step = tf.function(train_step, jit_compile=True if args.execution == "compiled" else None)


for epoch in range(1, args.epochs + 1):
    order = np.random.RandomState([args.seed, epoch]).permutation(len(x_train))
    start = time.perf_counter()
    dataset = tf.data.Dataset.from_tensor_slices((x_train[order], y_train[order]))
    total = 0.0
    for x, y in dataset.batch(args.batch_size).prefetch(tf.data.AUTOTUNE):
        total += float(train_step(x, y)) * len(x)
    seconds = time.perf_counter() - start
    print(json.dumps({"epoch": epoch, "train_time_s": seconds, "loss": total / len(order)}), flush=True)
