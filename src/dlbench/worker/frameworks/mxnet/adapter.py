"""MXNet 1.9 adapter: the IR as Gluon HybridBlocks, hybridized (or not), trained under autograd.record.

The package by concern: layers.py (the layer table: each IR kind's Gluon blocks and its Parameters by
canonical name; the layouts, the LSTM's second bias, 'same' padding, the Transformer pieces and BatchNorm
are described there), optimizers.py (the optimisers, written out as the reference defines them, and the
learning-rate schedules), losses.py (the objective graph and the per-batch sums); this module holds the
Adapter: device, threads, weights in and out, the training and evaluation loops.

BatchNorm's moving statistics: the block outputs the batch mean and biased variance, and the adapter
moves the statistics after each training step with the unbiased variance and the IR's (Keras's)
momentum (layers.py says why).

Executions: "graph" (the default) hybridizes the blocks; "eager" leaves them imperative, each operator pushed to
the engine from Python as Gluon runs without hybridize(); MXNet has no compiler of its own to ask for.

Precisions: "float32", and "mixed-bfloat16" by MXNet's own AMP (mxnet.contrib.amp, target bfloat16): amp.init()
rewrites the process's operators so that Convolution and FullyConnected compute in bfloat16 (oneDNN) on casts of
the float32 weights, others in float32 or in their inputs' widest type (AMP's lists); the weights, their gradients
and the optimiser's state stay float32, and the logits are cast to float32 before the loss (layers.Net). amp.init
cannot be undone and must come before the model's first call, so a process that has trained in mixed-bfloat16
refuses a float32 model: the certificate's probes run one process per precision (certification/probes.py). MXNet
has no other reduced precision here: Gluon cannot hold parameters in bfloat16 (Block.cast('bfloat16') fails in
numpy: "data type 'bfloat16' not understood"), and AMP's float16 trains nothing on the CPU ("FP16 gemm on cpu not
implemented!" in the first backward pass); AMP's bfloat16 is oneDNN's, the CPU's alone.

Compilation: hybridize() only marks the blocks; the first call of a hybridized block builds its
graph (CachedOp), so that cost lands in the first train_epoch (and the first predict or evaluate).
With static_alloc and static_shape a graph keeps its memory between calls; a new input shape (the
last, smaller batch) builds its plan once.
Nothing is fetched to the host inside an epoch: the loss and counts are summed on the engine and
read once at its end; synchronise() is mx.nd.waitall().

Threads: MXNet's engine reads MXNET_CPU_WORKER_NTHREADS at import (the recipe sets 1, its default:
one engine thread runs the operators in order), and each operator runs OpenMP threads. Their count
is fixed when MXNet loads: the engine's thread inherits OMP_NUM_THREADS, which the adapter sets from
the cell's budget (DLBENCH_THREADS) before importing mxnet, with MXNET_OMP_MAX_THREADS, MXNet's cap
for its own operators. Measured: a convolution ran 1.6x CPU per wall second with OMP_NUM_THREADS=2
and 1.0x with 1, whatever MXNet's runtime call MXSetNumOMPThreads said, so the adapter does not
rely on that call; an adapter asked for another count in the same process refuses.
MXNET_HOME (datasets, model zoo) is pointed into the run's cache folder, where HOME already is.
"""
from __future__ import annotations

import os

from dlbench.worker.base import thread_budget  # numpy alone, before the framework


def _configure_before_import() -> int:
    """The OpenMP thread count, and MXNet's cache folder: both read when mxnet is imported."""
    threads = thread_budget()
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MXNET_OMP_MAX_THREADS"] = str(threads)
    if os.environ.get("XDG_CACHE_HOME"):
        os.environ.setdefault("MXNET_HOME", os.path.join(os.environ["XDG_CACHE_HOME"], "mxnet"))
    return threads


THREADS = _configure_before_import()

from typing import Dict  # noqa: E402

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, nd  # noqa: E402
from mxnet.contrib import amp  # noqa: E402

from dlbench.shared.ir import all_shapes  # noqa: E402
from dlbench.worker.base import (  # noqa: E402
    BaseAdapter,
    Split,
    batch_slices,
    finish_metrics,
    lookup,
    recipe_dtype,
)
from dlbench.worker.frameworks.mxnet.layers import build_net, gluon_params, layout  # noqa: E402
from dlbench.worker.frameworks.mxnet.losses import Objective, batch_sums  # noqa: E402
from dlbench.worker.frameworks.mxnet.optimizers import OPTIMIZERS  # noqa: E402


def check_threads(threads: int) -> None:
    """MXNet's OpenMP thread count is fixed at import: a cell asking for another one is refused."""
    if threads != THREADS:
        raise RuntimeError("MXNet's OpenMP runs %d threads, fixed when mxnet was imported (from DLBENCH_THREADS); "
                           "%d cannot be set in the same process" % (THREADS, threads))


