"""A user's dataset in a plain format: an .npz, or a folder of .npy files, holding x_train, y_train, x_test and
y_test. Read without pickles, checked array by array, and prepared like any dataset (prepared.write_prepared)
into a folder of the data cache named by its content hash, so the worker reads it as it reads the others."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
from numpy.lib import format as npy

from dlbench.shared.protocol import ARRAY_NAMES, array_file

from . import npy_files
from .prepared import Built, base_meta, content_hash

# the tasks a plain dataset may be prepared for: a label a sample, or (language_model) a next token a position
TASKS = ("classification", "binary", "language_model")
INPUT_DTYPES = "uint8 or float32 (pixels, features) or an integer type (token ids)"
ACCEPTED = "an .npz as numpy.savez or numpy.savez_compressed writes it, or a folder of .npy files, holding " + \
    ", ".join(ARRAY_NAMES)


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
    input_dtype: str  # x_train's type as the file holds it (int64 token ids are stored as int32)

    def build(self) -> Built:
        return self.built


def read(path: Path, name: str, task: str, num_classes: int | None, input_scale: float | None) -> UserDataset:
    """The dataset at `path` (an .npz or a folder of .npy files), checked and laid out as a prepared dataset."""
    if task not in TASKS:
        raise UserDataError(f"{path}: task {task!r} is not accepted; a dataset in a plain format is one of: "
                            f"{', '.join(TASKS)}")
    arrays = _arrays(path, task)
    input_dtype = str(arrays["x_train"].dtype)  # before token ids become int32
    arrays = {key: _checked(path, key, value) for key, value in arrays.items()}
    # no path in the meta: the same arrays from another place, or as .npy files, prepare the same
    info = {"name": name, "task": task, "description": f"the user's dataset {name}",
            "source": "a user's file (an .npz or a folder of .npy files)", "licence": "the user's"}
    meta = base_meta(info, arrays, _input_scale(path, arrays["x_train"], input_scale))
    if task == "language_model":  # the meta a built-in language model's is: its vocabulary and window
        meta["vocab_size"] = _vocabulary(path, arrays, num_classes)
        meta["seq_len"] = int(arrays["x_train"].shape[1])
    else:
        meta["num_classes"] = _classes(path, task, arrays, num_classes)
    built = Built(arrays=arrays, meta=meta)
    return UserDataset(name, info, built, content_hash(arrays, meta), path, input_dtype)


def _arrays(path: Path, task: str) -> dict[str, np.ndarray]:
    """The four arrays, read once every header has been checked (_check_headers)."""
    if _is_folder(path):
        files = {key: path / array_file(key) for key in ARRAY_NAMES}
        missing = [str(file.name) for file in files.values() if not file.is_file()]
        if missing:
            raise UserDataError(f"{path}: missing {', '.join(missing)}; a dataset folder holds "
                                f"{', '.join(array_file(key) for key in ARRAY_NAMES)}")
        try:
            _check_headers(path, {key: npy_files.file_header(file, ACCEPTED) for key, file in files.items()}, task)
            return {key: npy_files.file_array(file, ACCEPTED) for key, file in files.items()}
        except npy_files.ArrayFileError as error:
            raise UserDataError(str(error)) from None
    _check_not_a_single_array(path)
    try:
        with npy_files.open_zip(path, ACCEPTED) as archive:
            members = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}
            missing = [key for key in ARRAY_NAMES if key not in members]
            if missing:
                raise UserDataError(f"{path}: missing array {', '.join(missing)}; it holds "
                                    f"{', '.join(members) or 'nothing'}, a dataset holds {', '.join(ARRAY_NAMES)}")
            _check_headers(path, {key: npy_files.zip_header(path, key, archive, members[key], ACCEPTED)
                                  for key in ARRAY_NAMES}, task)
            return {key: npy_files.zip_array(path, key, archive, members[key], ACCEPTED) for key in ARRAY_NAMES}
    except npy_files.ArrayFileError as error:
        raise UserDataError(str(error)) from None


def _is_folder(path: Path) -> bool:
    """Whether the dataset is a folder (else it must be a file); a path that is neither, or that the file system
    cannot follow (a symbolic link loop), is refused naming the file system's reason."""
    try:
        mode = path.stat().st_mode
    except OSError as error:  # a loop: ELOOP, "Too many levels of symbolic links"
        reason = "no such file or folder" if isinstance(error, FileNotFoundError) else error.strerror
        raise UserDataError(f"{path}: {reason}; a dataset is an .npz or a folder of .npy files holding "
                            f"{', '.join(ARRAY_NAMES)}") from None
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise UserDataError(f"{path}: neither a file nor a folder; a dataset is an .npz or a folder of .npy files")
    return stat.S_ISDIR(mode)


