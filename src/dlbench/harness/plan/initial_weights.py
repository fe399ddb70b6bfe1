"""Starting weights a user supplies instead of the canonical initialisation: a suite entry's `weights:`,
for instance a pretrained backbone. Every framework loads the same file, so the runs stay comparable.

The file is a numpy .npz holding every canonical weight of the model ("layer_name/param", in the
canonical layout of shared/ir.py: what `dlbench.shared.init.canonical_init` draws), float values of
exactly those shapes, nothing else. It is checked against the model before any cell runs, and its
SHA-256 enters the cell's configuration: another file is another cell.
"""
import hashlib
import zipfile
from pathlib import Path

import numpy as np

from dlbench.shared import ir


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
    naming the file and the first weight that is missing, extra, misshapen, not float or not finite."""
    expected = ir.weight_shapes(model)
    try:
        with np.load(path, allow_pickle=False) as loaded:
            arrays = {key: loaded[key] for key in loaded.files}
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise WeightsError(f"{path}: not a readable .npz of weights ({error})") from None
    missing = [key for key in expected if key not in arrays]
    if missing:
        raise WeightsError(f"{path}: lacks {len(missing)} of {workload}'s {len(expected)} weights, first "
                           f"{missing[0]!r} of shape {expected[missing[0]]}")
    extra = sorted(set(arrays) - set(expected))
    if extra:
        raise WeightsError(f"{path}: {extra[0]!r} is not a weight of {workload}; its weights: "
                           f"{', '.join(expected)}")
    for key, shape in expected.items():
        value = arrays[key]
        if value.shape != tuple(shape):
            raise WeightsError(f"{path}: {key!r} has shape {value.shape}; {workload} needs {tuple(shape)}")
        if value.dtype.kind != "f" or not np.isfinite(value).all():
            raise WeightsError(f"{path}: {key!r} must hold finite floats (found {value.dtype}"
                               f"{'' if value.dtype.kind != 'f' else ' with NaN or inf'})")
    return digest(path)
