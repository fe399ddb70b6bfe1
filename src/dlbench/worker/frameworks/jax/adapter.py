"""JAX adapter: the IR as a Flax (linen) module, optimised with optax, trained by jitted steps.

The package: layers.py holds the layer table (each IR kind's Flax build and where its canonical weights live;
the weights are in canonical layout already), optimizers.py the optax chains, losses.py the loss terms and
the sums a step accumulates; this module the device, the threads, weights in and out, and the loops.

Each split is copied to the device once (pixels stay uint8 until a batch is gathered); an epoch's
order travels once; the train step finds its batch from a position it carries on the device and
accumulates loss and counts there, so nothing comes back to the host until the epoch ends.
The train step does not donate its state (donate_argnums): measured on the 2-core machine, donating
(params, statistics, optimiser state, key) made steady epochs 20 % slower for lstm-ptb (500 windows:
0.83-0.89 s against 0.67-0.71 s) and 10 % for cnn-mnist (digits-28: 2.50-2.53 s against 2.26-2.28 s),
with the same losses; Flax's own tutorials do not donate either.

Threads: XLA's CPU client is configured before jax is imported, from DLBENCH_THREADS: PJRT_NPROC
sizes its intra-op thread pool, and with one thread Eigen's own multi-threading is switched off too
(--xla_cpu_multi_thread_eigen=false). The persistent compilation cache stays off (JAX's default).

Precision (base.PRECISIONS), the Flax way: IRModel's `dtype` (compute) and `param_dtype` (parameters), which
every layer's module is built with (layers.py), and the type the adapter stores its variables in.
- "float32": both float32, nothing cast (the default; what ran before the axis existed).
- "bfloat16": param_dtype = dtype = bfloat16: parameters, the BatchNorm's moving statistics and the optax state
  (which optax creates in its parameters' type) are bfloat16, the gradients too, and the update is rounded to
  bfloat16 as optax.apply_updates casts it to each parameter's type.
- "mixed-bfloat16": param_dtype float32, dtype bfloat16: float32 parameters and optax state, every layer casting its
  input and parameters to bfloat16 (nn.Dense, nn.Conv and nn.Embed themselves; our modules with layers.compute),
  so the gradients come back float32 through the casts; no loss scaling.
- "mixed-float16": as mixed-bfloat16 with float16 compute, and dynamic loss scaling written with jnp inside the
  jitted step (no jmp in the environment; optax has none), carried in the train state as (scale, finite steps in
  a row), with base.LOSS_SCALE's terms: the loss is multiplied by the scale before jax.value_and_grad and the
  gradients divided by it; a step whose gradients hold an inf or nan leaves the parameters and the optax state
  as they were (jnp.where over both trees; moving statistics and the dropout key move on, as under Keras's
  LossScaleOptimizer and torch's GradScaler) and multiplies the scale by backoff_factor; growth_interval finite
  steps in a row multiply it by growth_factor. loss_and_gradients scales by the current scale too (and unscales),
  backing it off for itself, without a step, until its gradients are finite.
In every one the logits are cast to float32 before the loss (IRModel's output), nn.LayerNorm and nn.RMSNorm
compute their statistics and the normalisation in float32 (flax's force_float32_reductions default; our
BatchNorm does the same), jax.nn.dot_product_attention's logits and softmax are float32 in it too (JAX's own),
weights go in and out as float32 canonical arrays, and predictions and gradients come back float32.
"""
from __future__ import annotations

import os

from dlbench.worker.base import thread_budget  # numpy alone, before the framework


def _configure_threads() -> int:
    """Must run before jax is imported: XLA reads these when it creates its CPU client."""
    threads = thread_budget()
    os.environ["PJRT_NPROC"] = str(threads)  # the CPU client's intra-op thread pool size
    if threads == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_cpu_multi_thread_eigen" not in flags:
            os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false").strip()
    return threads


THREADS = _configure_threads()

from typing import Dict  # noqa: E402

import flax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxlib  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from dlbench.shared.ir import all_shapes, param_shapes  # noqa: E402
from dlbench.worker.base import LOSS_SCALE, PRECISIONS, BaseAdapter, Split, batch_slices, finish_metrics, lookup  # noqa: E402
from dlbench.worker.frameworks.jax.layers import LAYERS, IRModel  # noqa: E402
from dlbench.worker.frameworks.jax.losses import add_sums, loss_terms, zero_sums  # noqa: E402
from dlbench.worker.frameworks.jax.optimizers import make_optimizer  # noqa: E402

