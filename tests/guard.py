"""Hang guards: bounds on the tests' waits that only a hang reaches, never a speed check.

Each bound is several times the longest such wait seen on the slowest machine the suite ran on (a
2-core machine about twice as slow as the development one, with other jobs beside it), and every bound
is multiplied by $DLBENCH_TEST_GUARD_SCALE (default 1) for a slower machine still. When a guard fires,
the test fails with the child's output so far, so that a slow run and a hung one can be told apart.
"""
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import NoReturn

import psutil
import pytest

SCALE_VARIABLE = "DLBENCH_TEST_GUARD_SCALE"
TAIL_CHARS = 4000  # of each stream, in a guard's failure


def scale() -> float:
    raw = os.environ.get(SCALE_VARIABLE, "1")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"${SCALE_VARIABLE}={raw!r}: expected a finite number > 0, such as 2")
    return value


def bound(seconds: float) -> float:
    """`seconds`, a generous bound on a wait, stretched for this machine."""
    return seconds * scale()


def _tail(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = text or ""
    return text if len(text) <= TAIL_CHARS else "..." + text[-TAIL_CHARS:]


def fired(what: str, seconds: float, stdout: str | bytes | None = None, stderr: str | bytes | None = None) -> NoReturn:
    """Fails the test: `what` outran its guard. Prints what the child had written by then."""
    limit = bound(seconds)
    message = (f"hang guard: {what} still running after {limit:g} s (a bound of {seconds:g} s x "
               f"${SCALE_VARIABLE}={scale():g}); stopped. If it was only slow, not hung, raise ${SCALE_VARIABLE}.")
    if stdout is not None or stderr is not None:
        message += f"\n--- its stdout so far ---\n{_tail(stdout)}\n--- its stderr so far ---\n{_tail(stderr)}"
    pytest.fail(message, pytrace=False)


def stop(child: subprocess.Popen) -> None:
    """Kills the child and every descendant: the ones still in its tree, and its process group where it
    leads one (started with start_new_session), which also holds the orphans of a dead parent."""
    try:
        tree = [child.pid, *(p.pid for p in psutil.Process(child.pid).children(recursive=True))]
    except psutil.NoSuchProcess:
        tree = []
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        if os.getpgid(child.pid) == child.pid:
            os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def default_sigint() -> None:
    """A child's preexec_fn: Ctrl-C as at a terminal. A test process started with SIGINT ignored (a shell's
    background job, as a CI runner may start it) passes that on, and a harness keeps an ignored SIGINT
    ignored, as it should; a test of what Ctrl-C does must not depend on how its runner was started."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(command: list[str], seconds: float, *, input: str | None = None, env: dict | None = None,
        cwd: os.PathLike | str | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """subprocess.run(command, capture_output=True, text=True) under a hang guard of `seconds`. The child
    leads its own process group, so a guard that fires stops its descendants (a harness's workers) too."""
    child = subprocess.Popen(command, stdin=subprocess.PIPE if input is not None else None, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, start_new_session=True)
    try:
        stdout, stderr = child.communicate(input, timeout=bound(seconds))
    except subprocess.TimeoutExpired:
        stop(child)
        stdout, stderr = child.communicate()  # what it wrote before the kill: nothing is lost on a retry
        fired(" ".join(map(str, command)), seconds, stdout, stderr)
    done = subprocess.CompletedProcess(command, child.returncode, stdout, stderr)
    if check:
        done.check_returncode()
    return done


def communicate(child: subprocess.Popen, seconds: float) -> tuple[str, str]:
    """child.communicate() under a hang guard; the child and its descendants are killed when it fires."""
    try:
        return child.communicate(timeout=bound(seconds))
    except subprocess.TimeoutExpired:
        stop(child)
        stdout, stderr = child.communicate()
        fired(" ".join(map(str, child.args)), seconds, stdout, stderr)


def read_until(child: subprocess.Popen, condition: Callable[[str], bool], seconds: float, what: str) -> list[str]:
    """The lines of the child's (text) stdout up to the first that meets `condition`. Fails with the lines
    read so far when the guard fires (the child is killed) or when the child ends before that line."""
    lines: list[str] = []
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        stop(child)  # ends the read below, unless a descendant that left the child's group holds its stdout

    timer = threading.Timer(bound(seconds), expire)
    timer.start()
    try:
        for line in child.stdout:
            lines.append(line)
            if condition(line):
                return lines
    finally:
        timer.cancel()
    if expired.is_set():
        fired(what, seconds, "".join(lines))
    pytest.fail(f"{what}: the process ended (exit {child.wait()}) first; its stdout:\n{_tail(''.join(lines))}",
                pytrace=False)


def wait_until(condition: Callable[[], object], seconds: float, what: str,
               progress: Callable[[], str] | None = None, poll_s: float = 0.5) -> object:
    """Polls `condition` until it returns something true, and returns that; fails naming `what` (with
    `progress()`, what the awaited process has written, if given) when the guard fires."""
    deadline = time.monotonic() + bound(seconds)
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            fired(what, seconds, progress() if progress else None)
        time.sleep(poll_s)
