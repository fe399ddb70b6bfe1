"""Datasets, prepared once by the harness into numpy arrays that workers memory-map.

Two kinds: offline quick sets (modules with NAME, INFO and build()) and the study's datasets
(download.Source: a table of files to download and verify, and a build from those files).
Layout of the data folder: raw/<dataset>/<file> for downloads, prepared/<dataset>/ for arrays.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from types import ModuleType

from . import (
    cifar,
    digits,
    django_es,
    download,
    imdb,
    lee_lm,
    manythings,
    mnist,
    photo_boxes,
    photos,
    polarity,
    ptb,
    rt_snippets,
    svhn,
    voc,
)
from .download import Source
from .prepared import META_FILE, DatasetError, PreparedDataset, load_prepared, write_prepared

__all__ = ["DatasetError", "PreparedDataset", "dataset_names", "describe", "load_prepared", "prepare"]

_DATASETS: dict[str, ModuleType | Source] = {module.NAME: module for module in (digits, polarity, lee_lm)}
_DATASETS.update({source.info["name"]: source for source in (
    mnist.MNIST, mnist.FASHION_MNIST, cifar.CIFAR10, cifar.CIFAR100, svhn.SVHN, imdb.IMDB, ptb.PTB,
    manythings.SPA_ENG, voc.VOC2012, voc.VOC2012_300, rt_snippets.RT_SNIPPETS,
    photos.PHOTO_PATCHES_10, photos.PHOTO_REGIONS_100, django_es.DJANGO_ES_EN, photo_boxes.PHOTO_BOXES,
)})


def dataset_names() -> list[str]:
    return sorted(_DATASETS)


def describe(name: str) -> dict:
    dataset = _dataset(name)
    return dict(dataset.info if isinstance(dataset, Source) else dataset.INFO)


def files(name: str) -> tuple[download.FileSpec, ...]:
    """The downloaded files a dataset is prepared from; none for the offline quick sets."""
    dataset = _dataset(name)
    return dataset.files if isinstance(dataset, Source) else ()


def raw_dir(name: str, data_dir: Path) -> Path:
    return Path(data_dir) / "raw" / name


def prepared_dir(name: str, data_dir: Path) -> Path:
    return Path(data_dir) / "prepared" / name


def prepare(name: str, data_dir: Path) -> PreparedDataset:
    """Prepare `name` under data_dir/prepared/<name>, or return it if already prepared and valid.

    Never downloads: a study dataset whose files are missing raises, naming them and where they go.
    """
    dataset = _dataset(name)
    final = prepared_dir(name, data_dir)
    if (final / META_FILE).exists():
        try:
            return load_prepared(final)
        except DatasetError:
            # Invalid (edited, truncated, older layout): rebuild rather than fail every run.
            shutil.rmtree(final)
    try:
        _build_and_write(name, dataset, Path(data_dir), final)
    except FileExistsError:
        pass  # a concurrent preparation finished first; its result is checked below
    return load_prepared(final)


def _build_and_write(name: str, dataset: ModuleType | Source, data_dir: Path, final: Path) -> None:
    if not isinstance(dataset, Source):
        write_prepared(dataset.build(), final)
        return
    paths = download.require(dataset.files, raw_dir(name, data_dir), name)
    # Archives are unpacked into a scratch folder beside the data, removed whatever happens.
    data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}.work-", dir=data_dir) as work:
        write_prepared(dataset.build(paths, Path(work)), final)


def _dataset(name: str) -> ModuleType | Source:
    try:
        return _DATASETS[name]
    except KeyError:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(dataset_names())}") from None
