"""PyTorch's Faster R-CNN, the reference every other framework's detector is certified against.

Each IR part is built by the classifier's build_module (layers.py; NHWC in and out). RoI Align and NMS
come from torch's primitives, not torchvision.ops: torchvision's wheels on PyPI are CUDA builds that
cannot load beside the CPU torch dlbench installs (torchvision's CPU wheels live on PyTorch's own
index only), and one code path serves both devices. RoI Align is the shared plan
(pipeline.roi_align_plan) applied by embedding_bag: a weighted gather-sum of feature-map rows whose
gradient scatters back, never materialising the gathered rows. NMS is the pairwise IoU and the greedy
pass's fixed point (shared/detection/nms.fixed_point_keep) in torch on the run's device.
"""
from __future__ import annotations

from typing import Dict

import numpy as np
import torch
import torch.nn.functional as F

from dlbench.shared.detection.pipeline import SMOOTH_L1_BETA
from dlbench.shared.ir import detector_parts
from dlbench.worker.base import lookup, recipe_dtype
from dlbench.worker.detector import LOSS_NAMES, DetectorAdapter
from dlbench.worker.frameworks.pytorch.adapter import DTYPES, torch_device
from dlbench.worker.frameworks.pytorch.layers import build_module, layout, torch_params
from dlbench.worker.frameworks.pytorch.optimizers import make_optimizer


def rpn_losses(objectness, deltas, labels, targets, weights):
    sampled = labels >= 0
    count = sampled.sum().clamp(min=1)
    # summed over the count rather than averaged: an image with no anchor inside it samples none (0, not NaN)
    rpn_objectness = F.binary_cross_entropy_with_logits(objectness[sampled], labels[sampled].to(objectness.dtype),
                                                        reduction="sum") / count
    box = F.smooth_l1_loss(deltas, targets, beta=SMOOTH_L1_BETA, reduction="none") * weights
    return rpn_objectness, box.sum() / count


def head_losses(logits, box_deltas, labels, targets, weights):
    rows = torch.arange(len(labels), device=labels.device)
    own = box_deltas.reshape(len(labels), -1, 4)[rows, labels]
    box = F.smooth_l1_loss(own, targets, beta=SMOOTH_L1_BETA, reduction="none") * weights
    head_class = F.cross_entropy(logits, labels)
    return head_class, box.sum() / max(len(labels), 1), (logits.argmax(1) == labels).sum()


