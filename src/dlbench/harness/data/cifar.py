"""CIFAR-10 and CIFAR-100, python version: pickled batches in a tar.gz, loaded without trusting them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .download import FileSpec, Source
from .prepared import Built, DatasetError, base_meta
from .safe import restricted_load, safe_extract

URL_BASE = "https://www.cs.toronto.edu/~kriz/"
LAYOUT = (
    "Pickled batches read through a restricted unpickler (numpy arrays and plain containers only). "
    "Each row of 3,072 bytes (1,024 R, then G, then B, each plane row-major 32x32) becomes an NHWC "
    "image: x uint8 (N, 32, 32, 3), 0..255; y int32. Train and test in file order (train batches in "
    "order 1..5 for CIFAR-10). No normalisation, no augmentation."
)
CIFAR10_FILE = FileSpec(
    "cifar-10-python.tar.gz", (URL_BASE + "cifar-10-python.tar.gz",), 170498071,
    "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce", "c58f30108f718f92721af3b95e74349a",
)
CIFAR100_FILE = FileSpec(
    "cifar-100-python.tar.gz", (URL_BASE + "cifar-100-python.tar.gz",), 169001437,
    "85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7", "eb9058c3a382ffc7106e4002c42a8d85",
)


def load_batch(path: Path, label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    batch = restricted_load(path.read_bytes(), str(path))
    try:
        data, labels = batch[b"data"], batch[label_key]
    except (KeyError, TypeError):
        raise DatasetError(f"{path}: not a CIFAR batch (no b'data' or {label_key!r})") from None
    data = np.asarray(data, dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise DatasetError(f"{path}: data of shape {data.shape} with {len(labels)} labels; expected (N, 3072)")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), np.asarray(labels, dtype=np.int32)


def _names(path: Path, key: bytes) -> list[str]:
    return [name.decode("utf-8") for name in restricted_load(path.read_bytes(), str(path))[key]]


def _unpack(archive: Path, work: Path, folder: str) -> Path:
    safe_extract(archive, work)
    if not (work / folder).is_dir():
        raise DatasetError(f"{archive}: no {folder}/ folder inside")
    return work / folder


def build_cifar10(paths: dict[str, Path], work: Path) -> Built:
    folder = _unpack(paths[CIFAR10_FILE.name], work, "cifar-10-batches-py")
    train = [load_batch(folder / f"data_batch_{i}", b"labels") for i in range(1, 6)]
    x_test, y_test = load_batch(folder / "test_batch", b"labels")
    arrays = {"x_train": np.concatenate([x for x, _ in train]), "y_train": np.concatenate([y for _, y in train]),
              "x_test": x_test, "y_test": y_test}
    meta = base_meta(CIFAR10.info, arrays, input_scale=255.0)
    meta.update(num_classes=10, class_names=_names(folder / "batches.meta", b"label_names"))
    return Built(arrays=arrays, meta=meta)


def build_cifar100(paths: dict[str, Path], work: Path) -> Built:
    folder = _unpack(paths[CIFAR100_FILE.name], work, "cifar-100-python")
    x_train, y_train = load_batch(folder / "train", b"fine_labels")
    x_test, y_test = load_batch(folder / "test", b"fine_labels")
    arrays = {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
    meta = base_meta(CIFAR100.info, arrays, input_scale=255.0)
    meta.update(num_classes=100, class_names=_names(folder / "meta", b"fine_label_names"))
    return Built(arrays=arrays, meta=meta)


CIFAR10 = Source(
    info={"name": "cifar10", "task": "classification",
          "description": "CIFAR-10: 50,000 train and 10,000 test 32x32 colour images, 10 classes. " + LAYOUT,
          "source": URL_BASE + "cifar.html (A. Krizhevsky, 2009)",
          "licence": "no explicit licence; free to use with a citation of Krizhevsky (2009)"},
    files=(CIFAR10_FILE,), build=build_cifar10,
)
CIFAR100 = Source(
    info={"name": "cifar100", "task": "classification",
          "description": ("CIFAR-100: 50,000 train and 10,000 test 32x32 colour images, the 100 fine labels "
                          "(the 20 coarse labels are not used). " + LAYOUT),
          "source": URL_BASE + "cifar.html (A. Krizhevsky, 2009)",
          "licence": "no explicit licence; free to use with a citation of Krizhevsky (2009)"},
    files=(CIFAR100_FILE,), build=build_cifar100,
)
