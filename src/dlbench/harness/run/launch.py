"""Launches one worker process, for a cell's run, a peak or a certificate's probe: its environment
variables (worker_environment: caches, threads, allocator and GPU memory policy), then run_worker, which
spawns it in its own session, reads its JSON-lines events, samples its resources, enforces the time and
memory limits, and says how it ended.

A crash, a non-zero exit, a signal, a memory kill and a timeout each end as a failed outcome with a
reason and the tail of stderr; nothing a worker does can raise out of here. A signal to the harness
that run.interrupt holds (Ctrl-C, SIGTERM) stops the worker and ends the outcome as interrupted, with
the events it had reported.
"""
import ctypes
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from dlbench.harness import folders
from dlbench.harness.measure.monitor import Monitor, Sample, find_gpu_library
from dlbench.harness.run import interrupt
from dlbench.shared.protocol import DONE, EPOCH, ERROR, GARBLED, KIND, kind_of

STDERR_TAIL_CHARS = 4000
TIMEOUT, INTERRUPTED = "timeout", "interrupted"  # why the harness stopped a worker
PR_SET_PDEATHSIG = 1  # from linux/prctl.h


@dataclass
class Outcome:
    status: str  # ok | failed | timeout | interrupted
    reason: str | None
    events: list[dict] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    stderr_tail: str = ""
    wall_time_s: float = 0.0
    returncode: int | None = None
    # CPU seconds the harness process itself used while the worker ran (sampling its tree, reading its
    # events, drawing progress): what the measurement took from the machine the framework runs on
    harness_cpu_s: float | None = None
    monitor_cpu_s: float | None = None  # the part of harness_cpu_s its sampling thread used
    # per event, when the harness received it: seconds on the samples' clock (Sample.t_s), so the
    # samples taken while the worker trained can be told apart (record: cores used)
    event_times: list[float] = field(default_factory=list)


def _worker_preexec() -> None:
    """In the child before exec: its own session (so the whole group can be killed), and death when
    the harness dies, so an orphaned worker never trains on beside the next run's measurements."""
    os.setsid()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL the worker's whole session, and any descendant that left it."""
    try:
        descendants = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in descendants:
        try:
            child.kill()
        except psutil.Error:
            pass


def _parse(line: str) -> dict:
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        event = None
    return event if isinstance(event, dict) else {KIND: GARBLED, "line": line[:500]}


def _read_events(stream, events: "queue.Queue[dict | None]") -> None:
    """Puts each line's event on the queue, then None when the worker's stdout closes."""
    for line in stream:
        events.put(_parse(line))
    events.put(None)


def _tail(path: Path) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as handle:
        handle.seek(max(path.stat().st_size - STDERR_TAIL_CHARS, 0))
        return handle.read().decode("utf-8", "replace")


def _ending(returncode: int, events: list[dict], peak_rss_mb: float) -> tuple[str, str | None]:
    error = next((e["message"] for e in events if kind_of(e) == ERROR), None)
    if error:
        return "failed", error
    if returncode < 0:
        name = signal.Signals(-returncode).name
        hint = (f" (the kernel's out-of-memory killer sends it; peak RSS {peak_rss_mb:.0f} MiB)"
                if returncode == -signal.SIGKILL else "")
        return "failed", f"worker killed by {name}{hint}"
    if returncode != 0:
        return "failed", f"worker exited with status {returncode}"
    if not any(kind_of(e) == DONE for e in events):
        return "failed", "worker exited without reporting completion"
    return "ok", None


