"""PyTorch adapters with a deliberate mapping bug that still round-trips exactly: certification must
catch them (a check that cannot fail proves nothing)."""
import numpy as np

from dlbench.frameworks import pytorch


def swap_input_and_forget_gates(value: np.ndarray) -> np.ndarray:
    units = value.shape[-1] // 4
    order = np.r_[units:2 * units, 0:units, 2 * units:4 * units]
    return value[..., order]


def transpose_kernel_rows_and_columns(value: np.ndarray) -> np.ndarray:
    return value.transpose(1, 0, 2, 3)


class SwappedGates(pytorch.Adapter):
    def set_weights(self, weights):
        super().set_weights({k: swap_input_and_forget_gates(v) if k.startswith("lstm") else v
                             for k, v in weights.items()})

    def get_weights(self):
        return {k: swap_input_and_forget_gates(v) if k.startswith("lstm") else v
                for k, v in super().get_weights().items()}


class TransposedConv(pytorch.Adapter):
    def set_weights(self, weights):
        super().set_weights({k: transpose_kernel_rows_and_columns(v) if k.endswith("conv2d_1/kernel") else v
                             for k, v in weights.items()})

    def get_weights(self):
        return {k: transpose_kernel_rows_and_columns(v) if k.endswith("conv2d_1/kernel") else v
                for k, v in super().get_weights().items()}
