"""PyTorch adapter: the IR as an nn.Module, trained in eager mode as PyTorch's own examples do.

Images arrive NHWC (canonical); they are permuted once to NCHW before the first spatial layer and
back to NHWC before Flatten or to_sequence, so dense weights keep the canonical flatten order and a
sequence's steps the canonical row-major order.
"""
from __future__ import annotations

from typing import Dict

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dlbench.shared import schedule as schedules
from dlbench.shared.ir import ATTENTION_PARTS, WEIGHTED, all_shapes, block_shapes, infer_shapes, same_padding
from dlbench.shared.protocol import PAD_ID
from dlbench.worker.base import (
    BaseAdapter,
    Split,
    batch_slices,
    finish_metrics,
    from_out_in_layout,
    lookup,
    not_built,
    recipe_dtype,
    to_out_in_layout,
)


class Permute(nn.Module):
    def __init__(self, *dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.permute(*self.dims)


class SamePad(nn.Module):
    """TensorFlow-style 'same' padding, asymmetric when the total is odd (torch pads symmetrically)."""

    def __init__(self, in_hw, kernel: int, stride: int, value: float):
        super().__init__()
        top, bottom = same_padding(in_hw[0], kernel, stride)
        left, right = same_padding(in_hw[1], kernel, stride)
        self.pads = (left, right, top, bottom)
        self.value = value

    def forward(self, x):
        return F.pad(x, self.pads, value=self.value)


def canonical_lstm(in_features: int, units: int) -> nn.LSTM:
    """torch's LSTM adds two biases; the IR has one. The second stays zero and untrained: trained, it
    would take its own optimiser step (and weight decay) beside the first, moving the canonical bias
    twice as far as every other framework's."""
    lstm = nn.LSTM(in_features, units, batch_first=True)
    lstm.bias_hh_l0.requires_grad_(False)
    return lstm


class LSTMLayer(nn.Module):
    def __init__(self, in_features: int, units: int, return_sequences: bool):
        super().__init__()
        self.lstm = canonical_lstm(in_features, units)
        self.return_sequences = return_sequences

    def forward(self, x):
        out, _ = self.lstm(x)
        return out if self.return_sequences else out[:, -1]


class Seq2Seq(nn.Module):
    def __init__(self, layer: dict):
        super().__init__()
        self.source_len = layer["source_len"]
        self.source_embedding = nn.Embedding(layer["source_vocab"], layer["embed_dim"])
        self.target_embedding = nn.Embedding(layer["target_vocab"], layer["embed_dim"])
        self.encoder = canonical_lstm(layer["embed_dim"], layer["units"])
        self.decoder = canonical_lstm(layer["embed_dim"], layer["units"])

    def forward(self, x):
        _, state = self.encoder(self.source_embedding(x[:, :self.source_len]))
        out, _ = self.decoder(self.target_embedding(x[:, self.source_len:]), state)
        return out


class Residual(nn.Module):
    """y = x + f(x), f the block's own layers."""

    def __init__(self, inner: nn.Sequential):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return x + self.inner(x)


class Attention(nn.Module):
    """Multi-head self-attention through torch's fused scaled_dot_product_attention (its default scale is
    1 / sqrt(dk); is_causal masks every later key; dropout_p drops attention weights, inverted). The query,
    key and value projections run as one matmul over their weights stacked, as nn.MultiheadAttention's
    in_proj does; each stays a Parameter of its own, the canonical weight it maps to."""

    def __init__(self, features: int, layer: dict):
        super().__init__()
        self.heads, self.causal, self.dropout = layer["heads"], layer["causal"], layer["dropout"]
        self.query, self.key, self.value, self.output = (nn.Linear(features, features) for _ in ATTENTION_PARTS)

    def forward(self, x):
        batch, steps, features = x.shape
        # head h owns features h*dk .. (h+1)*dk - 1: (batch, steps, heads, dk) -> (batch, heads, steps, dk)
        parts = (self.query, self.key, self.value)
        stacked = F.linear(x, torch.cat([part.weight for part in parts]), torch.cat([part.bias for part in parts]))
        q, k, v = (projected.view(batch, steps, self.heads, -1).transpose(1, 2)
                   for projected in stacked.split(features, dim=2))
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                             is_causal=self.causal)
        return self.output(out.transpose(1, 2).reshape(batch, steps, features))


