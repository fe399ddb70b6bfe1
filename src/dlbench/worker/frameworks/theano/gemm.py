"""The GEMM whose float32 peak Theano's runs are measured against: a theano.function of T.dot, Theano's
gemm against the BLAS its adapter links.

Worker side (Python 3.8, numpy and Theano): dlbench.worker.gemm_peak calls `product` after importing the
adapter's module, so the threads and flags fixed at import are those of a measured run.
"""
from __future__ import annotations


def product(a, b, device: str, threads: int):
    """(method, a function running one finished product of a and b); threads are OpenMP's, set at import."""
    if device == "gpu":
        raise RuntimeError("theano computes on the CPU only in dlbench")
    import theano
    import theano.tensor as T
    x, y = T.fmatrix("x"), T.fmatrix("y")
    dot = theano.function([x, y], T.dot(x, y))
    return "theano.function(T.dot)", lambda: dot(a, b)
