"""What a training cell and an inference cell both need in the worker: the event stream, the prepared
splits, and the adapter built with its starting weights (worker/train.py trains a cell, worker/serve.py
serves one).

Worker side: Python 3.8, numpy and the one framework.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import time

import numpy as np

from dlbench.shared.cell_file import CellFile
from dlbench.shared.initializers import canonical_init
from dlbench.shared.protocol import ELAPSED, KIND, META_FILE, READY, array_file
from dlbench.worker.base import Split
from dlbench.worker.detector import detector_class

STARTED = time.perf_counter()


class Events(object):
    def __init__(self):
        self.stream = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)  # stray prints (C libraries included) land in stderr
        sys.stdout = sys.stderr

    def emit(self, event: str, **fields) -> None:
        fields[KIND] = event
        fields[ELAPSED] = time.perf_counter() - STARTED
        self.stream.write(json.dumps(fields) + "\n")
        self.stream.flush()


def load_split(folder: str, part: str, scale) -> Split:
    """Memory-mapped: preparing the data was the harness's job, reading it costs nothing here."""
    x = np.load(os.path.join(folder, array_file("x_" + part)), mmap_mode="r")
    y = np.load(os.path.join(folder, array_file("y_" + part)), mmap_mode="r")
    return Split(x, y, scale)


def load_adapter_class(path: str):
    module_name, _, class_name = path.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def starting_weights(cell: CellFile) -> dict:
    """The suite entry's weights file (checked by the harness), else the canonical initialisation."""
    if cell.weights:
        with np.load(cell.weights, allow_pickle=False) as loaded:
            return {key: loaded[key].astype(np.float32) for key in loaded.files}
    return canonical_init(cell.model, cell.seed)


def read_meta(cell: CellFile) -> dict:
    with open(os.path.join(cell.data_path, META_FILE)) as handle:
        return json.load(handle)


def is_detector(cell: CellFile) -> bool:
    """A detector model (its IR has a "detector" part): images of many sizes and their boxes, its own adapter."""
    return "detector" in cell.model


def ready_adapter(cell: CellFile, meta: dict, events: Events, n_train: int, n_test: int):
    """The cell's adapter (a detector's for a detector model), built with its starting weights; emits READY
    with the time the framework's import and the build took."""
    tic = time.perf_counter()
    # imports the framework
    adapter_class = detector_class(cell.adapter) if is_detector(cell) else load_adapter_class(cell.adapter)
    import_s = time.perf_counter() - tic
    tic = time.perf_counter()
    adapter = adapter_class(cell.model, cell.recipe, meta["task"], cell.device, cell.threads, cell.seed)
    adapter.set_weights(starting_weights(cell))
    adapter.synchronise()
    events.emit(READY, import_s=import_s, build_s=time.perf_counter() - tic, versions=adapter.versions(),
                threads=adapter.threads_used(), n_train=n_train, n_test=n_test, execution=adapter.execution,
                precision=adapter.precision)
    return adapter
