"""Chainer adapter: the IR as a chainer.Chain of Chainer's own links (layers.py's table), trained define-by-run
as Chainer's examples do (cleargrads, forward, backward, optimizer.update) with its optimizers.

The model's links, their canonical weights and layouts are layers.py's; the optimisers and schedules
optimizers.py's; the loss terms losses.py's.

Threads: Chainer computes with numpy on the CPU, so the threads are the BLAS's; threadpoolctl sets
them from the `threads` argument and threads_used() reports what the BLAS library says it uses.
Caches: Chainer writes files only for its datasets (CHAINER_DATASET_ROOT, default ~/.chainer under
HOME, which the worker points into the run's folder); this adapter downloads none.
Precisions: "float32", and "mixed-float16" by Chainer's own mixed16: the model is built and run under
chainer.config.dtype = chainer.mixed16, so its Parameters, activations and gradients are float16 (BatchNormalization
keeps float32 parameters and statistics, as mixed16 has it, and layers.py computes the other normalisations so),
the optimiser updates float32 master copies (use_fp32_update, whose arrays get_weights returns and set_weights
writes) with float32 state, and the backward pass takes a dynamic loss scale (optimizers.LossScale). The logits
are cast to float32 before the loss. numpy has no bfloat16, so Chainer has neither bfloat16 precision.

Device: CPU only. The recipe installs no CuPy (Chainer 7 supports CuPy up to v7/v8, none of which
runs on current GPUs), so device "gpu" is refused.
"""
from __future__ import annotations

from typing import Dict

import chainer
import numpy as np
import threadpoolctl

from dlbench.shared.ir import all_shapes
from dlbench.worker.base import BaseAdapter, Split, batch_slices, finish_metrics, lookup
from dlbench.worker.frameworks.chainer.layers import Model, layout, native_arrays
from dlbench.worker.frameworks.chainer.losses import loss_terms
from dlbench.worker.frameworks.chainer.optimizers import LossScale, optimizer_for

# each precision's chainer.config.dtype, under which the model is built and run
CONFIG_DTYPES = {"float32": np.float32, "mixed-float16": chainer.mixed16}


def cpu_threads(device: str, threads: int):
    """Refuses a GPU cell; limits BLAS to `threads`. The caller keeps the returned limiter: the setting
    lasts as long as it does."""
    if device != "cpu":
        raise RuntimeError("device %r requested: the chainer environment computes with numpy on the CPU "
                           "(no CuPy)" % device)
    return threadpoolctl.threadpool_limits(limits=threads)


def exported(layer, key, target, gradient=False) -> np.ndarray:
    """A Parameter's array (or its gradient), or a plain array (moving statistics), in the canonical layout, as a
    float32 copy."""
    if isinstance(target, chainer.Variable):
        target = target.grad if gradient else target.array
    return np.ascontiguousarray(layout(layer["type"]).to_canonical(key, target), dtype=np.float32).copy()


