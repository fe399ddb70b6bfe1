"""cnn-mnist in TensorFlow as TensorFlow's guide "Writing a training loop from scratch" trains a model:
Keras layers (tf.keras, Keras 3 in TensorFlow 2.16+), a keras optimizer, and a custom loop of a
tf.function train step with tf.GradientTape over a tf.data pipeline. (fit, the other usual way, is the
Keras programs' part.)

The recipe of dlbench's cnn-mnist: SGD, momentum 0.5, weight decay 1e-6 (Keras's, decoupled; dlbench
couples it, as torch does: at this size the cost is the same), softmax cross-entropy; the batches
follow dlbench's order (numpy RandomState([seed, epoch])).
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
x_train = np.load(os.path.join(args.data, "x_train.npy")).astype("float32") / meta["input_scale"]
y_train = np.load(os.path.join(args.data, "y_train.npy"))

model = keras.Sequential([
    keras.Input(shape=tuple(meta["input_shape"])),
    layers.Conv2D(32, 3, activation="relu"),
    layers.Conv2D(64, 3, activation="relu"),
    layers.MaxPooling2D(2),
    layers.Dropout(0.25),
    layers.Flatten(),
    layers.Dense(128, activation="relu"),
    layers.Dropout(0.5),
    layers.Dense(meta["num_classes"]),
])
optimizer = keras.optimizers.SGD(learning_rate=args.learning_rate, momentum=0.5, weight_decay=1e-6)
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
