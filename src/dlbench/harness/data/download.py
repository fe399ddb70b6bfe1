"""Downloading and verifying a dataset's raw files: mirrors in order, resume, size then hash.

A file is used only once it matches its expected size and hash. A download lands in `<name>.part`
and is renamed to `<name>` only after it verified, so a file under its real name is always good.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.harness import folders

from .prepared import Built, DatasetError, StandInTarget

CHUNK = 1 << 20
TIMEOUT_S = 60
USER_AGENT = "dlbench/0.1 (+https://github.com/dlbench)"
PIN_SUFFIX = ".pinned"  # holds "<sha256> <size>" for a file without a published checksum


@dataclass(frozen=True)
class Copy:
    """A copy installed by another tool (e.g. a Debian package), with that copy's own checksums."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class FileSpec:
    name: str
    urls: tuple[str, ...]  # canonical first, then the mirrors in the order they are tried
    size: int | None
    sha256: str | None = None
    md5: str | None = None
    copies: tuple[Copy, ...] = ()
    note: str = ""

    @property
    def pinned(self) -> bool:
        """No published checksum: the first copy seen is recorded and every later one must match it."""
        return self.size is None and self.sha256 is None and self.md5 is None


@dataclass(frozen=True)
class Source:
    """A dataset prepared from downloaded files: build(verified paths by file name, scratch folder)."""

    info: dict
    files: tuple[FileSpec, ...]
    build: Callable[[dict[str, Path], Path], Built]
    # a stand-in's own targets, per workload it stands in for (prepared.StandInTarget); none for the study's
    targets: dict[str, StandInTarget] = field(default_factory=dict)


def offline_from_env() -> bool:
    return os.environ.get("DLBENCH_OFFLINE", "") not in ("", "0")


def file_digests(path: Path) -> tuple[int, str, str]:
    sha256, md5 = hashlib.sha256(), hashlib.md5()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            sha256.update(chunk)
            md5.update(chunk)
    return path.stat().st_size, sha256.hexdigest(), md5.hexdigest()


def expected(spec: FileSpec, folder: Path) -> tuple[int | None, str | None, str | None]:
    """(size, sha256, md5) a copy in `folder` must match; a pinned file's come from its pin."""
    pin = folder / (spec.name + PIN_SUFFIX)
    if spec.pinned and pin.exists():
        sha256, size = pin.read_text(encoding="ascii").split()
        return int(size), sha256, None
    return spec.size, spec.sha256, spec.md5


def check(path: Path, size: int | None, sha256: str | None, md5: str | None) -> str | None:
    """None if `path` matches; else what is wrong, naming the file, the expected and the actual value.

    The size goes first: it costs nothing and catches a truncated file without reading it.
    """
    actual = path.stat().st_size
    if size is not None and actual != size:
        return f"{path}: size {actual:,} bytes, expected {size:,}"
    if sha256 is None and md5 is None:
        return None
    _, actual_sha256, actual_md5 = file_digests(path)
    if sha256 is not None and actual_sha256 != sha256:
        return f"{path}: sha256 {actual_sha256}, expected {sha256}"
    if sha256 is None and actual_md5 != md5:
        return f"{path}: md5 {actual_md5}, expected {md5}"
    return None


def pin(spec: FileSpec, path: Path) -> None:
    size, sha256, _ = file_digests(path)
    folders.write_text_atomically(path.parent / (spec.name + PIN_SUFFIX), f"{sha256} {size}\n")


def verify(spec: FileSpec, path: Path) -> None:
    """Raise if `path` is not a good copy of spec; a bad file in the data folder is moved aside."""
    problem = check(path, *expected(spec, path.parent))
    if problem is None:
        if spec.pinned and not (path.parent / (spec.name + PIN_SUFFIX)).exists():
            pin(spec, path)
        return
    bad = path.with_name(path.name + ".bad")
    os.replace(path, bad)
    raise DatasetError(f"{problem}; moved aside to {bad}, it will not be used")


def known_copy(spec: FileSpec) -> Path | None:
    """A verified copy installed elsewhere; one that does not match its checksums is ignored."""
    for copy in spec.copies:
        path = Path(copy.path)
        if path.is_file() and check(path, copy.size, copy.sha256, None) is None:
            return path
    return None


def present(spec: FileSpec, folder: Path) -> Path | None:
    """Where the file is without checking its content (for listings): the data folder or a known copy."""
    if (folder / spec.name).is_file():
        return folder / spec.name
    return next((Path(c.path) for c in spec.copies if Path(c.path).is_file()), None)


def locate(spec: FileSpec, folder: Path) -> Path | None:
    """A verified copy: the data folder's, else a known installed copy, else another dataset's; or None."""
    path = folder / spec.name
    if path.is_file():
        verify(spec, path)
        return path
    return known_copy(spec) or sibling_copy(spec, folder)


