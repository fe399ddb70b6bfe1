"""Keras 3 adapter, one module for the three backends (KERAS_BACKEND = tensorflow, jax or torch, chosen
by the environment's recipe before Keras is imported): the backend's threads and device, weights in and out,
and the training and evaluation loops. The package's other modules hold the rest, one concern each: layers.py
the layer table (each IR kind's Keras layers and their canonical weights), losses.py the losses, the epoch's
metric sums and the Trainer model they are taken in, optimizers.py the optimisers and schedules (with where
Keras's differ from the reference's). They import Keras, so they are imported here after the backend's
thread settings.

Training drives Keras's own train step (trainer.train_function, which fit calls, as compile() and the cell's execution
resolved it: by default a tf.function, a jax.jit of train_step, torch's eager train_step) over batches that every
framework's adapter forms alike: the split converted to the backend's tensors once (the first epoch takes it), each
batch gathered on the device by the epoch's order, base.batch_slices' consecutive batches with the last one smaller
(run_train_function). fit itself builds, every call and so inside the epoch's clock, a data adapter with a host copy
of the split, on TensorFlow a tf.data pipeline and its iterators, and a callback list: on keras-tensorflow 40-85 ms an
epoch, +20-28 % of a quick-suite cnn-mnist epoch on a 2-core AMD EPYC (issue 46), which no other framework pays.
feed_matches_fit() below trains a twin by

    model.fit(x[order], y[order], batch_size=bs, shuffle=False, epochs=1, verbose=0)

whose ArrayDataAdapter forms the same slices with shuffle=False (keras/src/trainers/data_adapters/
array_data_adapter.py: _get_iterator), and compares (tests/test_adapters.py: test_keras_feed_trains_as_fit):
SGD + L2 BatchNorm CNN, Adadelta LSTM language model, Adam masked seq2seq, AdamW with warm-up and cosine,
3 epochs of 21 samples in batches of 8: weight difference 0.0 on all three backends (keras 3.15.1), the
same epoch sums and optimiser iterations.

Precisions (base.PRECISIONS), the same on all three backends, each Keras's own dtype policy: layers.build_model sets
the precision's policy ("bfloat16", "mixed_bfloat16", "mixed_float16"; float32 none, the model as it always was) as
Keras's global policy while the model is built and restores the one before after, so every layer holds it and
several models of different precisions can be built in one process. "bfloat16": variables, and so the optimiser's
slots (made in their variables' type), in bfloat16, every layer computing in it. "mixed-*": float32 variables and
optimiser; each layer casts its floating inputs to bfloat16 or float16, and its variables as it reads them (Keras's
autocast scope); the gradients reach the float32 variables through those casts, in float32. "mixed-float16" alone adds
dynamic loss scaling: the optimizer wrapped in keras.optimizers.LossScaleOptimizer with base.LOSS_SCALE's terms
(loss_scaled below), whose train step multiplies the loss by the scale and whose apply divides the gradients by it,
skipping a step with a non-finite one. In every reduced precision the model ends in a float32 linear Activation (the
Keras mixed-precision guide's float32 output), so the loss, the epoch sums and predict, serving and training_outputs
see float32 logits (Keras's losses would cast them anyway: Loss.__call__ converts y_pred to floatx; the masked loss, a
plain function, casts them itself). Weights go in and out as float32 (a bfloat16 weight's stored values), gradients
come out as float32 numpy, mixed-float16's unscaled. Where Keras computes in float32 whatever the policy, so does
this adapter: BatchNormalization (its inputs, statistics and moving averages cast to float32, the output back to the
compute type; its variables, autocast=False, in the variable type: bfloat16 under "bfloat16", whose moving statistics
are then stored in bfloat16), LayerNormalization and RMSNormalization (ops.layer_normalization and
ops.rms_normalization compute in at least float32 and return the input's type), the losses; the Embedding looks up
in its variable's type and casts the rows. The hand-written layers follow: BatchNorm as Keras's, the positional
table autocast as any variable, TiedOutput casting the embedding table it borrows, grouped-query attention's
projections taking the layer's policy and its rotary tables made in the compute type. TorchAdam takes its step
scalars in float32 (bfloat16 rounds beta_2 = 0.999 to 1, which would stop every bfloat16 weight); SGD and Adadelta
are Keras's, their learning rate and coefficients cast to the variable's type as Keras does. One combination is
refused (precision_refusal): mixed-float16 on keras-jax's CPU, compiled, for a model whose attention reaches
ops.dot_product_attention, whose float16 x float16 -> float32 einsums XLA's CPU backend does not compile.
"""
from __future__ import annotations

