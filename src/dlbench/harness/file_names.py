"""Paths a user gives (a results or data folder, a suite file, a report) checked against what the file system
can name, before anything is read or written: the operating system would refuse them later with
"File name too long" (or Python with "embedded null byte"), after a store was opened or a report built."""
import os
from pathlib import Path

from dlbench.harness.folders import PathError

# POSIX's usual limits, for a file system that does not say its own (os.pathconf)
DEFAULT_NAME_MAX = 255
DEFAULT_PATH_MAX = 4096
SHOWN = 40  # characters of a long name a message shows


def shortened(value: object) -> str:
    """The value as a message quotes it (repr), cut after SHOWN characters with its length said, so that a
    message stays short."""
    shown = repr(value)
    if len(shown) <= SHOWN:
        return shown
    return f"{shown[:SHOWN]}... ({len(value) if isinstance(value, str) else len(shown)} characters)"


def _limits(path: Path) -> tuple[int, int]:
    """The longest name and the longest path the file system that would hold `path` accepts, in bytes; asked
    of the nearest folder above it that exists."""
    folder = Path(os.path.abspath(path))
    while not os.path.isdir(folder) and folder != folder.parent:
        folder = folder.parent
    return _pathconf(folder, "PC_NAME_MAX", DEFAULT_NAME_MAX), _pathconf(folder, "PC_PATH_MAX", DEFAULT_PATH_MAX)


def _pathconf(folder: Path, name: str, default: int) -> int:
    try:
        value = os.pathconf(folder, name)
    except (OSError, ValueError):  # not known on this system, or not for this file system
        return default
    return value if value > 0 else default


def unnameable(path: Path) -> str | None:
    """Why the file system cannot name `path` (a NUL character, one of its names or the whole longer than
    it allows), or None when it can."""
    if "\0" in str(path):  # every call on it would raise ValueError: embedded null byte
        return "it holds a NUL character, which no file name may hold"
    name_max, path_max = _limits(path)
    for name in path.parts:
        size = len(os.fsencode(name))
        if size > name_max:
            which = "its name" if len(path.parts) == 1 else f"the name {shortened(name)} in it"
            return f"{which} is {size} bytes long; this file system allows {name_max} bytes in a name"
    size = len(os.fsencode(os.path.abspath(path)))
    if size > path_max:
        return f"the path is {size} bytes long; this file system allows {path_max} bytes in a path"
    return None


def check(path: Path, what: str) -> None:
    """Refuses a path the file system cannot name, saying which option or variable gave it (`what`)."""
    reason = unnameable(path)
    if reason:
        raise PathError(f"{what} {shortened(str(path))}: {reason}")
