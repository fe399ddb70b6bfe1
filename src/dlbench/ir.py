"""The model IR as users declare models with it: `from dlbench import ir` (docs/ir.md).

The same functions as dlbench.shared.ir, which the workers import; this is the stable public path. Every
layer kind of the IR has its constructor here (a test checks them against ir.LAYER_SETTINGS and docs/ir.md);
the detector, which only the built-in frcnn-voc trains, stays in dlbench.shared.ir.
"""
from dlbench.shared.ir import (  # noqa: F401
    ACTIVATIONS,
    LAYER_SETTINGS,
    LOSSES,
    PADDINGS,
    POSITIVE_SETTINGS,
    RATE_SETTINGS,
    IRError,
    activation,
    attention,
    batchnorm,
    conv2d,
    dense,
    dropout,
    embedding,
    flatten,
    grouped_query_attention,
    infer_shapes,
    layer_norm,
    lstm,
    maxpool2d,
    model,
    param_shapes,
    positional_embedding,
    relu,
    residual,
    rms_norm,
    seq2seq,
    sequence_mean,
    swiglu,
    tied_output,
    to_sequence,
)

__all__ = ["ACTIVATIONS", "LAYER_SETTINGS", "LOSSES", "PADDINGS", "POSITIVE_SETTINGS", "RATE_SETTINGS", "IRError",
           "activation", "attention", "batchnorm", "conv2d", "dense", "dropout", "embedding", "flatten",
           "grouped_query_attention", "infer_shapes", "layer_norm", "lstm", "maxpool2d", "model", "param_shapes",
           "positional_embedding", "relu", "residual", "rms_norm", "seq2seq", "sequence_mean", "swiglu",
           "tied_output", "to_sequence"]
