"""The folders and files a command writes, checked before anything slow runs: a results folder before
environments and data are prepared, a report's file before it is rendered. A refusal is a PathError that
names the path, what is wrong with it and what is accepted; the checks themselves create nothing.

Also how a file is written in a folder dlbench did not just create (a results folder may be shared, and
anyone who can write there could plant a link named report.html to a file of the user's): never through a
link. write_text_atomically writes a temporary file created exclusively beside the target (O_EXCL, so
never an existing file or link) and renames it over the target, which replaces a link itself, never its
target; a target that is a link is refused all the same, naming it, so that the user learns of it.
open_no_follow opens a file kept in place (a lock) with O_NOFOLLOW and checks the descriptor it got: a
plain file no other name shares (a hard link would be written through as well)."""
import errno
import os
import re
import secrets
import stat
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
    """Raises PathError unless a file can be written at `path`: not a link, not a folder, in a folder that
    exists or can be created, and takes files."""
    path = Path(path)
    refuse_link(path)
    if path.is_dir():
        raise PathError(f"{label}: {path} is a folder; {hint}")
    check_writable_folder(path.parent, label, hint)


LINK_HINT = ("dlbench never writes through a link in a folder it did not create, as anyone who can write "
             "there could make it overwrite another file; remove the link")


def link_refused(path: Path) -> "PathError":
    """The refusal of a link found at `path`, naming it and where it points."""
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:  # gone or replaced meanwhile: the name alone
        target = ""
    return PathError(f"{path} is a symbolic link{target}; {LINK_HINT}")


def refuse_link(path: Path) -> None:
    """Raises PathError when `path` is a symbolic link (a broken one too)."""
    if Path(path).is_symlink():
        raise link_refused(Path(path))


def open_no_follow(path: Path, flags: int, mode: int = 0o666) -> int:
    """os.open(path, flags) that never follows a link at `path` and returns only a descriptor of a plain file
    with no other name (one hard-linked elsewhere, a FIFO or a device would be written through); anything else
    is a PathError naming `path`. O_TRUNC empties the file only once it passed (a hard-linked file would be
    emptied at the open). Other OSErrors are raised as they are."""
    path = Path(path)
    try:
        descriptor = os.open(path, (flags & ~os.O_TRUNC) | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise link_refused(path) from None
        raise
    held = os.fstat(descriptor)
    if not stat.S_ISREG(held.st_mode) or held.st_nlink != 1:
        os.close(descriptor)
        what = "not a plain file" if not stat.S_ISREG(held.st_mode) else f"a file with {held.st_nlink} hard links"
        raise PathError(f"{path} is {what}; dlbench writes only a plain file of its own there, as writing through "
                        "it would change another file; remove it")
    if flags & os.O_TRUNC:
        os.ftruncate(descriptor, 0)
    return descriptor


# .report.html.1234-9f3a0c21.partial: the target's name, the writer's pid, a random part (which a dlbench
# before 2026-12-07 did not add)
PARTIAL = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)(-[0-9a-f]+)?\.partial")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_partials(folder: Path, name: str | None = None) -> list[Path]:
    """Removes the temporary files that write_text_atomically left in `folder` (of the file `name`, or of any)
    when its process was killed before it could remove them (SIGKILL); a partial file of a process still
    alive on this machine is its writer's and stays. Returns those removed. The pid is this machine's: a
    writer on another host sharing the folder could lose its partial file, and its write then fails whole."""
    removed = []
    for partial in Path(folder).glob(".*.partial"):
        found = PARTIAL.fullmatch(partial.name)
        if found and (name is None or found["name"] == name) and not _alive(int(found["pid"])):
            partial.unlink(missing_ok=True)  # unlink removes a link itself, never its target
            removed.append(partial)
    return removed


def write_bytes_atomically(path: Path, content: bytes) -> None:
    """Writes `content` to `path` through a temporary file beside it, created exclusively (a unique name, never
    an existing file or link) and renamed over `path` once complete and synced: an error or an interruption
    meanwhile (a full disk, Ctrl-C) leaves the file as it was, an earlier report whole. A `path` that is a link
    is refused (PathError, naming it); the temporary files a killed writer left beside it are removed first."""
    path = Path(path)
    refuse_link(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
    created = False  # a file found at the partial's name is not this write's to remove
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_partials(path.parent, path.name)
        # os.open, not tempfile: the file gets the umask's permissions, as a plain write would give it
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        created = True
        with os.fdopen(descriptor, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())  # the rename must not reach the disk before the bytes do
        refuse_link(path)  # planted while the file was written: refused, not silently replaced
        os.replace(partial, path)
    except BaseException as error:
        if created:
            partial.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise PathError(f"{path}: cannot write it ({error.strerror}); nothing there was changed") from None
        raise


def write_text_atomically(path: Path, text: str) -> None:
    """write_bytes_atomically of `text` in UTF-8."""
    write_bytes_atomically(path, text.encode("utf-8"))


def new_folder(parent: Path, name: str) -> Path:
    """parent/name, made now; parent/name-2, name-3, ... when that exists already. mkdir is atomic, so
    two runs never share a folder, even two that start in the same second (a run folder's name holds
    the time to the second)."""
    parent.mkdir(parents=True, exist_ok=True)
    folder, attempt = parent / name, 1
    while True:
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            attempt += 1
            folder = parent / f"{name}-{attempt}"
