"""Resource sampling of a worker process tree (CPU, RSS, threads, GPU) on a background thread."""

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import fmean
from types import ModuleType
from typing import Any

import psutil

from dlbench.harness.measure import nvml

_MIB = 1024 * 1024
# Processes that vanish or turn unreadable between listing and reading are simply left out.
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


@dataclass(frozen=True)
class Sample:
    t_s: float  # seconds since monitor start
    cpu_percent: float  # summed over the tree (100 = one core busy)
    rss_mb: float  # summed RSS of the tree, MiB
    threads: int  # summed thread count of the tree
    system_cpu_percent: float  # whole machine, 0..100
    gpu_util_percent: float | None  # None without a GPU
    gpu_mem_mb: float | None  # GPU memory used by the tree's processes, None without a GPU


# Listing a tree's descendants scans every process on the machine (about 1 ms here, 90 % of a sample's
# cost), so the membership is refreshed only this often; the known processes are read every sample.
RESCAN_S = 2.0
DEFAULT_INTERVAL_S = 0.2


class _ProcessTree:
    """Caches psutil.Process objects by pid: cpu_percent() is a delta since the same object's last call.

    A process that joins the tree is seen at the next rescan (at most `rescan_s` late); one that
    leaves it drops out at once, since reading it fails."""

    def __init__(self, pid: int, rescan_s: float = RESCAN_S) -> None:
        self._root = psutil.Process(pid)
        self._procs: dict[int, psutil.Process] = {}
        self._rescan_s = rescan_s
        self._scanned_at = -math.inf

    def _rescan_due(self) -> bool:
        return time.monotonic() - self._scanned_at >= self._rescan_s

    @property
    def root_pid(self) -> int:
        return self._root.pid

    def read(self) -> tuple[float, float, int, set[int]]:
        """Summed (cpu %, RSS MiB, threads) of the tree, and the pids that were read. The root is
        among them while it runs: a zombie has released its memory, so it is left out like one exiting."""
        cpu, rss, threads = 0.0, 0.0, 0
        seen: set[int] = set()
        for proc, is_new in self._refresh():
            try:
                with proc.oneshot():
                    proc_rss = proc.memory_info().rss
                    # A process in the middle of exiting has already released its memory but is not
                    # yet a zombie; its reading would be a bogus 0 MiB sample, so it counts as gone.
                    if proc_rss == 0:
                        continue
                    # A process discovered just now was primed microseconds ago: reading its CPU
                    # over that window would be pure clock-tick noise, so it counts as 0 once.
                    cpu += 0.0 if is_new else proc.cpu_percent(None)
                    rss += proc_rss / _MIB
                    threads += proc.num_threads()
            except _GONE:
                continue
            seen.add(proc.pid)
        return cpu, rss, threads, seen

    def _refresh(self) -> list[tuple[psutil.Process, bool]]:
        if not self._rescan_due():
            return [(proc, False) for proc in self._procs.values()]
        self._scanned_at = time.monotonic()
        try:
            # is_running() also detects a recycled pid; it costs a read, so only rescans ask it.
            current = [self._root, *self._root.children(recursive=True)] if self._root.is_running() else []
        except _GONE:
            current = [self._root]
        procs: dict[int, psutil.Process] = {}
        result: list[tuple[psutil.Process, bool]] = []
        for proc in current:
            cached = self._procs.get(proc.pid)
            # Process equality includes the creation time, so a recycled pid gets a fresh object.
            is_new = cached is None or cached != proc
            if is_new:
                cached = proc
                _prime(cached)
            procs[proc.pid] = cached
            result.append((cached, is_new))
        self._procs = procs
        return result


def _prime(proc: psutil.Process) -> None:
    # The first cpu_percent() call only sets the baseline (and returns 0).
    try:
        proc.cpu_percent(None)
    except _GONE:
        pass


def find_gpu_library() -> None:
    """Looks for NVML's Python bindings once, so that a run's monitor does not spend that CPU while the
    worker it measures is running (executor.run_worker calls it before starting the worker)."""
    nvml.bindings()