class PositionalEmbedding(nn.Module):
    def __init__(self, max_len: int, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(max_len, features))

    def forward(self, x):
        return x + self.weight[:x.shape[1]]


class SequenceMean(nn.Module):
    """(batch, steps, features) -> (batch, features): the mean over the steps (torch has no module for it)."""

    def forward(self, x):
        return x.mean(dim=1)


class TiedOutput(nn.Module):
    """Logits x E^T + b sharing the embedding's Parameter itself (weight tying as PyTorch's
    word_language_model example does it): autograd sums both uses into its one gradient."""

    def __init__(self, embedding: nn.Embedding):
        super().__init__()
        self.weight = embedding.weight
        self.bias = nn.Parameter(torch.zeros(embedding.num_embeddings))

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


ACTIVATIONS = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh,
               "gelu": lambda: nn.GELU(approximate="none")}  # the exact (erf) form


def _spatial(layer: dict, in_shape) -> nn.Module:
    kind, padding = layer["type"], layer["padding"]
    if kind == "conv2d":
        size, pad_value = layer["kernel"], 0.0
        core = nn.Conv2d(in_shape[-1], layer["filters"], size, stride=layer["stride"])
    elif kind == "maxpool2d":
        size, pad_value = layer["pool"], float("-inf")
        core = nn.MaxPool2d(size, stride=layer["stride"])
    else:
        raise not_built("layer type", kind)
    if padding == "valid":
        return core
    if padding == "same":
        return nn.Sequential(SamePad(in_shape[:2], size, layer["stride"], pad_value), core)
    raise not_built("padding", padding)


def build_module(spec: dict) -> "tuple[nn.Sequential, Dict[str, nn.Module]]":
    """The model, and the module that holds each weighted IR layer's parameters, by layer name (a residual
    block's own layers included)."""
    by_name = {}
    modules, channels_first = _build_layers(infer_shapes(spec), by_name)
    if channels_first:
        modules.append(Permute(0, 2, 3, 1))
    return nn.Sequential(*modules), by_name


def _build_layers(shapes, by_name: Dict[str, nn.Module]) -> "tuple[list, bool]":
    """The modules of these (layer, in shape, out shape), and whether they leave activations NCHW."""
    modules = []
    channels_first = False
    for layer, in_shape, _ in shapes:
        kind = layer["type"]
        if kind in ("conv2d", "maxpool2d", "batchnorm") and len(in_shape) == 3 and not channels_first:
            modules.append(Permute(0, 3, 1, 2))
            channels_first = True
        if kind in ("flatten", "to_sequence") and channels_first:
            modules.append(Permute(0, 2, 3, 1))
            channels_first = False
        if kind == "residual":
            inner, inner_channels_first = _build_layers(block_shapes(layer, in_shape), by_name)
            if inner_channels_first:
                inner.append(Permute(0, 2, 3, 1))
            if channels_first:  # the block's layers take NHWC
                modules.append(Permute(0, 2, 3, 1))
                channels_first = False
            module = Residual(nn.Sequential(*inner))
        else:
            module = _layer_module(layer, in_shape, by_name)
        modules.append(module)
        if kind in WEIGHTED:  # set_weights finds them by name
            by_name[layer["name"]] = module[-1] if isinstance(module, nn.Sequential) else module
    return modules, channels_first


