"""A user's dataset in a plain format: an .npz, or a folder of .npy files, holding x_train, y_train, x_test and
y_test. Read without pickles, checked array by array, and prepared like any dataset (prepared.write_prepared)
into a folder of the data cache named by its content hash, so the worker reads it as it reads the others."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlbench.shared.protocol import ARRAY_NAMES, array_file

from .prepared import Built, base_meta, content_hash

TASKS = ("classification", "binary")  # the tasks a plain dataset may be prepared for
INPUT_DTYPES = "uint8 or float32 (pixels, features) or an integer type (token ids)"


class UserDataError(ValueError):
    """A user's dataset file that cannot be prepared: the message names the file, the array and the value."""


@dataclass(frozen=True)
class UserDataset:
    """A user's dataset, read and checked: what data.prepare builds from (NAME, INFO, build()) and its hash."""
    NAME: str
    INFO: dict
    built: Built
    hash: str  # the prepared content hash (prepared.content_hash): the prepared folder is named by it
    path: Path  # the file or folder it was read from

    def build(self) -> Built:
        return self.built


def read(path: Path, name: str, task: str, num_classes: int | None, input_scale: float | None) -> UserDataset:
    """The dataset at `path` (an .npz or a folder of .npy files), checked and laid out as a prepared dataset."""
    if task not in TASKS:
        raise UserDataError(f"{path}: task {task!r} is not accepted; a dataset in a plain format is one of: "
                            f"{', '.join(TASKS)}")
    arrays = _arrays(path)
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if len(x) != len(y):
            raise UserDataError(f"{path}: x_{split} holds {len(x):,} samples and y_{split} {len(y):,}; each x "
                                "and its y hold one row per sample")
        if len(x) == 0:
            raise UserDataError(f"{path}: x_{split} holds no samples")
    if arrays["x_train"].shape[1:] != arrays["x_test"].shape[1:]:
        raise UserDataError(f"{path}: x_train's samples are {list(arrays['x_train'].shape[1:])} and x_test's "
                            f"{list(arrays['x_test'].shape[1:])}; both splits' samples have one shape")
    arrays = {key: _checked(path, key, value) for key, value in arrays.items()}
    # no path in the meta: the same arrays from another place, or as .npy files, prepare the same
    info = {"name": name, "task": task, "description": f"the user's dataset {name}",
            "source": "a user's file (an .npz or a folder of .npy files)", "licence": "the user's"}
    meta = base_meta(info, arrays, _input_scale(path, arrays["x_train"], input_scale))
    meta["num_classes"] = _classes(path, task, arrays, num_classes)
    built = Built(arrays=arrays, meta=meta)
    return UserDataset(name, info, built, content_hash(arrays, meta), path)


def _arrays(path: Path) -> dict[str, np.ndarray]:
    if path.is_dir():
        files = {key: path / array_file(key) for key in ARRAY_NAMES}
        missing = [str(file.name) for file in files.values() if not file.is_file()]
        if missing:
            raise UserDataError(f"{path}: missing {', '.join(missing)}; a dataset folder holds "
                                f"{', '.join(array_file(key) for key in ARRAY_NAMES)}")
        return {key: _load(file, key, lambda file=file: np.load(file, allow_pickle=False)) for key, file in
                files.items()}
    if not path.is_file():
        raise UserDataError(f"{path}: no such file or folder; a dataset is an .npz or a folder of .npy files "
                            f"holding {', '.join(ARRAY_NAMES)}")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise UserDataError(f"{path}: not an .npz numpy can read ({error})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise UserDataError(f"{path}: a single array; a dataset file is an .npz holding {', '.join(ARRAY_NAMES)}")
    with archive:
        missing = [key for key in ARRAY_NAMES if key not in archive.files]
        if missing:
            raise UserDataError(f"{path}: missing array {', '.join(missing)}; it holds {', '.join(archive.files)}, "
                                f"a dataset holds {', '.join(ARRAY_NAMES)}")
        return {key: _load(path, key, lambda key=key: archive[key]) for key in ARRAY_NAMES}


def _load(path: Path, key: str, load) -> np.ndarray:
    try:
        return np.asarray(load())
    except ValueError as error:  # numpy refuses an object array without pickles: "Object arrays cannot be loaded"
        raise UserDataError(f"{path}: array {key} cannot be read without pickles ({error}); dlbench reads no "
                            "pickled (object) arrays: save numbers, uint8/float32 inputs and integer labels") from None


def _checked(path: Path, key: str, array: np.ndarray) -> np.ndarray:
    """The array as the prepared dataset stores it: inputs uint8, float32 or int32 token ids; labels int32."""
    kind = array.dtype.kind
    if key.startswith("x_"):
        if array.dtype in (np.uint8, np.float32):
            return np.ascontiguousarray(array)
        if kind in "iu":
            return _int32(path, key, array)
        raise UserDataError(f"{path}: array {key} is {array.dtype}; accepted: {INPUT_DTYPES}")
    if kind not in "iu":
        raise UserDataError(f"{path}: array {key} is {array.dtype}; labels are integers (class indices from 0)")
    if array.ndim != 1:
        raise UserDataError(f"{path}: array {key} has shape {list(array.shape)}; labels are one integer a sample, "
                            "shape (samples,)")
    return _int32(path, key, array)


def _int32(path: Path, key: str, array: np.ndarray) -> np.ndarray:
    if array.size and (array.min() < 0 or array.max() > np.iinfo(np.int32).max):
        bad = array.min() if array.min() < 0 else array.max()
        raise UserDataError(f"{path}: array {key} holds {bad}; accepted: integers from 0 to "
                            f"{np.iinfo(np.int32).max:,}")
    return np.ascontiguousarray(array, dtype=np.int32)


def _input_scale(path: Path, x: np.ndarray, declared: float | None) -> float | None:
    """What the worker divides inputs by: the declared value; else 255 for uint8 pixels, none otherwise."""
    if x.dtype == np.int32:
        if declared is not None:
            raise UserDataError(f"{path}: input_scale {declared} for integer inputs (token ids), which are not "
                                "scaled; leave input_scale out")
        return None
    if declared is not None:
        return float(declared)
    return 255.0 if x.dtype == np.uint8 else None


def _classes(path: Path, task: str, arrays: dict[str, np.ndarray], declared: int | None) -> int:
    """The number of classes: declared, else the largest label + 1; a binary task's labels are 0 and 1."""
    largest = max(int(arrays["y_train"].max()), int(arrays["y_test"].max()))
    if task == "binary":
        if largest > 1:
            key = "y_train" if int(arrays["y_train"].max()) > 1 else "y_test"
            raise UserDataError(f"{path}: array {key} holds label {largest}; a binary task's labels are 0 and 1")
        return 2
    if declared is not None and largest >= declared:
        key = "y_train" if int(arrays["y_train"].max()) == largest else "y_test"
        raise UserDataError(f"{path}: array {key} holds label {largest}, out of range for num_classes {declared}: "
                            f"labels run from 0 to {declared - 1}")
    return declared if declared is not None else largest + 1
