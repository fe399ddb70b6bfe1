"""A fake framework adapter for worker-protocol tests: numpy only, behaviour chosen by $FAKE_MODE.

Runs in the worker process (`python -m dlbench.worker CELL.json`), imported as "fake_framework:Adapter"
with tests/ on PYTHONPATH. Every misbehaving mode lets epoch 1 finish normally and misbehaves in
epoch 2, so the tests can check that events reported before a failure are kept.

Modes: ok, crash, exit, hang, memory, oomkill, print, child_hang, child_setsid.
Modes that start a grandchild write its pid to grandchild.pid in the working directory (the run dir).

$FAKE_SPIN=N (with mode ok) makes each epoch keep N cores busy for $FAKE_SPIN_S seconds (default 0.8)
instead of sleeping, in N threads, whatever threads the cell gives.

serving() (docs/measurement.md's inference mode) returns a call that sleeps SERVE_CALL_S plus SERVE_SAMPLE_S
per sample and returns zeros of (samples, 2); worker/serve.py drives it as the inference protocol says.

$FAKE_GATE=PATH (with mode ok) holds epoch $FAKE_GATE_EPOCH (default 1) and every later one until the file
PATH exists, so a test can act while a run is known to be mid-cell.
"""
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

from dlbench.worker.base import BaseAdapter, Split

MODES = ("ok", "crash", "exit", "hang", "memory", "oomkill", "print", "child_hang", "child_setsid")
OK_EPOCH_SLEEP_S = 0.15  # long enough for the 0.1 s monitor to take samples of a good run
GATE_LIMIT_S = 120  # a gate nobody opens (a test that failed before opening it) lets the run end
TRAIN_LOSS = 0.5
EVAL_LOSS = 0.25
SERVE_CALL_S = 0.002  # per call of the serving path
SERVE_SAMPLE_S = 0.0005  # and per sample in it


def _sleep_forever() -> None:
    while True:
        time.sleep(3600)


def _spawn_grandchild(new_session: bool) -> None:
    child = subprocess.Popen(["sleep", "1000"], start_new_session=new_session)
    with open("grandchild.pid", "w") as handle:
        handle.write(str(child.pid))


def _spin(cores: int, seconds: float) -> None:
    """Keeps `cores` cores busy for `seconds`: threads hashing a buffer (hashlib releases the GIL on large
    data), all in the worker process, which the monitor sees from its first sample."""
    end = time.perf_counter() + seconds
    data = bytes(1 << 20)

    def loop() -> None:
        while time.perf_counter() < end:
            hashlib.sha256(data).digest()

    threads = [threading.Thread(target=loop) for _ in range(cores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _wait_for_gate(path: str) -> None:
    end = time.monotonic() + GATE_LIMIT_S
    while not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.05)


def _grow_memory() -> None:
    """Up to ~400 MiB, touched page by page (np.ones writes every byte), 16 MiB at a time."""
    held = []
    for _ in range(25):
        held.append(np.ones(16 * 1024 * 1024 // 8))
        time.sleep(0.02)
    _sleep_forever()


class Adapter(BaseAdapter):
    name = "fake"

    def __init__(self, model, recipe, task, device, threads, seed):
        super().__init__(model, recipe, task, device, threads, seed)
        self.mode = os.environ.get("FAKE_MODE", "ok")
        if self.mode not in MODES:
            raise ValueError(f"unknown FAKE_MODE {self.mode!r}")
        self.weights = {}
        self.epoch = 0

    def versions(self):
        return {"fake": "1.0", "numpy": np.__version__}

    def threads_used(self):
        return self.threads

    def set_weights(self, weights):
        self.weights = {name: np.array(value) for name, value in weights.items()}

    def get_weights(self):
        return dict(self.weights)

    def synchronise(self):
        pass

    def train_epoch(self, data: Split, order):
        self.epoch += 1
        if self.epoch >= 2:
            self._misbehave()
        gate = os.environ.get("FAKE_GATE")
        if self.mode == "ok" and gate and self.epoch >= int(os.environ.get("FAKE_GATE_EPOCH", "1")):
            _wait_for_gate(gate)
        if self.mode == "ok" and os.environ.get("FAKE_SPIN"):
            _spin(int(os.environ["FAKE_SPIN"]), float(os.environ.get("FAKE_SPIN_S", "0.8")))
        elif self.mode in ("ok", "print"):
            time.sleep(OK_EPOCH_SLEEP_S)
        self.step_done()  # the epoch is its one step
        labels = np.asarray(data.y)[order]
        return {"loss": TRAIN_LOSS / self.epoch, "accuracy": float(np.mean(labels == 1))}

    def evaluate(self, data: Split):
        return {"loss": EVAL_LOSS, "accuracy": float(np.mean(np.asarray(data.y) == 1))}

    def serving(self):
        """A serving path: the calls take SERVE_CALL_S + SERVE_SAMPLE_S per sample; in mode crash it raises."""
        def serve(x):
            if self.mode == "crash":
                raise RuntimeError("fake crash while serving")
            time.sleep(SERVE_CALL_S + SERVE_SAMPLE_S * len(x))
            return np.zeros((len(x), 2), dtype=np.float32)
        return serve

    def _misbehave(self) -> None:
        mode = self.mode
        if mode == "crash":
            raise RuntimeError("fake crash")
        if mode == "exit":
            os._exit(3)
        if mode == "hang":
            _sleep_forever()
        if mode == "memory":
            _grow_memory()
        if mode == "oomkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "print":
            print("junk from print() in epoch", self.epoch)
            sys.stdout.flush()
            os.write(1, b"{not json from os.write(1)\n")
            os.write(1, b'{"event": "done", "forged": true}\n')
        if mode in ("child_hang", "child_setsid"):
            _spawn_grandchild(new_session=mode == "child_setsid")
            _sleep_forever()