import itertools
import os
from typing import Dict

import numpy as np

from dlbench.worker.base import LOSS_SCALE, PRECISIONS, BaseAdapter, Split, batch_slices, finish_metrics, thread_budget

BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")

# Thread knobs that must be set before the backend starts.
_SINGLE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
if BACKEND == "jax" and thread_budget() == 1:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _SINGLE_THREAD_XLA).strip()

if BACKEND == "tensorflow":
    import tensorflow as tf

    def _configure_tf_threads(threads: int) -> None:
        """Intra-op = inter-op = the budget, TensorFlow's own relation and dlbench's TensorFlow adapter's;
        settable only before TensorFlow's runtime starts, so first at import (DLBENCH_THREADS), then checked.
        One inter-op thread ran the ops of Keras's LSTM loop one after another: lstm-ptb's steady epochs took
        1.46 times as long with it [1.36-1.56] (issue 46; docs/fairness.md, "Threads set and recorded")."""
        config = tf.config.threading
        try:
            config.set_intra_op_parallelism_threads(threads)
            config.set_inter_op_parallelism_threads(threads)
        except RuntimeError:
            raise RuntimeError("TensorFlow's runtime already runs with %d intra-op threads; %d cannot be set "
                               "in the same process" % (config.get_intra_op_parallelism_threads(), threads)) from None

    _configure_tf_threads(thread_budget())
elif BACKEND == "jax":
    import jax
    import jaxlib
elif BACKEND == "torch":
    import torch
else:
    raise RuntimeError("KERAS_BACKEND=%r: this adapter supports tensorflow, jax and torch" % BACKEND)

import keras  # noqa: E402  (after the backend's thread settings)
from keras import ops  # noqa: E402

if keras.backend.backend() != BACKEND:
    raise RuntimeError("Keras runs the %r backend, KERAS_BACKEND asks for %r" % (keras.backend.backend(), BACKEND))

# the package's Keras modules, imported once Keras runs the backend asked for with its threads set
from dlbench.worker.frameworks.keras3.layers import build_model, canonical_shapes, fused_attention  # noqa: E402
from dlbench.worker.frameworks.keras3.losses import Trainer, make_loss  # noqa: E402
from dlbench.worker.frameworks.keras3.optimizers import make_optimizer  # noqa: E402

# ---- the execution -----------------------------------------------------------------------------

# The executions (base.EXECUTIONS) of each backend, its default first: what Keras's own jit_compile="auto" picks
# on a CPU (keras/src/trainers/trainer.py: _resolve_auto_jit_compile): TensorFlow's tf.function without XLA,
# JAX's jax.jit, torch's eager step. "eager" is compile(run_eagerly=True) (no tf.function, no jax.jit);
# "compiled" is compile(jit_compile=True): XLA on TensorFlow and JAX, torch.compile on torch. torch has no graph
# apart from torch.compile, and JAX none apart from jax.jit.
EXECUTIONS = {"tensorflow": ("graph", "eager", "compiled"), "jax": ("compiled", "eager"),
              "torch": ("eager", "compiled")}


def executed_as(model, execution: str) -> None:
    """Sets the model's run_eagerly and jit_compile to the execution's, and refuses when Keras runs it another
    way: jit_compile's setter falls back to False, with a warning only, for a model it deems unfit for XLA."""
    model.run_eagerly = execution == "eager"
    model.jit_compile = execution == "compiled"
    if model.jit_compile != (execution == "compiled"):
        raise RuntimeError("Keras %s runs this model without jit_compile (keras's model_supports_jit is False for "
                           "it): execution %r cannot be honoured" % (keras.__version__, execution))


# ---- the training feed ------------------------------------------------------------------------

def gather(tensor, index):
    """The rows of a split's tensor at a batch's positions in the epoch's order: one gather on the device."""
    if BACKEND == "tensorflow":
        return tf.gather(tensor, index)
    return tensor[index]


JAX_STATE = ("trainable_variables", "non_trainable_variables", "optimizer_variables", "metrics_variables")