class Detector(DetectorAdapter):
    name = "pytorch"
    dtypes = tuple(DTYPES)

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        torch.set_num_threads(threads)
        self.torch_device = torch_device(device)
        self.dtype = lookup(DTYPES, "dtype", recipe_dtype(recipe))
        self.parts, self.by_name, self.kinds = torch.nn.ModuleDict(), {}, {}
        for name, part in detector_parts(model).items():
            self.parts[name], modules = build_module(part)
            self.by_name.update(modules)
            self.kinds.update((layer["name"], layer["type"]) for layer in part["layers"])
        self.parts.to(self.torch_device, self.dtype)
        self.optimizer = make_optimizer(list(self.parts.parameters()), recipe["optimizer"])
        self.features = None

    def versions(self):
        return {"torch": torch.__version__, "numpy": np.__version__}

    def threads_used(self):
        return torch.get_num_threads()

    def synchronise(self):
        if self.torch_device.type == "cuda":
            torch.cuda.synchronize()

    # ---- weights -------------------------------------------------------------------------------

    def set_weights(self, weights):
        with torch.no_grad():
            for layer_name, module in self.by_name.items():
                for key, target in torch_params(self.kinds[layer_name], module).items():
                    value = layout(self.kinds[layer_name]).to_native(key, weights[layer_name + "/" + key])
                    target.copy_(torch.from_numpy(np.ascontiguousarray(value)))

    def get_weights(self):
        return self._export(gradients=False)

    def _export(self, gradients: bool) -> Dict[str, np.ndarray]:
        out = {}
        for layer_name, module in self.by_name.items():
            for key, tensor in torch_params(self.kinds[layer_name], module).items():
                value = tensor.grad if gradients else tensor.detach()
                out[layer_name + "/" + key] = layout(self.kinds[layer_name]).to_canonical(key,
                                                                 value.cpu().numpy()).copy()
        return out

    # ---- the network ---------------------------------------------------------------------------

    def _tensor(self, array, dtype=None):
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.torch_device, dtype or self.dtype)

    def _rpn(self, x):
        features = self.parts["backbone"](x)
        hidden = self.parts["rpn"](features)
        return features, self.parts["rpn_cls"](hidden).reshape(-1), self.parts["rpn_box"](hidden).reshape(-1, 4)

    def _head(self, features, plan_index, plan_weights):
        flat = features.reshape(-1, features.shape[-1])
        rois, bins, corners = plan_index.shape
        pooled = F.embedding_bag(self._tensor(plan_index.reshape(-1, corners), torch.long), flat,
                                 per_sample_weights=self._tensor(plan_weights.reshape(-1, corners)), mode="sum")
        size = int(round(bins ** 0.5))
        hidden = self.parts["head"](pooled.reshape(rois, size, size, -1))
        return self.parts["cls"](hidden), self.parts["box"](hidden)

    def rpn_outputs(self, x):
        with torch.no_grad():
            self.features, objectness, deltas = self._rpn(self._tensor(x))
        return objectness.cpu().numpy(), deltas.cpu().numpy()

    def head_outputs(self, rois, plan_index, plan_weights):
        with torch.no_grad():
            logits, deltas = self._head(self.features, plan_index, plan_weights)
        return logits.cpu().numpy(), deltas.cpu().numpy()

    def _losses(self, x, targets):
        features, objectness, deltas = self._rpn(self._tensor(x))
        rpn = rpn_losses(objectness, deltas, self._tensor(targets["rpn_labels"], torch.long),
                         self._tensor(targets["rpn_targets"]), self._tensor(targets["rpn_weights"]))
        logits, box_deltas = self._head(features, targets["plan_index"], targets["plan_weights"])
        head = head_losses(logits, box_deltas, self._tensor(targets["roi_labels"], torch.long),
                           self._tensor(targets["roi_targets"]), self._tensor(targets["roi_weights"]))
        return rpn + head[:2], head[2]

    def train_step(self, x, targets):
        self.optimizer.zero_grad(set_to_none=True)
        losses, right = self._losses(x, targets)
        sum(losses).backward()
        self.optimizer.step()
        values = torch.stack([loss.detach().to(torch.float64) for loss in losses] + [right.to(torch.float64)])
        return dict(zip(LOSS_NAMES + ("right",), values.tolist()))

    def losses_and_gradients(self, x, targets):
        self.optimizer.zero_grad(set_to_none=True)
        losses, _ = self._losses(x, targets)
        sum(losses).backward()
        gradients = self._export(gradients=True)
        self.optimizer.zero_grad(set_to_none=True)
        return dict(zip(LOSS_NAMES, (float(loss) for loss in losses))), gradients

    def nms(self, boxes, scores, threshold):
        """Greedy NMS on the run's device: the pairwise IoU in torch, then the greedy pass as
        shared/detection/nms.fixed_point_keep computes it (torch has no NMS of its own; torchvision's
        is not installed, see the module's doc)."""
        if len(boxes) == 0:
            return np.zeros(0, np.int64)
        order = np.argsort(-np.asarray(scores), kind="stable")
        x1, y1, x2, y2 = torch.from_numpy(np.asarray(boxes, np.float32)[order]).to(self.torch_device).unbind(1)
        area = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
        # one coordinate at a time, in place: a third of the time of (N, N, 2) corner blocks on a CPU
        inter = (torch.minimum(x2[:, None], x2[None]) - torch.maximum(x1[:, None], x1[None])).clamp_(min=0)
        inter.mul_((torch.minimum(y2[:, None], y2[None]) - torch.maximum(y1[:, None], y1[None])).clamp_(min=0))
        # IoU; two zero-area boxes give 0 / 0 = NaN, which no threshold passes: they overlap nothing
        overlaps = inter.div_(area[:, None] + area[None] - inter)
        suppress = torch.triu(overlaps > threshold, diagonal=1).to(torch.float32)
        keep = torch.ones(len(order), device=self.torch_device)
        while True:
            again = (keep @ suppress == 0).to(torch.float32)
            if torch.equal(again, keep):
                return order[keep.bool().cpu().numpy()]
            keep = again