class Adapter(BaseAdapter):
    name = "chainer"
    executions = ("eager",)  # define-by-run: Chainer has no graph mode and no compiler
    precisions = tuple(CONFIG_DTYPES)

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        self._thread_limit = cpu_threads(device, threads)
        np.random.seed(seed)  # Chainer's dropout masks come from numpy's global generator
        self.config_dtype = lookup(CONFIG_DTYPES, "precision", self.precision)
        self.mixed = self.precision != "float32"
        with self._computing():
            self.model = Model(model)
        self.optimizer = optimizer_for(self.model, recipe["optimizer"], recipe.get("schedule"), self.mixed)
        self.loss_scale = LossScale() if self.mixed else None
        self.float_inputs = model["input_dtype"].startswith("float")
        self._arrays = {}  # id of a Split -> (the split, x, y) in memory: read once

    def versions(self):
        return {"chainer": chainer.__version__, "numpy": np.__version__}

    def threads_used(self):
        counts = [pool["num_threads"] for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas"]
        return max(counts) if counts else 1  # no BLAS library loaded: numpy runs on this thread alone

    def _computing(self):
        """The precision's chainer.config.dtype, for building the model and every pass through it."""
        return chainer.using_config("dtype", self.config_dtype)

    def _logits(self, inputs):
        """The model's outputs, as float32 logits in every precision."""
        with self._computing():
            logits = self.model(inputs)
        return chainer.functions.cast(logits, np.float32) if self.mixed else logits

    # ---- weights ----

    def _native(self):
        for layer, _, _ in all_shapes(self.model_ir):
            link = getattr(self.model, layer["name"], None)
            if link is not None:
                for key, target in native_arrays(layer["type"], link).items():
                    yield layer, key, target

    def set_weights(self, weights):
        for layer, key, target in self._native():
            value = layout(layer["type"]).to_native(key, weights[layer["name"] + "/" + key])
            array = target.array if isinstance(target, chainer.Variable) else target
            array[...] = value  # in place: the optimiser's and BatchNorm's references stay valid
            if array.dtype == np.float16:  # mixed-float16: the optimiser's float32 master copy, made as it makes it
                target.update_rule._fp32_param = chainer.Parameter(np.array(value, dtype=np.float32),
                                                                   name=target.name)

    def get_weights(self):
        return {layer["name"] + "/" + key: self._export(layer, key, target) for layer, key, target in self._native()}

    def _export(self, layer, key, target, gradient=False):
        """exported(), but in mixed-float16 a weight as the optimiser holds it (the float16 Parameter's float32
        master copy) and a gradient unscaled."""
        if self.mixed and isinstance(target, chainer.Variable):
            if gradient:  # every Parameter's, float32 normalisations' too: the backward pass scaled them all
                target = target.grad.astype(np.float32) / np.float32(self.loss_scale.scale)
            elif target.update_rule._fp32_param is not None:  # a float16 Parameter's, from set_weights on
                target = target.update_rule._fp32_param.array
        return exported(layer, key, target, gradient)

    # ---- batches ----

    def _in_memory(self, data: Split):
        key = id(data)
        if key not in self._arrays:  # holding the split keeps its id from being reused
            x = np.asarray(data.x)
            self._arrays[key] = (data, np.array(x if self.float_inputs else x.astype(np.int32)),
                                 np.array(data.y).astype(np.int32))
        return self._arrays[key][1:]

    def _inputs(self, x: np.ndarray, scale) -> np.ndarray:
        if not self.float_inputs:
            return x
        x = x.astype(np.float32)
        x = x / np.float32(scale) if scale else x
        return x.astype(np.float16) if self.mixed else x

    def _given(self, x: np.ndarray) -> np.ndarray:
        """Inputs given ready (predict's, the probes'): floats in the precision's type, token ids as int32."""
        if not self.float_inputs:
            return np.ascontiguousarray(x, dtype=np.int32)
        return np.ascontiguousarray(x, dtype=np.float16 if self.mixed else np.float32)

    def _sums(self, data: Split, order: np.ndarray, train: bool) -> Dict[str, float]:
        x_all, y_all = self._in_memory(data)
        loss_name = self.recipe["loss"]
        sums = np.zeros(4, dtype=np.float64)
        with chainer.using_config("train", train), chainer.using_config("enable_backprop", train):
            for batch in batch_slices(len(order), self.recipe["batch_size"]):
                index = order[batch]
                logits = self._logits(self._inputs(x_all[index], data.input_scale))
                loss, weight, right, made = loss_terms(loss_name, logits, y_all[index])
                if train:
                    self._step(loss)
                sums += (float(loss.array) * weight, weight, right, made)
        return finish_metrics(loss_name, *sums.tolist())

    def _step(self, loss) -> None:
        """Backward and update, the loss scaled and the step skipped on overflow in mixed-float16."""
        self.model.cleargrads()
        with self._computing():
            if self.mixed:
                loss.backward(loss_scale=self.loss_scale.scale)
                self.loss_scale.update(self.optimizer)
            else:
                loss.backward()
                self.optimizer.update()
        self.step_done()

    # ---- the contract ----

    def train_epoch(self, data, order):
        return self._sums(data, np.asarray(order, dtype=np.int64), train=True)

    def evaluate(self, data):
        return self._sums(data, np.arange(len(data), dtype=np.int64), train=False)

    def loss_and_gradients(self, data):
        x_all, y_all = self._in_memory(data)
        with chainer.using_config("train", True):
            self.model.cleargrads()
            loss = loss_terms(self.recipe["loss"], self._logits(self._inputs(x_all, data.input_scale)), y_all)[0]
            with self._computing():
                loss.backward(loss_scale=self.loss_scale.scale if self.mixed else None)
        gradients = {layer["name"] + "/" + key: self._export(layer, key, target, gradient=True)
                     for layer, key, target in self._native() if isinstance(target, chainer.Variable)}
        self.model.cleargrads()
        return float(loss.array), gradients

    def apply_gradients(self, gradients):
        self.model.cleargrads()
        for layer, key, target in self._native():
            if isinstance(target, chainer.Variable):  # moving statistics are plain arrays
                target.grad = np.ascontiguousarray(
                    layout(layer["type"]).to_native(key, gradients[layer["name"] + "/" + key]), dtype=target.dtype)
                target._loss_scale = None  # unscaled: the update rule keeps dividing by the last backward's scale
        self.optimizer.update()
        self.model.cleargrads()

    def predict(self, x):
        with chainer.using_config("train", False), chainer.no_backprop_mode():
            return self._logits(self._given(x)).array.copy()

    def serving(self):
        """The model called under chainer.using_config('train', False) and no_backprop_mode, as Chainer's
        guides run inference; pixels scaled on the host, as training scales them."""
        scale = self.input_scale

        def serve(x):
            inputs = self._inputs(np.ascontiguousarray(x), scale) if self.float_inputs else np.asarray(x, np.int32)
            with chainer.using_config("train", False), chainer.no_backprop_mode():
                return self._logits(inputs).array.copy()
        return serve

    def training_outputs(self, x):
        with chainer.using_config("train", True), chainer.no_backprop_mode():
            return self._logits(self._given(x)).array.copy()

    def synchronise(self):
        pass  # numpy on the CPU: every operation has finished when it returns