def run_train_function(trainer: Trainer, batches, step_done) -> None:
    """One epoch of Keras's own train step, trainer.train_function as compile() and the execution resolved it for the
    backend (by default a tf.function, a jax.jit of train_step, torch's eager train_step), over the (x, y) batches as
    fit drives it (keras/src/backend/*/trainer.py, keras 3.15): the metrics reset, the model built and the function
    made on the first call; on jax the state (variables, optimiser slots, metric sums) threaded through the steps and
    written back to the variables after the last, on torch the module in training mode. What fit builds around it
    every call is left out of the clock: the data adapter with its host copy of the split, on tensorflow a tf.data
    pipeline and its iterators, and the callback list. step_done (BaseAdapter's) is called after every step with
    what it returned."""
    batches = iter(batches)
    first = next(batches)
    if trainer.train_function is None:  # the first epoch: fit's build and function, once
        if BACKEND == "tensorflow":
            trainer._maybe_symbolic_build(data_batch=first)
        else:
            trainer._symbolic_build(data_batch=first)
        trainer.make_train_function()
    trainer.reset_metrics()
    batches = itertools.chain((first,), batches)
    if BACKEND == "jax":
        state = trainer._get_jax_state(**dict.fromkeys(JAX_STATE, True), purge_model_variables=True)
        trainer._jax_state_synced = False
        try:
            for batch in batches:
                _, state = trainer.train_function(state, iter((batch,)))
                step_done(state)
        finally:  # the variables take the state back, as fit's jax_state_sync after an epoch
            trainer._jax_state = dict(zip(JAX_STATE, state))
            trainer.jax_state_sync()
            trainer._jax_state = None
    elif BACKEND == "torch":
        trainer.train()
        for batch in batches:
            step_done(trainer.train_function((batch,)))
        trainer.eval()
    else:
        for batch in batches:
            step_done(trainer.train_function((batch,)))
    trainer.optimizer.finalize_variable_values(trainer.trainable_weights)  # as fit ends (moving averages)


class Served(keras.Model):
    """What serving() calls: the float model in inference mode behind the input scaling (uint8 pixels ->
    [0, 1] on the device), its outputs as predict gives them."""

    def __init__(self, core, scale, **kwargs):
        super().__init__(**kwargs)
        self.core = core
        self.scale = scale

    def call(self, x, training=False):
        if self.scale:
            x = ops.divide(ops.cast(x, "float32"), float(self.scale))
        return self.core(x, training=False)


# ---- the adapter ------------------------------------------------------------------------------

def _check_device(device: str) -> str:
    """The keras.device name for the cell; a clear error when a GPU is asked for and none is seen."""
    if device != "gpu":
        if BACKEND == "tensorflow" and tf.config.list_physical_devices("GPU"):
            try:  # keep TensorFlow from claiming GPU memory for a CPU cell
                tf.config.set_visible_devices([], "GPU")
            except RuntimeError:
                pass  # runtime already started; keras.device("cpu:0") still pins the work
        return "cpu" if BACKEND == "torch" else "cpu:0"  # torch: "cpu:0" would copy every Parameter
    if BACKEND == "tensorflow":
        found = bool(tf.config.list_physical_devices("GPU"))
        what = "TensorFlow %s (built with CUDA: %s)" % (tf.__version__, tf.test.is_built_with_cuda())
    elif BACKEND == "jax":
        try:
            found = bool(jax.devices("gpu"))
        except RuntimeError:
            found = False
        what = "JAX %s (devices: %s)" % (jax.__version__, jax.devices())
    else:
        found = torch.cuda.is_available()
        what = "torch %s (CUDA build: %s)" % (torch.__version__, torch.version.cuda)
    if not found:
        raise RuntimeError("device gpu requested, but %s sees no GPU" % what)
    if BACKEND == "jax":  # XLA's own GEMMs in full float32 too, as the JAX adapter's (NVIDIA_TF32_OVERRIDE: cuBLAS)
        jax.config.update("jax_default_matmul_precision", "highest")
    return "cuda" if BACKEND == "torch" else "gpu:0"


# ---- the precision ------------------------------------------------------------------------------

def loss_scaled(optimizer, precision: str):
    """mixed-float16's optimizer: Keras's LossScaleOptimizer around it, given base.LOSS_SCALE's initial scale and
    growth interval (its defaults, 2**15 and 2000, stated here); its factors are fixed in Keras's code (keras 3.15:
    the scale times 2.0 after dynamic_growth_steps finite steps in a row, times 0.5 on a step with a non-finite
    gradient, which is skipped), LOSS_SCALE's. compile() would wrap the optimizer itself only where the compiled
    model's own policy is mixed_float16, which the Trainer's is not (its layers' are): wrapped here, and compile
    leaves a LossScaleOptimizer as it is. The other precisions step with the optimizer as it is."""
    if precision != "mixed-float16":
        return optimizer
    if (LOSS_SCALE["growth_factor"], LOSS_SCALE["backoff_factor"]) != (2.0, 0.5):
        raise NotImplementedError("Keras's LossScaleOptimizer grows by 2 and backs off by 1/2 only")
    return keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=LOSS_SCALE["initial"],
                                               dynamic_growth_steps=LOSS_SCALE["growth_interval"])


