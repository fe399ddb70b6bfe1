"""The tests' hang guards (tests/guard.py): a guard that fires stops the child and its descendants and
fails with what the child wrote; a child within its bound is left alone; the scale stretches every bound."""
import subprocess
import sys

import guard
import psutil
import pytest

# Writes to both streams, starts a grandchild in its process group, then hangs.
HANGS = """
import subprocess, sys, time
print("epoch 1 done", flush=True)
print("warming up", file=sys.stderr, flush=True)
child = subprocess.Popen(["sleep", "1000"])
print("grandchild", child.pid, flush=True)
time.sleep(1000)
"""


@pytest.fixture
def short_bounds(monkeypatch):
    """Every bound of 100 s lasts 2 s."""
    monkeypatch.setenv(guard.SCALE_VARIABLE, "0.02")


@pytest.mark.slow
def test_a_fired_guard_fails_with_the_output_so_far_and_stops_the_descendants(short_bounds):
    with pytest.raises(pytest.fail.Exception) as failure:
        guard.run([sys.executable, "-c", HANGS], 100)
    message = str(failure.value)
    assert message.startswith("hang guard: ") and "still running after 2 s (a bound of 100 s x" in message
    assert "DLBENCH_TEST_GUARD_SCALE=0.02" in message
    assert "epoch 1 done" in message and "warming up" in message
    grandchild = int(message.split("grandchild ")[1].split()[0])
    guard.wait_until(lambda: gone(grandchild), 500, "the grandchild's end after its SIGKILL", poll_s=0.05)


def gone(pid: int) -> bool:
    """Ended, or a zombie whose parent (killed too) left it to init; SIGKILL lands asynchronously."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_child_within_its_bound_is_left_alone(short_bounds):
    done = guard.run([sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"], 100, input="ok")
    assert (done.returncode, done.stdout) == (0, "OK\n")
    with pytest.raises(subprocess.CalledProcessError):
        guard.run([sys.executable, "-c", "raise SystemExit(3)"], 100, check=True)


@pytest.mark.slow
def test_communicate_and_read_until_fail_with_what_was_read(short_bounds):
    child = subprocess.Popen([sys.executable, "-c", HANGS], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    with pytest.raises(pytest.fail.Exception, match="(?s)hang guard: .*epoch 1 done"):
        guard.communicate(child, 100)
    assert child.poll() is not None

    child = subprocess.Popen([sys.executable, "-c", HANGS], stdout=subprocess.PIPE, text=True)
    lines = guard.read_until(child, lambda line: line.startswith("epoch"), 100, "the first epoch")
    assert lines == ["epoch 1 done\n"]
    with pytest.raises(pytest.fail.Exception, match="(?s)hang guard: the second epoch .*grandchild"):
        guard.read_until(child, lambda line: line.startswith("epoch 2"), 100, "the second epoch")
    child.wait()
    ended = subprocess.Popen([sys.executable, "-c", "print('only this')"], stdout=subprocess.PIPE, text=True)
    with pytest.raises(pytest.fail.Exception, match="(?s)the process ended \\(exit 0\\) first.*only this"):
        guard.read_until(ended, lambda line: False, 100, "a line never written")


@pytest.mark.slow
def test_wait_until_returns_the_condition_or_fails_with_the_progress(short_bounds):
    calls = iter([0, 0, 5])
    assert guard.wait_until(lambda: next(calls), 100, "a count", poll_s=0.01) == 5
    with pytest.raises(pytest.fail.Exception, match="(?s)hang guard: a stored run .*2 of 4 cells"):
        guard.wait_until(lambda: False, 100, "a stored run", progress=lambda: "2 of 4 cells", poll_s=0.1)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "fast"])
def test_a_bad_scale_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(guard.SCALE_VARIABLE, value)
    with pytest.raises(ValueError, match=f"DLBENCH_TEST_GUARD_SCALE='{value}': expected a finite number > 0"):
        guard.bound(10)


def test_the_scale_stretches_every_bound(monkeypatch):
    monkeypatch.delenv(guard.SCALE_VARIABLE, raising=False)
    assert guard.bound(240) == 240
    monkeypatch.setenv(guard.SCALE_VARIABLE, "2.5")
    assert guard.bound(240) == 600
