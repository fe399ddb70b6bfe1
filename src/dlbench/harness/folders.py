"""The folders and files a command writes, checked before anything slow runs: a results folder before
environments and data are prepared, a report's file before it is rendered. A refusal is a PathError that
names the path, what is wrong with it and what is accepted; the checks themselves create nothing."""
import os
import tempfile
from pathlib import Path


class PathError(Exception):
    """A path given to dlbench cannot be written: the message says which, why, and what is accepted."""


def nearest_existing(path: Path) -> Path:
    """`path` itself where it exists, else the closest of its parents that does."""
    for candidate in (path, *path.parents):
        try:
            if candidate.exists() or candidate.is_symlink():
                return candidate
        except OSError:  # a parent this user may not search: that one is where the check fails
            continue
    return Path(path.anchor or ".")


def check_writable_folder(folder: Path, label: str, hint: str) -> None:
    """Raises PathError unless `folder` can be written, or created and then written, by this process. Creates
    nothing: a temporary file, gone when closed, proves the folder (or the parent it would be made in)
    takes files. `label` names the folder as the user gave it ("--results /x"), `hint` says what to give."""
    folder = Path(folder).absolute()
    existing = nearest_existing(folder)
    if not existing.is_dir():
        raise PathError(f"{label}: {existing} is {'a file' if existing.exists() else 'a broken link'}, not a "
                        f"folder; {hint}")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        where = f"cannot write in {existing}" if existing == folder else (
            f"cannot create {folder}, since {existing} cannot be written")
        raise PathError(f"{label}: {where} ({error.strerror}); {hint}") from None


def check_output_file(path: Path, label: str, hint: str) -> None:
    """Raises PathError unless a file can be written at `path`: not a folder, in a folder that exists or can
    be created, and takes files."""
    path = Path(path)
    if path.is_dir():
        raise PathError(f"{label}: {path} is a folder; {hint}")
    check_writable_folder(path.parent, label, hint)


def write_text_atomically(path: Path, text: str) -> None:
    """Writes `text` to `path` through a temporary file beside it, renamed over it once complete: an error or
    an interruption meanwhile (a full disk, Ctrl-C) leaves the file as it was, an earlier report whole."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # os.open, not tempfile: the file gets the umask's permissions, as a plain write would give it
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666), "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(partial, path)
    except BaseException as error:
        partial.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise PathError(f"{path}: cannot write it ({error.strerror}); nothing there was changed") from None
        raise
