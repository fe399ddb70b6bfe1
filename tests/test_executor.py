"""The worker protocol end to end: the real worker (`python -m dlbench.worker`) driven by
dlbench.executor.run_worker, with tests/fake_framework.py as the framework, under the harness's own
interpreter (the fake needs numpy alone)."""
import json
import os
import sys
import time
from pathlib import Path

import guard
import numpy as np
import psutil
import pytest

from dlbench.harness.measure import cores
from dlbench.harness.run.launch import run_worker
from dlbench.shared import ir
from dlbench.shared.cell_file import CELL_FILE, CellFile
from dlbench.shared.detection.pipeline import DetectionSplit
from dlbench.worker.base import Split, epoch_order
from dlbench.worker.train import first_samples

REPO = Path(__file__).resolve().parent.parent
N_TRAIN, N_TEST = 12, 5
Y_TRAIN = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0], dtype=np.int64)  # 7 of 12 are 1
Y_TEST = np.array([1, 0, 0, 0, 1], dtype=np.int64)  # 2 of 5 are 1
RECIPE = {"optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.0, "nesterov": False, "weight_decay": 0.0},
          "batch_size": 4, "epochs": 2, "loss": "softmax_cross_entropy"}


def write_dataset(folder: Path) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(0)
    np.save(folder / "x_train.npy", rng.standard_normal((N_TRAIN, 4)).astype(np.float32))
    np.save(folder / "y_train.npy", Y_TRAIN)
    np.save(folder / "x_test.npy", rng.standard_normal((N_TEST, 4)).astype(np.float32))
    np.save(folder / "y_test.npy", Y_TEST)
    (folder / "meta.json").write_text(json.dumps({"task": "classification", "input_scale": None}))
    return folder


def write_cell(tmp_path: Path, epochs: int = 2, **fields) -> tuple[list[str], Path]:
    """The worker command and the run dir, as runner.run_cell lays them out."""
    data_path = write_dataset(tmp_path / "data")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cell = CellFile(adapter="fake_framework:Adapter", model=ir.model([4], "float32", [ir.dense(2)]), recipe=RECIPE,
                    data_path=str(data_path), seed=3, epochs=epochs, device="cpu", threads=1, **fields)
    cell.write(run_dir / CELL_FILE)
    return [sys.executable, "-m", "dlbench.worker.train", str(run_dir / CELL_FILE)], run_dir


def fake_env(mode: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO / 'tests'}", FAKE_MODE=mode,
                PYTHONUNBUFFERED="1")


# The cell's timeout where a run must not reach it: a hang guard.
GUARD_S = 300
# Where the timeout is what a test checks: the worker starts and finishes epoch 1 well inside it, on a
# loaded machine too (it is stretched with the hang guards), and then hangs.
HANG_TIMEOUT_S = guard.bound(5)


def run_fake(tmp_path: Path, mode: str, timeout_s: float = guard.bound(GUARD_S), memory_limit_mb: float | None = None,
             epochs: int = 2):
    command, run_dir = write_cell(tmp_path, epochs)
    seen: list[dict] = []
    outcome = run_worker(command, fake_env(mode), run_dir, timeout_s, memory_limit_mb, on_event=seen.append)
    assert seen == outcome.events, "on_event must see every event, in order"
    return outcome, run_dir


BOUNDARIES = ("epoch_start", "epoch_trained")  # the training's bounds within each epoch, for the energy reads


def kinds(events: list[dict]) -> list[str]:
    """The events' kinds, the training boundaries left out (test_epoch_boundaries_bound_the_training)."""
    return [e.get("event") for e in events if e.get("event") not in BOUNDARIES]


def worker_pid(events: list[dict]) -> int:
    start = next(e for e in events if e.get("event") == "start")
    return start["pid"]


