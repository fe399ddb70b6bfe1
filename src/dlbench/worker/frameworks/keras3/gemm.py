"""The GEMM whose float32 peak Keras 3's runs are measured against: the product of the backend it runs
on (KERAS_BACKEND, which its recipe sets), as that backend's own runs are.

Worker side (Python 3.8, numpy and the backend): dlbench.worker.gemm_peak calls `product` after importing the
adapter's module, so the threads and flags fixed at import are those of a measured run.
"""
from __future__ import annotations

import importlib
import os

BACKEND_PACKAGES = {"tensorflow": "tensorflow", "jax": "jax", "torch": "pytorch"}


def product(a, b, device: str, threads: int):
    """(method, a function running one finished product of a and b), by the backend's own peak."""
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if backend not in BACKEND_PACKAGES:
        raise RuntimeError("no GEMM known for Keras backend %r; known: %s" % (backend, ", ".join(BACKEND_PACKAGES)))
    gemm = importlib.import_module("dlbench.worker.frameworks.%s.gemm" % BACKEND_PACKAGES[backend])
    return gemm.product(a, b, device, threads)
