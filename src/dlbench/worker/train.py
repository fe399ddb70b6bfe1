"""Runs one benchmark cell in a framework's own interpreter and prints JSON-lines events.

Worker side: Python 3.8, numpy and the one framework. Started by the harness as
`<framework env python> -m dlbench.worker.train CELL.json` with dlbench's package directory on PYTHONPATH.

The cell file is shared/cell_file.CellFile, read and checked before anything else; an inference cell (its
mode INFERENCE) is served instead of trained (worker/serve.py).

Events go to a private copy of the original stdout; file descriptor 1 is pointed at stderr, so
whatever a framework prints can never corrupt the event stream.
"""
from __future__ import annotations

import os
import sys
import time
import traceback

from dlbench.shared.cell_file import CellFile
from dlbench.shared.detection.pipeline import DetectionSplit
from dlbench.shared.protocol import DONE, EPOCH, EPOCH_SPLIT, EPOCH_START, EPOCH_TRAINED, ERROR, FIRST_STEP, START
from dlbench.worker.base import Split, epoch_order
from dlbench.worker.cell import Events, is_detector, load_split, read_meta, ready_adapter
from dlbench.worker.serve import run as serve_cell


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


def run(cell: CellFile, events: Events) -> None:
    meta = read_meta(cell)
    if is_detector(cell):  # images of many sizes and their boxes, not one x and y array
        # the training images are read into memory here, before any epoch's clock starts, so that no
        # epoch time depends on the page cache (the test images are read as evaluation goes)
        train = DetectionSplit.load(cell.data_path, "train").in_memory()
        test = DetectionSplit.load(cell.data_path, "test")
    else:
        train = load_split(cell.data_path, "train", meta.get("input_scale"))
        test = load_split(cell.data_path, "test", meta.get("input_scale"))
    train = first_samples(train, cell.train_samples)
    adapter = ready_adapter(cell, meta, events, len(train), len(test))

    for epoch in range(1, cell.epochs + 1):
        order = epoch_order(cell.seed, epoch, len(train))
        # epoch_start and epoch_trained bound the training, outside its clock: the harness reads the
        # energy counters when they arrive
        events.emit(EPOCH_START, epoch=epoch)
        started = time.perf_counter()
        train_metrics = adapter.train_epoch(train, order)
        adapter.synchronise()
        train_time = time.perf_counter() - started
        events.emit(EPOCH_TRAINED, epoch=epoch, train_time_s=train_time)
        tic = time.perf_counter()
        metrics = adapter.evaluate(test)
        adapter.synchronise()
        # a detector's epoch also says where its training time went (DetectorAdapter.train_epoch)
        split = {key: train_metrics[key] for key in EPOCH_SPLIT if key in train_metrics}
        # the first epoch's also says when its first step had finished (BaseAdapter.step_done): traces, compilation
        # and first allocations
        first = {FIRST_STEP: adapter.first_step_at - started} if epoch == 1 else {}
        events.emit(EPOCH, epoch=epoch, train_time_s=train_time, eval_time_s=time.perf_counter() - tic,
                    train_loss=train_metrics["loss"], train_accuracy=train_metrics["accuracy"], metrics=metrics,
                    **split, **first)
    events.emit(DONE)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    events = Events()
    if len(argv) != 1:
        events.emit(ERROR, message="usage: python -m dlbench.worker.train CELL.json")
        return 2
    events.emit(START, pid=os.getpid(), python=sys.version.split()[0], executable=sys.executable)
    try:
        cell = CellFile.read(argv[0])
        if cell.inference:
            serve_cell(cell, events)
        else:  # a training cell has no mode
            run(cell, events)
    except Exception as error:  # the harness stores the message; the traceback goes to stderr
        traceback.print_exc()
        events.emit(ERROR, message="%s: %s" % (type(error).__name__, error))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
