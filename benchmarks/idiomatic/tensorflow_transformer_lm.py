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
Contract (arguments, output): benchmarks/idiomatic/README.md.
"""
import argparse
import json
import math
import os
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
for name, kind in (("--data", str), ("--epochs", int), ("--threads", int), ("--seed", int),
                   ("--batch-size", int), ("--learning-rate", float)):
    parser.add_argument(name, type=kind, required=True)
args = parser.parse_args()
tf.config.threading.set_intra_op_parallelism_threads(args.threads)
tf.config.threading.set_inter_op_parallelism_threads(args.threads)
keras = tf.keras
layers = keras.layers
keras.utils.set_random_seed(args.seed)

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

    def call(self, tokens, training=False):
        x = self.token(tokens) + self.position(tf.range(tf.shape(tokens)[1]))
        x = self.dropout(x, training=training)
        for block in self.blocks:
            x = block(x, training=training)
        # tied: logits x E^T + b on the token embedding's own variable
        return tf.matmul(self.ln(x), self.token.embeddings, transpose_b=True) + self.bias


model = GPT(meta["vocab_size"], meta["seq_len"])
total_steps = args.epochs * math.ceil(len(x_train) / args.batch_size)
warmup_steps = min(round(0.05 * total_steps), total_steps - 1)
schedule = keras.optimizers.schedules.CosineDecay(0.0, total_steps - warmup_steps, alpha=0.1,
                                                  warmup_target=args.learning_rate, warmup_steps=warmup_steps)
optimizer = keras.optimizers.AdamW(learning_rate=schedule, weight_decay=0.01, beta_1=0.9, beta_2=0.999,
                                   epsilon=1e-6)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    return loss


for epoch in range(1, args.epochs + 1):
    order = np.random.RandomState([args.seed, epoch]).permutation(len(x_train))
    start = time.perf_counter()
    dataset = tf.data.Dataset.from_tensor_slices((x_train[order], y_train[order]))
    total = 0.0
    for x, y in dataset.batch(args.batch_size).prefetch(tf.data.AUTOTUNE):
        total += float(train_step(x, y)) * len(x)
    seconds = time.perf_counter() - start
    print(json.dumps({"epoch": epoch, "train_time_s": seconds, "loss": total / len(order)}), flush=True)