def _check_not_a_single_array(path: Path) -> None:
    """An .npy given for an .npz: said so, rather than "not a zip file"."""
    try:
        with open(path, "rb") as handle:
            magic = handle.read(len(npy.MAGIC_PREFIX))
    except OSError as error:
        raise UserDataError(f"{path}: cannot be read ({error.strerror})") from None
    if magic == npy.MAGIC_PREFIX:
        raise UserDataError(f"{path}: a single array; a dataset file is an .npz holding {', '.join(ARRAY_NAMES)}")


def _check_headers(path: Path, headers: dict[str, npy_files.Header], task: str) -> None:
    """Every array's type, shape and size as its header declares them, before any array is read: so that neither
    a pickle is unpickled nor more memory taken than the machine can give (memory_bound)."""
    for key, header in headers.items():
        _check_dtype(path, key, header.dtype)
        if task == "language_model":
            _check_token_windows(path, key, header, headers)
        elif key.startswith("y_") and len(header.shape) != 1:
            raise UserDataError(f"{path}: array {key} has shape {list(header.shape)}; labels are one integer a "
                                "sample, shape (samples,)")
        if key.startswith("x_") and len(header.shape) < 2:
            raise UserDataError(f"{path}: array {key} has shape {list(header.shape)}; inputs are (samples, ...), "
                                "at least one axis a sample")
    total = sum(header.nbytes for header in headers.values())
    bound = memory_bound()
    if total > bound:
        largest = max(headers, key=lambda key: headers[key].nbytes)
        raise UserDataError(
            f"{path}: too large: its arrays' headers declare {npy_files.size_text(total)} ({largest}: shape "
            f"{list(headers[largest].shape)} of {headers[largest].dtype}); dlbench reads a dataset whole into "
            f"memory, at most half the memory available now ({npy_files.size_text(bound)})")
    for key, header in headers.items():  # a member that holds more (or less) than its header declares
        npy_files.check_size(path, key, header, ACCEPTED)
    for split in ("train", "test"):
        x, y = headers[f"x_{split}"].shape[0], headers[f"y_{split}"].shape[0]
        if x != y:
            raise UserDataError(f"{path}: x_{split} holds {x:,} samples and y_{split} {y:,}; each x "
                                "and its y hold one row per sample")
        if x == 0:
            raise UserDataError(f"{path}: x_{split} holds no samples")
    if headers["x_train"].shape[1:] != headers["x_test"].shape[1:]:
        raise UserDataError(f"{path}: x_train's samples are {list(headers['x_train'].shape[1:])} and x_test's "
                            f"{list(headers['x_test'].shape[1:])}; both splits' samples have one shape")


def _check_token_windows(path: Path, key: str, header: npy_files.Header,
                         headers: dict[str, npy_files.Header]) -> None:
    """A language model's arrays: x a window of token ids a sample, (samples, steps), and y the same window one
    token ahead, of x's shape (the next token at every position)."""
    if key.startswith("x_") and (len(header.shape) != 2 or header.dtype.kind not in "iu" or header.dtype == np.uint8):
        raise UserDataError(f"{path}: array {key} is {header.dtype} of shape {list(header.shape)}; a "
                            "language_model dataset's inputs are windows of token ids, (samples, steps), of an "
                            "integer type other than uint8 (which dlbench reads as pixels)")
    if key.startswith("y_") and header.shape != headers["x" + key[1:]].shape:
        raise UserDataError(f"{path}: array {key} has shape {list(header.shape)} and x{key[1:]} "
                            f"{list(headers['x' + key[1:]].shape)}; a language_model dataset's labels are the next "
                            "token at every position, of the inputs' shape")


