"""Offline datasets, prepared once by the harness into numpy arrays that workers memory-map.

Each dataset module exposes NAME, INFO (name, task, description, source, licence) and build().
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType

from . import digits, lee_lm, polarity
from .prepared import META_FILE, DatasetError, PreparedDataset, load_prepared, write_prepared

__all__ = ["DatasetError", "PreparedDataset", "dataset_names", "describe", "load_prepared", "prepare"]

_DATASETS = {module.NAME: module for module in (digits, polarity, lee_lm)}


def dataset_names() -> list[str]:
    return sorted(_DATASETS)


def describe(name: str) -> dict:
    return dict(_module(name).INFO)


def prepare(name: str, data_dir: Path) -> PreparedDataset:
    """Prepare `name` under data_dir/prepared/<name>, or return it if already prepared and valid."""
    module = _module(name)
    final = Path(data_dir) / "prepared" / name
    if (final / META_FILE).exists():
        try:
            return load_prepared(final)
        except DatasetError:
            # Invalid (edited, truncated, older layout): rebuild rather than fail every run.
            shutil.rmtree(final)
    try:
        write_prepared(module.build(), final)
    except FileExistsError:
        pass  # a concurrent preparation finished first; its result is checked below
    return load_prepared(final)


def _module(name: str) -> ModuleType:
    try:
        return _DATASETS[name]
    except KeyError:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(dataset_names())}") from None
