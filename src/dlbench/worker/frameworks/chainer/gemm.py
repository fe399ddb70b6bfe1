"""The GEMM whose float32 peak Chainer's runs are measured against: numpy.dot, since Chainer computes
with numpy on the CPU, so numpy's BLAS is what its runs use.

Worker side (Python 3.8, numpy and Chainer): dlbench.worker.gemm_peak calls `product` after importing the
adapter's module, so the threads and flags fixed at import are those of a measured run.
"""
from __future__ import annotations

import numpy as np


def product(a, b, device: str, threads: int):
    """(method, a function running one finished product of a and b)."""
    if device == "gpu":
        raise RuntimeError("chainer computes on the CPU only in dlbench")
    import threadpoolctl
    limiter = threadpoolctl.threadpool_limits(limits=threads)
    return "numpy.dot (chainer's CPU path)", lambda: (limiter, np.dot(a, b))
