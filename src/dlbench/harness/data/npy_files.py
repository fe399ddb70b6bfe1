"""Reading a user's .npz and .npy files header first: every member's shape and type, and the bytes it holds,
are known before any array is allocated, so a header that claims terabytes allocates nothing and a member that
inflates past what its header declares is refused. Used by the starting-weights reader
(plan/initial_weights.py) and the plain-format dataset reader (data/user.py); each decides what it accepts
from the headers, then reads. Every error is an ArrayFileError whose message names the file and the member."""

from __future__ import annotations

import math
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
from numpy.lib import format as npy

# what each .npy format version's header reader is; numpy.savez writes 1.0, or 2.0 for a header over 64 KiB
HEADER_READERS = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
# what reading a zip or a member raises when it is not readable: numpy's format errors, a truncated member,
# corrupt compressed data or a bad CRC, a zip version, compression method or encryption zipfile cannot
# read, the disk's own errors (a symbolic link loop among them)
UNREADABLE = (ValueError, EOFError, zlib.error, zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError)


class ArrayFileError(ValueError):
    """A file or member that is not a readable array; the message names it and what is accepted."""


@dataclass(frozen=True)
class Header:
    """What a member's .npy header declares, and how many bytes of data follow it in the member."""
    shape: tuple[int, ...]
    dtype: np.dtype
    data_bytes: int  # what the member holds after its header

    @property
    def nbytes(self) -> int:
        """The bytes the declared array takes (Python integers: no overflow however large the claim)."""
        return math.prod(self.shape) * self.dtype.itemsize


def open_zip(path: Path, accepted: str) -> zipfile.ZipFile:
    """The file as a zip (its list of members read, none of their data)."""
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile:  # an empty or truncated file too: numpy.load raised EOFError or BadZipFile there
        raise ArrayFileError(f"{path}: not an .npz (zip) file; expected {accepted}") from None
    except UNREADABLE as error:
        raise ArrayFileError(f"{path}: not a readable .npz ({error}); expected {accepted}") from None


def zip_header(path: Path, key: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, accepted: str) -> Header:
    """The header of the member `info` (array `key`), read without its data."""
    try:
        with archive.open(info) as member:
            return _header(member, info.file_size)
    except UNREADABLE as error:
        raise ArrayFileError(f"{path}: {key!r} is not a readable .npy array ({error}); expected {accepted}") from None


def file_header(path: Path, accepted: str) -> Header:
    """The header of the .npy file at `path`, read without its data."""
    try:
        with open(path, "rb") as handle:
            return _header(handle, path.stat().st_size)
    except UNREADABLE as error:
        raise ArrayFileError(f"{path}: not a readable .npy array ({error}); expected {accepted}") from None


def _header(handle: IO[bytes], size: int) -> Header:
    version = npy.read_magic(handle)
    if version not in HEADER_READERS:
        raise ValueError(f".npy format version {version[0]}.{version[1]}, not 1.0 or 2.0")
    shape, _, dtype = HEADER_READERS[version](handle)
    return Header(tuple(shape), dtype, size - handle.tell())


def check_size(path: Path, key: str, header: Header, accepted: str) -> None:
    """Refuses a member whose data is not exactly what its header declares: a truncated member, or one that
    holds (inflates to) more. Object arrays (pickles) have no fixed size: each reader refuses them first."""
    if header.nbytes != header.data_bytes:
        readable = f", {size_text(header.nbytes)}" if header.nbytes >= 1024 else ""
        raise ArrayFileError(
            f"{path}: {key!r} declares shape {header.shape} of {header.dtype} ({header.nbytes:,} bytes{readable}) "
            f"but holds {header.data_bytes:,} bytes of data: truncated, or not what its header says; "
            f"expected {accepted}")


def zip_array(path: Path, key: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, accepted: str) -> np.ndarray:
    """The member's array, of the shape and type its header was checked to declare."""
    try:
        with archive.open(info) as member:
            return npy.read_array(member, allow_pickle=False)
    except (*UNREADABLE, MemoryError) as error:
        raise ArrayFileError(f"{path}: {key!r} cannot be read ({error or type(error).__name__}); "
                             f"expected {accepted}") from None


def file_array(path: Path, accepted: str) -> np.ndarray:
    """The .npy file's array, of the shape and type its header was checked to declare."""
    try:
        with open(path, "rb") as handle:
            return npy.read_array(handle, allow_pickle=False)
    except (*UNREADABLE, MemoryError) as error:
        raise ArrayFileError(f"{path}: cannot be read ({error or type(error).__name__}); expected {accepted}") \
            from None


def size_text(size: int) -> str:
    """A byte count as people read it: 4.66 GiB, 364 TiB (binary units)."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} bytes"
