"""Runs one benchmark cell in a framework's own interpreter and prints JSON-lines events.

Worker side: Python 3.8, numpy and the one framework. Started by the harness as
`<framework env python> -m dlbench.worker.train CELL.json` with dlbench's package directory on PYTHONPATH.

A cell with "mode": "inference" is served instead of trained (worker/serve.py).

Events go to a private copy of the original stdout; file descriptor 1 is pointed at stderr, so
whatever a framework prints can never corrupt the event stream.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback

import numpy as np

from dlbench.shared.detection.pipeline import DetectionSplit
from dlbench.shared.init import canonical_init
from dlbench.shared.protocol import (
    DONE,
    EPOCH,
    EPOCH_SPLIT,
    EPOCH_START,
    EPOCH_TRAINED,
    ERROR,
    KIND,
    META_FILE,
    READY,
    START,
    array_file,
)
from dlbench.worker.base import Split, epoch_order
from dlbench.worker.detector import detector_class

STARTED = time.perf_counter()


class Events(object):
    def __init__(self):
        self.stream = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)  # stray prints (C libraries included) land in stderr
        sys.stdout = sys.stderr

    def emit(self, event: str, **fields) -> None:
        fields[KIND] = event
        fields["elapsed_s"] = time.perf_counter() - STARTED
        self.stream.write(json.dumps(fields) + "\n")
        self.stream.flush()


def load_split(folder: str, part: str, scale) -> Split:
    """Memory-mapped: preparing the data was the harness's job, reading it costs nothing here."""
    x = np.load(os.path.join(folder, array_file("x_" + part)), mmap_mode="r")
    y = np.load(os.path.join(folder, array_file("y_" + part)), mmap_mode="r")
    return Split(x, y, scale)


def first_samples(split, count):
    """The split's first `count` samples in their stored order (a suite entry's train_samples), or the whole
    split for None. The one place where a cell's training set is cut: every framework trains on what this
    returns, in the epoch orders drawn over its length."""
    if count is None:
        return split
    if count < 1 or count > len(split):
        raise ValueError("train_samples %r: the training split holds %d samples" % (count, len(split)))
    if isinstance(split, DetectionSplit):  # an image's pixels and boxes are found through its index and span
        return DetectionSplit(split.index[:count], split.spans[:count], split.pixels, split.boxes, split.labels,
                              split.difficult)
    return Split(split.x[:count], split.y[:count], split.input_scale)


def load_adapter_class(path: str):
    module_name, _, class_name = path.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def starting_weights(cell: dict) -> dict:
    """The suite entry's weights file (checked by the harness), else the canonical initialisation."""
    if cell.get("weights"):
        with np.load(cell["weights"], allow_pickle=False) as loaded:
            return {key: loaded[key].astype(np.float32) for key in loaded.files}
    return canonical_init(cell["model"], cell["seed"])


def read_meta(cell: dict) -> dict:
    with open(os.path.join(cell["data_path"], META_FILE)) as handle:
        return json.load(handle)


def ready_adapter(cell: dict, meta: dict, events: Events, n_train: int, n_test: int):
    """The cell's adapter (a detector's for a detector model), built with its starting weights; emits READY
    with the time the framework's import and the build took."""
    tic = time.perf_counter()
    # imports the framework
    detector = "detector" in cell["model"]
    adapter_class = detector_class(cell["adapter"]) if detector else load_adapter_class(cell["adapter"])
    import_s = time.perf_counter() - tic
    tic = time.perf_counter()
    adapter = adapter_class(cell["model"], cell["recipe"], meta["task"], cell["device"], cell["threads"],
                            cell["seed"])
    adapter.set_weights(starting_weights(cell))
    adapter.synchronise()
    events.emit(READY, import_s=import_s, build_s=time.perf_counter() - tic, versions=adapter.versions(),
                threads=adapter.threads_used(), n_train=n_train, n_test=n_test)
    return adapter


def run(cell: dict, events: Events) -> None:
    meta = read_meta(cell)
    detector = "detector" in cell["model"]
    if detector:  # images of many sizes and their boxes, not one x and y array
        # the training images are read into memory here, before any epoch's clock starts, so that no
        # epoch time depends on the page cache (the test images are read as evaluation goes)
        train = DetectionSplit.load(cell["data_path"], "train").in_memory()
        test = DetectionSplit.load(cell["data_path"], "test")
    else:
        train = load_split(cell["data_path"], "train", meta.get("input_scale"))
        test = load_split(cell["data_path"], "test", meta.get("input_scale"))
    train = first_samples(train, cell.get("train_samples"))
    adapter = ready_adapter(cell, meta, events, len(train), len(test))

    for epoch in range(1, cell["epochs"] + 1):
        order = epoch_order(cell["seed"], epoch, len(train))
        # epoch_start and epoch_trained bound the training, outside its clock: the harness reads the
        # energy counters when they arrive
        events.emit(EPOCH_START, epoch=epoch)
        tic = time.perf_counter()
        train_metrics = adapter.train_epoch(train, order)
        adapter.synchronise()
        train_time = time.perf_counter() - tic
        events.emit(EPOCH_TRAINED, epoch=epoch, train_time_s=train_time)
        tic = time.perf_counter()
        metrics = adapter.evaluate(test)
        adapter.synchronise()
        # a detector's epoch also says where its training time went (DetectorAdapter.train_epoch)
        split = {key: train_metrics[key] for key in EPOCH_SPLIT if key in train_metrics}
        events.emit(EPOCH, epoch=epoch, train_time_s=train_time, eval_time_s=time.perf_counter() - tic,
                    train_loss=train_metrics["loss"], train_accuracy=train_metrics["accuracy"], metrics=metrics,
                    **split)
    events.emit(DONE)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    events = Events()
    if len(argv) != 1:
        events.emit(ERROR, message="usage: python -m dlbench.worker.train CELL.json")
        return 2
    events.emit(START, pid=os.getpid(), python=sys.version.split()[0], executable=sys.executable)
    try:
        with open(argv[0]) as handle:
            cell = json.load(handle)
        mode = cell.get("mode")
        if mode == "inference":
            from dlbench.worker.serve import run as serve  # here: serve.py imports this module's helpers
            serve(cell, events)
        elif mode is None:  # a training cell has no mode
            run(cell, events)
        else:
            raise ValueError("cell mode %r: accepted: inference, or no mode for a training cell" % (mode,))
    except Exception as error:  # the harness stores the message; the traceback goes to stderr
        traceback.print_exc()
        events.emit(ERROR, message="%s: %s" % (type(error).__name__, error))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