def sibling_copy(spec: FileSpec, folder: Path) -> Path | None:
    """Link in a verified copy of the same file from another dataset's raw folder (two datasets built
    from one archive download it once). Only for a published sha256: a pin belongs to its own folder."""
    if spec.sha256 is None:
        return None
    for other in sorted(folder.parent.glob(f"*/{spec.name}")):
        if other.parent != folder and check(other, spec.size, spec.sha256, None) is None:
            folder.mkdir(parents=True, exist_ok=True)
            folders.refuse_link(folder / spec.name)  # copyfile would write through a link (a dangling one too)
            try:
                os.link(other, folder / spec.name)
            except OSError:
                shutil.copyfile(other, folder / spec.name)
            return folder / spec.name
    return None


def missing_message(specs: list[FileSpec], folder: Path, dataset: str) -> str:
    lines = [f"{dataset}: {len(specs)} file(s) missing; put each at the path shown (or run "
             f"`dlbench data fetch {dataset}` where there is network access):"]
    for spec in specs:
        checksum = f"sha256 {spec.sha256}" if spec.sha256 else f"md5 {spec.md5}" if spec.md5 else \
            "no published checksum (pinned at first use)"
        size = f"{spec.size:,} bytes, " if spec.size else ""
        lines.append(f"  {folder / spec.name}  ({size}{checksum}; from {spec.urls[0]})")
        lines += [f"    or an installed copy at {c.path}" for c in spec.copies]
    return "\n".join(lines)


def require(specs: tuple[FileSpec, ...], folder: Path, dataset: str) -> dict[str, Path]:
    """Verified paths of every file, without any network access; raise naming what is missing."""
    found = {spec.name: locate(spec, folder) for spec in specs}
    missing = [spec for spec in specs if found[spec.name] is None]
    if missing:
        raise DatasetError(missing_message(missing, folder, dataset))
    return {name: path for name, path in found.items() if path is not None}


Progress = Callable[[str, int, int | None, bool], None]


def stderr_progress(name: str, done: int, total: int | None, finished: bool) -> None:
    if total:
        sys.stderr.write(f"\r{name}: {100 * done // total:3d}% of {total:,} bytes")
    else:
        sys.stderr.write(f"\r{name}: {done:,} bytes")
    sys.stderr.write("\n" if finished else "")
    sys.stderr.flush()


def fetch(spec: FileSpec, folder: Path, progress: Progress = stderr_progress) -> Path:
    """A verified copy of spec, downloading it (canonical URL, then mirrors) if there is none."""
    folder.mkdir(parents=True, exist_ok=True)
    found = locate(spec, folder)
    if found is not None:
        return found
    final, part = folder / spec.name, folder / (spec.name + ".part")
    failures = []
    for url in spec.urls:
        try:
            _download(url, part, progress, spec.name)
        except (OSError, http.client.HTTPException) as exc:
            # The partial file stays: the next URL or the next run resumes it.
            failures.append(f"{url}: {exc}")
            continue
        problem = check(part, *expected(spec, folder))
        if problem is not None:
            part.unlink()
            failures.append(f"{url}: {problem}; the download was deleted")
            continue
        os.replace(part, final)
        if spec.pinned:
            pin(spec, final)
        return final
    kept = f"; the partial download {part} is kept and resumed next time" if part.exists() else ""
    raise DatasetError(f"could not fetch {spec.name}:\n  " + "\n  ".join(failures) + kept)


def _download(url: str, part: Path, progress: Progress, name: str) -> None:
    """Append to `part`, resuming with an HTTP range when the server grants one (206)."""
    offset = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        if exc.code != 416 or not offset:
            raise
        # 416: the range starts at or past the end; the partial file is suspect, start over.
        part.unlink()
        _download(url, part, progress, name)
        return
    with response:
        if offset and response.status != 206:
            offset = 0  # the server ignored the range and sends the whole file
        elif offset and not response.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
            raise OSError(f"asked for bytes from {offset}, got {response.headers.get('Content-Range')!r}")
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length is not None else None
        done, last = offset, 0.0
        # never through a link planted at the partial file's name (a PathError, which no other URL retries)
        mode = os.O_APPEND if offset else os.O_TRUNC
        with os.fdopen(folders.open_no_follow(part, os.O_WRONLY | os.O_CREAT | mode), "ab") as out:
            while chunk := response.read(CHUNK):
                out.write(chunk)
                done += len(chunk)
                if time.monotonic() - last > 0.5:
                    progress(name, done, total, False)
                    last = time.monotonic()
        progress(name, done, total, True)
    if total is not None and done < total:
        # http.client returns a short body without an error when the server closes early.
        raise OSError(f"connection closed after {done:,} of {total:,} bytes")
