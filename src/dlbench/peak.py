"""The float32 GEMM peak of one framework environment: what its own matrix product reaches here.

Worker side (Python 3.8, numpy and the one framework). Run by the harness as
`<framework env python> -m dlbench.peak ADAPTER --device cpu --threads N [--size N] [--repeats K]`
with the worker's variables (threads, caches), so the product runs on the BLAS or oneDNN the framework
links, with the threads its runs get. Prints one JSON line: gflops (best of the repeats, 2 n^3 FLOPs
per product), method, size, repeats, times_s; or error and exit status 1.

Each framework's own call, after one warm-up product (which also compiles where the framework
compiles), every timed product finished before the clock stops:

- pytorch, keras-torch: torch.matmul (torch.cuda.synchronize on a GPU)
- tensorflow, keras-tensorflow: tf.linalg.matmul, its result copied to numpy
- jax, keras-jax: jax.numpy.dot, jitted, block_until_ready
- mxnet: mx.nd.FullyConnected (x times y transposed), then mx.nd.waitall. Gluon's Dense layers run it,
  on oneDNN; mx.nd.dot runs on the wheel's OpenBLAS, at half the speed here (2 cores, n = 2048: 246
  against 495 GFLOP/s), which made MXNet's cnn-mnist MFU read 107 %
- chainer: numpy.dot; Chainer computes with numpy on the CPU, so numpy's BLAS is what its runs use
- theano: a theano.function of T.dot (Theano's gemm against the BLAS its adapter links)

The adapter's module is imported first: it sets the threads and flags that are fixed at import
(OpenMP for MXNet and Theano, XLA's for JAX, Theano's BLAS), as in a measured run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np

from dlbench.worker import load_adapter_class


def _operands(size: int):
    rng = np.random.RandomState(0)
    return (rng.standard_normal((size, size)).astype(np.float32),
            rng.standard_normal((size, size)).astype(np.float32))


def backend(adapter: str) -> str:
    """The library whose product a framework's runs compute with, from its adapter module."""
    module = adapter.partition(":")[0].rsplit(".", 1)[-1]
    if module == "keras3":
        return {"tensorflow": "tensorflow_nn", "jax": "jax_flax", "torch": "pytorch"}.get(
            os.environ.get("KERAS_BACKEND", "tensorflow"), "tensorflow_nn")
    return module


def product(adapter: str, size: int, device: str, threads: int):
    """(method, a function running one finished product)."""
    a, b = _operands(size)
    kind = backend(adapter)
    if kind == "pytorch":
        import torch
        torch.set_num_threads(threads)
        where = torch.device("cuda" if device == "gpu" else "cpu")
        x, y = torch.from_numpy(a).to(where), torch.from_numpy(b).to(where)

        def run():
            torch.matmul(x, y)
            if device == "gpu":
                torch.cuda.synchronize()
        return "torch.matmul", run
    if kind == "tensorflow_nn":
        import tensorflow as tf
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
        except RuntimeError:
            pass  # already initialised by the adapter's module with the same budget
        with tf.device("/GPU:0" if device == "gpu" else "/CPU:0"):
            x, y = tf.constant(a), tf.constant(b)

        def run():
            with tf.device("/GPU:0" if device == "gpu" else "/CPU:0"):
                tf.linalg.matmul(x, y).numpy()
        return "tf.linalg.matmul", run
    if kind == "jax_flax":
        import jax
        import jax.numpy as jnp
        where = jax.devices("gpu" if device == "gpu" else "cpu")[0]
        x, y = jax.device_put(a, where), jax.device_put(b, where)
        dot = jax.jit(jnp.dot)
        return "jax.numpy.dot", lambda: dot(x, y).block_until_ready()
    if kind == "mxnet_gluon":
        import mxnet as mx
        ctx = mx.gpu(0) if device == "gpu" else mx.cpu()
        x, y = mx.nd.array(a, ctx=ctx), mx.nd.array(b, ctx=ctx)

        def run():
            mx.nd.FullyConnected(x, y, no_bias=True, num_hidden=y.shape[0])
            mx.nd.waitall()
        return "mx.nd.FullyConnected", run
    if device == "gpu":
        raise RuntimeError("%s computes on the CPU only" % kind)
    if kind == "chainer_nn":
        import threadpoolctl
        limiter = threadpoolctl.threadpool_limits(limits=threads)
        return "numpy.dot (chainer's CPU path)", lambda: (limiter, np.dot(a, b))
    if kind == "theano_fn":
        import theano
        import theano.tensor as T
        x, y = T.fmatrix("x"), T.fmatrix("y")
        dot = theano.function([x, y], T.dot(x, y))
        return "theano.function(T.dot)", lambda: dot(a, b)
    if kind == "numpy_only":  # tests: no framework, numpy's own BLAS
        return "numpy.dot", lambda: np.dot(a, b)
    raise RuntimeError("no GEMM known for adapter %s" % adapter)


def measure(adapter: str, size: int = 2048, repeats: int = 5, device: str = "cpu", threads: int = 1) -> dict:
    """Imports the adapter's module (its import-time settings), warms up once, then times `repeats`
    products and keeps the fastest."""
    if backend(adapter) != "numpy_only":
        load_adapter_class(adapter)
    method, run = product(adapter, size, device, threads)
    run()
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        run()
        times.append(time.perf_counter() - tic)
    return {"gflops": 2.0 * size ** 3 / min(times) / 1e9, "method": method, "size": size, "repeats": repeats,
            "times_s": times}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlbench.peak")
    parser.add_argument("adapter", help="module:Class of the framework's adapter, or numpy_only")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the framework prints goes to stderr; stdout carries the one result line
    sys.stdout = sys.stderr
    try:
        result = measure(args.adapter, args.size, args.repeats, args.device, args.threads)
    except Exception as error:
        traceback.print_exc()
        out.write(json.dumps({"error": "%s: %s" % (type(error).__name__, error)}) + "\n")
        out.flush()
        return 1
    out.write(json.dumps(result) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
