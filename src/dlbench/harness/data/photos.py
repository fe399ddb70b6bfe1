"""photo-patches-10 and photo-regions-100: 32x32 colour patches of ten real photographs.

The photographs ship in scikit-image's wheel (skimage/data). The wheel is downloaded from PyPI and
read as an archive, never installed; the two datasets share its one verified copy.
photo-patches-10 labels a patch by its photograph (10 classes: CIFAR-10's and SVHN's heads);
photo-regions-100 by its photograph and the cell of a 2 x 5 grid it lies in (100 classes: CIFAR-100's).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from .download import Source
from .prepared import Built, DatasetError, StandInTarget, base_meta
from .wheel import pypi_wheel, read_member

WHEEL = pypi_wheel(
    "scikit_image-0.26.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
    "a5/2a/e71c1a7d90e70da67b88ccc609bd6ae54798d5847369b15d3a8052232f9d/"
    "scikit_image-0.26.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
    13711217, "74aa5518ccea28121f57a95374581d3b979839adc25bb03f289b1bc9b99c58af",
)
# Photographs only (no drawings, charts or textures), each public domain or CC0 per skimage.data's notes;
# the order is the class order.
PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "hubble_deep_field.jpg", "ihc.png", "retina.jpg",
          "rocket.jpg", "camera.png", "coins.png", "cell.png")
FOLDER = "skimage/data/"
PATCH = 32
SHORT_SIDE = 256  # each photo is shrunk by the largest whole factor that keeps its short side >= this
GRID = (2, 5)  # rows x columns of photo-regions-100's cells
SEED = 0
SOURCE = "scikit-image 0.26.0's wheel on PyPI (cp311, manylinux x86_64), skimage/data: " + ", ".join(PHOTOS)
LICENCE = ("public domain or CC0 per skimage.data's notes (NASA: astronaut, Hubble deep field; SpaceX: rocket; "
           "CC0: chelsea, coffee, retina, camera, cell; no known copyright restrictions: ihc, coins); "
           "scikit-image: BSD-3-Clause")
METHOD = (
    "Each photograph decoded with Pillow to RGB (grey ones repeated over 3 channels) and shrunk by the largest "
    f"whole factor k that keeps its short side >= {SHORT_SIDE} px, averaging k x k blocks (exact, no resampler). "
    f"{PATCH}x{PATCH} patches are cut at positions drawn by numpy's seed-{SEED} RandomState; train and test "
    "patches are drawn independently from the same areas, so they overlap: this measures recognising areas "
    "already seen, not generalising to new photographs. x uint8 (N, 32, 32, 3) NHWC, 0..255; y int32; "
    "both splits shuffled."
)


def load_photo(wheel: Path, name: str) -> np.ndarray:
    """(H, W, 3) uint8, shrunk by whole-block averaging."""
    from PIL import Image  # imported here: only preparation needs it

    with Image.open(io.BytesIO(read_member(wheel, FOLDER + name))) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=np.float64)
    k = max(1, min(pixels.shape[:2]) // SHORT_SIDE)
    h, w = pixels.shape[0] // k * k, pixels.shape[1] // k * k
    blocks = pixels[:h, :w].reshape(h // k, k, w // k, k, 3).mean(axis=(1, 3))
    return np.rint(blocks).astype(np.uint8)


def cells(photo: np.ndarray, grid: tuple[int, int]) -> list[tuple[int, int, int, int]]:
    """(top, left, height, width) of each grid cell, row by row."""
    rows, cols = grid
    height, width = photo.shape[0] // rows, photo.shape[1] // cols
    if min(height, width) < PATCH:
        raise DatasetError(f"a {photo.shape[0]}x{photo.shape[1]} photo has cells of {height}x{width} px, "
                           f"smaller than a {PATCH} px patch")
    return [(r * height, c * width, height, width) for r in range(rows) for c in range(cols)]


def patches(photo: np.ndarray, cell: tuple[int, int, int, int], count: int,
            rng: np.random.RandomState) -> np.ndarray:
    top, left, height, width = cell
    ys = top + rng.randint(0, height - PATCH + 1, size=count)
    xs = left + rng.randint(0, width - PATCH + 1, size=count)
    return np.stack([photo[y:y + PATCH, x:x + PATCH] for y, x in zip(ys, xs, strict=True)])


def build_patches(wheel: Path, grid: tuple[int, int], per_class: dict[str, int]) -> dict[str, np.ndarray]:
    """x_/y_ arrays; class = photo index * cells per photo + cell index."""
    rng = np.random.RandomState(SEED)
    xs: dict[str, list[np.ndarray]] = {part: [] for part in per_class}
    ys: dict[str, list[int]] = {part: [] for part in per_class}
    for photo_index, name in enumerate(PHOTOS):
        photo = load_photo(wheel, name)
        for cell_index, cell in enumerate(cells(photo, grid)):
            label = photo_index * grid[0] * grid[1] + cell_index
            for part, count in per_class.items():
                xs[part].append(patches(photo, cell, count, rng))
                ys[part] += [label] * count
    arrays = {}
    for part in per_class:
        order = rng.permutation(len(ys[part]))
        arrays[f"x_{part}"] = np.ascontiguousarray(np.concatenate(xs[part])[order])
        arrays[f"y_{part}"] = np.asarray(ys[part], dtype=np.int32)[order]
    return arrays


def class_names(grid: tuple[int, int]) -> list[str]:
    stems = [name.rsplit(".", 1)[0] for name in PHOTOS]
    if grid == (1, 1):
        return stems
    return [f"{stem}-r{r}c{c}" for stem in stems for r in range(grid[0]) for c in range(grid[1])]


def _built(info: dict, wheel: Path, grid: tuple[int, int], per_class: tuple[int, int]) -> Built:
    arrays = build_patches(wheel, grid, {"train": per_class[0], "test": per_class[1]})
    meta = base_meta(info, arrays, input_scale=255.0)
    names = class_names(grid)
    meta.update(num_classes=len(names), class_names=names, photos=list(PHOTOS), patch=PATCH,
                short_side=SHORT_SIDE, grid=list(grid))
    return Built(arrays=arrays, meta=meta)


def build_photo_patches(paths: dict[str, Path], work: Path) -> Built:
    return _built(PHOTO_PATCHES_10.info, paths[WHEEL.name], (1, 1), PATCHES_PER_PHOTO)


def build_photo_regions(paths: dict[str, Path], work: Path) -> Built:
    return _built(PHOTO_REGIONS_100.info, paths[WHEEL.name], GRID, PATCHES_PER_REGION)


PATCHES_PER_PHOTO = (30, 10)  # train, test
PATCHES_PER_REGION = (3, 1)
PHOTO_PATCHES_10 = Source(
    info={"name": "photo-patches-10", "task": "classification",
          "description": (
              f"{PATCHES_PER_PHOTO[0] * 10} train and {PATCHES_PER_PHOTO[1] * 10} test 32x32 colour patches of "
              "ten real photographs, labelled by the photograph (10 classes, "
              f"{PATCHES_PER_PHOTO[0]} + {PATCHES_PER_PHOTO[1]} each, drawn from the whole photo). " + METHOD +
              " A small offline stand-in for quick runs of cnn-cifar10 and cnn-svhn: this is NOT CIFAR-10 or "
              "SVHN, and its accuracies are not comparable with theirs."),
          "source": SOURCE, "licence": LICENCE},
    files=(WHEEL,), build=build_photo_patches,
    targets={
        # accuracies are whole patches of 100 (steps of 0.01): 0.135 lies between 13 and 14 right
        "cnn-cifar10": StandInTarget(0.135, (
            "14 of the 100 test patches right, above chance (10), which the quick suite's 10 epochs reach: in "
            "make run's store the reference passed it at epoch 7 and every framework by epoch 9, where "
            "CIFAR-10's 75 % is out of reach of 300 patches")),
        "vit-cifar10": StandInTarget(0.20, (
            "twice chance (10), which every framework passed at the second of the quick suite's 3 epochs on the "
            "first 256 patches in a check run (28-31 right of 100, after 10 at epoch 1), where CIFAR-10's 75 % "
            "is out of reach of 256 patches")),
        "cnn-svhn": StandInTarget(None, (
            "the quick-large suite's cnn-svhn (2 epochs on 128 samples) stays at chance: its accuracy wandered "
            "between 10 and 20 % in make run stores, so any target would be passed or missed by noise")),
    },
)
PHOTO_REGIONS_100 = Source(
    info={"name": "photo-regions-100", "task": "classification",
          "description": (
              f"{PATCHES_PER_REGION[0] * 100} train and {PATCHES_PER_REGION[1] * 100} test 32x32 colour patches "
              "of ten real photographs, each photo cut into a 2 x 5 grid of cells and a patch labelled by its "
              f"photo and cell (100 classes, {PATCHES_PER_REGION[0]} + {PATCHES_PER_REGION[1]} each, drawn "
              "inside the cell). " + METHOD + " A small offline stand-in for quick runs of cnn-cifar100: this "
              "is NOT CIFAR-100, and its accuracies are not comparable with CIFAR-100's."),
          "source": SOURCE, "licence": LICENCE},
    files=(WHEEL,), build=build_photo_regions,
    targets={"cnn-cifar100": StandInTarget(None, (
        "at chance after the quick-large suite's 2 epochs (1 to 2 % for every framework in a make run store, "
        "chance being 1 %): no target would mean anything"))},
)