def memory_bound() -> int:
    """The most bytes a dataset's arrays may take together: half the memory available now, since preparing them
    holds a converted copy (int32 labels and token ids) beside the arrays read."""
    return psutil.virtual_memory().available // 2


def _check_dtype(path: Path, key: str, dtype: np.dtype) -> None:
    if dtype.hasobject:  # refused from the header: nothing is unpickled
        raise UserDataError(f"{path}: array {key} cannot be read without pickles (it holds Python objects); "
                            "dlbench reads no pickled (object) arrays: save numbers, uint8/float32 inputs and "
                            "integer labels")
    if key.startswith("x_") and not (dtype in (np.uint8, np.float32) or dtype.kind in "iu"):
        raise UserDataError(f"{path}: array {key} is {dtype}; accepted: {INPUT_DTYPES}")
    if key.startswith("y_") and dtype.kind not in "iu":
        raise UserDataError(f"{path}: array {key} is {dtype}; labels are integers (class indices from 0)")


def _checked(path: Path, key: str, array: np.ndarray) -> np.ndarray:
    """The array as the prepared dataset stores it: inputs uint8, float32 or int32 token ids; labels int32.
    Its type and shape were checked from its header."""
    if array.dtype == np.float32:
        _check_finite(path, key, array)
    if array.dtype in (np.uint8, np.float32):
        return np.ascontiguousarray(array)
    return _int32(path, key, array)


def _check_finite(path: Path, key: str, array: np.ndarray) -> None:
    """NaN or inf in an input would train to a meaningless accuracy stored as ok: refused at the first one."""
    finite = np.isfinite(array)
    if not finite.all():
        first = np.unravel_index(int(np.argmin(finite)), array.shape)  # argmin of booleans: the first False
        raise UserDataError(f"{path}: array {key} holds {array[first]} at index {[int(i) for i in first]}; "
                            "inputs are finite numbers (no NaN or inf)")


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


def _vocabulary(path: Path, arrays: dict[str, np.ndarray], declared: int | None) -> int:
    """A language model's vocabulary (ids 0 to V - 1): declared (num_classes), else the largest id + 1."""
    largest = max(int(arrays[key].max()) for key in ARRAY_NAMES)
    if declared is not None and largest >= declared:
        key = max(ARRAY_NAMES, key=lambda name: int(arrays[name].max()))
        raise UserDataError(f"{path}: array {key} holds token id {largest}, out of range for num_classes {declared} "
                            f"(a language model's vocabulary: ids 0 to {declared - 1})")
    return declared if declared is not None else largest + 1


def _classes(path: Path, task: str, arrays: dict[str, np.ndarray], declared: int | None) -> int:
    """The number of classes: declared, else the largest label + 1; a binary task's labels are 0 and 1. Labels of
    one class alone are refused, as a declared num_classes of 1 is (nothing to tell apart: any accuracy is 1)."""
    largest = max(int(arrays["y_train"].max()), int(arrays["y_test"].max()))
    if task == "binary" and largest > 1:
        key = "y_train" if int(arrays["y_train"].max()) > 1 else "y_test"
        raise UserDataError(f"{path}: array {key} holds label {largest}; a binary task's labels are 0 and 1")
    if task == "classification" and declared is not None and largest >= declared:
        key = "y_train" if int(arrays["y_train"].max()) == largest else "y_test"
        raise UserDataError(f"{path}: array {key} holds label {largest}, out of range for num_classes {declared}: "
                            f"labels run from 0 to {declared - 1}")
    if min(int(arrays["y_train"].min()), int(arrays["y_test"].min())) == largest:
        raise UserDataError(f"{path}: every label in y_train and y_test is {largest}: one class; a {task} "
                            "dataset's labels hold at least two classes (as num_classes is at least 2)")
    if task == "binary":
        return 2
    return declared if declared is not None else largest + 1
