"""Datasets, prepared once by the harness into numpy arrays that workers memory-map.

Two kinds: offline quick sets (modules with NAME, INFO and build()) and the study's datasets
(download.Source: a table of files to download and verify, and a build from those files).
Layout of the data folder: raw/<dataset>/<file> for downloads, prepared/<dataset>/ for arrays.
"""

from __future__ import annotations

import os
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
    user,
    voc,
)
from .download import Source
from .prepared import META_FILE, DatasetError, PreparedDataset, StandInTarget, load_prepared, write_prepared

__all__ = ["DatasetError", "PreparedDataset", "StandInTarget", "dataset_names", "describe", "load_prepared",
           "prepare", "stand_in_target", "stand_in_targets"]

_DATASETS: dict[str, ModuleType | Source] = {module.NAME: module for module in (digits, polarity, lee_lm)}
_DATASETS.update({source.info["name"]: source for source in (
    mnist.MNIST, mnist.FASHION_MNIST, cifar.CIFAR10, cifar.CIFAR100, svhn.SVHN, imdb.IMDB, ptb.PTB,
    manythings.SPA_ENG, voc.VOC2012, voc.VOC2012_300, rt_snippets.RT_SNIPPETS,
    photos.PHOTO_PATCHES_10, photos.PHOTO_REGIONS_100, django_es.DJANGO_ES_EN, photo_boxes.PHOTO_BOXES,
)})


def register_user(dataset: user.UserDataset) -> None:
    """Makes a user's dataset (a suite entry's plain-format file) known to this process under its name."""
    _DATASETS[dataset.NAME] = dataset  # type: ignore[assignment]  # NAME, INFO and build(), as a quick set's module


def user_dataset(name: str) -> user.UserDataset | None:
    """The user's dataset registered under `name`, or None (a built-in dataset's name, or an unknown one)."""
    dataset = _DATASETS.get(name)
    return dataset if isinstance(dataset, user.UserDataset) else None


def dataset_names() -> list[str]:
    return sorted(_DATASETS)


def describe(name: str) -> dict:
    dataset = _dataset(name)
    return dict(dataset.info if isinstance(dataset, Source) else dataset.INFO)


def stand_in_targets(name: str) -> dict[str, StandInTarget]:
    """The targets a stand-in dataset declares for itself, per workload (prepared.StandInTarget); none for
    the study's datasets, or a name no longer known (a stored run's)."""
    dataset = _DATASETS.get(name)
    if dataset is None:
        return {}
    return dict(dataset.targets if isinstance(dataset, Source) else getattr(dataset, "TARGETS", {}))


def stand_in_target(name: str, workload: str) -> StandInTarget | None:
    """The stand-in's own target for the workload, or None where the workload's (the study's) applies."""
    return stand_in_targets(name).get(workload)


def files(name: str) -> tuple[download.FileSpec, ...]:
    """The downloaded files a dataset is prepared from; none for the offline quick sets."""
    dataset = _dataset(name)
    return dataset.files if isinstance(dataset, Source) else ()


def raw_dir(name: str, data_dir: Path) -> Path:
    return Path(data_dir) / "raw" / name


def prepared_dir(name: str, data_dir: Path) -> Path:
    """Where the dataset is prepared; a user's in a folder named by its content hash as well, so a changed
    file is prepared afresh beside the old one rather than the old one read as it."""
    dataset = user_dataset(name)
    if dataset is not None:
        return Path(data_dir) / "prepared" / f"{name}@{dataset.hash[:16]}"
    return Path(data_dir) / "prepared" / name


def prepare(name: str, data_dir: Path) -> PreparedDataset:
    """Prepare `name` under data_dir/prepared/<name>, or return it if already prepared and valid.

    Never downloads: a study dataset whose files are missing raises, naming them and where they go.
    """
    dataset = _dataset(name)
    final = prepared_dir(name, data_dir)
    existing = _valid_or_removed(name, final)
    if existing is not None:
        return existing
    try:
        _build_and_write(name, dataset, Path(data_dir), final)
    except FileExistsError:
        pass  # a concurrent preparation finished first; its result is checked below
    return load_prepared(final)


def _valid_or_removed(name: str, final: Path) -> PreparedDataset | None:
    """The valid dataset prepared at `final`; else None, an invalid one (edited, truncated, older layout)
    removed first, so that it is rebuilt rather than failing every run. A link there is refused instead."""
    if final.is_symlink() and not (final / META_FILE).exists():
        raise _refuse_link(name, final, "which does not exist" if not final.exists() else
                           f"which holds no prepared dataset ({META_FILE} is missing)")
    if not (final / META_FILE).exists():
        return None
    try:
        return load_prepared(final)
    except DatasetError as invalid:
        if final.is_symlink():
            reason = str(invalid).removeprefix(f"{final}: ")
            raise _refuse_link(name, final, f"whose prepared arrays are invalid ({reason})") from None
        shutil.rmtree(final)
    return None


def _refuse_link(name: str, link: Path, what: str) -> DatasetError:
    """A prepared folder that is a link (to another disk, say) is the user's arrangement: dlbench neither deletes
    what it points at nor replaces the link with a folder of its own."""
    target = os.readlink(link)
    return DatasetError(f"{link} is a link to {target}, {what}; dlbench deletes nothing a link points at and keeps "
                        f"the link: remove the link to prepare {name} afresh in the data folder (dlbench data fetch "
                        f"{name}), or put a valid prepared copy at {target}")


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
