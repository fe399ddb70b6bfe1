"""What a `dlbench run` owns in its results folder: the folder itself, locked for the whole run, and the
new folders it makes there (a run's, a peak's, certification's), never one that exists already.

The lock is an OS lock (flock) on `<results>/dlbench.lock`, so the kernel releases it when its process
ends, however it ends: a killed run leaves no stale lock. The file names who holds it (pid, host, start
time, command line) for the message of a run refused because of it. Readers take no lock: `results`,
`report` and `compare` read the SQLite store while a run writes it.
"""
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from dlbench.harness import folders
from dlbench.harness.run.live_report import COST_FILE, REPORT_FILE
from dlbench.harness.store import FILENAME, SIDE_FILES, StoreError

LOCK_FILE = "dlbench.lock"
# the files a run writes in the results folder itself, which may be shared: a link planted at one is refused
WRITTEN = (LOCK_FILE, FILENAME, *(FILENAME + suffix for suffix in SIDE_FILES), REPORT_FILE, COST_FILE)


class FolderInUse(StoreError):
    """Another dlbench run holds the results folder's lock."""


def holder() -> dict:
    """Who this process is, as the lock file records it."""
    try:
        command = shlex.join(psutil.Process().cmdline())
    except psutil.Error:  # /proc unreadable: the arguments at least
        command = shlex.join(["dlbench", *sys.argv[1:]])
    return {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": command}


def describe_holder(text: str) -> str:
    """The lock file's record in words; the holder may have locked it without writing it yet."""
    try:
        held = json.loads(text)
        return f"pid {held['pid']} on {held['host']}, started {held['started_at']}: {held['command']}"
    except (ValueError, TypeError, KeyError):
        return "a process that has not written who it is yet"


def _open_lock_file(results: Path) -> int:
    """The lock file's descriptor, never through a link planted in its place: the file is emptied and written
    (a link to another file would empty that file)."""
    try:
        results.mkdir(parents=True, exist_ok=True)
        # no O_TRUNC: the file is emptied only once the lock is ours, or the holder's record is lost
        return folders.open_no_follow(results / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except folders.PathError as error:
        raise StoreError(f"the lock file {error}") from None
    except OSError as error:
        raise StoreError(f"cannot use {results} as the results folder: {error.strerror} "
                         f"({error.filename}); pass a folder you can write with --results") from None


def refuse_planted_links(results: Path) -> None:
    """Raises PathError, naming the first, when a file the run writes in `results` is a symbolic link: checked
    before anything is prepared, as the writes refuse it too but only once the run is under way."""
    for name in WRITTEN:
        folders.refuse_link(results / name)


@contextmanager
def locked(results: Path) -> Iterator[None]:
    """Holds the results folder's lock while the block runs; raises FolderInUse at once, naming the holder,
    when another process holds it. The lock file stays (removing it would let a third process lock a
    file the second already opened); it is emptied on release."""
    descriptor = _open_lock_file(results)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(descriptor, 4096, 0).decode("utf-8", "replace")
            raise FolderInUse(
                f"results folder {results} is in use by another dlbench run ({describe_holder(text)}); "
                f"wait for it to end, or pass another --results folder. Reading it meanwhile works "
                f"(dlbench results --results {results}). Lock file: {results / LOCK_FILE}") from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, json.dumps(holder()).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(descriptor, 0)
    finally:
        os.close(descriptor)  # releases the lock
