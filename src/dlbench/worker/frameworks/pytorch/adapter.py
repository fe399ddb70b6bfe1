"""PyTorch adapter: the IR as an nn.Module (layers.py's table), trained in eager mode as PyTorch's own examples do,
or compiled (execution "compiled": torch.compile of the module, inductor's default mode, as PyTorch's tutorial
compiles a model; "reduce-overhead" adds CUDA graphs, which a CPU lacks, and "max-autotune" spends minutes
searching kernels: the default mode is the one every user gets from torch.compile(model)). PyTorch's graph
capture is torch.compile's own (TorchScript is deprecated), so it has no "graph" execution apart from it.

Precisions as PyTorch's documentation makes them: "bfloat16" casts the module (weights, and so the optimiser's
state) and the float inputs to torch.bfloat16; "mixed-bfloat16" and "mixed-float16" keep float32 weights and run
each forward pass under torch.autocast in bfloat16 or float16 (the backward pass follows the forward's types), the
latter with a GradScaler on base.LOSS_SCALE's terms. The logits leave the forward pass as float32 in every one.

The model's modules, their canonical weights and the NHWC/NCHW permutes are layers.py's; the optimisers and
schedules optimizers.py's; the loss terms losses.py's.
"""
from __future__ import annotations

import contextlib
import os
from typing import Dict

import numpy as np
import torch

from dlbench.shared.ir import all_shapes
from dlbench.worker.base import (
    LOSS_SCALE,
    BaseAdapter,
    Split,
    batch_slices,
    compile_cache,
    finish_metrics,
    lookup,
    recipe_dtype,
)
from dlbench.worker.frameworks.pytorch.layers import build_module, layout, torch_params
from dlbench.worker.frameworks.pytorch.losses import batch_sums, loss_terms
from dlbench.worker.frameworks.pytorch.optimizers import make_optimizer, make_scheduler


def torch_device(device: str) -> torch.device:
    """The torch device of a cell's "cpu" or "gpu", or an error saying torch sees no GPU."""
    if device == "gpu" and not torch.cuda.is_available():
        raise RuntimeError("device gpu requested, but torch %s sees no CUDA device (CUDA build: %s)"
                           % (torch.__version__, torch.version.cuda))
    return torch.device("cuda" if device == "gpu" else "cpu")


DTYPES = {"float32": torch.float32, "float64": torch.float64}
# each precision's (storage type of the weights and inputs, type torch.autocast computes in: None, no autocast)
PRECISIONS = {"float32": (None, None), "bfloat16": (torch.bfloat16, None),
              "mixed-bfloat16": (None, torch.bfloat16), "mixed-float16": (None, torch.float16)}