jax.config.update("jax_enable_x64", False)  # float32 everywhere, as the other adapters
# full float32 matmuls and convolutions on GPU too (no TF32), so results compare with the CPU's
jax.config.update("jax_default_matmul_precision", "highest")


def jax_device(device: str):
    """The jax device of a cell's "cpu" or "gpu", or an error naming what jax found."""
    platform = "gpu" if device == "gpu" else "cpu"
    if platform == "cpu":
        try:
            jax.config.update("jax_platforms", "cpu")  # a CPU cell leaves any GPU alone
        except Exception:  # backends already started (a second adapter in this process)
            pass
    try:
        return jax.devices(platform)[0]
    except RuntimeError as error:
        raise RuntimeError("device %s requested, but jax %s (jaxlib %s) finds none: %s"
                           % (device, jax.__version__, jaxlib.__version__, error)) from error


# precision -> (compute type, parameters' type): the module's doc says how each is made
PRECISION_TYPES = {"float32": (jnp.float32, jnp.float32), "bfloat16": (jnp.bfloat16, jnp.bfloat16),
                   "mixed-bfloat16": (jnp.bfloat16, jnp.float32), "mixed-float16": (jnp.float16, jnp.float32)}


def all_finite(tree):
    """Whether every element of every array in the tree is finite (a scalar bool on the device)."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(tree)]))


def scaled_step(finite, scaler):
    """The loss scale after a step (base.LOSS_SCALE's rule): (scale, finite steps in a row)."""
    scale, good = scaler
    good = jnp.where(finite, good + 1, 0)
    grow = good >= LOSS_SCALE["growth_interval"]
    scale = jnp.where(finite, jnp.where(grow, scale * LOSS_SCALE["growth_factor"], scale),
                      scale * LOSS_SCALE["backoff_factor"])
    return scale, jnp.where(grow, 0, good)


class Adapter(BaseAdapter):
    name = "jax"
    executions = ("compiled",)  # jax.jit: how JAX programs run (op by op is JAX's debugging mode, disable_jit)
    precisions = PRECISIONS  # all four on the CPU (XLA's CPU compiles bfloat16 and float16)

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        self.jax_device = jax_device(device)
        self.float_inputs = model["input_dtype"].startswith("float")
        self.compute_dtype, self.param_dtype = PRECISION_TYPES[self.precision]
        self.loss_scaling = self.precision == "mixed-float16"
        self.module = IRModel(tuple(model["layers"]), dtype=self.compute_dtype, param_dtype=self.param_dtype)
        self.loss_name = recipe["loss"]
        self.batch_size = recipe["batch_size"]
        self.tx = make_optimizer(recipe["optimizer"], recipe.get("schedule"))
        self.locations = {}  # canonical name -> (collection, layer, key)
        variables = {"params": {}, "batch_stats": {}}
        for layer, in_shape, _ in all_shapes(model):  # a residual block's own layers too
            for key, shape in param_shapes(layer, in_shape).items():
                collection, inner = lookup(LAYERS, "layer type", layer["type"]).weights(key)
                self.locations[layer["name"] + "/" + key] = (collection, layer["name"], inner)
                fill = np.ones if key in ("gamma", "moving_var") else np.zeros
                variables[collection].setdefault(layer["name"], {})[inner] = fill(shape, np.float32)
        variables = self._put(self._stored(variables))
        self.params, self.stats = variables["params"], variables["batch_stats"]
        # committed to the device as the step's outputs are: an uncommitted state (jit's output) made the
        # first epoch compile the train step twice (1.9 s more for cnn-mnist on the 2-core machine)
        self.opt_state = self._put(self.tx.init(self.params))
        self.key = self._put(jax.random.PRNGKey(seed))  # dropout masks: split once per step
        # mixed-float16's dynamic loss scale: (scale, finite steps in a row), carried in the train state
        self.scaler = (self._put((jnp.float32(LOSS_SCALE["initial"]), jnp.int32(0))) if self.loss_scaling
                       else None)
        self._splits = {}  # id of a Split -> (the split, x, y on the device): copied once
        self._train_steps = {}
        self._eval_steps = {}
        self._predict = jax.jit(self._apply_eval)
        self._grads = jax.jit(self._loss_and_grads, static_argnames=("scale",))

    # ---- plumbing -------------------------------------------------------------------------

    def _put(self, tree):
        return jax.device_put(tree, self.jax_device)

    def _stored(self, tree):
        """Host arrays (float32) in the parameters' type: as they are in float32 and the mixed precisions."""
        if self.param_dtype == jnp.float32:
            return tree
        return jax.tree_util.tree_map(lambda value: np.asarray(value).astype(self.param_dtype), tree)

    def _on_device(self, data: Split):
        key = id(data)
        if key not in self._splits:  # holding the split keeps its id from being reused
            x = np.asarray(data.x)
            x = x if self.float_inputs else x.astype(np.int32)
            self._splits[key] = (data, self._put(x), self._put(np.asarray(data.y).astype(np.int32)))
        return self._splits[key][1:]

    def _inputs(self, x, scale):
        if not self.float_inputs:
            return x
        x = x.astype(jnp.float32)
        return x / scale if scale else x

    def _apply_eval(self, params, stats, x):
        return self.module.apply({"params": params, "batch_stats": stats}, x, train=False)

    def _apply_train(self, params, stats, x, key):
        logits, updated = self.module.apply({"params": params, "batch_stats": stats}, x, train=True,
                                            rngs={"dropout": key}, mutable=["batch_stats"])
        return logits, updated.get("batch_stats", stats)

    def _loss_and_grads(self, params, stats, key, x, y, scale=None, loss_scale=None):
        """The gradients of the batch's loss, the updated moving statistics and the loss terms; with a
        loss_scale (mixed-float16) the loss is scaled before differentiating and the gradients unscaled."""
        def objective(p):
            logits, new_stats = self._apply_train(p, stats, self._inputs(x, scale), key)
            terms = loss_terms(self.loss_name, logits, y)
            return (terms[0] if loss_scale is None else terms[0] * loss_scale), (new_stats, terms)

        (_, (new_stats, terms)), grads = jax.value_and_grad(objective, has_aux=True)(params)
        if loss_scale is not None:
            grads = jax.tree_util.tree_map(lambda g: g / loss_scale, grads)
        return grads, new_stats, terms

    def _train_step(self, size: int, scale):
        """One optimiser step over `size` samples at the carried position of the epoch's order."""
        if (size, scale) not in self._train_steps:
            def step(state, carry, x_all, y_all, order):
                params, stats, opt_state, key = state[:4]
                position, sums = carry
                index = jax.lax.dynamic_slice_in_dim(order, position, size)
                key, subkey = jax.random.split(key)
                if not self.loss_scaling:
                    grads, stats, terms = self._loss_and_grads(params, stats, subkey, x_all[index], y_all[index],
                                                               scale)
                    updates, opt_state = self.tx.update(grads, opt_state, params)
                    params = optax.apply_updates(params, updates)
                    return (params, stats, opt_state, key), (position + size, add_sums(sums, *terms))
                scaler = state[4]
                grads, stats, terms = self._loss_and_grads(params, stats, subkey, x_all[index], y_all[index], scale,
                                                           scaler[0])
                finite = all_finite(grads)
                updates, new_opt_state = self.tx.update(grads, opt_state, params)
                new_params = optax.apply_updates(params, updates)
                params, opt_state = jax.tree_util.tree_map(lambda new, old: jnp.where(finite, new, old),
                                                           (new_params, new_opt_state), (params, opt_state))
                return ((params, stats, opt_state, key, scaled_step(finite, scaler)),
                        (position + size, add_sums(sums, *terms)))

            # not donated: see the module's doc (donating the state made XLA's CPU steps slower)
            self._train_steps[size, scale] = jax.jit(step)
        return self._train_steps[size, scale]

    def _eval_step(self, size: int, scale):
        if (size, scale) not in self._eval_steps:
            def step(params, stats, carry, x_all, y_all):
                position, sums = carry
                x = jax.lax.dynamic_slice_in_dim(x_all, position, size)
                y = jax.lax.dynamic_slice_in_dim(y_all, position, size)
                logits = self._apply_eval(params, stats, self._inputs(x, scale))
                return position + size, add_sums(sums, *loss_terms(self.loss_name, logits, y))

            self._eval_steps[size, scale] = jax.jit(step, donate_argnums=(2,))
        return self._eval_steps[size, scale]

    def _start(self):
        return self._put((jnp.zeros((), jnp.int32), zero_sums()))

    def _finish(self, carry) -> Dict[str, float]:
        loss_sum, counts = jax.device_get(carry[1])  # the epoch's one trip back to the host
        weight, right, made = (float(v) for v in counts)
        return finish_metrics(self.loss_name, float(loss_sum), weight, right, made)

    # ---- the contract ---------------------------------------------------------------------

    def versions(self):
        return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__,
                "optax": optax.__version__, "numpy": np.__version__}

    def threads_used(self):
        return THREADS  # what XLA's CPU client was configured with at import

    def set_weights(self, weights):
        params = jax.device_get(self.params)
        stats = jax.device_get(self.stats)
        trees = {"params": params, "batch_stats": stats}
        for name, (collection, layer, key) in self.locations.items():
            target = trees[collection][layer][key]
            value = np.asarray(weights[name], dtype=np.float32)
            if value.shape != target.shape:
                raise ValueError("weight %s: shape %s, expected %s" % (name, value.shape, target.shape))
            trees[collection][layer][key] = np.array(value)
        self.params, self.stats = self._put(self._stored(params)), self._put(self._stored(stats))

    def apply_gradients(self, gradients):
        grads = jax.device_get(self.params)
        for name, (collection, layer, key) in self.locations.items():
            if collection == "params":
                grads[layer][key] = np.asarray(gradients[name], dtype=np.float32)
        # in the parameters' type, as the train step's gradients are (bfloat16's); true gradients: no loss scale
        updates, self.opt_state = self.tx.update(self._put(self._stored(grads)), self.opt_state, self.params)
        self.params = optax.apply_updates(self.params, updates)

    def get_weights(self):
        trees = jax.device_get({"params": self.params, "batch_stats": self.stats})
        return {name: np.array(trees[collection][layer][key], dtype=np.float32)  # a bfloat16 one exactly
                for name, (collection, layer, key) in self.locations.items()}

    def loss_and_gradients(self, data):
        x_all, y_all = self._on_device(data)
        self.key, subkey = jax.random.split(self.key)
        loss_scale = self.scaler[0] if self.loss_scaling else None
        while True:
            grads, stats, terms = self._grads(self.params, self.stats, subkey, x_all, y_all, scale=data.input_scale,
                                              loss_scale=loss_scale)
            # mixed-float16: gradients that overflowed the current scale are computed again at a scale backed
            # off as the train step's would be (down to 1), the same batch, key and statistics: no step is
            # taken and the carried scale is left as it is
            if loss_scale is None or float(loss_scale) <= 1.0 or bool(all_finite(grads)):
                break
            loss_scale = loss_scale * LOSS_SCALE["backoff_factor"]
        self.stats = stats
        grads = jax.device_get(grads)
        out = {name: np.array(grads[layer][key], dtype=np.float32)
               for name, (collection, layer, key) in self.locations.items() if collection == "params"}
        return float(terms[0]), out

    def train_epoch(self, data, order):
        x_all, y_all = self._on_device(data)
        order_d = self._put(np.asarray(order).astype(np.int32))
        state = (self.params, self.stats, self.opt_state, self.key)
        if self.loss_scaling:
            state += (self.scaler,)
        carry = self._start()
        for batch in batch_slices(len(order), self.batch_size):
            state, carry = self._train_step(batch.stop - batch.start, data.input_scale)(
                state, carry, x_all, y_all, order_d)
            self.step_done(state, carry)
        self.params, self.stats, self.opt_state, self.key = state[:4]
        if self.loss_scaling:
            self.scaler = state[4]
        return self._finish(carry)

    def evaluate(self, data):
        x_all, y_all = self._on_device(data)
        carry = self._start()
        for batch in batch_slices(len(data), self.batch_size):
            carry = self._eval_step(batch.stop - batch.start, data.input_scale)(
                self.params, self.stats, carry, x_all, y_all)
        return self._finish(carry)

    def predict(self, x):
        inputs = np.ascontiguousarray(x)
        inputs = inputs.astype(np.float32) if self.float_inputs else inputs.astype(np.int32)
        return np.asarray(self._predict(self.params, self.stats, self._put(inputs)))

    def serving(self):
        """jax.jit of the module's apply with train=False on inputs as stored (pixels scaled inside the
        compiled function); it compiles once per batch shape, at that shape's first call."""
        scale = self.input_scale

        @jax.jit
        def forward(params, stats, x):
            return self._apply_eval(params, stats, self._inputs(x, scale))

        def serve(x):
            inputs = np.ascontiguousarray(x) if self.float_inputs else np.asarray(x, np.int32)
            return np.asarray(forward(self.params, self.stats, self._put(inputs)))
        return serve

    def training_outputs(self, x):
        self.key, key = jax.random.split(self.key)
        inputs = self._put(np.ascontiguousarray(x, dtype=np.float32))
        return np.asarray(self._apply_train(self.params, self.stats, inputs, key)[0])

    def synchronise(self):
        jax.block_until_ready((self.params, self.stats, self.opt_state, self.key, self.scaler))

    def wait_for(self, outputs):
        jax.block_until_ready(outputs)  # the step's new state, held by the loop until the epoch ends
