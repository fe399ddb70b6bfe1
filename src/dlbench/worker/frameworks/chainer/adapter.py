"""Chainer adapter: the IR as a chainer.Chain of Chainer's own links (layers.py's table), trained define-by-run
as Chainer's examples do (cleargrads, forward, backward, optimizer.update) with its optimizers.

The model's links, their canonical weights and layouts are layers.py's; the optimisers and schedules
optimizers.py's; the loss terms losses.py's.

Threads: Chainer computes with numpy on the CPU, so the threads are the BLAS's; threadpoolctl sets
them from the `threads` argument and threads_used() reports what the BLAS library says it uses.
Caches: Chainer writes files only for its datasets (CHAINER_DATASET_ROOT, default ~/.chainer under
HOME, which the worker points into the run's folder); this adapter downloads none.
Device: CPU only. The recipe installs no CuPy (Chainer 7 supports CuPy up to v7/v8, none of which
runs on current GPUs), so device "gpu" is refused.
"""
from __future__ import annotations

from typing import Dict

import chainer
import numpy as np
import threadpoolctl

from dlbench.shared.ir import all_shapes
from dlbench.worker.base import BaseAdapter, Split, batch_slices, finish_metrics
from dlbench.worker.frameworks.chainer.layers import Model, layout, native_arrays
from dlbench.worker.frameworks.chainer.losses import loss_terms
from dlbench.worker.frameworks.chainer.optimizers import optimizer_for


def cpu_threads(device: str, threads: int):
    """Refuses a GPU cell; limits BLAS to `threads`. The caller keeps the returned limiter: the setting
    lasts as long as it does."""
    if device != "cpu":
        raise RuntimeError("device %r requested: the chainer environment computes with numpy on the CPU "
                           "(no CuPy)" % device)
    return threadpoolctl.threadpool_limits(limits=threads)


class Adapter(BaseAdapter):
    name = "chainer"
    executions = ("eager",)  # define-by-run: Chainer has no graph mode and no compiler

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        self._thread_limit = cpu_threads(device, threads)
        np.random.seed(seed)  # Chainer's dropout masks come from numpy's global generator
        self.model = Model(model)
        self.optimizer = optimizer_for(self.model, recipe["optimizer"], recipe.get("schedule"))
        self.float_inputs = model["input_dtype"].startswith("float")
        self._arrays = {}  # id of a Split -> (the split, x, y) in memory: read once

    def versions(self):
        return {"chainer": chainer.__version__, "numpy": np.__version__}

    def threads_used(self):
        counts = [pool["num_threads"] for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas"]
        return max(counts) if counts else 1  # no BLAS library loaded: numpy runs on this thread alone

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

    def get_weights(self):
        return {layer["name"] + "/" + key: self._export(layer, key, target) for layer, key, target in self._native()}

    @staticmethod
    def _export(layer, key, target, gradient=False):
        if isinstance(target, chainer.Variable):
            target = target.grad if gradient else target.array
        return np.ascontiguousarray(layout(layer["type"]).to_canonical(key, target)).copy()

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
        return x / np.float32(scale) if scale else x

    def _sums(self, data: Split, order: np.ndarray, train: bool) -> Dict[str, float]:
        x_all, y_all = self._in_memory(data)
        loss_name = self.recipe["loss"]
        sums = np.zeros(4, dtype=np.float64)
        with chainer.using_config("train", train), chainer.using_config("enable_backprop", train):
            for batch in batch_slices(len(order), self.recipe["batch_size"]):
                index = order[batch]
                logits = self.model(self._inputs(x_all[index], data.input_scale))
                loss, weight, right, made = loss_terms(loss_name, logits, y_all[index])
                if train:
                    self.model.cleargrads()
                    loss.backward()
                    self.optimizer.update()
                    self.step_done()
                sums += (float(loss.array) * weight, weight, right, made)
        return finish_metrics(loss_name, *sums.tolist())

    # ---- the contract ----

    def train_epoch(self, data, order):
        return self._sums(data, np.asarray(order, dtype=np.int64), train=True)

    def evaluate(self, data):
        return self._sums(data, np.arange(len(data), dtype=np.int64), train=False)

    def loss_and_gradients(self, data):
        x_all, y_all = self._in_memory(data)
        with chainer.using_config("train", True):
            self.model.cleargrads()
            loss = loss_terms(self.recipe["loss"], self.model(self._inputs(x_all, data.input_scale)), y_all)[0]
            loss.backward()
        gradients = {layer["name"] + "/" + key: self._export(layer, key, target, gradient=True)
                     for layer, key, target in self._native() if isinstance(target, chainer.Variable)}
        self.model.cleargrads()
        return float(loss.array), gradients

    def apply_gradients(self, gradients):
        self.model.cleargrads()
        for layer, key, target in self._native():
            if isinstance(target, chainer.Variable):  # moving statistics are plain arrays
                target.grad = np.ascontiguousarray(
                    layout(layer["type"]).to_native(key, gradients[layer["name"] + "/" + key]), dtype=np.float32)
        self.optimizer.update()
        self.model.cleargrads()

    def predict(self, x):
        inputs = np.ascontiguousarray(x, dtype=np.float32 if self.float_inputs else np.int32)
        with chainer.using_config("train", False), chainer.no_backprop_mode():
            return self.model(inputs).array.copy()

    def serving(self):
        """The model called under chainer.using_config('train', False) and no_backprop_mode, as Chainer's
        guides run inference; pixels scaled on the host, as training scales them."""
        scale = self.input_scale

        def serve(x):
            inputs = self._inputs(np.ascontiguousarray(x), scale) if self.float_inputs else np.asarray(x, np.int32)
            with chainer.using_config("train", False), chainer.no_backprop_mode():
                return self.model(inputs).array.copy()
        return serve

    def training_outputs(self, x):
        inputs = np.ascontiguousarray(x, dtype=np.float32)
        with chainer.using_config("train", True), chainer.no_backprop_mode():
            return self.model(inputs).array.copy()

    def synchronise(self):
        pass  # numpy on the CPU: every operation has finished when it returns