def alive(pid: int, cmdline_has: str | None = None) -> bool:
    """Running and not a zombie (an orphan's zombie may wait for a reaper that never comes)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return cmdline_has is None or cmdline_has in proc.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


def assert_gone(pid: int, cmdline_has: str | None = None) -> None:
    """SIGKILL is asynchronous for a process nobody waits on: allow it a few seconds to die."""
    deadline = time.monotonic() + guard.bound(60)
    while alive(pid, cmdline_has) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid, cmdline_has):
        psutil.Process(pid).kill()  # do not leak it into the rest of the session
        pytest.fail(f"process {pid} survived the worker's kill")


def assert_first_epoch_kept(events: list[dict]) -> None:
    assert kinds(events)[:3] == ["start", "ready", "epoch"]
    epoch = next(e for e in events if e.get("event") == "epoch")
    assert epoch["epoch"] == 1
    assert epoch["train_loss"] == pytest.approx(0.5)
    assert epoch["train_accuracy"] == pytest.approx(7 / 12)
    assert epoch["metrics"] == {"loss": pytest.approx(0.25), "accuracy": pytest.approx(2 / 5)}
    assert [e["epoch"] for e in events if e.get("event") == "epoch"] == [1]


def test_ok_run_reports_every_event_and_samples(tmp_path):
    outcome, run_dir = run_fake(tmp_path, "ok", epochs=3)
    assert (outcome.status, outcome.reason, outcome.returncode) == ("ok", None, 0)
    assert kinds(outcome.events) == ["start", "ready", "epoch", "epoch", "epoch", "done"]
    start, ready = outcome.events[0], outcome.events[1]
    assert start["executable"] == sys.executable
    assert ready["versions"] == {"fake": "1.0", "numpy": np.__version__}
    assert (ready["threads"], ready["n_train"], ready["n_test"]) == (1, N_TRAIN, N_TEST)
    epochs = [e for e in outcome.events if e.get("event") == "epoch"]
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    assert [e["train_loss"] for e in epochs] == pytest.approx([0.5, 0.25, 0.5 / 3])
    for epoch in epochs:
        assert epoch["metrics"] == {"loss": pytest.approx(0.25), "accuracy": pytest.approx(0.4)}
        assert epoch["train_time_s"] >= 0.15  # the fake sleeps 0.15 s per epoch
    elapsed = [e["elapsed_s"] for e in outcome.events]
    assert elapsed == sorted(elapsed)
    assert len(outcome.samples) > 0
    assert max(s.rss_mb for s in outcome.samples) > 5
    assert outcome.wall_time_s >= 0.45
    assert (run_dir / "stderr.log").exists()
    assert not alive(start["pid"])


def test_epoch_order_is_the_shared_one():
    """What the worker hands the adapter: a permutation fixed by (seed, epoch) alone."""
    first = epoch_order(3, 1, N_TRAIN)
    assert sorted(first.tolist()) == list(range(N_TRAIN))
    assert np.array_equal(first, epoch_order(3, 1, N_TRAIN))
    assert not np.array_equal(first, epoch_order(3, 2, N_TRAIN))


def test_train_samples_hand_every_framework_the_first_n_samples_in_stored_order(tmp_path):
    """The one place a suite entry's train_samples cuts the training split: what the adapter gets."""
    data_path = write_dataset(tmp_path / "data")
    whole = Split(np.load(data_path / "x_train.npy", mmap_mode="r"), np.load(data_path / "y_train.npy"), 255)
    first = first_samples(whole, 5)
    assert len(first) == 5 and first.input_scale == 255
    assert np.array_equal(first.x, np.load(data_path / "x_train.npy")[:5]) and np.array_equal(first.y, Y_TRAIN[:5])
    assert first_samples(whole, None) is whole and len(first_samples(whole, N_TRAIN)) == N_TRAIN
    for count in (0, N_TRAIN + 1):
        with pytest.raises(ValueError, match="train_samples"):
            first_samples(whole, count)
    # a detection split: its first images, their boxes found through the same index and spans
    arrays = [np.arange(12).reshape(4, 3), np.array([[0, 1], [1, 2], [3, 1], [4, 0]]), np.zeros(9, np.uint8),
              np.zeros((4, 4)), np.arange(4), np.zeros(4, bool)]
    images = first_samples(DetectionSplit(*arrays), 2)
    assert len(images) == 2 and [images.truth(i)[1].tolist() for i in range(2)] == [[0], [1, 2]]
    # the worker reports the samples it trains on, and each epoch's order is drawn over them alone
    outcome = run_worker(*run_cell_of(tmp_path / "cut", train_samples=8))
    assert next(e for e in outcome.events if e.get("event") == "ready")["n_train"] == 8
    accuracy = [e["train_accuracy"] for e in outcome.events if e.get("event") == "epoch"]
    assert accuracy == [pytest.approx(float(np.mean(Y_TRAIN[:8] == 1)))] * 2  # the fake's mean over its labels


def run_cell_of(tmp_path: Path, **fields):
    tmp_path.mkdir()
    command, run_dir = write_cell(tmp_path, 2, **fields)
    return command, fake_env("ok"), run_dir, guard.bound(GUARD_S), None


def test_crash_keeps_message_traceback_and_earlier_epochs(tmp_path):
    outcome, _ = run_fake(tmp_path, "crash")
    assert outcome.status == "failed"
    assert outcome.reason == "RuntimeError: fake crash"
    assert outcome.returncode == 1
    assert "Traceback (most recent call last)" in outcome.stderr_tail
    assert "in train_epoch" in outcome.stderr_tail
    assert "RuntimeError: fake crash" in outcome.stderr_tail
    assert_first_epoch_kept(outcome.events)
    assert kinds(outcome.events)[-1] == "error"
    assert "done" not in kinds(outcome.events)


