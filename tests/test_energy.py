"""The energy reader on a fake powercap tree and a fake pynvml, and the per-epoch energy a run stores."""
import os
import sys
import types
from pathlib import Path

import pytest

from dlbench.harness.analysis import measures
from dlbench.harness.measure import energy

MAX_RANGE = 262143328850


def zone(root: Path, name: str, label: str, energy_uj: int, max_range: int | None = MAX_RANGE) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "name").write_text(label + "\n")
    (folder / "energy_uj").write_text(f"{energy_uj}\n")
    if max_range is not None:
        (folder / "max_energy_range_uj").write_text(f"{max_range}\n")
    return folder


def set_uj(folder: Path, value: int) -> None:
    (folder / "energy_uj").write_text(f"{value}\n")


@pytest.fixture
def powercap(tmp_path: Path) -> Path:
    """Two packages, the first with core and dram subzones, plus an mmio copy and a psys zone to ignore."""
    root = tmp_path / "powercap"
    zone(root, "intel-rapl:0", "package-0", 1_000_000)
    zone(root, "intel-rapl:0:0", "core", 500_000)
    zone(root, "intel-rapl:0:1", "dram", 2_000_000)
    zone(root, "intel-rapl:1", "package-1", MAX_RANGE - 1_000_000)  # about to wrap
    zone(root, "intel-rapl:2", "psys", 7)
    zone(root, "intel-rapl-mmio:0", "package-0", 1_000_000)
    return root


def test_finds_packages_and_dram_and_ignores_the_rest(powercap):
    packages, drams, reason = energy.find_rapl(powercap)
    assert reason is None
    assert [z.path.name for z in packages] == ["intel-rapl:0", "intel-rapl:1"]
    assert [z.path.name for z in drams] == ["intel-rapl:0:1"]
    assert packages[0].max_range_uj == MAX_RANGE


def test_joules_between_two_readings_with_a_wraparound(powercap):
    meter = energy.EnergyMeter("cpu", powercap)
    assert meter.available and meter.source == "cpu: RAPL package-0, package-1 + dram x1; gpu: device cpu"
    start = meter.read()
    set_uj(powercap / "intel-rapl:0", 3_500_000)  # +2.5 J
    set_uj(powercap / "intel-rapl:1", 500_000)  # wrapped: 1.0 J to the top, then 0.5 J
    set_uj(powercap / "intel-rapl:0:1", 2_250_000)  # +0.25 J
    joules = meter.joules(start, meter.read())
    assert joules == {"energy_cpu_j": pytest.approx(4.0), "energy_dram_j": pytest.approx(0.25),
                      "energy_gpu_j": None}


def test_counter_delta():
    assert energy.counter_delta(10, 25, 100) == 15
    assert energy.counter_delta(90, 5, 100) == 15
    with pytest.raises(ValueError):
        energy.counter_delta(90, 5, None)


def test_no_powercap_says_so(tmp_path):
    meter = energy.EnergyMeter("cpu", tmp_path / "absent")
    assert not meter.available
    assert meter.source == f"cpu: no {tmp_path / 'absent'}; gpu: device cpu"
    assert meter.joules(meter.read(), meter.read()) == dict.fromkeys(("energy_cpu_j", "energy_dram_j",
                                                                      "energy_gpu_j"))


def test_a_tree_without_packages_says_so(tmp_path):
    zone(tmp_path / "powercap", "intel-rapl:0", "psys", 1)
    assert energy.EnergyMeter("cpu", tmp_path / "powercap").source.startswith("cpu: no RAPL package zone under")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_counter_is_the_reason(powercap):
    (powercap / "intel-rapl:1" / "energy_uj").chmod(0o200)
    meter = energy.EnergyMeter("cpu", powercap)
    assert not meter.available
    assert meter.source.startswith("cpu: energy_uj not readable (permission): ")
    assert "intel-rapl:1" in meter.source


