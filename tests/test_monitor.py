import subprocess
import sys
import threading
import time
import types
from types import SimpleNamespace

import guard
import psutil
import pytest

from dlbench.harness.measure.monitor import Monitor, Sample, _ProcessTree, summarise

# Both children report their phases as CLOCK_MONOTONIC readings, which are shared across processes,
# so the test can place each phase on the monitor's own time axis. The busy phase burns a known amount
# of CPU time (not of wall time), so the check holds however loaded the machine is.
BURN_THEN_SLEEP = """
import time
busy_start = time.monotonic()
while time.process_time() < 1.2:
    pass
sleep_start = time.monotonic()
time.sleep(0.5)
print(busy_start, sleep_start, time.monotonic(), time.process_time(), flush=True)
"""

SPAWN_BURNING_GRANDCHILD = """
import subprocess, sys
grandchild = '''
import time
busy_start = time.monotonic()
while time.process_time() < 1.2:
    pass
print(busy_start, time.monotonic(), time.process_time(), flush=True)
'''
subprocess.run([sys.executable, "-c", grandchild], check=True)
"""


def spawn(script: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def monitor_until_exit(script: str, **kwargs: object) -> tuple[list[Sample], list[float], float]:
    """Samples of the child's tree, the child's printed monotonic times, and the monitor's start."""
    child = spawn(script)
    monitor = Monitor(child.pid, **kwargs)  # type: ignore[arg-type]
    started = time.monotonic()
    monitor.start()
    out, err = guard.communicate(child, 300)
    samples = monitor.stop()
    assert child.returncode == 0, err
    return samples, [float(x) for x in out.split()], started


def mean_cpu(samples: list[Sample], start: float, end: float) -> float:
    # A sample's CPU covers the interval before it, so a window starts one interval late.
    window = [s.cpu_percent for s in samples if start <= s.t_s <= end]
    assert len(window) >= 2, f"too few samples in [{start:.2f}, {end:.2f}]: {samples}"
    return sum(window) / len(window)


def cpu_seconds(samples: list[Sample]) -> float:
    """The CPU time the samples account for: each sample's percentage covers the interval before it."""
    return sum(s.cpu_percent / 100 * (s.t_s - before.t_s) for before, s in zip(samples, samples[1:], strict=False))


def test_cpu_rss_threads_of_a_busy_then_sleeping_child() -> None:
    # Twice the default rate, so that the short sleeping phase gets enough samples of its own.
    samples, (busy_start, sleep_start, end, child_cpu), started = monitor_until_exit(BURN_THEN_SLEEP, interval_s=0.1)
    busy_start, sleep_start, end = (t - started for t in (busy_start, sleep_start, end))

    span = samples[-1].t_s - samples[0].t_s
    assert (len(samples) - 1) / span >= 5
    # Deadline scheduling never samples faster than the interval, however late a tick was.
    assert len(samples) <= samples[-1].t_s / 0.1 + 1
    # The samples account for the CPU time the child really used (less its start, before the first one).
    assert 0.8 * child_cpu - 0.1 <= cpu_seconds(samples) <= 1.15 * child_cpu + 0.05
    assert max(s.cpu_percent for s in samples) <= 130  # one busy thread
    assert mean_cpu(samples, sleep_start + 0.15, end) < 30
    assert [s for s in samples if not (s.rss_mb > 5 and s.threads >= 1)] == []
    assert [s for s in samples if not 0 <= s.system_cpu_percent <= 100] == []


def test_cpu_of_a_grandchild_counts_towards_the_tree() -> None:
    # The grandchild lives about 1.2 s: rescans of the tree at 0.2 s find it early in its life.
    samples, (_, _, grandchild_cpu), _ = monitor_until_exit(SPAWN_BURNING_GRANDCHILD, rescan_s=0.2)
    assert cpu_seconds(samples) >= 0.8 * grandchild_cpu - 0.3
    # The idle child and the burning grandchild each bring at least one thread.
    assert max(s.threads for s in samples) >= 2


def test_without_gpu_fields_are_none_and_monitor_is_silent(capfd: pytest.CaptureFixture[str]) -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("a GPU is present")
    samples, _, _ = monitor_until_exit(BURN_THEN_SLEEP)
    assert samples
    assert all(s.gpu_util_percent is None and s.gpu_mem_mb is None for s in samples)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


class FakeNvml(types.ModuleType):
    """Two devices; the tree runs on device 0 only, next to a foreign process."""

    class NVMLError(Exception):
        pass

    def __init__(self, tree_pid: int) -> None:
        super().__init__("pynvml")
        self.tree_pid = tree_pid
        self.shut_down = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=(40, 90)[handle])

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        if handle == 1:
            return [SimpleNamespace(pid=1, usedGpuMemory=999 * 2**20)]
        return [
            SimpleNamespace(pid=self.tree_pid, usedGpuMemory=256 * 2**20),
            SimpleNamespace(pid=self.tree_pid, usedGpuMemory=None),
            SimpleNamespace(pid=1, usedGpuMemory=999 * 2**20),
        ]