class Adapter(BaseAdapter):
    name = "pytorch"
    dtypes = tuple(DTYPES)
    executions = ("eager", "compiled")
    precisions = tuple(PRECISIONS)

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        torch.set_num_threads(threads)
        self.torch_device = torch_device(device)
        torch.manual_seed(seed)  # dropout masks
        self.module, self.by_name = build_module(model)
        self.module.to(self.torch_device)
        # what every forward pass calls: the module, or its compiled twin (the same parameters; compiled at its
        # first call, again for the other of training and evaluation, and for a new batch shape)
        self.forward = self.module
        if self.execution == "compiled":
            cache = compile_cache(None)
            if cache:  # certification and a suite's shared cache; else inductor's own under the run's TMPDIR
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
            self.forward = torch.compile(self.module)
        trainable = [p for p in self.module.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(trainable, recipe["optimizer"])
        self.scheduler = make_scheduler(self.optimizer, recipe)
        self.float_inputs = model["input_dtype"].startswith("float")
        # float64 only for certification, which measures float32 rounding against it
        storage, self.autocast = lookup(PRECISIONS, "precision", self.precision)
        self.dtype = storage or lookup(DTYPES, "dtype", recipe_dtype(recipe))
        self.module.to(self.dtype)
        # mixed-float16's dynamic loss scaling, on base.LOSS_SCALE's terms (GradScaler's own defaults differ)
        self.scaler = torch.amp.GradScaler(
            self.torch_device.type, init_scale=LOSS_SCALE["initial"], growth_factor=LOSS_SCALE["growth_factor"],
            backoff_factor=LOSS_SCALE["backoff_factor"], growth_interval=LOSS_SCALE["growth_interval"],
        ) if self.autocast == torch.float16 else None
        self._tensors = {}  # id of a Split -> (the split, x, y on the device): converted once

    def _outputs(self, inputs: torch.Tensor) -> torch.Tensor:
        """The forward pass in the cell's precision (torch.autocast around it where mixed), as float32 logits: the
        loss and every caller take them so."""
        computing = (torch.autocast(self.torch_device.type, dtype=self.autocast) if self.autocast
                     else contextlib.nullcontext())
        with computing:
            outputs = self.forward(inputs)
        return outputs if self.dtype == torch.float64 else outputs.float()

    def versions(self):
        return {"torch": torch.__version__, "numpy": np.__version__}

    def threads_used(self):
        return torch.get_num_threads()

    def set_weights(self, weights):
        with torch.no_grad():
            for layer in self._layers():
                if layer["name"] not in self.by_name:
                    continue
                params = torch_params(layer["type"], self.by_name[layer["name"]])
                for key, target in params.items():
                    if key.endswith("bias_hh"):  # torch's second LSTM bias; the canonical bias is their sum
                        target.zero_()
                        continue
                    value = layout(layer["type"]).to_native(key, weights[layer["name"] + "/" + key])
                    target.copy_(torch.from_numpy(np.ascontiguousarray(value)))

    def _layers(self):
        """Every IR layer, a residual block's own layers included."""
        return [layer for layer, _, _ in all_shapes(self.model_ir)]

    def get_weights(self):
        return self._export(gradients=False)

    def _export(self, gradients: bool) -> Dict[str, np.ndarray]:
        """Canonical weights, or the gradients of the trainable ones."""
        out = {}
        for layer in self._layers():
            if layer["name"] not in self.by_name:
                continue
            params = torch_params(layer["type"], self.by_name[layer["name"]])
            for key, tensor in params.items():
                if key.endswith("bias_hh") or (gradients and key.startswith("moving_")):
                    continue
                if gradients:
                    value = tensor.grad
                else:
                    value = tensor.detach()
                    if key + "_hh" in params:
                        value = value + params[key + "_hh"].detach()
                value = value if self.dtype == torch.float64 else value.float()  # a bfloat16 weight as it is stored
                out[layer["name"] + "/" + key] = layout(layer["type"]).to_canonical(key, value.cpu().numpy()).copy()
        return out

    def loss_and_gradients(self, data):
        x_all, y_all = self._on_device(data)
        self.module.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = loss_terms(self.recipe["loss"], self._outputs(self._inputs(x_all, data.input_scale)), y_all)[0]
        scale = self.scaler.get_scale() if self.scaler else 1.0
        (loss * scale if self.scaler else loss).backward()
        gradients = {name: value / scale for name, value in self._export(gradients=True).items()}
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss), gradients

    def apply_gradients(self, gradients):
        for layer in self._layers():
            if layer["name"] not in self.by_name:
                continue
            for key, param in torch_params(layer["type"], self.by_name[layer["name"]]).items():
                if key.startswith("moving_"):
                    continue
                # torch's second LSTM bias gets the canonical bias's gradient, as in training
                canonical = key[:-len("_hh")] if key.endswith("bias_hh") else key
                value = layout(layer["type"]).to_native(canonical, gradients[layer["name"] + "/" + canonical])
                param.grad = torch.from_numpy(np.ascontiguousarray(value)).to(param.device, param.dtype)
        self._step()
        self.optimizer.zero_grad(set_to_none=True)

    def _step(self):
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()

    def _scaled_step(self, loss: torch.Tensor) -> None:
        """mixed-float16's step, as PyTorch's AMP recipe takes it: the scaled loss's backward pass, the optimiser's
        step on the unscaled gradients unless one is inf or nan (then skipped), the scale updated; the learning
        rate's schedule advances either way, as in that recipe."""
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scheduler is not None:
            self.scheduler.step()

    def _on_device(self, data: Split):
        """Inputs and labels as device tensors, made once per split: pixels stay uint8 until a batch."""
        key = id(data)
        if key not in self._tensors:  # holding the split keeps its id from being reused
            x = torch.from_numpy(np.array(data.x))
            y = torch.from_numpy(np.array(data.y)).long()
            if not self.float_inputs:
                x = x.long()
            self._tensors[key] = (data, x.to(self.torch_device), y.to(self.torch_device))
        return self._tensors[key][1:]

    def _inputs(self, x: torch.Tensor, scale) -> torch.Tensor:
        if not self.float_inputs:
            return x
        x = x.to(self.dtype)
        return x / scale if scale else x

    def train_epoch(self, data, order):
        x_all, y_all = self._on_device(data)
        order_t = torch.from_numpy(order).to(self.torch_device)
        loss_name = self.recipe["loss"]
        self.module.train()
        sums = torch.zeros(4, dtype=torch.float64, device=self.torch_device)
        for batch in batch_slices(len(order), self.recipe["batch_size"]):
            index = order_t[batch]
            self.optimizer.zero_grad(set_to_none=True)
            logits = self._outputs(self._inputs(x_all[index], data.input_scale))
            loss, weight, right, made = loss_terms(loss_name, logits, y_all[index])
            if self.scaler:
                self._scaled_step(loss)
            else:
                loss.backward()
                self._step()
            sums += batch_sums(loss.detach(), weight, right, made)
            self.step_done()
        return finish_metrics(loss_name, *sums.tolist())

    def evaluate(self, data):
        x_all, y_all = self._on_device(data)
        loss_name = self.recipe["loss"]
        self.module.eval()
        sums = torch.zeros(4, dtype=torch.float64, device=self.torch_device)
        with torch.inference_mode():
            for batch in batch_slices(len(data), self.recipe["batch_size"]):
                logits = self._outputs(self._inputs(x_all[batch], data.input_scale))
                loss, weight, right, made = loss_terms(loss_name, logits, y_all[batch])
                sums += batch_sums(loss, weight, right, made)
        return finish_metrics(loss_name, *sums.tolist())

    def predict(self, x):
        self.module.eval()
        inputs = torch.from_numpy(np.ascontiguousarray(x)).to(self.torch_device)
        with torch.inference_mode():
            return self._outputs(inputs.to(self.dtype) if self.float_inputs else inputs.long()).cpu().numpy()

    def serving(self):
        """eval() and torch.inference_mode, as PyTorch's guides serve a model, on the module as the execution
        runs it; the stored pixels are scaled on the device.

        Eager by default, not torch.compile'd: on the 2-core CPU machine (torch 2.13, inductor, one thread, beside
        other work) cnn-mnist's compiled module took 28-40 s at its first call and served batch 1 no faster (median
        0.547 ms against eager's 0.518 ms, 1,200 calls of each, interleaved); only batch 128 gained (67 ms against 116
        ms). The protocol times batch-1 latency, and a 30 s first call would dominate a cell."""
        self.module.eval()
        scale = self.input_scale

        def serve(x):
            inputs = torch.from_numpy(np.ascontiguousarray(x)).to(self.torch_device)
            with torch.inference_mode():
                inputs = self._inputs(inputs, scale) if self.float_inputs else inputs.long()
                return self._outputs(inputs).cpu().numpy()
        return serve

    def training_outputs(self, x):
        self.module.train()
        inputs = torch.from_numpy(np.ascontiguousarray(x)).to(self.torch_device).to(self.dtype)
        with torch.no_grad():
            return self._outputs(inputs).cpu().numpy()

    def synchronise(self):
        if self.torch_device.type == "cuda":
            torch.cuda.synchronize()
