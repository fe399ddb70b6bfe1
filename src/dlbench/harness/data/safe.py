"""Reading downloaded archives and pickles without trusting them.

Archives: every member is checked before anything is written; a member that would land outside the
target folder, an absolute path, a link or a device file refuses the whole archive.
Pickles: only numpy arrays, dtypes and plain containers are rebuilt; any other global is refused.
"""

from __future__ import annotations

import codecs
import io
import pickle
import stat
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import numpy as np

from .prepared import DatasetError

try:
    from numpy._core.multiarray import _reconstruct
except ImportError:  # numpy < 2
    from numpy.core.multiarray import _reconstruct

Wanted = Callable[[str], bool]


def _check_name(archive: Path, name: str) -> None:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or name.startswith(("/", "\\")) or (path.parts and ":" in path.parts[0]):
        raise DatasetError(f"{archive}: member {name!r} has an absolute path; archive refused")
    if ".." in path.parts:
        raise DatasetError(f"{archive}: member {name!r} would be written outside the target folder; "
                           "archive refused")


def _tar_members(archive: Path, tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    for member in members:
        _check_name(archive, member.name)
        if member.issym() or member.islnk():
            raise DatasetError(f"{archive}: member {member.name!r} is a link (to {member.linkname!r}); "
                               "archive refused")
        if not (member.isfile() or member.isdir()):
            raise DatasetError(f"{archive}: member {member.name!r} is a device, FIFO or other special file; "
                               "archive refused")
    return members


def _zip_members(archive: Path, zf: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    members = zf.infolist()
    for member in members:
        _check_name(archive, member.filename)
        # Unix mode in the high 16 bits; zips written elsewhere (or by zipfile.writestr) leave the type 0.
        mode = member.external_attr >> 16
        if stat.S_ISLNK(mode):
            raise DatasetError(f"{archive}: member {member.filename!r} is a link; archive refused")
        if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise DatasetError(f"{archive}: member {member.filename!r} is a special file; archive refused")
    return members


def safe_extract(archive: Path, dest: Path, wanted: Wanted | None = None) -> None:
    """Extract the members of a tar (any compression) or zip whose name `wanted` accepts (all if None)."""
    dest.mkdir(parents=True, exist_ok=True)
    keep = wanted or (lambda name: True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for member in _zip_members(archive, zf):
                if keep(member.filename):
                    zf.extract(member, dest)
        return
    try:
        with tarfile.open(archive) as tar:
            chosen = [m for m in _tar_members(archive, tar) if keep(m.name)]
            # The data filter repeats the checks above and drops permission bits; Python 3.11 has it
            # only from 3.11.4, so the checks above are what is relied on.
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, members=chosen, filter="data")
            else:
                tar.extractall(dest, members=chosen)
    except tarfile.TarError as exc:
        raise DatasetError(f"{archive}: not a readable tar or zip archive ({exc})") from exc


class _RestrictedUnpickler(pickle.Unpickler):
    # Under both numpy module names: pickles written with numpy < 2 say numpy.core, >= 2 numpy._core.
    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        # Python 3 writes bytes as _codecs.encode(text, "latin1") in protocol-2 pickles.
        ("_codecs", "encode"): codecs.encode,
    }

    def find_class(self, module: str, name: str) -> object:
        try:
            return self.ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed") from None


def restricted_load(data: bytes, source: str) -> object:
    """Unpickle a Python-2 style pickle (keys as bytes), rebuilding only numpy arrays and containers."""
    try:
        return _RestrictedUnpickler(io.BytesIO(data), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
        raise DatasetError(f"{source}: refused to unpickle ({exc})") from exc
