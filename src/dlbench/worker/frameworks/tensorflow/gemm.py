"""The GEMM whose float32 peak TensorFlow's runs are measured against: tf.linalg.matmul, its result
copied to numpy so the product has finished.

Worker side (Python 3.8, numpy and TensorFlow): dlbench.worker.gemm_peak calls `product` after importing the
adapter's module, so the threads and flags fixed at import are those of a measured run.
"""
from __future__ import annotations


def product(a, b, device: str, threads: int):
    """(method, a function running one finished product of a and b)."""
    import tensorflow as tf
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    except RuntimeError:
        pass  # already initialised by the adapter's module with the same budget
    where = "/GPU:0" if device == "gpu" else "/CPU:0"
    with tf.device(where):
        x, y = tf.constant(a), tf.constant(b)

    def run():
        with tf.device(where):
            tf.linalg.matmul(x, y).numpy()
    return "tf.linalg.matmul", run