def test_an_unreadable_counter_is_the_reason_as_root_too(powercap, monkeypatch):
    """Root reads any file, so the permission error that newer kernels give users is simulated."""
    real = Path.read_text

    def read_text(self, *args, **kwargs):
        if self.name == "energy_uj" and self.parent.name == "intel-rapl:1":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    meter = energy.EnergyMeter("cpu", powercap)
    assert not meter.available
    assert meter.source == (f"cpu: energy_uj not readable (permission): {powercap / 'intel-rapl:1' / 'energy_uj'}; "
                            "gpu: device cpu")


class FakeNvml(types.ModuleType):
    """pynvml's calls that the meter makes: a GPU whose energy counter (mJ) the test sets."""

    class NVMLError(Exception):
        pass

    def __init__(self, counters: dict[int, int], supported: bool = True) -> None:
        super().__init__("pynvml")
        self.counters, self.supported, self.inits = counters, supported, 0

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.inits -= 1

    def nvmlDeviceGetHandleByIndex(self, index):
        if index not in self.counters:
            raise self.NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.supported:
            raise self.NVMLError("Not Supported")
        return self.counters[handle]


def test_gpu_energy_from_nvml(monkeypatch, tmp_path):
    fake = FakeNvml({0: 1_000, 1: 50_000})
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    meter = energy.EnergyMeter("gpu", tmp_path / "absent")
    assert meter.available
    assert meter.source == f"cpu: no {tmp_path / 'absent'}; gpu: NVML total energy, GPU 1"
    start = meter.read()
    fake.counters[1] += 12_500  # mJ
    fake.counters[0] += 99_000  # another GPU: not the run's
    assert meter.joules(start, meter.read()) == {"energy_cpu_j": None, "energy_dram_j": None,
                                                 "energy_gpu_j": pytest.approx(12.5)}
    meter.close()
    assert fake.inits == 0


def test_gpu_without_the_counter_or_nvml(monkeypatch, tmp_path):
    fake = FakeNvml({0: 1}, supported=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    meter = energy.EnergyMeter("gpu", tmp_path)
    assert not meter.available and "gpu: NVML energy counter not available on GPU 0 (Not Supported)" in meter.source
    assert fake.inits == 0
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert energy.EnergyMeter("gpu", tmp_path).source.endswith("gpu: no NVML (pynvml not installed)")


def test_epoch_energy_follows_the_boundary_events(powercap):
    """Only the training, between epoch_start and epoch_trained, counts; evaluation after it does not."""
    recorder = energy.EpochEnergy(energy.EnergyMeter("cpu", powercap))
    package = powercap / "intel-rapl:0"  # starts at 1 J; package-1 stays put
    for epoch, (trained, evaluated) in enumerate(((6_000_000, 16_000_000), (19_000_000, 30_000_000)), 1):
        recorder.on_event({"event": "epoch_start", "epoch": epoch})
        set_uj(package, trained)
        recorder.on_event({"event": "epoch_trained", "epoch": epoch, "train_time_s": 1.0})
        set_uj(package, evaluated)
        recorder.on_event({"event": "epoch", "epoch": epoch})
    assert {n: e["energy_cpu_j"] for n, e in recorder.epochs.items()} == {1: pytest.approx(5.0),
                                                                          2: pytest.approx(3.0)}
    assert recorder.epochs[1]["energy_dram_j"] == 0.0


def test_energy_per_sample_and_its_text():
    run = {"n_train": 100, "device": "cpu", "energy_source": "cpu: RAPL package-0 (no dram zone); gpu: device cpu",
           "epochs": [{"energy_cpu_j": 90.0}, {"energy_cpu_j": 20.0}, {"energy_cpu_j": 30.0},
                      {"energy_cpu_j": 25.0}]}
    assert measures.energy_per_sample(run) == {"cpu": pytest.approx(0.25)}  # median of the steady epochs / 100
    assert measures.energy_text(run) == "cpu 0.25 J"
    none = {"n_train": 100, "device": "cpu", "energy_source": "cpu: no /sys/class/powercap; gpu: device cpu",
            "epochs": [{"energy_cpu_j": None}]}
    assert measures.energy_text(none) == "n/a: no /sys/class/powercap"
    assert measures.energy_text({"epochs": []}) == "-"  # stored before energy was read