def test_exit_mid_epoch(tmp_path):
    outcome, _ = run_fake(tmp_path, "exit")
    assert outcome.status == "failed"
    assert outcome.reason == "worker exited with status 3"
    assert outcome.returncode == 3
    assert_first_epoch_kept(outcome.events)
    assert kinds(outcome.events) == ["start", "ready", "epoch"]


def test_sigkill_is_reported_as_the_oom_killer_would_be(tmp_path):
    outcome, _ = run_fake(tmp_path, "oomkill")
    assert outcome.status == "failed"
    assert outcome.returncode == -9
    assert outcome.reason.startswith("worker killed by SIGKILL")
    assert "out-of-memory killer" in outcome.reason
    assert "peak RSS" in outcome.reason
    assert kinds(outcome.events) == ["start", "ready", "epoch"]
    assert_first_epoch_kept(outcome.events)


@pytest.mark.slow
def test_hang_times_out_and_the_worker_is_killed(tmp_path):
    outcome, _ = run_fake(tmp_path, "hang", timeout_s=HANG_TIMEOUT_S)
    assert outcome.status == "timeout"
    assert outcome.reason == f"timed out after {HANG_TIMEOUT_S:g} s (1 epochs done)"
    assert outcome.returncode == -9
    assert outcome.wall_time_s >= HANG_TIMEOUT_S
    assert_first_epoch_kept(outcome.events)
    assert len(outcome.samples) > 0
    assert_gone(worker_pid(outcome.events))


@pytest.mark.parametrize("mode", ["child_hang", "child_setsid"])
@pytest.mark.slow
def test_timeout_kills_the_grandchild_too(tmp_path, mode):
    """child_hang: a grandchild in the worker's session; child_setsid: one that left it."""
    outcome, run_dir = run_fake(tmp_path, mode, timeout_s=HANG_TIMEOUT_S)
    assert outcome.status == "timeout"
    assert outcome.reason == f"timed out after {HANG_TIMEOUT_S:g} s (1 epochs done)"
    pid_file = run_dir / "grandchild.pid"
    assert pid_file.exists(), f"the worker never reached epoch 2 within the timeout: {outcome.stderr_tail}"
    assert_gone(worker_pid(outcome.events))
    assert_gone(int(pid_file.read_text()), cmdline_has="1000")
    assert len(outcome.samples) > 0


def test_memory_limit_kills_the_tree(tmp_path):
    outcome, _ = run_fake(tmp_path, "memory", memory_limit_mb=200)
    assert outcome.status == "failed", outcome.reason
    assert outcome.reason.startswith("out of memory: RSS reached ")
    assert outcome.reason.endswith(" MiB, over the limit of 200 MiB")
    reached = float(outcome.reason.removeprefix("out of memory: RSS reached ").split()[0])
    assert 200 < reached < 600
    assert outcome.returncode == -9
    assert max(s.rss_mb for s in outcome.samples) > 200
    assert_first_epoch_kept(outcome.events)
    assert_gone(worker_pid(outcome.events))


def test_memory_limit_not_reached_leaves_a_good_run_alone(tmp_path):
    outcome, _ = run_fake(tmp_path, "ok", memory_limit_mb=2000)
    assert (outcome.status, outcome.reason) == ("ok", None)


def test_framework_prints_cannot_corrupt_the_event_stream(tmp_path):
    outcome, _ = run_fake(tmp_path, "print")
    assert (outcome.status, outcome.reason) == ("ok", None)
    assert kinds(outcome.events) == ["start", "ready", "epoch", "epoch", "done"]
    assert not any("forged" in e or e.get("event") == "garbled" for e in outcome.events)
    # the stray output went to stderr instead
    assert "junk from print() in epoch 2" in outcome.stderr_tail
    assert "{not json from os.write(1)" in outcome.stderr_tail


SCRIPTED_WORKER = """
import sys
for line in sys.argv[1:]:
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()
"""
EPOCH = json.dumps({"event": "epoch", "epoch": 1, "train_time_s": 0.1, "eval_time_s": 0.1, "train_loss": 1.0,
                    "train_accuracy": 0.5, "metrics": {"loss": 1.0, "accuracy": 0.5}})


def run_scripted(tmp_path: Path, lines: list[str]):
    command = [sys.executable, "-c", SCRIPTED_WORKER, *lines]
    return run_worker(command, dict(os.environ), tmp_path, timeout_s=guard.bound(GUARD_S))


