"""Writing, hashing and loading prepared datasets (the folder layout workers memory-map)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlbench.shared.protocol import ARRAY_NAMES, META_FILE, array_file

VOCAB_FILE = "vocab.json"
REQUIRED_META = (
    "name", "task", "description", "source", "licence", "n_train", "n_test",
    "input_shape", "input_dtype", "input_scale", "hash",
)


class DatasetError(Exception):
    """A dataset is unknown, its source is unavailable, or a prepared folder is invalid."""


@dataclass(frozen=True)
class PreparedDataset:
    name: str
    path: Path
    hash: str
    meta: dict


@dataclass(frozen=True)
class StandInTarget:
    """A stand-in dataset's own target for a workload it stands in for, declared beside the dataset: the
    study's target was set for the study's data and a quick run on the stand-in need not come near it. The
    metric and its direction stay the workload's. value None: no meaningful target (the reason says why).
    Kept out of the dataset's meta, so declaring or changing one leaves the dataset's hash as it is."""

    value: float | None
    reason: str


@dataclass(frozen=True)
class Built:
    """What a dataset module produces: arrays, meta without the hash, optional vocabulary."""

    arrays: dict[str, np.ndarray]
    meta: dict
    vocab: list[str] | dict[str, list[str]] | None = None


def base_meta(info: dict, arrays: dict[str, np.ndarray], input_scale: float | None) -> dict:
    """Meta fields every dataset has, the sizes read off the arrays so they cannot disagree."""
    x = arrays["x_train"]
    return {
        **info,
        "n_train": int(x.shape[0]),
        "n_test": int(arrays["x_test"].shape[0]),
        "input_shape": list(x.shape[1:]),
        "input_dtype": str(x.dtype),
        "input_scale": input_scale,
    }


def canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def array_names(meta: dict) -> tuple[str, ...]:
    """The four arrays every dataset has, then the extras a detection or translation set lists in meta."""
    return ARRAY_NAMES + tuple(meta.get("extra_arrays", ()))


def content_hash(arrays: dict[str, np.ndarray], meta: dict) -> str:
    """sha256 over each array's name, dtype, shape and bytes, then the meta without its hash."""
    h = hashlib.sha256()
    for name in array_names(meta):
        a = np.ascontiguousarray(arrays[name])
        h.update(canonical_json([name, a.dtype.str, list(a.shape)]))
        h.update(a.data)
    h.update(canonical_json({k: v for k, v in meta.items() if k != "hash"}))
    return h.hexdigest()


def vocab_bytes(vocab: list[str] | dict[str, list[str]]) -> bytes:
    # vocab.json is written as exactly these bytes, so its sha256 can be checked on the file itself.
    return canonical_json(vocab)


def write_array(path: Path, array: np.ndarray) -> None:
    np.save(path, array, allow_pickle=False)


def write_prepared(built: Built, final: Path) -> None:
    """Write into a temporary sibling folder, then rename it into place in one step.

    A crash before the rename leaves only a hidden temporary folder, never a folder that looks
    prepared. Raises FileExistsError if another process renamed its own copy into place first.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        # mkdtemp makes the folder private (0700); workers may read it as another user.
        tmp.chmod(0o755)
        meta = dict(built.meta)
        if built.vocab is not None:
            meta["vocab_sha256"] = hashlib.sha256(vocab_bytes(built.vocab)).hexdigest()
            (tmp / VOCAB_FILE).write_bytes(vocab_bytes(built.vocab))
        meta["hash"] = content_hash(built.arrays, meta)
        for name in array_names(meta):
            write_array(tmp / array_file(name), built.arrays[name])
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        _rename_into_place(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _rename_into_place(tmp: Path, final: Path) -> None:
    try:
        os.rename(tmp, final)
    except OSError as exc:
        # POSIX refuses to rename onto a non-empty folder: someone else finished first.
        if final.exists():
            raise FileExistsError(final) from exc
        raise


# How a detection dataset's boxes are stored (voc.parse_annotation): continuous pixel coordinates, x1 =
# xmin - 1 and x2 = xmax of VOC's 1-based pixels. Folders prepared before it (x2 = xmax - 1) lack the key.
BOX_CONVENTION = "continuous"


def load_prepared(path: Path) -> PreparedDataset:
    """Open a prepared folder, checking its meta, arrays, vocabulary and hash."""
    path = Path(path)
    meta = _read_meta(path / META_FILE)
    if meta.get("task") == "detection" and meta.get("box_convention") != BOX_CONVENTION:
        raise DatasetError(f"{path}: box_convention {meta.get('box_convention')!r} in {META_FILE}, but dlbench "
                           f"reads {BOX_CONVENTION!r} boxes (x1 = xmin - 1, x2 = xmax); it was prepared by an "
                           "older dlbench: delete the folder and prepare it again (dlbench data fetch)")
    arrays = {name: _open_array(path / array_file(name)) for name in array_names(meta)}
    _check_vocab(path, meta)
    # Recomputing the hash catches a truncated or edited array; the quick sets hash in milliseconds.
    if content_hash(arrays, meta) != meta["hash"]:
        raise DatasetError(f"{path}: content does not match the hash in {META_FILE}; delete the folder")
    return PreparedDataset(name=meta["name"], path=path, hash=meta["hash"], meta=meta)


def _read_meta(meta_path: Path) -> dict:
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError(f"{meta_path}: missing, the dataset is not prepared") from None
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{meta_path}: unreadable or not JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise DatasetError(f"{meta_path}: expected a JSON object")
    missing = [key for key in REQUIRED_META if key not in meta]
    if missing:
        raise DatasetError(f"{meta_path}: missing fields {missing}")
    return meta


def _open_array(array_path: Path) -> np.ndarray:
    try:
        return np.load(array_path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{array_path}: missing or unreadable ({exc})") from exc


def _check_vocab(path: Path, meta: dict) -> None:
    if "vocab_sha256" not in meta:
        return
    vocab_path = path / VOCAB_FILE
    try:
        digest = hashlib.sha256(vocab_path.read_bytes()).hexdigest()
    except OSError as exc:
        raise DatasetError(f"{vocab_path}: missing or unreadable ({exc})") from exc
    if digest != meta["vocab_sha256"]:
        raise DatasetError(f"{vocab_path}: does not match vocab_sha256 in {META_FILE}")