def _layer_module(layer: dict, in_shape, by_name: Dict[str, nn.Module]) -> nn.Module:
    kind = layer["type"]
    if kind in ("conv2d", "maxpool2d"):
        return _spatial(layer, in_shape)
    if kind == "batchnorm":
        norm = nn.BatchNorm2d if len(in_shape) == 3 else nn.BatchNorm1d
        # torch's momentum weighs the new batch; the IR's (Keras's) weighs the running value
        return norm(in_shape[-1], eps=layer["epsilon"], momentum=1.0 - layer["momentum"])
    if kind == "layer_norm":  # over the last axis, biased variance
        return nn.LayerNorm(in_shape[-1], eps=layer["epsilon"])
    if kind == "activation":
        return lookup(ACTIVATIONS, "activation", layer["fn"])()
    if kind == "dropout":
        return nn.Dropout(layer["rate"])
    if kind == "flatten":
        return nn.Flatten()
    if kind == "to_sequence":  # NHWC (batch, H, W, C) -> (batch, H * W, C), row by row
        return nn.Flatten(1, 2)
    if kind == "sequence_mean":
        return SequenceMean()
    if kind == "dense":
        return nn.Linear(in_shape[-1], layer["units"])
    if kind == "embedding":
        return nn.Embedding(layer["vocab"], layer["dim"])
    if kind == "lstm":
        return LSTMLayer(in_shape[-1], layer["units"], layer["return_sequences"])
    if kind == "seq2seq":
        return Seq2Seq(layer)
    if kind == "attention":
        return Attention(in_shape[-1], layer)
    if kind == "positional_embedding":
        return PositionalEmbedding(layer["max_len"], in_shape[-1])
    if kind == "tied_output":
        return TiedOutput(by_name[layer["embedding"]])  # the IR puts the embedding before it
    raise not_built("layer type", kind)


def _torch_params(kind: str, module: nn.Module) -> Dict[str, torch.Tensor]:
    if kind == "batchnorm":
        return {"gamma": module.weight, "beta": module.bias,
                "moving_mean": module.running_mean, "moving_var": module.running_var}
    if kind == "layer_norm":
        return {"gamma": module.weight, "beta": module.bias}
    if kind in ("embedding", "positional_embedding"):
        return {"embeddings": module.weight}
    if kind == "attention":
        return {part + suffix: getattr(getattr(module, part), attribute) for part in ATTENTION_PARTS
                for suffix, attribute in (("_kernel", "weight"), ("_bias", "bias"))}
    if kind == "tied_output":  # its kernel is the embedding's table, exported there
        return {"bias": module.bias}
    if kind == "lstm":
        return _lstm_params("", module.lstm)
    if kind == "seq2seq":
        return {"source_embeddings": module.source_embedding.weight,
                "target_embeddings": module.target_embedding.weight,
                **_lstm_params("encoder_", module.encoder), **_lstm_params("decoder_", module.decoder)}
    if kind in ("conv2d", "dense"):
        return {"kernel": module.weight, "bias": module.bias}
    raise not_built("weights of layer type", kind)


def _lstm_params(prefix: str, lstm: nn.LSTM) -> Dict[str, torch.Tensor]:
    """torch keeps two biases; the canonical one is their sum ("..._hh" marks torch's second, kept 0)."""
    return {prefix + "kernel": lstm.weight_ih_l0, prefix + "recurrent_kernel": lstm.weight_hh_l0,
            prefix + "bias": lstm.bias_ih_l0, prefix + "bias_hh": lstm.bias_hh_l0}


def make_optimizer(params, config: dict) -> torch.optim.Optimizer:
    """torch.optim's optimizers; Adam and AdamW as their fused kernels (fused=True: one pass over each
    weight, on the CPU too), which PyTorch documents as its fastest implementation. Its default on the CPU
    is a loop of small ops per weight: transformer-lm's steady epochs took about 5 % longer with it on the
    2-core Intel machine."""
    name = config["name"]
    if name == "sgd":
        return torch.optim.SGD(params, lr=config["lr"], momentum=config["momentum"],
                               nesterov=config["nesterov"], weight_decay=config["weight_decay"])
    if name == "adam":
        return torch.optim.Adam(params, lr=config["lr"], betas=(config["beta1"], config["beta2"]),
                                eps=config["epsilon"], fused=True)
    if name == "adadelta":
        return torch.optim.Adadelta(params, lr=config["lr"], rho=config["rho"], eps=config["epsilon"])
    if name == "adamw":
        return torch.optim.AdamW(params, lr=config["lr"], betas=(config["beta1"], config["beta2"]),
                                 eps=config["epsilon"], weight_decay=config["weight_decay"], fused=True)
    raise not_built("optimizer", name)