def test_a_non_json_line_on_the_event_stream_is_kept_as_garbled(tmp_path):
    outcome = run_scripted(tmp_path, ['{"event": "start"}', "this is not json {", EPOCH, '{"event": "done"}'])
    assert (outcome.status, outcome.reason) == ("ok", None)
    assert kinds(outcome.events) == ["start", "garbled", "epoch", "done"]
    assert outcome.events[1]["line"] == "this is not json {\n"
    assert outcome.events[2]["epoch"] == 1


def test_an_exit_without_done_is_a_failure(tmp_path):
    outcome = run_scripted(tmp_path, ['{"event": "start"}', EPOCH])
    assert (outcome.status, outcome.reason) == ("failed", "worker exited without reporting completion")
    assert kinds(outcome.events) == ["start", "epoch"]


def test_a_worker_that_reports_nothing_and_fails(tmp_path):
    outcome = run_worker([sys.executable, "-c", "import sys; sys.exit(7)"], dict(os.environ), tmp_path, 60)
    assert (outcome.status, outcome.reason, outcome.events) == ("failed", "worker exited with status 7", [])


def test_a_json_null_line_does_not_end_the_event_stream(tmp_path):
    outcome = run_scripted(tmp_path, ['{"event": "start"}', "null", EPOCH, '{"event": "done"}'])
    assert outcome.status == "ok", outcome.reason
    assert "epoch" in kinds(outcome.events) and "done" in kinds(outcome.events)


def test_a_json_non_object_line_does_not_break_the_harness(tmp_path):
    outcome = run_scripted(tmp_path, ['{"event": "start"}', "42", EPOCH, '{"event": "done"}'])
    assert outcome.status == "ok", outcome.reason
    assert kinds(outcome.events) == ["start", "garbled", "epoch", "done"]


LEAVES_A_DAEMON = """
import subprocess, sys
print('{"event": "start"}', flush=True)
print('{"event": "done"}', flush=True)
child = subprocess.Popen(["sleep", "1000"])  # inherits stdout, as a framework's helper process would
open("grandchild.pid", "w").write(str(child.pid))
"""


def test_a_finished_worker_leaving_a_background_process_is_ok(tmp_path):
    try:
        outcome = run_worker([sys.executable, "-c", LEAVES_A_DAEMON], dict(os.environ), tmp_path,
                             timeout_s=guard.bound(30))
        assert (outcome.status, outcome.reason, outcome.returncode) == ("ok", None, 0)
    finally:
        if (tmp_path / "grandchild.pid").exists():
            assert_gone(int((tmp_path / "grandchild.pid").read_text()), cmdline_has="1000")


def test_epoch_boundaries_bound_the_training(tmp_path):
    """epoch_start and epoch_trained surround each epoch's training (not its evaluation), each received
    by the harness at a time on the samples' clock."""
    outcome, _ = run_fake(tmp_path, "ok", epochs=2)
    assert [e.get("event") for e in outcome.events] == [
        "start", "ready", "epoch_start", "epoch_trained", "epoch", "epoch_start", "epoch_trained", "epoch", "done"]
    trained = [e for e in outcome.events if e.get("event") == "epoch_trained"]
    epochs = [e for e in outcome.events if e.get("event") == "epoch"]
    assert [e["train_time_s"] for e in trained] == [e["train_time_s"] for e in epochs]
    assert len(outcome.event_times) == len(outcome.events) and outcome.event_times == sorted(outcome.event_times)
    start, end = outcome.event_times[2], outcome.event_times[3]
    assert end - start == pytest.approx(trained[0]["train_time_s"], abs=0.05)
    assert 0 <= outcome.event_times[0] < outcome.samples[-1].t_s + 1


@pytest.mark.parametrize("spinning, flagged", [(1, True), (2, False)])
@pytest.mark.slow
def test_a_run_using_one_core_of_two_is_flagged(tmp_path, monkeypatch, spinning, flagged):
    """The fake keeps `spinning` cores busy in each epoch; the cell gave it two threads."""
    monkeypatch.setenv("FAKE_SPIN", str(spinning))
    outcome, _ = run_fake(tmp_path, "ok", epochs=3)
    assert outcome.status == "ok", outcome.reason
    used = cores.used(outcome.samples, outcome.events, outcome.event_times)
    busy = cores.others(outcome.samples, outcome.events, outcome.event_times, os.cpu_count())
    flag = cores.flag(used, 2, busy)
    # The fake gets the cores it spins on, or what other processes left of the machine's (the CI's
    # other test workers kept 0.4 of 2 busy once: two spinners then used 1.6).
    assert min(spinning, os.cpu_count() - busy) - 0.25 <= used <= spinning + 0.25
    if flagged:
        assert flag is not None and flag.startswith(f"used {used:.1f} of 2 cores")
    else:  # on a machine other processes keep busy, two spinners may get one core: the flag then says so
        assert flag is None or "other processes kept" in flag
