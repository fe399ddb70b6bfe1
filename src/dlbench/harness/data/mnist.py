"""MNIST and Fashion-MNIST: four IDX files, gzip-compressed, in the same format and file names."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from .download import Copy, FileSpec, Source
from .prepared import Built, DatasetError, base_meta

FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049
MNIST_URLS = ("http://yann.lecun.com/exdb/mnist/", "https://ossci-datasets.s3.amazonaws.com/mnist/",
              "https://storage.googleapis.com/cvdf-datasets/mnist/")
FASHION_URLS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)
DEBIAN_FASHION = "/usr/share/datasets/fashion-mnist/"
FASHION_CLASSES = ["t-shirt/top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
                   "bag", "ankle boot"]
LAYOUT = (
    "Parsed from the IDX files (big-endian header, magic 2051 images / 2049 labels, checked), "
    "stored as the files give them: x uint8 (N, 28, 28, 1) NHWC with 0 = background, y int32; "
    "the 60,000 train and 10,000 t10k images are the train and test splits, in file order."
)


def _specs(urls: tuple[str, ...], table: list[tuple], copies: list[tuple] | None = None) -> tuple[FileSpec, ...]:
    specs = []
    for i, (name, size, sha256, md5) in enumerate(table):
        found = (Copy(DEBIAN_FASHION + name, *copies[i]),) if copies else ()
        specs.append(FileSpec(name, tuple(base + name for base in urls), size, sha256, md5, found))
    return tuple(specs)


MNIST_FILES = _specs(MNIST_URLS, [
    (FILES[0], 9912422, "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
     "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
    (FILES[1], 28881, "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
     "d53e105ee54ea40749a09fcbcd1e9432"),
    (FILES[2], 1648877, "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
     "9fb629c4189551a2d022fa330f9573f3"),
    (FILES[3], 4542, "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
     "ec29112dd5afa0611ce80d1b7f02629c"),
])
# Debian's dataset-fashion-mnist rewrote the gzip headers (same payload), so its copies have their
# own sizes and sha256s (DATASETS.md A.3).
FASHION_FILES = _specs(FASHION_URLS, [
    (FILES[0], 26421880, "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
     "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
    (FILES[1], 29515, "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
     "25c81989df183df01b3e8a0aad5dffbe"),
    (FILES[2], 4422102, "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
     "bef4ecab320f06d8554ea6380940ec79"),
    (FILES[3], 5148, "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
     "bb300cfdad3c16e7a12a480ee83cd310"),
], copies=[
    (26421856, "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7"),
    (29491, "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056"),
    (4422079, "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa"),
    (5125, "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"),
])


def read_idx(path: Path, magic: int) -> np.ndarray:
    """An IDX file of uint8 (everything MNIST-style uses), gzip-compressed."""
    with gzip.open(path, "rb") as handle:
        raw = handle.read()
    if len(raw) < 4:
        raise DatasetError(f"{path}: too short for an IDX header")
    found, ndim = struct.unpack(">I", raw[:4])[0], raw[3]
    if found != magic:
        raise DatasetError(f"{path}: IDX magic {found}, expected {magic}")
    shape = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise DatasetError(f"{path}: {data.size} values for shape {shape}")
    return data.reshape(shape)


def build_idx(info: dict, class_names: list[str], paths: dict[str, Path]) -> Built:
    images = [read_idx(paths[name], IMAGE_MAGIC) for name in (FILES[0], FILES[2])]
    labels = [read_idx(paths[name], LABEL_MAGIC).astype(np.int32) for name in (FILES[1], FILES[3])]
    arrays = {"x_train": images[0][..., None], "y_train": labels[0],
              "x_test": images[1][..., None], "y_test": labels[1]}
    for part in ("train", "test"):
        if len(arrays[f"x_{part}"]) != len(arrays[f"y_{part}"]):
            raise DatasetError(f"{info['name']}: {part} images and labels differ in number")
    meta = base_meta(info, arrays, input_scale=255.0)
    meta.update(num_classes=len(class_names), class_names=class_names)
    return Built(arrays=arrays, meta=meta)


MNIST = Source(
    info={
        "name": "mnist", "task": "classification",
        "description": "MNIST handwritten digits, the study's cnn-mnist dataset. " + LAYOUT,
        "source": "http://yann.lecun.com/exdb/mnist/ (mirrors: torchvision's ossci S3, tensorflow-datasets' GCS)",
        "licence": "CC BY-SA 3.0 (per the Keras documentation); Y. LeCun, C. Cortes, C. Burges",
    },
    files=MNIST_FILES,
    build=lambda paths, work: build_idx(MNIST.info, [str(d) for d in range(10)], paths),
)

FASHION_MNIST = Source(
    info={
        "name": "fashion-mnist", "task": "classification",
        "description": (
            "Fashion-MNIST (Zalando): 28x28 grey photos of 10 clothing classes in MNIST's exact format, a "
            "named variant for cnn-mnist (accuracy about 90% where MNIST gives 99%). " + LAYOUT + " Debian's "
            "dataset-fashion-mnist copies in " + DEBIAN_FASHION + " are found and checked against Debian's "
            "own checksums (same payload, rewritten gzip headers), so the prepared hash is the same."
        ),
        "source": FASHION_URLS[0] + " (or Debian package dataset-fashion-mnist)",
        "licence": "MIT (Zalando Research)",
    },
    files=FASHION_FILES,
    build=lambda paths, work: build_idx(FASHION_MNIST.info, FASHION_CLASSES, paths),
)