def test_gpu_memory_counts_only_the_tree_and_utilisation_its_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    child = spawn("import time; time.sleep(0.6)")
    fake = FakeNvml(child.pid)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monitor = Monitor(child.pid, interval_s=0.05)
    monitor.start()
    guard.communicate(child, 300)
    samples = monitor.stop()
    assert samples
    readings = [(s.gpu_util_percent, s.gpu_mem_mb) for s in samples]
    # all while the child runs; a last sample may catch it exiting, its pid gone: all devices, no memory
    assert readings[:-1] == [(40.0, 256.0)] * (len(readings) - 1) and readings[-1] in {(40.0, 256.0), (65.0, 0.0)}
    assert fake.shut_down


def test_failing_nvml_gives_none(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    child = spawn("import time; time.sleep(0.4)")
    fake = FakeNvml(child.pid)

    def broken() -> None:
        raise fake.NVMLError("driver gone")

    monkeypatch.setattr(fake, "nvmlDeviceGetUtilizationRates", lambda handle: broken())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monitor = Monitor(child.pid, interval_s=0.05)
    monitor.start()
    guard.communicate(child, 300)
    samples = monitor.stop()
    assert samples
    assert all(s.gpu_util_percent is None and s.gpu_mem_mb is None for s in samples)
    assert capfd.readouterr().err == ""


def test_a_descendant_joins_the_samples_at_the_next_rescan() -> None:
    child = spawn("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; "
                  "time.sleep(30)']); time.sleep(30)")
    try:
        tree = _ProcessTree(child.pid, rescan_s=0.5)
        assert tree.read()[3] == {child.pid}  # read at once: the grandchild is not started yet
        time.sleep(0.3)
        assert tree.read()[3] == {child.pid}  # no rescan yet: the tree is the one listed before
        time.sleep(0.4)
        pids = tree.read()[3]
        assert child.pid in pids and len(pids) == 2
    finally:
        for proc in psutil.Process(child.pid).children(recursive=True):
            proc.kill()
        child.kill()
        child.wait()


def test_the_monitor_records_its_own_cpu_seconds() -> None:
    child = spawn("import time; time.sleep(0.6)")
    monitor = Monitor(child.pid, interval_s=0.01)
    monitor.start()
    guard.communicate(child, 300)
    samples = monitor.stop()
    # Some CPU for each of the ~60 samples, but far less than the wall time it sampled over.
    assert len(samples) >= 10
    assert 0 < monitor.cpu_s < 0.6


def test_on_sample_sees_every_sample_from_the_sampling_thread() -> None:
    seen: list[tuple[Sample, str]] = []
    child = spawn("import time; time.sleep(0.5)")
    monitor = Monitor(
        child.pid, interval_s=0.05, on_sample=lambda s: seen.append((s, threading.current_thread().name))
    )
    monitor.start()
    guard.communicate(child, 300)
    samples = monitor.stop()
    assert samples
    assert [s for s, _ in seen] == samples
    assert {name for _, name in seen} == {f"dlbench-monitor-{child.pid}"}


def test_stops_by_itself_when_the_child_exits() -> None:
    child = spawn("import time; time.sleep(0.3)")
    monitor = Monitor(child.pid, interval_s=0.02)
    monitor.start()
    # Not reaped on purpose: an exited child stays a zombie until waited for, and must count as gone.
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.02)
    time.sleep(0.3)
    count = len(monitor.samples)
    time.sleep(0.3)
    assert count > 0
    assert len(monitor.samples) == count
    assert f"dlbench-monitor-{child.pid}" not in {t.name for t in threading.enumerate()}
    assert monitor.stop() == monitor.samples
    child.wait()