def precision_refusal(model: dict, precision: str, execution: str, device: str):
    """Why this backend cannot train the model in the precision, or None. keras-jax, mixed-float16, compiled, CPU,
    a model whose attention reaches ops.dot_product_attention: Keras's JAX backend calls jax.nn.dot_product_attention,
    whose einsums ask for float16 x float16 -> float32 (preferred_element_type), a dot XLA's CPU backend does not
    compile ("The precision 'F16_F16_F32' is not supported by dot_general on CPU"; jax and keras 3.15.1). bfloat16
    compiles, op by op (eager) it runs, on a GPU it is supported."""
    if (BACKEND == "jax" and precision == "mixed-float16" and execution == "compiled" and device != "gpu"
            and fused_attention(model["layers"])):
        return ("keras-jax compiles no float16 x float16 -> float32 dot on the CPU, which the attention of this "
                "model reaches (jax.nn.dot_product_attention)")
    return None


def as_float32(array) -> np.ndarray:
    """A host array as float32 numpy (bfloat16 and float16 values exactly as stored); a float32 one as it is."""
    array = np.asarray(array)
    return array if array.dtype == np.float32 else array.astype(np.float32)


class Adapter(BaseAdapter):
    name = "keras"
    executions = EXECUTIONS[BACKEND]
    precisions = PRECISIONS

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        why = precision_refusal(model, self.precision, self.execution, device)
        if why:
            raise NotImplementedError("precision %r: %s" % (self.precision, why))
        if BACKEND == "tensorflow":
            _configure_tf_threads(threads)
        elif BACKEND == "torch":
            torch.set_num_threads(threads)
        self.device_name = _check_device(device)
        keras.utils.set_random_seed(seed)  # Python, numpy and backend seeds: the dropout layers' seeds
        self.loss_name = recipe["loss"]
        self.loss = make_loss(self.loss_name)
        self.float_inputs = model["input_dtype"].startswith("float")
        with keras.device(self.device_name):
            self.core, self.variables = build_model(model, self.precision)
        executed_as(self.core, self.execution)  # predict's
        self.shapes = canonical_shapes(model)
        self.trainable = [key for key in self.variables if "/moving_" not in key]
        self.optimizer = loss_scaled(make_optimizer(recipe["optimizer"], recipe.get("schedule")), self.precision)
        self._trainers = {}  # input scale -> compiled Trainer (the weights and optimizer are shared)
        self._arrays = {}  # id of a Split -> (the split, x, y in memory)
        self._tensors = {}  # id of a Split -> (the split, x, y as the backend's tensors on the device)

    # ---- facts ----

    def versions(self):
        out = {"keras": keras.__version__, "numpy": np.__version__}
        if BACKEND == "tensorflow":
            out["tensorflow"] = tf.__version__
        elif BACKEND == "jax":
            out.update(jax=jax.__version__, jaxlib=jaxlib.__version__)
        else:
            out["torch"] = torch.__version__
        return out

    def threads_used(self):
        if BACKEND == "tensorflow":
            return tf.config.threading.get_intra_op_parallelism_threads()
        if BACKEND == "torch":
            return torch.get_num_threads()
        # XLA's CPU client: one thread with the single-thread flags, else a pool over the schedulable CPUs
        if _SINGLE_THREAD_XLA in os.environ.get("XLA_FLAGS", ""):
            return 1
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

    # ---- weights ----

    def set_weights(self, weights):
        for key, variable in self.variables.items():
            variable.assign(np.asarray(weights[key], dtype=np.float32).reshape(variable.shape))

    def get_weights(self):
        return {key: as_float32(np.array(ops.convert_to_numpy(variable))).reshape(self.shapes[key])
                for key, variable in self.variables.items()}

    # ---- training ----

    def _trainer(self, scale) -> Trainer:
        scale = float(scale) if (self.float_inputs and scale) else None
        if scale not in self._trainers:
            with keras.device(self.device_name):
                trainer = Trainer(self.core, scale, self.loss_name)
                trainer.compile(optimizer=self.optimizer, loss=self.loss)
                executed_as(trainer, self.execution)
            self._trainers[scale] = trainer
        return self._trainers[scale]

    def _arrays_of(self, data: Split):
        """Inputs and labels in memory, read once per split (pixels stay uint8)."""
        key = id(data)
        if key not in self._arrays:  # holding the split keeps its id from being reused
            x = np.array(data.x)
            if not self.float_inputs:
                x = x.astype(np.int32, copy=False)
            self._arrays[key] = (data, x, np.array(data.y).astype(np.int32, copy=False))
        return self._arrays[key][1:]

    def _tensors_of(self, data: Split):
        """Inputs and labels as the backend's tensors on the cell's device, converted once per split (in the
        first epoch, which takes every conversion and compilation in every framework) from the split itself,
        so that no second copy stays in host memory (pixels stay uint8)."""
        key = id(data)
        if key not in self._tensors:  # holding the split keeps its id from being reused
            x = np.array(data.x) if self.float_inputs else np.array(data.x, dtype=np.int32)
            with keras.device(self.device_name):
                x, y = ops.convert_to_tensor(x), ops.convert_to_tensor(np.array(data.y, dtype=np.int32))
            self._tensors[key] = (data, x, y)
        return self._tensors[key][1:]

    def _sums(self, trainer: Trainer) -> Dict[str, float]:
        return finish_metrics(self.loss_name, *np.asarray(ops.convert_to_numpy(trainer.epoch_sums.sums), np.float64))

    def train_epoch(self, data, order):
        x, y = self._tensors_of(data)
        trainer = self._trainer(data.input_scale)
        with keras.device(self.device_name):
            index = ops.convert_to_tensor(order)
            batches = ((gather(x, index[batch]), gather(y, index[batch]))
                       for batch in batch_slices(len(order), self.recipe["batch_size"]))
            run_train_function(trainer, batches, self.step_done)
        return self._sums(trainer)

    def evaluate(self, data):
        x, y = self._arrays_of(data)
        trainer = self._trainer(data.input_scale)
        with keras.device(self.device_name):
            trainer.evaluate(x, y, batch_size=self.recipe["batch_size"], verbose=0)
        return self._sums(trainer)

    def apply_gradients(self, gradients):
        """The gradients are a loss's own: under mixed-float16 the LossScaleOptimizer's inner optimizer steps with
        them (the wrapper would divide them by its scale), the wrapper built first so that it owns that optimizer's
        slots as training builds it. bfloat16 weights take them cast to bfloat16."""
        variables = [self.variables[key] for key in self.trainable]
        optimizer = self.optimizer
        with keras.device(self.device_name):
            grads = [ops.convert_to_tensor(np.asarray(gradients[key], np.float32).reshape(variable.shape),
                                           dtype=variable.dtype) for key, variable in zip(self.trainable, variables)]
            if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
                if not optimizer.built:
                    optimizer.build(variables)
                optimizer = optimizer.inner_optimizer
            optimizer.apply(grads, variables)

    def predict(self, x):
        x = np.ascontiguousarray(x, dtype=np.float32 if self.float_inputs else np.int32)
        with keras.device(self.device_name):
            return as_float32(self.core.predict(x, batch_size=self.recipe["batch_size"], verbose=0))

    def serving(self):
        """predict_on_batch of a compiled model: Keras's predict step as the execution resolves it for the
        backend (by default a tf.function, jax.jit, or torch's eager step under no_grad, as fit's train step) on one
        batch, without predict()'s per-call data adapter and callbacks."""
        scale = float(self.input_scale) if (self.float_inputs and self.input_scale) else None
        stored = np.uint8 if self.float_inputs else np.int32
        with keras.device(self.device_name):
            served = Served(self.core, scale)
            served.compile()
            executed_as(served, self.execution)

        def serve(x):
            with keras.device(self.device_name):
                return as_float32(served.predict_on_batch(np.ascontiguousarray(x, dtype=stored)))
        return serve

    def training_outputs(self, x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        with keras.device(self.device_name):
            return as_float32(np.array(ops.convert_to_numpy(self.core(x, training=True))))

    def _loss_scale(self) -> float:
        """The scale mixed-float16's train step multiplies the loss by now (the LossScaleOptimizer's, its initial one
        before it is built); 1 in every other precision."""
        optimizer = self.optimizer
        if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            return 1.0
        if not optimizer.built:
            return float(optimizer.initial_scale)
        return float(ops.convert_to_numpy(optimizer.dynamic_scale))

    def loss_and_gradients(self, data):
        """The loss and its true gradients, float32, in every precision: under mixed-float16 the backward pass runs
        on the loss times the current loss scale, as the train step's, and the gradients are divided by it after
        (in float32, as the LossScaleOptimizer divides them)."""
        x, y = self._arrays_of(data)
        trainer = self._trainer(data.input_scale)
        keys = self.trainable
        scale = self._loss_scale()

        def scaled(loss):
            return loss * scale if scale != 1.0 else loss
        with keras.device(self.device_name):
            if BACKEND == "tensorflow":
                with tf.GradientTape() as tape:
                    loss = self.loss(y, trainer(x, training=True))
                    backward = scaled(loss)
                grads = tape.gradient(backward, [self.variables[k].value for k in keys])
                grads = [tf.convert_to_tensor(g).numpy() for g in grads]  # IndexedSlices densified
            elif BACKEND == "jax":
                if not trainer.built:  # stateless_call wants a built model: one inference call builds it
                    trainer(x[:1])
                trainable = trainer.trainable_variables
                place = {id(v): i for i, v in enumerate(trainable)}
                frozen = [v.value for v in trainer.non_trainable_variables]

                def loss_of(values):
                    y_pred, _ = trainer.stateless_call(values, frozen, x, training=True)
                    loss = self.loss(y, y_pred)
                    return scaled(loss), loss

                (_, loss), all_grads = jax.value_and_grad(loss_of, has_aux=True)([v.value for v in trainable])
                grads = [np.asarray(all_grads[place[id(self.variables[k])]]) for k in keys]
            else:
                params = [self.variables[k].value for k in keys]
                for param in params:
                    param.grad = None
                loss = self.loss(y, trainer(x, training=True))
                scaled(loss).backward()
                grads = [param.grad.detach().float().cpu().numpy() for param in params]  # numpy has no bfloat16
                for param in params:
                    param.grad = None
        grads = [as_float32(g) for g in grads]
        if scale != 1.0:
            grads = [g / np.float32(scale) for g in grads]
        return float(ops.convert_to_numpy(loss)), {k: np.array(g).reshape(self.shapes[k]) for k, g in zip(keys, grads)}

    def wait_for(self, outputs):
        if BACKEND == "jax":  # the step's state, held by run_train_function until the epoch ends
            jax.block_until_ready(outputs)
        else:
            self.synchronise()

    def synchronise(self):
        if BACKEND == "jax":
            jax.block_until_ready([v.value for v in self.variables.values()])
        elif BACKEND == "torch":
            if torch.cuda.is_available() and self.device_name == "cuda":
                torch.cuda.synchronize()
        elif self.device_name.startswith("gpu") and hasattr(tf.test.experimental, "sync_devices"):
            tf.test.experimental.sync_devices()


def feed_matches_fit(model: dict, recipe: dict, task: str, data: Split, orders) -> dict:
    """An adapter's epochs (train_epoch: Keras's train function over batches gathered on the device) against
    a twin adapter's model.fit(x[order], y[order], batch_size, shuffle=False, epochs=1) over the same orders,
    from the same weights (use a model without dropout, whose masks differ between two models): the largest
    weight difference, each one's epoch metrics and the optimiser's iteration count. A development check
    (tests/adapter_check.py runs it): with shuffle=False, Keras's ArrayDataAdapter forms the slices
    base.batch_slices forms, so equal weights mean the same batches, steps, schedule and metric sums."""
    by_feed, by_fit = (Adapter(model, recipe, task, "cpu", 1, 0) for _ in range(2))
    by_fit.set_weights(by_feed.get_weights())
    feed_metrics = [by_feed.train_epoch(data, order) for order in orders]
    x, y = by_fit._arrays_of(data)
    trainer = by_fit._trainer(data.input_scale)
    fit_metrics = []
    for order in orders:
        with keras.device(by_fit.device_name):
            trainer.fit(x[order], y[order], batch_size=recipe["batch_size"], shuffle=False, epochs=1, verbose=0)
        fit_metrics.append(by_fit._sums(trainer))
    feed_weights, fit_weights = by_feed.get_weights(), by_fit.get_weights()
    return {"max_weight_difference": max(float(np.max(np.abs(feed_weights[k] - fit_weights[k]))) for k in fit_weights),
            "feed_metrics": feed_metrics, "fit_metrics": fit_metrics,
            "feed_iterations": int(ops.convert_to_numpy(by_feed.optimizer.iterations)),
            "fit_iterations": int(ops.convert_to_numpy(by_fit.optimizer.iterations))}
