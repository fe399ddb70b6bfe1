"""SVHN cropped digits (format 2): MATLAB Level-5 files read with scipy.io.loadmat."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .download import FileSpec, Source
from .prepared import Built, DatasetError, base_meta

URL_BASE = "http://ufldl.stanford.edu/housenumbers/"
TEST = FileSpec("test_32x32.mat", (URL_BASE + "test_32x32.mat",), 64275384,
                "cdce80dfb2a2c4c6160906d0bd7c68ec5a99d7ca4831afa54f09182025b6a75b", "eb5a983be6a315427106f1b164d9cef3")
EXTRA = FileSpec("extra_32x32.mat", (URL_BASE + "extra_32x32.mat",), 1329278602,
                 "a133a4beb38a00fcdda90c9489e0c04f900b660ce8a316a5e854838379a71eb3", "a93ce644f1a588dc4d68dda5feec44a7")


def read_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(N, 32, 32, 3) uint8 images and int32 labels 0..9 (the files' label 10 means digit 0)."""
    from scipy.io import loadmat  # only preparation needs scipy

    try:
        mat = loadmat(path, variable_names=["X", "y"])
        x, y = mat["X"], mat["y"]
    except (KeyError, ValueError, TypeError, NotImplementedError) as exc:
        raise DatasetError(f"{path}: not an SVHN .mat file with X and y ({exc})") from exc
    if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or y.size != x.shape[3]:
        raise DatasetError(f"{path}: X of shape {x.shape} and y of size {y.size}; expected (32, 32, 3, N) and N")
    labels = y.reshape(-1).astype(np.int32)
    if labels.min() < 1 or labels.max() > 10:
        raise DatasetError(f"{path}: labels outside 1..10")
    images = np.ascontiguousarray(x.transpose(3, 0, 1, 2), dtype=np.uint8)
    return images, labels % 10


def build(paths: dict[str, Path], work: Path) -> Built:
    x_train, y_train = read_mat(paths[EXTRA.name])
    x_test, y_test = read_mat(paths[TEST.name])
    arrays = {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
    meta = base_meta(SVHN.info, arrays, input_scale=255.0)
    meta.update(num_classes=10, class_names=[str(d) for d in range(10)], train_split="extra", test_split="test")
    return Built(arrays=arrays, meta=meta)


SVHN = Source(
    info={
        "name": "svhn", "task": "classification",
        "description": (
            "Street View House Numbers, cropped 32x32 digits. As in the study, the prepared train split is "
            "the 531,131-image 'extra' file and the test split the 26,032-image 'test' file; the "
            "73,257-image 'train' file is not used and not downloaded. X (32, 32, 3, N) is transposed to "
            "NHWC: x uint8 (N, 32, 32, 3), 0..255; y int32 with label 10 mapped to digit 0 (y % 10). File "
            "order kept."
        ),
        "source": URL_BASE + " (Netzer et al., 2011)",
        "licence": "non-commercial use only (SVHN page)",
    },
    files=(EXTRA, TEST), build=build,
)