def make_scheduler(optimizer: torch.optim.Optimizer, recipe: dict):
    """The recipe's learning-rate schedule as a LambdaLR stepped after every update (Hugging Face's
    get_cosine_schedule_with_warmup is one); None without a schedule: the rate stays constant."""
    if "schedule" not in recipe:
        return None
    schedule = recipe["schedule"]
    factor = lookup({"warmup_cosine": schedules.factor}, "schedule", schedule["name"])
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: factor(schedule, step))


def loss_terms(loss: str, logits: torch.Tensor, labels: torch.Tensor):
    """The batch's mean loss, its weight, right predictions and predictions made (tensors: no host
    sync), as base.finish_metrics sums them."""
    if loss == "sigmoid_cross_entropy":
        logits = logits.squeeze(-1)
        value = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
        return value, len(labels), ((logits > 0) == labels.bool()).sum(), len(labels)
    flat = logits.reshape(-1, logits.shape[-1])
    flat_labels = labels.reshape(-1)
    right = flat.max(-1).indices == flat_labels  # argmax's first maximum, 2.4x faster on the CPU here
    if loss == "masked_sequence_softmax_cross_entropy":
        kept = flat_labels != PAD_ID
        count = kept.sum()
        return F.cross_entropy(flat, flat_labels, ignore_index=PAD_ID), count, (right & kept).sum(), count
    if loss in ("softmax_cross_entropy", "sequence_softmax_cross_entropy"):
        return F.cross_entropy(flat, flat_labels), len(labels), right.sum(), flat_labels.numel()
    raise not_built("loss", loss)


def batch_sums(loss, weight, right, made) -> torch.Tensor:
    """(loss x weight, weight, right, made) on the loss's device, in float64 so long epochs sum exactly."""
    return torch.stack([torch.as_tensor(value, dtype=torch.float64, device=loss.device)
                        for value in (loss * weight, weight, right, made)])


def torch_device(device: str) -> torch.device:
    """The torch device of a cell's "cpu" or "gpu", or an error saying torch sees no GPU."""
    if device == "gpu" and not torch.cuda.is_available():
        raise RuntimeError("device gpu requested, but torch %s sees no CUDA device (CUDA build: %s)"
                           % (torch.__version__, torch.version.cuda))
    return torch.device("cuda" if device == "gpu" else "cpu")


DTYPES = {"float32": torch.float32, "float64": torch.float64}


