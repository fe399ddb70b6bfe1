"""The GEMM whose float32 peak MXNet's runs are measured against: mx.nd.FullyConnected (x times y
transposed), then mx.nd.waitall. Gluon's Dense layers run it, on oneDNN; mx.nd.dot runs on the wheel's
OpenBLAS, at half the speed (2-core EPYC, n = 2048: 246 against 495 GFLOP/s), which made MXNet's
cnn-mnist MFU read 107 %.

Worker side (Python 3.8, numpy and MXNet): dlbench.worker.gemm_peak calls `product` after importing the
adapter's module, so the threads and flags fixed at import are those of a measured run.
"""
from __future__ import annotations


def product(a, b, device: str, threads: int):
    """(method, a function running one finished product of a and b); threads are OpenMP's, set at import."""
    import mxnet as mx
    ctx = mx.gpu(0) if device == "gpu" else mx.cpu()
    x, y = mx.nd.array(a, ctx=ctx), mx.nd.array(b, ctx=ctx)

    def run():
        mx.nd.FullyConnected(x, y, no_bias=True, num_hidden=y.shape[0])
        mx.nd.waitall()
    return "mx.nd.FullyConnected", run
