"""The model IR as users declare models with it: `from dlbench import ir` (docs/ir.md).

The same functions as dlbench.shared.ir, which the workers import; this is the stable public path.
"""
from dlbench.shared.ir import (  # noqa: F401
    ACTIVATIONS,
    LAYER_SETTINGS,
    LOSSES,
    PADDINGS,
    IRError,
    activation,
    batchnorm,
    conv2d,
    dense,
    dropout,
    embedding,
    flatten,
    infer_shapes,
    layer_norm,
    lstm,
    maxpool2d,
    model,
    param_shapes,
    relu,
)

__all__ = ["ACTIVATIONS", "LAYER_SETTINGS", "LOSSES", "PADDINGS", "IRError", "activation", "batchnorm", "conv2d",
           "dense", "dropout", "embedding", "flatten", "infer_shapes", "layer_norm", "lstm", "maxpool2d", "model",
           "param_shapes", "relu"]
