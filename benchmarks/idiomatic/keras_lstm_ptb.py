"""lstm-ptb in Keras 3, the usual way: a Sequential model (Embedding, two LSTM layers, Dropout, a
per-step Dense), compile and model.fit, which shuffles the windows every epoch (seeded by
keras.utils.set_random_seed). The backend is KERAS_BACKEND's (tensorflow, jax or torch); the thread
count is set as each backend's users set it (JAX: XLA's CPU client, sized by the machine).

The recipe of dlbench's lstm-ptb: embedding 200, LSTM 200 x 2, dropout 0.5, Adadelta (rho 0.95,
eps 1e-6), cross-entropy on logits averaged over every token of a batch; each window an independent
sample. Each epoch's training time is read by a callback, after the epoch's loss is fetched.
Contract (arguments, output): benchmarks/idiomatic/README.md.
"""
import argparse
import json
import os
import time

import numpy as np

parser = argparse.ArgumentParser()
for name, kind in (("--data", str), ("--epochs", int), ("--threads", int), ("--seed", int),
                   ("--batch-size", int), ("--learning-rate", float)):
    parser.add_argument(name, type=kind, required=True)
args = parser.parse_args()
if os.environ.get("KERAS_BACKEND") == "tensorflow":
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
elif os.environ.get("KERAS_BACKEND") == "torch":
    import torch

    torch.set_num_threads(args.threads)
import keras  # noqa: E402
from keras import layers  # noqa: E402

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
model.compile(optimizer=keras.optimizers.Adadelta(learning_rate=args.learning_rate, rho=0.95, epsilon=1e-6),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class EpochTimes(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        loss = float(logs["loss"])  # fetched first: the epoch's work is done when it is
        seconds = time.perf_counter() - self.start
        print(json.dumps({"epoch": epoch + 1, "train_time_s": seconds, "loss": loss}), flush=True)


model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, shuffle=True, verbose=0,
          callbacks=[EpochTimes()])
