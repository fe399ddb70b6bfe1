"""What a `dlbench run` owns in its results folder: one run at a time (a second is refused at once, naming
the first), a folder of its own for every run, and a run stopped by Ctrl-C or SIGTERM that keeps what its
cell measured and leaves nothing no stored run names. Through the real command line, with the fake
framework of tests/fake_dlbench.py (about a second a cell)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import fake_dlbench
import guard
import psutil
import pytest

from dlbench.harness import cli
from dlbench.harness.environments import envs
from dlbench.harness.measure import gemm_peak
from dlbench.harness.plan import suite
from dlbench.harness.run import interrupt, launch, plan_peaks
from dlbench.harness.run.cell_config import Options, Prepared
from dlbench.harness.store import Store

FAKE_DLBENCH = Path(fake_dlbench.__file__)
CELL = "cell 1 of 1 (fakefw cnn-mnist on digits-28, rep 1)"


@pytest.fixture
def suite_file(tmp_path, monkeypatch) -> Path:
    """The fake framework's suite, with its environment under a DLBENCH_HOME of this test's own."""
    return fake_dlbench.suite_file(tmp_path, monkeypatch)


def run_args(suite_file: Path, results: Path, digits_dir: Path) -> list[str]:
    return ["run", str(suite_file), "--results", str(results), "--data-dir", str(digits_dir), "--plain"]


def start(args: list[str], **variables: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(FAKE_DLBENCH), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, **variables),
                            start_new_session=True, preexec_fn=guard.default_sigint)


def dlbench(args: list[str]) -> subprocess.CompletedProcess:
    return guard.run([sys.executable, str(FAKE_DLBENCH), *args], 120)


def stored(results: Path) -> tuple[list[dict], list[dict]]:
    with Store(results / "dlbench.sqlite") as store:
        return store.runs(), store.peaks()


def events_of(run: dict) -> list[dict]:
    return [json.loads(line) for line in (Path(run["run_dir"]) / "events.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_second_run_into_a_held_folder_is_refused_at_once_naming_the_first(tmp_path, suite_file, digits_dir):
    results, gate = tmp_path / "results", tmp_path / "gate"
    first = start(run_args(suite_file, results, digits_dir), FAKE_GATE=str(gate))
    try:
        guard.read_until(first, lambda line: line.startswith("[1/1]"), 120, "the first run's cell")
        reading = dlbench(["results", "--results", str(results)])  # readers take no lock
        untouched = tmp_path / "second-data"
        tic = time.monotonic()
        second = dlbench(run_args(suite_file, results, untouched))
        refused_in = time.monotonic() - tic
    finally:
        gate.touch()
    out, err = guard.communicate(first, 120)
    assert reading.returncode == 0, reading.stderr
    assert second.returncode == 2 and second.stdout == "", second.stdout + second.stderr
    message = second.stderr.splitlines()[0]
    assert message.startswith(f"dlbench: error: results folder {results} is in use by another dlbench run "
                              f"(pid {first.pid} on {socket.gethostname()}, started "), message
    assert f"{FAKE_DLBENCH} run {suite_file}" in message and f"Lock file: {results / 'dlbench.lock'}" in message
    # at once: before any data was prepared (the first run's own start-up takes about as long as this bound)
    assert not untouched.exists() and refused_in < guard.bound(20)

    assert first.returncode == 0, out + err
    runs, _ = stored(results)
    assert [(run["status"], len(run["epochs"])) for run in runs] == [("ok", 2)]  # its cell, stored once
    [run] = runs
    kinds = [event["event"] for event in events_of(run)]
    assert kinds[:2] == ["start", "ready"] and kinds.count("epoch") == 2 and kinds[-1] == "done"
    assert list((results / "runs").iterdir()) == [Path(run["run_dir"])]
    assert (results / "dlbench.lock").read_text() == ""  # released: no holder named any more


@pytest.mark.slow
def test_two_runs_of_one_cell_in_the_same_second_get_folders_of_their_own(tmp_path, suite_file, digits_dir,
                                                                           monkeypatch):
    """A run folder's name holds the time to the second: with the clock frozen, both runs (and both
    peaks) start in the same second, and none may overwrite the other's files."""
    monkeypatch.setitem(envs.RECIPES, "fakefw", fake_dlbench.RECIPE)
    moment, strftime = time.localtime(), time.strftime
    monkeypatch.setattr(time, "strftime", lambda text, when=None: strftime(text, moment))
    results = tmp_path / "results"
    for _ in range(2):
        assert cli.main([*run_args(suite_file, results, digits_dir), "--force"]) == 0
    runs, peaks = stored(results)
    assert [run["status"] for run in runs] == ["ok", "ok"] and runs[0]["cell_hash"] == runs[1]["cell_hash"]
    folders = [Path(run["run_dir"]) for run in runs]
    assert folders[0] != folders[1] and sorted((results / "runs").iterdir()) == sorted(folders)
    workers = [events_of(run)[0]["pid"] for run in runs]  # each folder holds its own run's events
    assert workers[0] != workers[1]
    assert len(peaks) == 2 and len(list((results / "peaks").iterdir())) == 2


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.slow
def test_an_interrupted_run_stores_its_cell_as_interrupted_and_leaves_no_orphan(tmp_path, suite_file, digits_dir,
                                                                                signal_number):
    results, gate = tmp_path / "results", tmp_path / "gate"
    harness = start(run_args(suite_file, results, digits_dir), FAKE_GATE=str(gate), FAKE_GATE_EPOCH="2")
    try:
        guard.read_until(harness, lambda line: "epoch 1/2" in line, 120, "the cell's first epoch")
        harness.send_signal(signal_number)
        out, err = guard.communicate(harness, 60)
    finally:
        gate.touch()
    assert harness.returncode == 128 + signal_number, out + err
    name = interrupt.signal_name(signal_number)
    assert err.splitlines()[0].startswith(
        f"dlbench: interrupted by {name}: {CELL} stored as interrupted with the 1 epochs, events and resource "
        f"samples its worker had reported (run folder {results / 'runs'}"), err
    assert err.splitlines()[0].endswith(". The same command resumes: complete cells are skipped")
    assert f"interrupted: interrupted by {name}" in out
    # the report of what the store holds, written whole once the plan stopped (run/live_report.py)
    assert "writing the report of the cells stored (Ctrl-C again skips it)" in out
    assert f"report: {results / 'report.html'}" in out and "<svg" in (results / "report.html").read_text()

    [run], [peak] = stored(results)
    assert run["status"] == "interrupted" and run["reason"] == (
        f"interrupted by {name} (1 epochs done); its worker was stopped")
    assert [epoch["epoch"] for epoch in run["epochs"]] == [1] and run["peak_id"] == peak["id"]
    with Store(results / "dlbench.sqlite") as store:
        assert store.samples(run["id"])  # what the monitor saw until the worker was stopped
    # no orphan: the one run folder and the one peak folder are the run's and its peak's
    assert list((results / "runs").iterdir()) == [Path(run["run_dir"])]
    assert len(list((results / "peaks").iterdir())) == 1
    events = events_of(run)
    assert [event["epoch"] for event in events if event["event"] == "epoch"] == [1]
    with pytest.raises(psutil.NoSuchProcess):  # the worker was stopped with the harness
        psutil.Process(events[0]["pid"]).status()

    again = dlbench(run_args(suite_file, results, digits_dir))  # an interrupted cell is not complete
    assert again.returncode == 0 and "1 ok" in again.stdout, again.stdout + again.stderr
    assert [run["status"] for run in stored(results)[0]] == ["interrupted", "ok"]


