"""Serves one inference cell: the model's serving path (adapter.serving()) timed on the test split.

Worker side: Python 3.8, numpy and the one framework. worker/train.py's main hands it an inference
cell (shared/cell_file.CellFile, its mode INFERENCE). After READY it emits, in this order:
- SERVE_FIRST_CALL: the first call, on test sample 0 alone (it may trace or compile);
- SERVE_LATENCY: after `warmup_calls` untimed calls, `latency_calls` timed calls of one sample each, call i
  on test sample i % n_test;
- SERVE_THROUGHPUT: after one call on the first batch of `throughput_batch` samples (reported as its
  first_call_s: a new shape may compile), the first floor(min(throughput_samples, n_test) / batch) whole
  batches of the split, timed as one span;
then DONE. The serving path returns host numpy, so every timed call has finished when its clock stops.
A detector serves image by image (its batch is 1): a call takes one image and returns its detections.
"""
from __future__ import annotations

import time

import numpy as np

from dlbench.shared.cell_file import CellFile
from dlbench.shared.detection.pipeline import DetectionSplit
from dlbench.shared.protocol import DONE, SERVE_FIRST_CALL, SERVE_LATENCY, SERVE_THROUGHPUT
from dlbench.worker.cell import is_detector, load_split, read_meta, ready_adapter

SETTINGS = ("warmup_calls", "latency_calls", "throughput_batch", "throughput_samples")


def settings_of(cell: CellFile) -> dict:
    """The cell's serve settings, each checked: a whole number, at least 1 (warm-up calls: at least 0)."""
    given = cell.serve
    if not isinstance(given, dict):
        raise ValueError("an inference cell needs \"serve\": {%s}; got %r" % (", ".join(SETTINGS), given))
    for key in SETTINGS:
        value, least = given.get(key), 0 if key == "warmup_calls" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError("serve.%s %r: accepted: a whole number, at least %d" % (key, value, least))
    if is_detector(cell) and given["throughput_batch"] != 1:
        raise ValueError("serve.throughput_batch %d: a detector serves one image a call; accepted: 1"
                         % given["throughput_batch"])
    return given


def throughput_samples(settings: dict, n_test: int) -> int:
    """How many samples the throughput span serves: whole batches of the first min(N, n_test)."""
    batch = settings["throughput_batch"]
    samples = min(settings["throughput_samples"], n_test) // batch * batch
    if samples == 0:
        raise ValueError("serve.throughput_batch %d: more than the %d samples served (throughput_samples %d, "
                         "test split %d)" % (batch, min(settings["throughput_samples"], n_test),
                                             settings["throughput_samples"], n_test))
    return samples


class Inputs(object):
    """The served test samples, read into memory before any clock starts: batches of stored inputs, or a
    detector's images one at a time."""

    def __init__(self, test, count: int, detector: bool):
        self.detector = detector
        if detector:
            self.images = [test.image(i) for i in range(count)]
        else:
            self.x = np.array(test.x[:count])

    def batch(self, start: int, size: int):
        if self.detector:  # settings_of refuses a detector's batch of more than one
            return self.images[start]
        return self.x[start:start + size]


def timed(serve, x) -> float:
    tic = time.perf_counter()
    serve(x)
    return time.perf_counter() - tic


def run(cell: CellFile, events) -> None:
    meta = read_meta(cell)
    settings = settings_of(cell)
    detector = is_detector(cell)
    if detector:
        test = DetectionSplit.load(cell.data_path, "test")
    else:
        test = load_split(cell.data_path, "test", meta.get("input_scale"))
    n_test = len(test)
    samples = throughput_samples(settings, n_test)
    warmup, calls, batch = settings["warmup_calls"], settings["latency_calls"], settings["throughput_batch"]
    adapter = ready_adapter(cell, meta, events, 0, n_test)
    if not detector:
        adapter.input_scale = meta.get("input_scale")
    inputs = Inputs(test, min(n_test, max(warmup, calls, samples)), detector)

    serve = adapter.serving()
    events.emit(SERVE_FIRST_CALL, batch_size=1, first_call_s=timed(serve, inputs.batch(0, 1)))
    for i in range(warmup):
        serve(inputs.batch(i % n_test, 1))
    latencies = [timed(serve, inputs.batch(i % n_test, 1)) for i in range(calls)]
    events.emit(SERVE_LATENCY, batch_size=1, warmup_calls=warmup, latencies_s=latencies)

    first_call_s = timed(serve, inputs.batch(0, batch))
    tic = time.perf_counter()
    for start in range(0, samples, batch):
        serve(inputs.batch(start, batch))
    seconds = time.perf_counter() - tic
    events.emit(SERVE_THROUGHPUT, batch_size=batch, samples=samples, seconds=seconds, first_call_s=first_call_s)
    events.emit(DONE)
