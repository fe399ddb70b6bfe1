"""The GEMM whose float32 peak JAX's runs are measured against: jax.numpy.dot, jitted, waited for
with block_until_ready.

Worker side (Python 3.8, numpy and JAX): dlbench.worker.gemm_peak calls `product` after importing the
adapter's module, so the threads and flags fixed at import are those of a measured run.
"""
from __future__ import annotations


def product(a, b, device: str, threads: int):
    """(method, a function running one finished product of a and b); threads are XLA's, set at import."""
    import jax
    import jax.numpy as jnp
    where = jax.devices("gpu" if device == "gpu" else "cpu")[0]
    x, y = jax.device_put(a, where), jax.device_put(b, where)
    dot = jax.jit(jnp.dot)
    return "jax.numpy.dot", lambda: dot(x, y).block_until_ready()
