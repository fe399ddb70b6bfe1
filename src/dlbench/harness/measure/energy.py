"""Energy counters the machine exposes, read by the harness at the worker's epoch boundaries.

CPU: RAPL through Linux's powercap tree (default /sys/class/powercap): each `intel-rapl:N` zone whose
`name` starts with "package" is a CPU socket's package; its subzones named "dram" are that socket's
memory. Each zone's `energy_uj` is a cumulative counter in microjoules that wraps at
`max_energy_range_uj`. A package counts the whole socket, every process on it, not only the worker.
AMD CPUs appear under the same `intel-rapl` names on recent kernels. Newer kernels make `energy_uj`
readable by root only; then there is no CPU energy and the reason says so.

GPU: NVML's total energy counter (`nvmlDeviceGetTotalEnergyConsumption`, millijoules since the driver
loaded; Volta and later) of the GPU the run computes on, through pynvml when the harness has it.

Nothing here raises for a missing or unreadable counter: a meter without a counter reads None for it
and `source` says why.
"""
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from dlbench.harness.measure import nvml
from dlbench.shared.protocol import EPOCH_START, EPOCH_TRAINED, kind_of

POWERCAP = Path("/sys/class/powercap")


@dataclass(frozen=True)
class Zone:
    path: Path
    name: str  # package-0, dram, ...
    max_range_uj: int | None  # where the counter wraps; None when not published

    def read_uj(self) -> int:
        return int((self.path / "energy_uj").read_text().strip())


@dataclass(frozen=True)
class Reading:
    """Raw counters at one moment: microjoules per RAPL zone, millijoules per GPU."""
    packages: tuple[int, ...]
    drams: tuple[int, ...]
    gpus: tuple[int, ...]


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def find_rapl(root: Path = POWERCAP) -> tuple[list[Zone], list[Zone], str | None]:
    """(package zones, dram zones, reason there are none or they cannot be read, else None).
    Zones are taken from the intel-rapl control type only (intel-rapl-mmio repeats the packages)."""
    if not root.is_dir():
        return [], [], f"no {root}"
    packages: list[Zone] = []
    drams: list[Zone] = []
    for zone in sorted(root.glob("intel-rapl:*")):
        parts = zone.name.split(":")
        try:
            name = (zone / "name").read_text().strip()
        except OSError:
            continue
        entry = Zone(zone, name, _read_int(zone / "max_energy_range_uj"))
        if len(parts) == 2 and name.startswith("package"):
            packages.append(entry)
        elif name == "dram":  # a package's subzone (intel-rapl:N:M), or a top-level dram zone
            drams.append(entry)
    if not packages:
        return [], [], f"no RAPL package zone under {root}"
    for zone in packages + drams:
        try:
            zone.read_uj()
        except PermissionError:
            return [], [], f"energy_uj not readable (permission): {zone.path / 'energy_uj'}"
        except (OSError, ValueError) as error:
            return [], [], f"energy_uj not readable: {zone.path / 'energy_uj'}: {error}"
    return packages, drams, None


def counter_delta(start: int, end: int, max_range: int | None) -> int:
    """end - start of a counter that wraps to 0 after max_range (one wrap at most between two reads)."""
    if end >= start:
        return end - start
    if max_range is None:
        raise ValueError("the counter went back and its range is not published")
    return max_range - start + end


def _nvml() -> tuple[ModuleType | None, str | None]:
    pynvml = nvml.bindings()
    if pynvml is None:
        return None, "no NVML (pynvml not installed)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return None, f"no NVML ({error})"
    return pynvml, None


def gpu_index() -> int:
    """The NVML index of the GPU the adapters compute on: the first of CUDA_VISIBLE_DEVICES when it
    lists indices, else 0."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(visible) if visible.isdigit() else 0


class EnergyMeter:
    """Reads the counters of one run. `source` says, per kind, what is read or why nothing is."""

    def __init__(self, device: str = "cpu", powercap: Path = POWERCAP) -> None:
        self.packages, self.drams, cpu_reason = find_rapl(Path(powercap))
        self._nvml: ModuleType | None = None
        self._handles: list[Any] = []
        gpu_reason: str | None = None
        if device != "gpu":
            gpu_reason = f"device {device}"
        else:
            self._nvml, gpu_reason = _nvml()
            if self._nvml is not None:
                gpu_reason = self._open_gpu(gpu_index())
        cpu = cpu_reason or ("RAPL " + ", ".join(z.name for z in self.packages)
                             + (f" + dram x{len(self.drams)}" if self.drams else " (no dram zone)"))
        gpu = gpu_reason or f"NVML total energy, GPU {gpu_index()}"
        self.source = f"cpu: {cpu}; gpu: {gpu}"

    def _open_gpu(self, index: int) -> str | None:
        nvml = self._nvml
        assert nvml is not None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except nvml.NVMLError as error:
            self.close()
            return f"NVML energy counter not available on GPU {index} ({error})"
        self._handles = [handle]
        return None

    @property
    def available(self) -> bool:
        return bool(self.packages or self._handles)

    def read(self) -> Reading:
        def rapl(zones: list[Zone]) -> tuple[int, ...]:
            try:
                return tuple(zone.read_uj() for zone in zones)
            except (OSError, ValueError):
                return ()

        gpus: tuple[int, ...] = ()
        if self._handles and self._nvml is not None:
            try:
                gpus = tuple(int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._handles)
            except self._nvml.NVMLError:
                gpus = ()
        return Reading(rapl(self.packages), rapl(self.drams), gpus)

    def joules(self, start: Reading, end: Reading) -> dict[str, float | None]:
        """energy_cpu_j, energy_dram_j, energy_gpu_j between two readings; None where not read."""
        def rapl(zones: list[Zone], a: tuple[int, ...], b: tuple[int, ...]) -> float | None:
            if not zones or len(a) != len(zones) or len(b) != len(zones):
                return None
            try:
                return sum(counter_delta(x, y, z.max_range_uj) for z, x, y in zip(zones, a, b, strict=True)) / 1e6
            except ValueError:
                return None

        gpu = None
        if self._handles and len(start.gpus) == len(end.gpus) == len(self._handles):
            gpu = sum(y - x for x, y in zip(start.gpus, end.gpus, strict=True)) / 1e3
        return {"energy_cpu_j": rapl(self.packages, start.packages, end.packages),
                "energy_dram_j": rapl(self.drams, start.drams, end.drams), "energy_gpu_j": gpu}

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._nvml, self._handles = None, []


class EpochEnergy:
    """Reads the energy counters when the worker's epoch_start and epoch_trained events arrive; per
    epoch, the joules of its training."""

    def __init__(self, meter: EnergyMeter) -> None:
        self.meter = meter
        self.starts: dict[int, Reading] = {}
        self.epochs: dict[int, dict] = {}

    def on_event(self, event: dict) -> None:
        if not self.meter.available or kind_of(event) not in (EPOCH_START, EPOCH_TRAINED):
            return
        reading = self.meter.read()
        if kind_of(event) == EPOCH_START:
            self.starts[event["epoch"]] = reading
        elif event["epoch"] in self.starts:
            self.epochs[event["epoch"]] = self.meter.joules(self.starts[event["epoch"]], reading)
