"""Peaks for MFU: the float32 GEMM FLOP/s of a framework environment, measured by running the worker-side
dlbench.worker.gemm_peak in that environment, and a run's achieved FLOP/s against it. Harness side."""
import json
import resource
import subprocess
import time
from pathlib import Path

import psutil

from dlbench.harness import folders

PEAK_SIZE = 2048  # saturates the CPUs here (two 16 MiB operands); a GPU gets PEAK_SIZE_GPU
PEAK_SIZE_GPU = 8192
PEAK_REPEATS = 5
PEAK_TIMEOUT_S = 600


def achieved_gflops(flops_per_sample: int | None, n_train: int | None, steady_epoch_s: float | None) -> float | None:
    """FLOP/s of a steady epoch: every training sample of the epoch (the last batch may be smaller, none
    is dropped) at the IR's training FLOPs (3x forward), over the median steady epoch's training time."""
    if not flops_per_sample or not n_train or not steady_epoch_s:
        return None
    return flops_per_sample * n_train / steady_epoch_s / 1e9


def mfu(achieved: float | None, peak_gflops: float | None) -> float | None:
    return achieved / peak_gflops if achieved is not None and peak_gflops else None


def _busy_s() -> float:
    """CPU seconds the whole machine has spent busy (not idle, not waiting for I/O), all cores."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(command: list[str], variables: dict[str, str], folder: Path) -> dict:
    """Runs dlbench.worker.gemm_peak; its result as peaks fields (gflops, method, reason, others_busy_cores).
    Never raises."""
    busy, children, tic = _busy_s(), _children_cpu_s(), time.perf_counter()
    try:
        done = subprocess.run(command, env=variables, cwd=folder, capture_output=True, text=True,
                              timeout=PEAK_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as error:
        return {"gflops": None, "reason": f"peak not measured: {error}"}
    wall = time.perf_counter() - tic
    others = max(0.0, (_busy_s() - busy) - (_children_cpu_s() - children)) / wall if wall > 0 else None
    folders.write_text_atomically(folder / "stderr.log", done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    try:
        result = json.loads(lines[-1]) if lines else {}
    except ValueError:
        result = {}
    if result.get("gflops") and done.returncode == 0:
        return {"gflops": result["gflops"], "method": result.get("method"), "others_busy_cores": others}
    reason = result.get("error") or f"exit status {done.returncode}: {done.stderr.strip()[-300:]}"
    return {"gflops": None, "reason": f"peak not measured: {reason}", "others_busy_cores": others}


