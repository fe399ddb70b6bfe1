"""PyTorch adapters with a deliberate mapping bug that still round-trips exactly: certification must
catch them (a check that cannot fail proves nothing)."""
import numpy as np
import torch

from dlbench.worker.frameworks.pytorch import adapter, layers


def swap_input_and_forget_gates(value: np.ndarray) -> np.ndarray:
    units = value.shape[-1] // 4
    order = np.r_[units:2 * units, 0:units, 2 * units:4 * units]
    return value[..., order]


def transpose_kernel_rows_and_columns(value: np.ndarray) -> np.ndarray:
    return value.transpose(1, 0, 2, 3)


class SwappedGates(adapter.Adapter):
    def set_weights(self, weights):
        super().set_weights({k: swap_input_and_forget_gates(v) if k.startswith("lstm") else v
                             for k, v in weights.items()})

    def get_weights(self):
        return {k: swap_input_and_forget_gates(v) if k.startswith("lstm") else v
                for k, v in super().get_weights().items()}


class TransposedConv(adapter.Adapter):
    def set_weights(self, weights):
        super().set_weights({k: transpose_kernel_rows_and_columns(v) if k.endswith("conv2d_1/kernel") else v
                             for k, v in weights.items()})

    def get_weights(self):
        return {k: transpose_kernel_rows_and_columns(v) if k.endswith("conv2d_1/kernel") else v
                for k, v in super().get_weights().items()}


class _Zeroing(torch.nn.Module):
    """Dropout that zeroes at a given rate and scales the kept values by a given factor."""

    def __init__(self, rate: float, scale: float):
        super().__init__()
        self.rate, self.scale = rate, scale

    def forward(self, x):
        if not self.training:
            return x
        return x * (torch.rand_like(x) >= self.rate) * self.scale


def _replace_dropout(adapter: adapter.Adapter, make) -> None:
    for index, module in enumerate(adapter.module):
        if isinstance(module, torch.nn.Dropout):
            adapter.module[index] = make(module.p)


class DoubledDropout(adapter.Adapter):
    """Drops twice the IR's rate (scaled for it): a rate read from the wrong place."""

    def __init__(self, *args):
        super().__init__(*args)
        _replace_dropout(self, lambda p: torch.nn.Dropout(min(2 * p, 0.9)))


class UnscaledDropout(adapter.Adapter):
    """Zeroes at the right rate but keeps values as they are: 'vanilla' dropout, whose inference
    output then differs from training's by the factor 1 - rate."""

    def __init__(self, *args):
        super().__init__(*args)
        _replace_dropout(self, lambda p: _Zeroing(p, 1.0))


class ChannelDropout(adapter.Adapter):
    """Drops whole feature maps (torch's Dropout2d) where the IR drops single values."""

    def __init__(self, *args):
        super().__init__(*args)
        _replace_dropout(self, lambda p: _ChannelsLast2d(p))


class _ChannelsLast2d(torch.nn.Module):
    def __init__(self, rate: float):
        super().__init__()
        self.inner = torch.nn.Dropout2d(rate)

    def forward(self, x):  # the model's images are NHWC here: Dropout2d wants NCHW
        if x.dim() != 4:
            return torch.nn.functional.dropout(x, self.inner.p, self.training)
        return self.inner(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)


class KerasMomentum(adapter.Adapter):
    """Hands the IR's (Keras's) BatchNorm momentum to torch unconverted: torch weighs the new batch by
    it, so the moving statistics move 99 % of the way at each step instead of 1 %."""

    def __init__(self, model, *args):
        super().__init__(model, *args)
        momentum = {layer["name"]: layer["momentum"] for layer in model["layers"] if layer["type"] == "batchnorm"}
        for name, value in momentum.items():
            self.by_name[name].momentum = value


class _OptimizerBug(adapter.Adapter):
    """An optimiser setting read wrongly: the recipe's optimiser is built with one value changed."""

    @staticmethod
    def changed(config: dict) -> dict:
        raise NotImplementedError

    def __init__(self, model, recipe, *args):
        super().__init__(model, dict(recipe, optimizer=self.changed(dict(recipe["optimizer"]))), *args)


class HundredfoldDecay(_OptimizerBug):
    @staticmethod
    def changed(config):
        return dict(config, weight_decay=100 * config["weight_decay"])


class NesterovDropped(_OptimizerBug):
    @staticmethod
    def changed(config):
        return dict(config, nesterov=False)


class TenfoldEpsilon(_OptimizerBug):
    @staticmethod
    def changed(config):
        return dict(config, epsilon=10 * config["epsilon"])


class ChangedRho(_OptimizerBug):
    @staticmethod
    def changed(config):
        return dict(config, rho=0.9)


class _ScheduleBug(adapter.Adapter):
    """A schedule setting read wrongly: the recipe's learning-rate schedule is built with one value changed."""

    @staticmethod
    def changed(schedule: dict) -> dict:
        raise NotImplementedError

    def __init__(self, model, recipe, *args):
        if "schedule" in recipe:  # the certificate's other checks run at a constant rate
            recipe = dict(recipe, schedule=self.changed(dict(recipe["schedule"])))
        super().__init__(model, recipe, *args)


class LateWarmup(_ScheduleBug):
    @staticmethod
    def changed(schedule):
        return dict(schedule, warmup_steps=schedule["warmup_steps"] + 1)


class LongerTotal(_ScheduleBug):
    @staticmethod
    def changed(schedule):
        return dict(schedule, total_steps=schedule["total_steps"] + 1)


class HigherFinalRate(_ScheduleBug):
    @staticmethod
    def changed(schedule):
        return dict(schedule, final_lr_fraction=1.1 * schedule["final_lr_fraction"])


class UnscaledServing(adapter.Adapter):
    """A serving path that forgot the training's input scaling: it serves stored pixels as 0-255 where
    predict (and training) see them in [0, 1]."""

    def serving(self):
        self.input_scale = None
        return super().serving()


class DoubledAttentionDropout(adapter.Adapter):
    """Drops twice the IR's rate of attention weights: the whole-model probes run with dropout off."""

    def __init__(self, *args):
        super().__init__(*args)
        for module in self.module.modules():
            if isinstance(module, layers.Attention):
                module.dropout = min(2 * module.dropout, 0.9)


class TrainingModeServing(adapter.Adapter):
    """A serving path that leaves the model in training mode: it draws and applies dropout masks in every
    served call, which changes nothing where a model has no dropout."""

    def serving(self):
        serve = super().serving()
        self.module.train()
        return serve


class TanhGelu(adapter.Adapter):
    """The tanh approximation of GELU where the IR declares the exact (erf) form."""

    def __init__(self, *args):
        super().__init__(*args)
        for module in self.module.modules():
            if isinstance(module, torch.nn.GELU):
                module.approximate = "tanh"


class Float32AsBfloat16(adapter.Adapter):
    """Declares the recipe's reduced precision and trains in float32: the weights, the optimiser and every
    operation as a float32 cell's."""

    def __init__(self, model, recipe, *args):
        super().__init__(model, {key: value for key, value in recipe.items() if key != "precision"}, *args)
        self.precision = recipe.get("precision", "float32")


class HalfMasterWeights(adapter.Adapter):
    """Mixed precision whose master weights are kept in the half type: the module is cast to it, as "bfloat16"
    casts it, while torch.autocast computes as mixed precision does."""

    def __init__(self, *args):
        super().__init__(*args)
        self.module.to(self.autocast)
