"""What a `dlbench run` owns in its results folder: one run at a time (a second is refused at once, naming
the first) and a folder of its own for every run. Through the real command line, with the fake framework
of tests/fake_dlbench.py (about a second a cell)."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import fake_dlbench
import guard
import pytest

from dlbench.harness import cli, data
from dlbench.harness.environments import envs
from dlbench.harness.store import Store

FAKE_DLBENCH = Path(fake_dlbench.__file__)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    data.prepare("digits-28", folder)  # once, not by every run
    return folder


@pytest.fixture
def suite_file(tmp_path, monkeypatch) -> Path:
    """The fake framework's suite, with its environment under a DLBENCH_HOME of this test's own."""
    home = tmp_path / "home"
    fake_dlbench.make_environment(home)
    monkeypatch.setenv("DLBENCH_HOME", str(home))
    path = tmp_path / "fakes.yaml"
    path.write_text(fake_dlbench.SUITE)
    return path


def run_args(suite_file: Path, results: Path, data_dir: Path) -> list[str]:
    return ["run", str(suite_file), "--results", str(results), "--data-dir", str(data_dir), "--plain"]


def start(args: list[str], **variables: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(FAKE_DLBENCH), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, **variables),
                            start_new_session=True)


def dlbench(args: list[str]) -> subprocess.CompletedProcess:
    return guard.run([sys.executable, str(FAKE_DLBENCH), *args], 120)


def stored(results: Path) -> tuple[list[dict], list[dict]]:
    with Store(results / "dlbench.sqlite") as store:
        return store.runs(), store.peaks()


def events_of(run: dict) -> list[dict]:
    return [json.loads(line) for line in (Path(run["run_dir"]) / "events.jsonl").read_text().splitlines()]


def test_a_second_run_into_a_held_folder_is_refused_at_once_naming_the_first(tmp_path, suite_file, data_dir):
    results, gate = tmp_path / "results", tmp_path / "gate"
    first = start(run_args(suite_file, results, data_dir), FAKE_GATE=str(gate))
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


def test_two_runs_of_one_cell_in_the_same_second_get_folders_of_their_own(tmp_path, suite_file, data_dir,
                                                                           monkeypatch):
    """A run folder's name holds the time to the second: with the clock frozen, both runs (and both
    peaks) start in the same second, and none may overwrite the other's files."""
    monkeypatch.setitem(envs.RECIPES, "fakefw", fake_dlbench.RECIPE)
    moment, strftime = time.localtime(), time.strftime
    monkeypatch.setattr(time, "strftime", lambda text, when=None: strftime(text, moment))
    results = tmp_path / "results"
    for _ in range(2):
        assert cli.main([*run_args(suite_file, results, data_dir), "--force"]) == 0
    runs, peaks = stored(results)
    assert [run["status"] for run in runs] == ["ok", "ok"] and runs[0]["cell_hash"] == runs[1]["cell_hash"]
    folders = [Path(run["run_dir"]) for run in runs]
    assert folders[0] != folders[1] and sorted((results / "runs").iterdir()) == sorted(folders)
    workers = [events_of(run)[0]["pid"] for run in runs]  # each folder holds its own run's events
    assert workers[0] != workers[1]
    assert len(peaks) == 2 and len(list((results / "peaks").iterdir())) == 2