DTYPES = {"float32": np.float32, "float64": np.float64}
PRECISIONS = ("float32", "mixed-bfloat16")  # see the module's docstring
# Operators without inputs that AMP lists as float32's and the layers call in a graph (causal masks, LSTM states):
# AMP 1.9's wrapper of a symbol without inputs fails ("'NoneType' object is not iterable": it casts the symbol's
# children, None), so they leave its list. They make float32 arrays by default, so nothing changes type.
CREATION_OPS = ("_arange", "_full", "_zeros", "_ones")


def amp_for(precision: str, device: str) -> None:
    """AMP in bfloat16 for a mixed-bfloat16 model (amp.init: once a process, later calls return at once); a float32
    model in a process whose operators AMP has rewritten is refused, for it would compute in bfloat16."""
    if precision == "mixed-bfloat16":
        if device == "gpu":
            raise RuntimeError("MXNet's AMP computes bfloat16 with oneDNN, on the CPU only")
        amp.init(target_dtype="bfloat16", fp32_ops=[op for op in amp.lists.symbol_bf16.FP32_FUNCS
                                                    if op not in CREATION_OPS])
    elif amp.amp._amp_initialized:
        raise RuntimeError("MXNet's AMP (amp.init) has rewritten this process's operators to compute in bfloat16 "
                           "and cannot be undone: a %s model needs a process of its own" % precision)