def test_stop_interrupts_a_long_interval() -> None:
    child = spawn("import time; time.sleep(60)")
    try:
        monitor = Monitor(child.pid, interval_s=30)
        monitor.start()
        time.sleep(0.2)
        tic = time.monotonic()
        samples = monitor.stop()
        # A sleep-based loop would block for the rest of the 30 s interval.
        assert time.monotonic() - tic < 15
        assert samples == []
    finally:
        child.kill()
        child.wait()


def test_vanished_pid_gives_no_samples() -> None:
    child = spawn("pass")
    child.wait()
    monitor = Monitor(child.pid)
    monitor.start()
    assert monitor.stop() == []


def test_a_process_that_released_its_memory_while_exiting_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # Between freeing its memory and becoming a zombie, an exiting process reads as RSS 0: the race
    # that once stored a bogus 0 MiB sample at the end of a run.
    child = spawn("import time; time.sleep(30)")
    try:
        tree = _ProcessTree(child.pid)
        assert tree.read()[3] == {child.pid}
        def memory_while_exiting(self: psutil.Process) -> types.SimpleNamespace:
            return types.SimpleNamespace(rss=0, vms=0)

        # psutil's oneshot() switches the caches of its memoised readers on and off.
        memory_while_exiting.cache_activate = memory_while_exiting.cache_deactivate = lambda proc: None  # type: ignore[attr-defined]
        monkeypatch.setattr(psutil.Process, "memory_info", memory_while_exiting)
        assert tree.read() == (0.0, 0.0, 0, set())
        monitor = Monitor(child.pid, interval_s=0.02)
        monitor.start()
        assert monitor.stop() == []  # the tree reads as ended, so sampling stops by itself
    finally:
        child.kill()
        child.wait()


def sample(
    t: float, cpu: float, rss: float, threads: int, system: float, gpu: float | None, mem: float | None
) -> Sample:
    return Sample(t, cpu, rss, threads, system, gpu, mem)


def test_summarise_known_samples() -> None:
    samples = [
        sample(0.1, 50.0, 100.0, 4, 20.0, 10.0, 500.0),
        sample(0.2, 150.0, 300.0, 9, 40.0, None, None),
        sample(0.3, 100.0, 200.0, 6, 60.0, 30.0, 700.0),
    ]
    assert summarise(samples) == {
        "mean_cpu_percent": 100.0,
        "peak_cpu_percent": 150.0,
        "mean_rss_mb": 200.0,
        "peak_rss_mb": 300.0,
        "peak_threads": 9,
        "mean_system_cpu_percent": 40.0,
        "mean_gpu_util_percent": 20.0,
        "peak_gpu_mem_mb": 700.0,
    }


def test_summarise_without_gpu_or_samples() -> None:
    no_gpu = summarise([sample(0.1, 80.0, 10.0, 2, 50.0, None, None)])
    assert no_gpu["mean_gpu_util_percent"] is None and no_gpu["peak_gpu_mem_mb"] is None
    assert no_gpu["mean_cpu_percent"] == 80.0
    assert set(summarise([]).values()) == {None}
