"""The GEMM whose float32 peak PyTorch's runs are measured against: torch.matmul, synchronised on a GPU.

Worker side (Python 3.8, numpy and torch): dlbench.worker.gemm_peak calls `product` after importing the
adapter's module, so the threads and flags fixed at import are those of a measured run.
"""
from __future__ import annotations


def product(a, b, device: str, threads: int):
    """(method, a function running one finished product of a and b)."""
    import torch
    torch.set_num_threads(threads)
    where = torch.device("cuda" if device == "gpu" else "cpu")
    x, y = torch.from_numpy(a).to(where), torch.from_numpy(b).to(where)

    def run():
        torch.matmul(x, y)
        if device == "gpu":
            torch.cuda.synchronize()
    return "torch.matmul", run
