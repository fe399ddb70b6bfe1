"""TensorFlow 2 adapter at its lowest idiomatic level: variables in a tf.Module, tf.nn ops, a
tf.function train step with GradientTape, and optimisers written out with tf.Variable slots.

No Keras layers or optimisers. The package splits by concern: layers.py is the layer table (each IR kind
in tf.nn ops over canonical variables, and the Model that applies them; TensorFlow's native layouts are
the canonical ones, so weights move in and out unchanged), optimizers.py the optimisers and schedules,
losses.py the loss terms and per-batch sums; this module the device, threads, weights in and out, and the
compiled training and evaluation steps.

An epoch is driven from Python one step per batch (a tf.function, as the default execution runs it): the split lives
on the device as tensors made once (pixels stay uint8 until a batch), each step gathers its batch from the epoch's
order inside the graph, and loss and right predictions are summed into a device variable fetched once per epoch. The
smaller last batch reuses the same graph (input signature with a free batch axis).

Precisions (base.PRECISIONS), all four in each execution. Without Keras there is no dtype policy to set, so each is
made the way TensorFlow's low-level programs make one (and as Keras's mixed policy works underneath): variables
created in a variable dtype, and a compute dtype every layer casts its floating input and its variables to on use
(layers.Model.apply: tf.cast, whose gradient carries the backward pass back to the variable's own type), the logits
cast to float32 before the loss and before anything is returned:
- "float32": both float32; every cast is the identity (tf.cast returns a tensor or variable of the type as it is),
  so the ops are those of before the axis.
- "bfloat16": variables, optimiser slots (zeros_like their variable) and moving statistics in bfloat16, compute in
  bfloat16; the gradients come out in bfloat16. The optimisers' update arithmetic is float32, each result rounded to
  its bfloat16 variable or slot (optimizers.py). Weights go in rounded to bfloat16 and come out exactly as stored,
  in float32; loss_and_gradients' gradients come back in float32.
- "mixed-bfloat16": float32 variables and slots (the master weights), compute in bfloat16 through the casts; the
  gradients reach the variables in float32 through the casts' gradients; no loss scaling.
- "mixed-float16": as mixed-bfloat16 in float16, with base.LOSS_SCALE's dynamic loss scaling inside the train step
  (a tf.Variable scale and a tf.Variable count of finite steps in a row): the tape differentiates loss * scale, the
  gradients are divided by it; a tf.cond takes the optimiser's step only where every gradient is finite, else
  leaves variables, slots and step counts as they were and multiplies the scale by backoff_factor; after
  growth_interval finite steps in a row it multiplies it by growth_factor. loss_and_gradients scales and unscales
  the same way with the scale as it stands (changing nothing), so its gradients are the true ones;
  apply_gradients steps with the gradients as given (a loss's true gradients: no scale, no skip).
Exceptions to the compute dtype: batch and layer normalisation and RMS normalisation compute their statistics and
normalise in float32, with their scale and offset and moving statistics read in float32, and give their output in
the compute dtype (as Keras's normalisation layers under a mixed policy and tf.nn.fused_batch_norm do for half
types); the embedding looks its rows up in the variable and casts the rows, not the table (Keras's Embedding under a
mixed policy). Every op the workloads need has a bfloat16 and a float16 CPU kernel in tensorflow-cpu 2.21 (conv2d,
max pooling, matmul and batched matmul, the LSTM's scan of sigmoid and tanh, softmax, GELU, SiLU, stateless dropout,
gather) and an XLA lowering, so no precision is refused.

Environment: the recipe installs tensorflow-cpu, what the project's machines can test. On a machine
with a GPU install "tensorflow" (CUDA build) instead; device "gpu" then places everything on /GPU:0.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import tensorflow as tf

from dlbench.worker.base import LOSS_SCALE, BaseAdapter, Split, batch_slices, finish_metrics, lookup
from dlbench.worker.frameworks.tensorflow.layers import Model
from dlbench.worker.frameworks.tensorflow.losses import batch_sums, loss_terms
from dlbench.worker.frameworks.tensorflow.optimizers import OPTIMIZERS, dense_gradient

# The executions (base.EXECUTIONS), the default first: "graph", each step a tf.function without XLA; "eager",
# the same Python functions run op by op; "compiled", tf.function(jit_compile=True), XLA. XLA measured slower on
# the project's 2-core CPU machine than plain graph functions: cnn-mnist steady epochs ~5x, lstm-ptb ~1.3-1.6x
# (XLA's CPU convolutions do not use oneDNN; its while-loop and embedding scatter gain nothing at these sizes),
# so graph is the default.
EXECUTIONS = ("graph", "eager", "compiled")
# The precisions (base.PRECISIONS), each in every execution: see the module's docstring for how each is made.
PRECISIONS = ("float32", "bfloat16", "mixed-bfloat16", "mixed-float16")


def as_executed(fn, execution: str, input_signature):
    """`fn` as the execution runs it: itself (eager), or a tf.function of the signature, through XLA (compiled)
    or not (graph)."""
    if execution == "eager":
        return fn
    return tf.function(fn, input_signature=input_signature, jit_compile=execution == "compiled")


def configure_threads(threads: int) -> None:
    """Intra-op threads = the cell's budget: one op (a conv, a matmul) may use every core. Inter-op
    threads = the same count, TensorFlow's own default relation: the backward pass holds independent
    small ops (weight and input gradients, the LSTM's per-step matmuls) that then overlap. Measured on
    2 cores, inter-op 2 beat inter-op 1 (lstm-ptb steady epochs ~6 s against ~10 s, cnn-mnist equal
    or better). Settable only before TensorFlow's runtime starts; a later adapter in the same process
    may only ask for what is already set."""
    config = tf.config.threading
    try:
        config.set_intra_op_parallelism_threads(threads)
        config.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        raise RuntimeError("TensorFlow's runtime already runs with %d intra-op threads; %d cannot be set "
                           "in the same process" % (config.get_intra_op_parallelism_threads(), threads)) from None


def configure_fusions(precision: str, device: str) -> None:
    """Grappler's remapper off for mixed-float16 on the CPU, on for everything else (its default). It fuses a MatMul
    and the BiasAdd or Add after it into oneDNN's _FusedMatMul, and tensorflow-cpu 2.21's float16 fusion runs about
    200 times slower than the float32 one: measured on the project's 2-core Xeon (AVX-512 FP16), a tf.function of a
    (2048, 64) @ (64, 256) matmul plus bias took 481 ms in float16 against 2.2 ms in float32, and 0.8 ms for the
    float16 matmul alone; transformer-lm's float16 forward pass took 13.8 s with the remapper and 0.05 s without.
    Only the graph executions read it (XLA's compilation has no remapper); it is the process's setting, so each
    adapter sets it as its own precision needs."""
    tf.config.optimizer.set_experimental_options({"remapping": precision != "mixed-float16" or device == "gpu"})


def choose_device(device: str) -> str:
    gpus = tf.config.list_physical_devices("GPU")
    if device == "gpu":
        if not gpus:
            raise RuntimeError("device gpu requested, but TensorFlow %s sees no GPU (built with CUDA: %s); "
                               "install the 'tensorflow' distribution with CUDA, not tensorflow-cpu"
                               % (tf.__version__, tf.test.is_built_with_cuda()))
        return "/GPU:0"
    if gpus:
        try:  # keep TensorFlow from claiming GPU memory for a CPU cell
            tf.config.set_visible_devices([], "GPU")
        except RuntimeError:
            pass  # runtime already started; the explicit device scope still pins the work to the CPU
    return "/CPU:0"


class Adapter(BaseAdapter):
    name = "tensorflow"
    executions = EXECUTIONS
    precisions = PRECISIONS

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        configure_threads(threads)
        configure_fusions(self.precision, device)
        self.tf_device = choose_device(device)
        self.float_inputs = model["input_dtype"].startswith("float")
        with tf.device(self.tf_device):
            self.model = Model(model, seed, self.precision)
            self.params = [self.model.weights[n] for n in self.model.trainable_names]
            optimizer = lookup(OPTIMIZERS, "optimizer", recipe["optimizer"]["name"])
            self.optimizer = optimizer(self.params, recipe["optimizer"], recipe.get("schedule"))
            self.sums = tf.Variable(tf.zeros(4, tf.float64), trainable=False)
            self.loss_scale = None  # mixed-float16's dynamic loss scale and its count of finite steps in a row
            if self.precision == "mixed-float16":
                self.loss_scale = tf.Variable(LOSS_SCALE["initial"], dtype=tf.float32, trainable=False)
                self.finite_steps = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._tensors = {}  # id of a Split -> (the split, x, y, scale on the device): converted once
        stored = tf.uint8 if self.float_inputs else tf.int32
        x_spec = tf.TensorSpec([None] + list(model["input_shape"]), stored)
        y_spec = tf.TensorSpec(None, tf.int32)
        index = tf.TensorSpec([None], tf.int64)
        scale = tf.TensorSpec([], tf.float32)
        self._train_step = as_executed(self._train_step_fn, self.execution, [x_spec, y_spec, index, scale])
        self._eval_step = as_executed(self._eval_step_fn, self.execution, [x_spec, y_spec, index, scale])
        self._gradients = as_executed(self._gradients_fn, self.execution, [x_spec, y_spec, scale])
        self._predict = as_executed(self._predict_fn, self.execution, [
            tf.TensorSpec([None] + list(model["input_shape"]), tf.float32 if self.float_inputs else tf.int32)])

    def versions(self):
        return {"tensorflow": tf.__version__, "numpy": np.__version__}

    def threads_used(self):
        return tf.config.threading.get_intra_op_parallelism_threads()

    # ---- weights ----

    def set_weights(self, weights):
        with tf.device(self.tf_device):
            for name, var in self.model.weights.items():
                value = np.asarray(weights[name], dtype=np.float32)
                var.assign(value if var.dtype == tf.float32 else tf.cast(value, var.dtype))  # bfloat16: rounded

    def get_weights(self):
        # a bfloat16 variable's values exactly, in float32
        return {name: np.array(var.numpy(), dtype=np.float32) for name, var in self.model.weights.items()}

    # ---- compiled bodies ----

    def _inputs(self, x, scale):
        if not self.float_inputs:
            return x
        return tf.cast(x, tf.float32) / scale

    def _loss(self, x, y, training):
        logits = self.model(x, training=training)
        return loss_terms(self.recipe["loss"], logits, y)

    def _train_step_fn(self, x_all, y_all, index, scale):
        x = self._inputs(tf.gather(x_all, index), scale)
        y = tf.gather(y_all, index)
        with tf.GradientTape() as tape:
            loss, weight, right, made = self._loss(x, y, training=True)
            scaled = loss if self.loss_scale is None else loss * self.loss_scale
        grads = [dense_gradient(g) for g in tape.gradient(scaled, self.params)]
        if self.loss_scale is None:
            self.optimizer.apply(self.params, grads)
        else:
            self._scaled_step([g / self.loss_scale for g in grads])
        self.sums.assign_add(batch_sums(loss, weight, right, made))

    def _scaled_step(self, grads):
        """mixed-float16's step, base.LOSS_SCALE's terms: with the unscaled gradients all finite, the optimiser's
        step and one more finite step in a row (the scale times growth_factor at growth_interval of them); else no
        step at all (variables, slots, step counts unchanged) and the scale times backoff_factor."""
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])

        def step():
            self.optimizer.apply(self.params, grads)
            grow = self.finite_steps.assign_add(1) >= LOSS_SCALE["growth_interval"]
            self.loss_scale.assign(tf.where(grow, self.loss_scale * LOSS_SCALE["growth_factor"], self.loss_scale))
            self.finite_steps.assign(tf.where(grow, tf.constant(0, tf.int64), self.finite_steps))
            return tf.constant(True)

        def skip():
            self.loss_scale.assign(self.loss_scale * LOSS_SCALE["backoff_factor"])
            self.finite_steps.assign(0)
            return tf.constant(False)
        return tf.cond(finite, step, skip)

    def _eval_step_fn(self, x_all, y_all, index, scale):
        x = self._inputs(tf.gather(x_all, index), scale)
        self.sums.assign_add(batch_sums(*self._loss(x, tf.gather(y_all, index), training=False)))

    def _gradients_fn(self, x_all, y_all, scale):
        with tf.GradientTape() as tape:
            loss = self._loss(self._inputs(x_all, scale), y_all, training=True)[0]
            scaled = loss if self.loss_scale is None else loss * self.loss_scale
        grads = [dense_gradient(g) for g in tape.gradient(scaled, self.params)]
        # the true gradients: mixed-float16's scale (as it stands; this changes nothing) divided out
        return loss, grads if self.loss_scale is None else [g / self.loss_scale for g in grads]

    def _predict_fn(self, x):
        return self.model(x, training=False)

    # ---- the contract ----

    def _on_device(self, data: Split):
        key = id(data)
        if key not in self._tensors:  # holding the split keeps its id from being reused
            with tf.device(self.tf_device):
                x = np.asarray(data.x)
                x = tf.constant(x if self.float_inputs else x.astype(np.int32))
                y = tf.constant(np.asarray(data.y).astype(np.int32))
                scale = tf.constant(float(data.input_scale or 1.0), tf.float32)
            self._tensors[key] = (data, x, y, scale)
        return self._tensors[key][1:]

    def _batches(self, order: np.ndarray) -> List[tf.Tensor]:
        """The epoch's order on the device, split into its batches by one op."""
        sizes = [s.stop - s.start for s in batch_slices(len(order), self.recipe["batch_size"])]
        with tf.device(self.tf_device):
            return tf.split(tf.constant(order, tf.int64), sizes) if sizes else []

    def _run(self, step, data: Split, order: np.ndarray, trains: bool) -> Dict[str, float]:
        x_all, y_all, scale = self._on_device(data)
        self.sums.assign(tf.zeros(4, tf.float64))
        with tf.device(self.tf_device):
            for index in self._batches(order):
                step(x_all, y_all, index, scale)
                if trains:
                    self.step_done()
        return finish_metrics(self.recipe["loss"], *self.sums.numpy().tolist())  # the epoch's one fetch

    def train_epoch(self, data, order):
        return self._run(self._train_step, data, np.asarray(order, dtype=np.int64), trains=True)

    def evaluate(self, data):
        return self._run(self._eval_step, data, np.arange(len(data), dtype=np.int64), trains=False)

    def loss_and_gradients(self, data):
        x_all, y_all, scale = self._on_device(data)
        with tf.device(self.tf_device):
            loss, grads = self._gradients(x_all, y_all, scale)
        return float(loss), {name: np.asarray(g.numpy(), dtype=np.float32)  # bfloat16's in float32
                             for name, g in zip(self.model.trainable_names, grads)}

    def apply_gradients(self, gradients):
        with tf.device(self.tf_device):
            grads = [tf.constant(np.asarray(gradients[name], np.float32)) for name in self.model.trainable_names]
            self.optimizer.apply(self.params, grads)

    def predict(self, x):
        x = np.ascontiguousarray(x, dtype=np.float32 if self.float_inputs else np.int32)
        with tf.device(self.tf_device):
            return self._predict(tf.constant(x)).numpy()

    def serving(self):
        """The inference-mode forward pass on inputs as stored (pixels scaled inside), as the execution runs it: a
        tf.function (with XLA where compiled) whose signature's batch is None, one trace for every batch size."""
        stored = tf.uint8 if self.float_inputs else tf.int32
        scale = tf.constant(float(self.input_scale or 1.0), tf.float32)
        with tf.device(self.tf_device):
            forward = as_executed(lambda x: self.model(self._inputs(x, scale), training=False), self.execution,
                                  [tf.TensorSpec([None] + list(self.model_ir["input_shape"]), stored)])

        def serve(x):
            with tf.device(self.tf_device):
                return forward(tf.constant(np.asarray(x, dtype=stored.as_numpy_dtype))).numpy()
        return serve

    def training_outputs(self, x):
        """The training-mode forward pass as the execution runs it (its dropout with XLA's random numbers where
        compiled), so that the dropout check certifies the path the training steps take."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        with tf.device(self.tf_device):
            forward = as_executed(lambda inputs: self.model(inputs, training=True), self.execution,
                                  [tf.TensorSpec([None] + list(self.model_ir["input_shape"]), tf.float32)])
            return forward(tf.constant(x)).numpy()

    def synchronise(self):
        if self.tf_device.startswith("/GPU"):
            if hasattr(tf.test.experimental, "sync_devices"):
                tf.test.experimental.sync_devices()
            else:
                self.sums.numpy()  # a fetch waits for the queued work before it