class Adapter(BaseAdapter):
    name = "pytorch"
    dtypes = tuple(DTYPES)

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        torch.set_num_threads(threads)
        self.torch_device = torch_device(device)
        torch.manual_seed(seed)  # dropout masks
        self.module, self.by_name = build_module(model)
        self.module.to(self.torch_device)
        trainable = [p for p in self.module.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(trainable, recipe["optimizer"])
        self.scheduler = make_scheduler(self.optimizer, recipe)
        self.float_inputs = model["input_dtype"].startswith("float")
        # float64 only for certification, which measures float32 rounding against it
        self.dtype = lookup(DTYPES, "dtype", recipe_dtype(recipe))
        self.module.to(self.dtype)
        self._tensors = {}  # id of a Split -> (the split, x, y on the device): converted once

    def versions(self):
        return {"torch": torch.__version__, "numpy": np.__version__}

    def threads_used(self):
        return torch.get_num_threads()

    def set_weights(self, weights):
        with torch.no_grad():
            for layer in self._layers():
                if layer["name"] not in self.by_name:
                    continue
                params = _torch_params(layer["type"], self.by_name[layer["name"]])
                for key, target in params.items():
                    if key.endswith("bias_hh"):  # torch's second LSTM bias; the canonical bias is their sum
                        target.zero_()
                        continue
                    value = to_out_in_layout(layer["type"], key, weights[layer["name"] + "/" + key])
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
            params = _torch_params(layer["type"], self.by_name[layer["name"]])
            for key, tensor in params.items():
                if key.endswith("bias_hh") or (gradients and key.startswith("moving_")):
                    continue
                if gradients:
                    value = tensor.grad
                else:
                    value = tensor.detach()
                    if key + "_hh" in params:
                        value = value + params[key + "_hh"].detach()
                out[layer["name"] + "/" + key] = from_out_in_layout(layer["type"], key, value.cpu().numpy()).copy()
        return out

    def loss_and_gradients(self, data):
        x_all, y_all = self._on_device(data)
        self.module.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = loss_terms(self.recipe["loss"], self.module(self._inputs(x_all, data.input_scale)), y_all)[0]
        loss.backward()
        gradients = self._export(gradients=True)
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss), gradients

    def apply_gradients(self, gradients):
        for layer in self._layers():
            if layer["name"] not in self.by_name:
                continue
            for key, param in _torch_params(layer["type"], self.by_name[layer["name"]]).items():
                if key.startswith("moving_"):
                    continue
                # torch's second LSTM bias gets the canonical bias's gradient, as in training
                canonical = key[:-len("_hh")] if key.endswith("bias_hh") else key
                value = to_out_in_layout(layer["type"], canonical, gradients[layer["name"] + "/" + canonical])
                param.grad = torch.from_numpy(np.ascontiguousarray(value)).to(param.device, param.dtype)
        self._step()
        self.optimizer.zero_grad(set_to_none=True)

    def _step(self):
        self.optimizer.step()
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
            logits = self.module(self._inputs(x_all[index], data.input_scale))
            loss, weight, right, made = loss_terms(loss_name, logits, y_all[index])
            loss.backward()
            self._step()
            sums += batch_sums(loss.detach(), weight, right, made)
        return finish_metrics(loss_name, *sums.tolist())

    def evaluate(self, data):
        x_all, y_all = self._on_device(data)
        loss_name = self.recipe["loss"]
        self.module.eval()
        sums = torch.zeros(4, dtype=torch.float64, device=self.torch_device)
        with torch.inference_mode():
            for batch in batch_slices(len(data), self.recipe["batch_size"]):
                logits = self.module(self._inputs(x_all[batch], data.input_scale))
                loss, weight, right, made = loss_terms(loss_name, logits, y_all[batch])
                sums += batch_sums(loss, weight, right, made)
        return finish_metrics(loss_name, *sums.tolist())

    def predict(self, x):
        self.module.eval()
        inputs = torch.from_numpy(np.ascontiguousarray(x)).to(self.torch_device)
        with torch.inference_mode():
            return self.module(inputs.to(self.dtype) if self.float_inputs else inputs.long()).cpu().numpy()

    def serving(self):
        """eval() and torch.inference_mode, as PyTorch's guides serve a model; the stored pixels are scaled
        on the device.

        Not torch.compile'd: on the 2-core CPU machine (torch 2.13, inductor, one thread, beside other work)
        cnn-mnist's compiled module took 28-40 s at its first call and served batch 1 no faster (median
        0.547 ms against eager's 0.518 ms, 1,200 calls of each, interleaved); only batch 128 gained (67 ms
        against 116 ms). The protocol times batch-1 latency, and a 30 s first call would dominate a cell."""
        self.module.eval()
        scale = self.input_scale

        def serve(x):
            inputs = torch.from_numpy(np.ascontiguousarray(x)).to(self.torch_device)
            with torch.inference_mode():
                inputs = self._inputs(inputs, scale) if self.float_inputs else inputs.long()
                return self.module(inputs).cpu().numpy()
        return serve

    def training_outputs(self, x):
        self.module.train()
        inputs = torch.from_numpy(np.ascontiguousarray(x)).to(self.torch_device).to(self.dtype)
        with torch.no_grad():
            return self.module(inputs).cpu().numpy()

    def synchronise(self):
        if self.torch_device.type == "cuda":
            torch.cuda.synchronize()