class Adapter(BaseAdapter):
    name = "mxnet"
    dtypes = tuple(DTYPES)
    executions = ("graph", "eager")
    precisions = PRECISIONS

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        check_threads(threads)
        if device == "gpu":
            if mx.context.num_gpus() == 0:
                raise RuntimeError("device gpu requested, but MXNet %s sees no GPU (CUDA build: %s)"
                                   % (mx.__version__, mx.runtime.Features().is_enabled("CUDA")))
            self.ctx = mx.gpu(0)
        else:
            self.ctx = mx.cpu()
        mx.random.seed(seed)  # dropout masks
        amp_for(self.precision, device)
        self.net, self.by_name, self.norms = build_net(model)
        self.net.float32_logits = self.precision != "float32"
        self.objective = Objective(self.net, recipe["loss"])
        self.objective.initialize(ctx=self.ctx)  # placeholders: set_weights brings the canonical ones
        # float64 only for certification, which measures float32 rounding against it
        self.dtype = lookup(DTYPES, "dtype", recipe_dtype(recipe))
        if self.dtype == np.float64:
            self.objective.cast("float64")
        # marks only: the graphs are built by the first calls. static_alloc and static_shape (Gluon's
        # performance guide, as an idiomatic program runs) keep each graph's memory and shapes from one
        # call to the next instead of planning them again at every batch
        if self.execution == "graph":
            self.objective.hybridize(static_alloc=True, static_shape=True)
        self.trainable = [p for p in self.objective.collect_params().values() if p.grad_req != "null"]
        optimizer = lookup(OPTIMIZERS, "optimizer", recipe["optimizer"]["name"])
        self.optimizer = optimizer([p.data(self.ctx) for p in self.trainable], recipe["optimizer"],
                                   recipe.get("schedule"))
        self.float_inputs = model["input_dtype"].startswith("float")
        self._arrays = {}  # id of a Split -> (the split, x, y on the device): converted once

    def versions(self):
        return {"mxnet": mx.__version__, "numpy": np.__version__}

    def threads_used(self):
        return THREADS

    # ---- weights ----

    def _layer_params(self):
        for layer, _, _ in all_shapes(self.model_ir):
            if layer["name"] in self.by_name:
                yield layer, gluon_params(layer["type"], self.by_name[layer["name"]])

    def set_weights(self, weights):
        for layer, params in self._layer_params():
            for key, param in params.items():
                if key.endswith("bias_hh"):  # Gluon's second LSTM bias; the canonical bias is their sum
                    param.set_data(nd.zeros(param.shape, ctx=self.ctx))
                    continue
                value = layout(layer["type"]).to_native(key, weights[layer["name"] + "/" + key])
                param.set_data(nd.array(np.ascontiguousarray(value), ctx=self.ctx, dtype=self.dtype))

    def get_weights(self):
        return self._export(gradients=False)

    def apply_gradients(self, gradients):
        native = {}  # Gluon's parameter name -> its gradient in Gluon's layout
        for layer, params in self._layer_params():
            for key, param in params.items():
                if key.startswith("moving_"):
                    continue
                # Gluon's second LSTM bias gets the canonical bias's gradient, as in training
                canonical = key[:-len("_hh")] if key.endswith("bias_hh") else key
                value = layout(layer["type"]).to_native(canonical, gradients[layer["name"] + "/" + canonical])
                native[param.name] = nd.array(np.ascontiguousarray(value), ctx=self.ctx, dtype=self.dtype)
        self.optimizer.step([p.data(self.ctx) for p in self.trainable], [native[p.name] for p in self.trainable])

    def _export(self, gradients: bool) -> Dict[str, np.ndarray]:
        """Canonical weights, or the gradients of the trainable ones."""
        out = {}
        for layer, params in self._layer_params():
            for key, param in params.items():
                if key.endswith("bias_hh") or (gradients and key.startswith("moving_")):
                    continue
                if gradients:
                    value = param.grad(self.ctx)
                else:
                    value = param.data(self.ctx)
                    if key + "_hh" in params:
                        value = value + params[key + "_hh"].data(self.ctx)
                out[layer["name"] + "/" + key] = layout(layer["type"]).to_canonical(key, value.asnumpy()).copy()
        return out

    # ---- data ----

    def _on_device(self, data: Split):
        """Inputs and labels as device arrays, made once per split: pixels stay uint8 until a batch;
        token ids and labels are floats, what MXNet's embedding and pick take (exact below 2**24)."""
        key = id(data)
        if key not in self._arrays:  # holding the split keeps its id from being reused
            x = np.asarray(data.x)
            x = nd.array(x, ctx=self.ctx, dtype=np.uint8 if self.float_inputs else self.dtype)
            y = nd.array(np.asarray(data.y), ctx=self.ctx, dtype=self.dtype)
            self._arrays[key] = (data, x, y)
        return self._arrays[key][1:]

    def _inputs(self, x: nd.NDArray, scale) -> nd.NDArray:
        if not self.float_inputs:
            return x
        x = x.astype(self.dtype)
        return x / scale if scale else x

    # ---- training ----

    def _update_moving_statistics(self, stats, in_count: int) -> None:
        """Moving mean and variance after a training batch, the variance unbiased (as the reference; see
        layers.py's BatchNorm)."""
        for index, (layer, positions) in enumerate(self.norms):
            params = gluon_params(layer["type"], self.by_name[layer["name"]])
            mean, variance = stats[2 * index], stats[2 * index + 1]
            n = in_count * positions
            unbiased = variance * (n / max(n - 1.0, 1.0))
            momentum = layer["momentum"]
            moving_mean, moving_var = params["moving_mean"].data(self.ctx), params["moving_var"].data(self.ctx)
            moving_mean[:] = momentum * moving_mean + (1.0 - momentum) * mean
            moving_var[:] = momentum * moving_var + (1.0 - momentum) * unbiased

    def _forward_backward(self, x, y):
        """The objective's outputs, training mode, with the loss's gradients in the parameters."""
        with autograd.record():
            outputs = self.objective(x, y)
        outputs[0].backward()
        return outputs

    def _train_step(self, x, y):
        outputs = self._forward_backward(x, y)
        self.optimizer.step([p.data(self.ctx) for p in self.trainable], [p.grad(self.ctx) for p in self.trainable])
        if self.norms:
            self._update_moving_statistics(outputs[3:], x.shape[0])
        return outputs[:3]

    def train_epoch(self, data, order):
        x_all, y_all = self._on_device(data)
        order_nd = nd.array(order, ctx=self.ctx, dtype=np.int64)
        sums = nd.zeros(4, ctx=self.ctx, dtype=np.float64)
        for batch in batch_slices(len(order), self.recipe["batch_size"]):
            index = order_nd[batch.start:batch.stop]
            x = self._inputs(nd.take(x_all, index), data.input_scale)
            y = nd.take(y_all, index)
            loss, right, count = self._train_step(x, y)
            sums += batch_sums(self.recipe["loss"], loss, right, count, y.shape, self.ctx)
            self.step_done()
        return finish_metrics(self.recipe["loss"], *sums.asnumpy().tolist())  # the epoch's one fetch

    def loss_and_gradients(self, data):
        x_all, y_all = self._on_device(data)
        loss = self._forward_backward(self._inputs(x_all, data.input_scale), y_all)[0]
        return float(loss.asscalar()), self._export(gradients=True)

    def evaluate(self, data):
        x_all, y_all = self._on_device(data)
        sums = nd.zeros(4, ctx=self.ctx, dtype=np.float64)
        for batch in batch_slices(len(data), self.recipe["batch_size"]):
            x = self._inputs(x_all[batch.start:batch.stop], data.input_scale)
            y = y_all[batch.start:batch.stop]
            loss, right, count = self.objective(x, y)[:3]  # outside autograd.record: predict mode
            sums += batch_sums(self.recipe["loss"], loss, right, count, y.shape, self.ctx)
        return finish_metrics(self.recipe["loss"], *sums.asnumpy().tolist())

    def predict(self, x):
        inputs = nd.array(np.ascontiguousarray(x), ctx=self.ctx, dtype=self.dtype)  # token ids too
        return self.net(inputs)[0].asnumpy()

    def serving(self):
        """The Gluon network as the execution runs it (graph: hybridized, static_alloc, static_shape, its cached
        graph one per batch shape) under autograd.predict_mode; pixels go to the device as uint8 and are scaled
        there."""
        scale = self.input_scale

        def serve(x):
            stored = np.uint8 if self.float_inputs else self.dtype  # token ids as floats, as MXNet's embedding takes
            inputs = self._inputs(nd.array(np.ascontiguousarray(x), ctx=self.ctx, dtype=stored), scale)
            with autograd.predict_mode():
                return self.net(inputs)[0].asnumpy()
        return serve

    def training_outputs(self, x):
        inputs = nd.array(np.ascontiguousarray(x), ctx=self.ctx, dtype=self.dtype)
        with autograd.train_mode():
            return self.net(inputs)[0].asnumpy()

    def synchronise(self):
        nd.waitall()