class _Gpu:
    """NVML access, initialised lazily once; any failure silently turns GPU fields into None."""

    def __init__(self) -> None:
        self._nvml: ModuleType | None = None
        self._handles: list[Any] = []
        self._tried = False

    def read(self, pids: set[int]) -> tuple[float | None, float | None]:
        nvml = self.open()
        if nvml is None:
            return None, None
        try:
            return self._read(nvml, pids)
        except nvml.NVMLError:
            return None, None

    def shutdown(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._nvml = None

    def open(self) -> ModuleType | None:
        if self._tried:
            return self._nvml
        self._tried = True
        pynvml = nvml.bindings()
        if pynvml is None:
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:
            return None
        self._nvml = pynvml
        try:
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except pynvml.NVMLError:
            self.shutdown()  # nvmlInit is reference counted: balance it
        return self._nvml

    def _read(self, nvml: ModuleType, pids: set[int]) -> tuple[float | None, float | None]:
        mem_mb = 0.0
        used: list[Any] = []
        for handle in self._handles:
            mine = [p for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid in pids]
            if mine:
                used.append(handle)
            # usedGpuMemory is None where the driver cannot attribute memory (e.g. some MIG/vGPU setups).
            mem_mb += sum(p.usedGpuMemory for p in mine if p.usedGpuMemory is not None) / _MIB
        # Utilisation of the devices the tree runs on; before it has a CUDA context, of all devices.
        handles = used or self._handles
        if not handles:
            return None, None
        util = fmean(float(nvml.nvmlDeviceGetUtilizationRates(h).gpu) for h in handles)
        return util, mem_mb


class Monitor:
    """Samples a process and all its descendants every `interval_s` on a daemon thread; a descendant
    joins the samples at the next rescan of the tree, every `rescan_s`.

    Sampling ends by itself when the root process exits (or is a zombie); `on_sample` runs on the
    sampling thread after each sample. The defaults keep the sampling thread under 0.5 % of one core
    (benchmarks/monitor_cost.py measures it; `cpu_s` records it for each run).
    """

    def __init__(
        self, pid: int, interval_s: float = DEFAULT_INTERVAL_S, on_sample: Callable[[Sample], None] | None = None,
        rescan_s: float = RESCAN_S,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self._pid = pid
        self._interval = interval_s
        self._rescan_s = rescan_s
        self._on_sample = on_sample
        self._samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._gpu = _Gpu()
        self._started = False
        self._thread: threading.Thread | None = None
        self._cpu_s = 0.0

    def start(self) -> None:
        """Primes the CPU baselines here, so the clock starts now, then samples on a daemon thread."""
        if self._started:
            raise RuntimeError("Monitor already started")
        self._started = True
        try:
            tree = _ProcessTree(self._pid, self._rescan_s)
        except psutil.NoSuchProcess:
            return  # already gone: nothing to sample
        tree.read()
        psutil.cpu_percent(None)
        self._thread = threading.Thread(
            target=self._run, args=(tree, time.monotonic()), name=f"dlbench-monitor-{self._pid}", daemon=True
        )
        self._thread.start()

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.samples

    @property
    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    @property
    def cpu_s(self) -> float:
        """CPU seconds the sampling thread has used: the monitor's own cost, taken from the machine."""
        return self._cpu_s

    def _run(self, tree: _ProcessTree, t0: float) -> None:
        try:
            # Loading the NVML library can take a while; the deadline grid absorbs the delay.
            self._gpu.open()
            self._loop(tree, t0)
        finally:
            self._gpu.shutdown()
            self._cpu_s = time.thread_time()

    def _loop(self, tree: _ProcessTree, t0: float) -> None:
        deadline = t0
        while True:
            deadline = self._next_deadline(deadline, time.monotonic())
            if self._stop.wait(max(0.0, deadline - time.monotonic())):
                return
            sample = self._take(tree, time.monotonic() - t0)
            if sample is None:  # the root has exited: nothing left to measure
                return
            with self._lock:
                self._samples.append(sample)
            if self._on_sample is not None:
                self._on_sample(sample)

    def _next_deadline(self, deadline: float, now: float) -> float:
        # Schedule on a fixed grid so work time does not accumulate as drift; after a stall,
        # skip the missed ticks rather than bursting to catch up.
        deadline += self._interval
        if deadline <= now:
            deadline += math.ceil((now - deadline) / self._interval) * self._interval
        return deadline

    def _take(self, tree: _ProcessTree, t_s: float) -> Sample | None:
        cpu, rss, threads, pids = tree.read()
        if tree.root_pid not in pids:
            return None
        gpu_util, gpu_mem = self._gpu.read(pids)
        return Sample(
            t_s=t_s,
            cpu_percent=cpu,
            rss_mb=rss,
            threads=threads,
            system_cpu_percent=psutil.cpu_percent(None),
            gpu_util_percent=gpu_util,
            gpu_mem_mb=gpu_mem,
        )


def summarise(samples: list[Sample]) -> dict[str, float | None]:
    """Means and peaks of a run's samples; None where there is no data (e.g. no GPU)."""

    def column(name: str) -> list[float]:
        return [v for v in (getattr(s, name) for s in samples) if v is not None]

    cpu, rss = column("cpu_percent"), column("rss_mb")
    return {
        "mean_cpu_percent": _mean(cpu),
        "peak_cpu_percent": _peak(cpu),
        "mean_rss_mb": _mean(rss),
        "peak_rss_mb": _peak(rss),
        "peak_threads": _peak(column("threads")),
        "mean_system_cpu_percent": _mean(column("system_cpu_percent")),
        "mean_gpu_util_percent": _mean(column("gpu_util_percent")),
        "peak_gpu_mem_mb": _peak(column("gpu_mem_mb")),
    }


def _mean(values: list[float]) -> float | None:
    return fmean(values) if values else None


def _peak(values: list[float]) -> float | None:
    return max(values) if values else None