@pytest.fixture
def ctrl_c_as_at_a_terminal():
    """SIGINT raises KeyboardInterrupt in this process for the test, whatever the process inherited:
    handled() rightly leaves an ignored SIGINT (a shell's background job, as a CI runner may start pytest)
    ignored."""
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, inherited)


def test_a_signal_inside_held_is_noted_and_raised_at_its_end(tmp_path, ctrl_c_as_at_a_terminal):
    """The executor's stretch from a cell's peak to its stored run: the first signal waits for the run to
    be stored (a worker about to start is not started), a second one raises at once."""
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with interrupt.handled():
        with pytest.raises(interrupt.Interrupted) as stopped:
            with interrupt.held():
                os.kill(os.getpid(), signal.SIGTERM)
                assert interrupt.requested() == signal.SIGTERM
                outcome = launch.run_worker([sys.executable, "-c", "pass"], dict(os.environ), tmp_path, 60)
                assert (outcome.status, outcome.reason) == (
                    "interrupted", "interrupted by SIGTERM before its worker started")
        assert stopped.value.exit_status == 128 + signal.SIGTERM and interrupt.requested() is None
        with pytest.raises(interrupt.Interrupted):
            with interrupt.held():
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)
                pytest.fail("a second signal must raise at once")
        with pytest.raises(interrupt.Interrupted):
            with interrupt.held(), interrupt.allowed():
                os.kill(os.getpid(), signal.SIGINT)
                pytest.fail("inside allowed(), a signal must raise at once")
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before  # the handlers are back


def test_a_peak_stopped_midway_leaves_no_folder(tmp_path, suite_file, monkeypatch):
    """Nothing was measured, so nothing is kept: no peaks row (it is stored after) and no folder."""
    monkeypatch.setitem(envs.RECIPES, "fakefw", fake_dlbench.RECIPE)
    cell = suite.Cell("fakes", "fakefw", "cnn-mnist", "digits-28", "cpu", 1, 0, 2, 32, 1, 60.0)
    prepared = Prepared(cell, None, None, envs.require("fakefw"), {})

    def stopped(command: list[str], variables: dict, folder: Path) -> dict:
        (folder / "stderr.log").write_text("half a measurement")
        raise interrupt.Interrupted(signal.SIGINT)

    monkeypatch.setattr(gemm_peak, "run", stopped)
    results = tmp_path / "results"
    with pytest.raises(interrupt.Interrupted):
        plan_peaks.measure_peak(prepared, Options(results, tmp_path / "data"), 1)
    assert list((results / "peaks").iterdir()) == []
