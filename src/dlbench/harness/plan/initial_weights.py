"""Starting weights a user supplies instead of the canonical initialisation: a suite entry's `weights:`,
for instance a pretrained backbone. Every framework loads the same file, so the runs stay comparable.

The file is a numpy .npz holding every canonical weight of the model ("layer_name/param", in the
canonical layout of shared/ir.py: what `dlbench.shared.initializers.canonical_init` draws), float values of
exactly those shapes, nothing else. It is checked against the model before any cell runs, and its
SHA-256 enters the cell's configuration: another file is another cell.
"""
import hashlib
import zipfile
from pathlib import Path

import numpy as np

from dlbench.harness.data import npy_files
from dlbench.shared import ir

ACCEPTED = "an .npz as numpy.savez or numpy.savez_compressed writes it, one '<weight>.npy' member per weight"


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
    try:
        with npy_files.open_zip(path, ACCEPTED) as archive:
            members = _members(path, archive)
            _check_names(path, members, expected, workload)
            for key, shape in expected.items():
                header = npy_files.zip_header(path, key, archive, members[key], ACCEPTED)
                _check_header(path, key, header, shape, workload)
                npy_files.check_size(path, key, header, ACCEPTED)
            for key in expected:
                _check_values(path, key, npy_files.zip_array(path, key, archive, members[key], ACCEPTED))
    except npy_files.ArrayFileError as error:
        raise WeightsError(str(error)) from None
    return digest(path)


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


def _check_header(path: Path, key: str, header: npy_files.Header, shape: tuple, workload: str) -> None:
    if header.shape != shape:
        raise WeightsError(f"{path}: {key!r} has shape {header.shape}; {workload} needs {shape}")
    if header.dtype.kind != "f":  # object arrays (pickles) among them: refused before anything is unpickled
        raise WeightsError(f"{path}: {key!r} must hold finite floats (found {header.dtype})")


def _check_values(path: Path, key: str, value: np.ndarray) -> None:
    if not np.isfinite(value).all():
        raise WeightsError(f"{path}: {key!r} must hold finite floats (found {value.dtype} with NaN or inf)")