def run_worker(command: list[str], env: dict[str, str], run_dir: Path, timeout_s: float,
               memory_limit_mb: float | None = None, on_event: Callable[[dict], None] | None = None) -> Outcome:
    stderr_path = run_dir / "stderr.log"
    if interrupt.requested():  # the plan is stopping: no worker is started only to be stopped
        return Outcome("interrupted", _interrupted_reason(0, started=False))
    find_gpu_library()
    started, cpu_started = time.perf_counter(), time.process_time()
    try:
        with os.fdopen(folders.open_no_follow(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as stderr:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                                       env=env, cwd=run_dir, preexec_fn=_worker_preexec, text=True)
    except (OSError, folders.PathError) as error:
        return Outcome("failed", f"cannot start the worker {command[0]}: {error}")
    over_memory: list[float] = []

    def check_memory(sample: Sample) -> None:
        if memory_limit_mb and sample.rss_mb > memory_limit_mb and not over_memory:
            over_memory.append(sample.rss_mb)
            kill_tree(process)

    monitor = Monitor(process.pid, on_sample=check_memory)
    monitor.start()
    t0 = time.monotonic()  # the samples' t_s count from the monitor's start, microseconds before this
    pending: queue.Queue[dict | None] = queue.Queue()
    threading.Thread(target=_read_events, args=(process.stdout, pending), daemon=True).start()
    deadline = started + timeout_s
    times: list[float] = []
    try:
        events, stopped = _collect(pending, process, deadline, on_event,
                                   lambda: times.append(time.monotonic() - t0))
        try:  # stdout can close before the process ends
            returncode = process.wait(timeout=max(deadline - time.perf_counter(), 0.0))
        except subprocess.TimeoutExpired:
            kill_tree(process)
            returncode, stopped = process.wait(), stopped or TIMEOUT
    except BaseException:  # a second Ctrl-C, or one no run.interrupt holds: the worker goes first
        kill_tree(process)
        monitor.stop()
        raise
    samples = monitor.stop()
    outcome = Outcome("ok", None, events, samples, _tail(stderr_path), time.perf_counter() - started, returncode,
                      time.process_time() - cpu_started, monitor.cpu_s, times[:len(events)])
    epochs_done = sum(1 for e in events if kind_of(e) == EPOCH)
    if stopped == TIMEOUT:
        outcome.status, outcome.reason = "timeout", f"timed out after {timeout_s:g} s ({epochs_done} epochs done)"
    elif stopped == INTERRUPTED:
        outcome.status, outcome.reason = "interrupted", _interrupted_reason(epochs_done)
    elif over_memory:
        outcome.status = "failed"
        outcome.reason = (f"out of memory: RSS reached {over_memory[0]:.0f} MiB, "
                          f"over the limit of {memory_limit_mb:g} MiB")
    else:
        peak = max((s.rss_mb for s in samples), default=0.0)
        outcome.status, outcome.reason = _ending(returncode, events, peak)
    return outcome


def _interrupted_reason(epochs_done: int, started: bool = True) -> str:
    signal_number = interrupt.requested()
    by = interrupt.signal_name(signal_number) if signal_number else "a signal"
    if not started:
        return f"interrupted by {by} before its worker started"
    return f"interrupted by {by} ({epochs_done} epochs done); its worker was stopped"


def _collect(pending: "queue.Queue[dict | None]", process: subprocess.Popen, deadline: float,
             on_event: Callable[[dict], None] | None,
             stamp: Callable[[], None] = lambda: None) -> tuple[list[dict], str | None]:
    """Events until the worker's stdout closes, and why the worker was stopped: TIMEOUT (killed at the
    deadline), INTERRUPTED (killed because the harness was asked to stop, run.interrupt) or None. A
    descendant that inherited stdout can hold it open after the worker exits: a grace second later it is
    killed."""
    events: list[dict] = []
    exited_at = None
    finished = False  # the worker reported done: a signal now lets it exit by itself
    while True:
        now = time.perf_counter()
        stop = TIMEOUT if now >= deadline else INTERRUPTED if interrupt.requested() and not finished else None
        if stop:
            kill_tree(process)
            _drain(pending, events)
            return events, stop
        try:
            event = pending.get(timeout=min(0.2, deadline - now))
        except queue.Empty:
            if process.poll() is not None:
                exited_at = exited_at or now
                if now - exited_at > 1.0:
                    kill_tree(process)
                    _drain(pending, events)
                    return events, None
            continue
        if event is None:
            return events, None
        stamp()
        events.append(event)
        finished = finished or kind_of(event) == DONE
        if on_event:
            on_event(event)


def _drain(pending: "queue.Queue[dict | None]", events: list[dict]) -> None:
    while True:
        try:
            event = pending.get(timeout=5)
        except queue.Empty:
            return
        if event is None:
            return
        events.append(event)
