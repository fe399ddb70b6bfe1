"""lstm-ptb in TensorFlow as TensorFlow's guide "Writing a training loop from scratch" trains a model:
Keras layers (tf.keras, Keras 3 in TensorFlow 2.16+), a keras optimizer, and a custom loop of a
tf.function train step with tf.GradientTape over a tf.data pipeline.

The recipe of dlbench's lstm-ptb: embedding 200, LSTM 200 x 2, dropout 0.5, a per-step dense layer,
Adadelta (rho 0.95, eps 1e-6), cross-entropy averaged over every token of a batch; each window is an
independent sample; the batches follow dlbench's order (numpy RandomState([seed, epoch])).
Contract (arguments, output): benchmarks/idiomatic/README.md.
"""
import argparse
import json
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

model = keras.Sequential([
    keras.Input(shape=(meta["seq_len"],), dtype="int32"),
    layers.Embedding(meta["vocab_size"], 200),
    layers.LSTM(200, return_sequences=True),
    layers.LSTM(200, return_sequences=True),
    layers.Dropout(0.5),
    layers.Dense(meta["vocab_size"]),
])
optimizer = keras.optimizers.Adadelta(learning_rate=args.learning_rate, rho=0.95, epsilon=1e-6)
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
