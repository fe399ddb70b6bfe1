"""The float32 GEMM peak of one framework environment: what its own matrix product reaches here.

Worker side (Python 3.8, numpy and the one framework). Run by the harness as
`<framework env python> -m dlbench.worker.gemm_peak ADAPTER --device cpu --threads N [--size N] [--repeats K]`
with the worker's variables (threads, caches), so the product runs on the BLAS or oneDNN the framework
links, with the threads its runs get. Prints one JSON line: gflops (best of the repeats, 2 n^3 FLOPs
per product), method, size, repeats, times_s; or error and exit status 1.

Each framework's own product lives in its package (dlbench.worker.frameworks.<name>.peak), beside its
adapter; it is run once as a warm-up (which also compiles where the framework compiles), then timed,
every product finished before the clock stops.

The adapter's module is imported first: it sets the threads and flags that are fixed at import
(OpenMP for MXNet and Theano, XLA's for JAX, Theano's BLAS), as in a measured run.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback

import numpy as np

from dlbench.worker.base import sibling_module
from dlbench.worker.cell import load_adapter_class


def _operands(size: int):
    rng = np.random.RandomState(0)
    return (rng.standard_normal((size, size)).astype(np.float32),
            rng.standard_normal((size, size)).astype(np.float32))


def product(adapter: str, size: int, device: str, threads: int):
    """(method, a function running one finished product), from the framework's own peak module."""
    a, b = _operands(size)
    return importlib.import_module(sibling_module(adapter, "gemm")).product(a, b, device, threads)


def measure(adapter: str, size: int = 2048, repeats: int = 5, device: str = "cpu", threads: int = 1) -> dict:
    """Imports the adapter's module (its import-time settings), warms up once, then times `repeats`
    products and keeps the fastest."""
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
    parser = argparse.ArgumentParser(prog="python -m dlbench.worker.gemm_peak")
    parser.add_argument("adapter", help="module:Class of the framework's adapter")
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
