"""Starting weights a user supplies instead of the canonical initialisation: a suite entry's `weights:`,
for instance a pretrained backbone. Every framework loads the same file, so the runs stay comparable.

The file is a numpy .npz holding every canonical weight of the model ("layer_name/param", in the
canonical layout of shared/ir.py: what `dlbench.shared.init.canonical_init` draws), float values of
exactly those shapes, nothing else. It is checked against the model before any cell runs, and its
SHA-256 enters the cell's configuration: another file is another cell.
"""
import hashlib
import zipfile
import zlib
from pathlib import Path

import numpy as np
from numpy.lib import format as npy

from dlbench.shared import ir

ACCEPTED = "an .npz as numpy.savez or numpy.savez_compressed writes it, one '<weight>.npy' member per weight"
# what each .npy format version's header reader is; numpy.savez writes 1.0, or 2.0 for a header over 64 KiB
HEADER_READERS = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
# what reading a zip or a member raises when it is not readable: numpy's format errors, a truncated member,
# corrupt compressed data or a bad CRC, a zip version, compression method or encryption zipfile cannot
# read, the disk's own errors
UNREADABLE = (ValueError, EOFError, zlib.error, zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError)


class WeightsError(ValueError):
    pass


def digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def check(path: Path, model: dict, workload: str) -> str:
    """The file's SHA-256, once it holds exactly the model's canonical weights; else a WeightsError
    naming the file and the first weight that is missing, extra, misshapen, not float or not finite.
    Every member's name and header (shape, type) is checked before any array is read, so a header that
    claims 10^10 floats allocates nothing."""
    expected = {key: tuple(shape) for key, shape in ir.weight_shapes(model).items()}
    with _opened(path) as archive:
        members = _members(path, archive)
        _check_names(path, members, expected, workload)
        for key, shape in expected.items():
            _check_header(path, key, _header(path, key, archive, members[key]), shape, workload)
        for key in expected:
            _check_values(path, key, _array(path, key, archive, members[key]))
    return digest(path)


def _opened(path: Path) -> zipfile.ZipFile:
    """The file as a zip (its list of members read, none of their data)."""
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile:  # an empty file too: numpy.load raised EOFError there
        raise WeightsError(f"{path}: not an .npz (zip) file; expected {ACCEPTED}") from None
    except UNREADABLE as error:
        raise WeightsError(f"{path}: not a readable .npz ({error}); expected {ACCEPTED}") from None


def _members(path: Path, archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """Each weight's member, by weight name (numpy.load's key: the member's name less '.npy')."""
    members: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        if not info.filename.endswith(".npy"):
            raise WeightsError(f"{path}: its member {info.filename!r} is not an array (.npy); expected {ACCEPTED}")
        key = info.filename.removesuffix(".npy")
        if key in members:  # numpy.load would read the last one; which one was meant is not known
            raise WeightsError(f"{path}: holds {key!r} twice; expected {ACCEPTED}")
        members[key] = info
    return members


def _check_names(path: Path, members: dict, expected: dict[str, tuple], workload: str) -> None:
    missing = [key for key in expected if key not in members]
    if missing:
        raise WeightsError(f"{path}: lacks {len(missing)} of {workload}'s {len(expected)} weights, first "
                           f"{missing[0]!r} of shape {expected[missing[0]]}")
    extra = sorted(set(members) - set(expected))
    if extra:
        raise WeightsError(f"{path}: {extra[0]!r} is not a weight of {workload}; its weights: "
                           f"{', '.join(expected)}")


def _header(path: Path, key: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple, bool, np.dtype]:
    """The shape, order and type a member's .npy header declares, read without its data."""
    try:
        with archive.open(info) as member:
            version = npy.read_magic(member)
            if version not in HEADER_READERS:
                raise ValueError(f".npy format version {version[0]}.{version[1]}, not 1.0 or 2.0")
            return HEADER_READERS[version](member)
    except UNREADABLE as error:
        raise WeightsError(f"{path}: {key!r} is not a readable .npy array ({error}); expected {ACCEPTED}") from None


def _check_header(path: Path, key: str, header: tuple[tuple, bool, np.dtype], shape: tuple, workload: str) -> None:
    declared, _, dtype = header
    if declared != shape:
        raise WeightsError(f"{path}: {key!r} has shape {declared}; {workload} needs {shape}")
    if dtype.kind != "f":  # object arrays (pickles) among them: refused before anything is unpickled
        raise WeightsError(f"{path}: {key!r} must hold finite floats (found {dtype})")


def _array(path: Path, key: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """The member's array, of the shape and type its header was checked to declare."""
    try:
        with archive.open(info) as member:
            return npy.read_array(member, allow_pickle=False)
    except UNREADABLE as error:
        raise WeightsError(f"{path}: {key!r} cannot be read ({error}); expected {ACCEPTED}") from None


def _check_values(path: Path, key: str, value: np.ndarray) -> None:
    if not np.isfinite(value).all():
        raise WeightsError(f"{path}: {key!r} must hold finite floats (found {value.dtype} with NaN or inf)")
