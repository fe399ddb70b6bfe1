"""What a run ran on: the machine, and the dlbench that ran it. Recorded with every run, so a store
holding runs from two machines or two dlbench versions says so."""
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from dlbench.harness import PACKAGE_DIR
from dlbench.harness.measure import nvml

_MIB = 1024 * 1024


def describe() -> dict[str, Any]:
    """hostname, cpu_model, logical_cores, memory_mib, gpus (names from NVML, [] without one), os,
    python (the harness's version; each run's own interpreter is in its python column)."""
    return {
        "hostname": socket.gethostname(), "cpu_model": cpu_model(), "logical_cores": psutil.cpu_count(),
        "memory_mib": psutil.virtual_memory().total // _MIB, "gpus": gpu_names(), "os": platform.platform(),
        "python": platform.python_version(),
    }


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The first "model name" of /proc/cpuinfo (x86; most ARM kernels have none), else what platform says."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def gpu_names() -> list[str]:
    """Names of the GPUs NVML sees; [] where there is no NVML library or no GPU."""
    pynvml = nvml.bindings()
    if pynvml is None:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                 for i in range(pynvml.nvmlDeviceGetCount())]
        return [name.decode() if isinstance(name, bytes) else name for name in names]  # bytes in older bindings
    except pynvml.NVMLError:
        return []
    finally:
        pynvml.nvmlShutdown()


def dlbench_version() -> dict[str, Any]:
    """version: dlbench's installed version (None when not installed); commit: the git commit of the
    package's sources when they are tracked in a git checkout, else None; dirty: whether those sources
    differ from that commit (None without a commit)."""
    try:
        version = metadata.version("dlbench")
    except metadata.PackageNotFoundError:
        version = None
    commit = _git("rev-parse", "HEAD")
    # A copy installed inside some other repository (a venv in a checkout) is not tracked there.
    if commit is None or _git("ls-files", "--error-unmatch", "__init__.py") is None:
        return {"version": version, "commit": None, "dirty": None}
    return {"version": version, "commit": commit, "dirty": bool(_git("status", "--porcelain", "--", "."))}


def _git(*args: str) -> str | None:
    """git's output for the package folder, None where git is missing or fails."""
    try:
        done = subprocess.run(["git", "-C", str(PACKAGE_DIR), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def hardware(run: dict) -> str | None:
    """The model of what a stored run computed on: its machine's CPU model, or its GPUs' names for a GPU
    run; None for runs stored before machines were recorded."""
    machine = run.get("machine")
    if not isinstance(machine, dict):
        return None
    if run.get("device") == "gpu":
        return ", ".join(machine.get("gpus") or []) or None
    return machine.get("cpu_model")
