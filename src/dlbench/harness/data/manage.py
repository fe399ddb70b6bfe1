"""What `dlbench data` does: status, fetch, verify and locate datasets in a data folder."""

from __future__ import annotations

from pathlib import Path

from . import describe, download, files, prepare, prepared_dir, raw_dir
from .prepared import META_FILE, DatasetError, load_prepared


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def status(name: str, data_dir: Path) -> tuple[str, int]:
    """(absent | downloaded | prepared, bytes on disk in the data folder); files are not re-hashed here."""
    size = _size(raw_dir(name, data_dir)) + _size(prepared_dir(name, data_dir))
    if (prepared_dir(name, data_dir) / META_FILE).exists():
        return "prepared", size
    specs = files(name)
    found = [download.present(spec, raw_dir(name, data_dir)) for spec in specs]
    return ("downloaded" if specs and all(found) else "absent"), size


def fetch(name: str, data_dir: Path, offline: bool) -> list[str]:
    """Download what is missing (never when offline), verify every file, prepare; one line per step."""
    folder = raw_dir(name, data_dir)
    if offline:
        paths = download.require(files(name), folder, name)
    else:
        paths = {spec.name: download.fetch(spec, folder) for spec in files(name)}
    lines = [f"{name}: {file} verified at {path}" for file, path in paths.items()]
    ds = prepare(name, data_dir)
    return lines + [f"{name}: prepared at {ds.path} (hash {ds.hash[:16]})"]


def verify(name: str, data_dir: Path) -> list[str]:
    """Re-check every raw file (size, then hash) and the prepared arrays against their hash."""
    lines, missing = [], []
    for spec in files(name):
        path = download.locate(spec, raw_dir(name, data_dir))
        if path is None:
            missing.append(spec)
        else:
            lines.append(f"{name}: {spec.name} ok ({path})")
    if missing:
        raise DatasetError(download.missing_message(missing, raw_dir(name, data_dir), name))
    folder = prepared_dir(name, data_dir)
    if (folder / META_FILE).exists():
        lines.append(f"{name}: prepared arrays ok (hash {load_prepared(folder).hash[:16]})")
    else:
        lines.append(f"{name}: not prepared yet")
    return lines


def location(name: str, data_dir: Path) -> Path:
    """The prepared folder once prepared, else the folder the raw files go to."""
    describe(name)  # raises for an unknown name, listing the known ones
    folder = prepared_dir(name, data_dir)
    return folder if (folder / META_FILE).exists() or not files(name) else raw_dir(name, data_dir)
