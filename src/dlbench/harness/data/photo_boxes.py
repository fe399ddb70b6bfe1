"""photo-boxes: six real photographs with bounding boxes drawn by hand for dlbench, in VOC's classes.

A small offline stand-in for PASCAL VOC 2012 detection, NOT VOC. The photographs ship in two wheels on
PyPI (scikit-image's, shared with the photo sets, and matplotlib's), downloaded, verified and read as
archives, never installed. The boxes live in this package as VOC-style XML (photo-boxes/Annotations/,
with a LICENCE.md naming each photo's source and licence), parsed by voc.parse_annotation and
prepared by voc.pack_split into voc2012's array layout, at a small scale for quick runs.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from . import voc
from .download import Source
from .photos import WHEEL
from .prepared import Built, DatasetError, StandInTarget
from .wheel import pypi_wheel, read_member

MPL_WHEEL = pypi_wheel(
    "matplotlib-3.11.2-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    "2e/a4/1ca765c63a60e3096ae2ad132eb25f6f7eab0377418cd0472808befd9665/"
    "matplotlib-3.11.2-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    9854405, "07d9b9fa60cd4c393692f50d0bb03123242ddf61c99bb0e95e75feb354e7c1a8",
)
ANNOTATIONS = Path(__file__).parent / "photo-boxes" / "Annotations"
# image id: (wheel, member); the id names the XML in ANNOTATIONS
IMAGES = {
    "astronaut": (WHEEL, "skimage/data/astronaut.png"),
    "chelsea": (WHEEL, "skimage/data/chelsea.png"),
    "camera": (WHEEL, "skimage/data/camera.png"),
    "motorcycle_left": (WHEEL, "skimage/data/motorcycle_left.png"),
    "motorcycle_right": (WHEEL, "skimage/data/motorcycle_right.png"),
    "grace_hopper": (MPL_WHEEL, "matplotlib/mpl-data/sample_data/grace_hopper.jpg"),
}
# Fixed: every class of the test split is in train. motorcycle_right is the other view of the
# stereo pair whose left view is in train, so the test split is not independent of it.
SPLIT = {"train": ("astronaut", "chelsea", "motorcycle_left", "grace_hopper"),
         "test": ("camera", "motorcycle_right")}
# voc2012 uses 600 and 1,000; these keep its ratio at a size CI's detectors train on in seconds.
MIN_SIDE, MAX_SIDE = 128, 213

SOURCE = ("scikit-image 0.26.0's wheel on PyPI (skimage/data: astronaut, chelsea, camera, motorcycle_left, "
          "motorcycle_right) and matplotlib 3.11.2's (mpl-data/sample_data/grace_hopper.jpg); boxes drawn "
          "by hand for dlbench (src/dlbench/data/photo-boxes/)")
LICENCE = ("astronaut: NASA, public domain; chelsea and camera: CC0 (per skimage.data's notes); "
           "motorcycle_left/right: Middlebury 2014 stereo data (Scharstein et al., GCPR 2014), no licence "
           "stated by scikit-image or Middlebury, citation requested; grace_hopper: U.S. Navy photograph, "
           "public domain (via Wikimedia Commons); wheels: scikit-image BSD-3-Clause, matplotlib PSF-based "
           "licence; boxes: same terms as dlbench")


def annotation(image_id: str) -> Path:
    return ANNOTATIONS / f"{image_id}.xml"


def annotated_size(path: Path) -> tuple[int, int]:
    """(width, height) from an annotation's <size>, or an error naming the file."""
    try:
        size = ElementTree.parse(path).getroot().find("size")
        return int(size.findtext("width")), int(size.findtext("height"))
    except (OSError, ElementTree.ParseError, AttributeError, TypeError, ValueError) as exc:
        raise DatasetError(f"{path}: no readable <size> ({exc})") from exc


def check_annotation(path: Path, image_size: tuple[int, int]) -> None:
    """The XML's size is the photo's, and every box lies inside it with a positive area."""
    width, height = annotated_size(path)
    if (width, height) != tuple(image_size):
        raise DatasetError(f"{path}: size {width}x{height}, but the photo is {image_size[0]}x{image_size[1]}")
    boxes, _, _ = voc.parse_annotation(path)
    if not len(boxes):
        raise DatasetError(f"{path}: no objects")
    for x1, y1, x2, y2 in boxes.tolist():  # continuous: the XML's xmin - 1, ymin - 1, xmax, ymax
        if not (0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height):
            raise DatasetError(f"{path}: box ({x1 + 1:g}, {y1 + 1:g}, {x2:g}, {y2:g}) "
                               f"is empty or outside the {width}x{height} photo")


def photo(paths: dict[str, Path], image_id: str) -> io.BytesIO:
    wheel, member = IMAGES[image_id]
    return io.BytesIO(read_member(paths[wheel.name], member))


def build_arrays(paths: dict[str, Path], work: Path, min_side: int = MIN_SIDE,
                 max_side: int = MAX_SIDE) -> dict:
    """voc2012's arrays (pixels_, x_, y_, boxes_, labels_, difficult_ per split) at the given scale."""
    from PIL import Image  # only preparation needs Pillow

    arrays = {}
    for part, ids in SPLIT.items():
        images = [photo(paths, image_id) for image_id in ids]
        for image_id, data in zip(ids, images, strict=True):
            with Image.open(data) as image:
                check_annotation(annotation(image_id), image.size)
        arrays.update(voc.pack_split(images, [annotation(i) for i in ids], part, work, min_side, max_side))
    return arrays


def build(paths: dict[str, Path], work: Path) -> Built:
    return Built(arrays=build_arrays(paths, work),
                 meta=voc.detection_meta(PHOTO_BOXES.info, SPLIT, "test", MIN_SIDE, MAX_SIDE))


PHOTO_BOXES = Source(
    info={
        "name": "photo-boxes", "task": "detection",
        "description": (
            "Six real photographs with boxes drawn by hand for dlbench in PASCAL VOC's 20 classes (conventional "
            "order): astronaut (person), chelsea (cat), camera (person), motorcycle_left and motorcycle_right "
            "(a stereo pair: motorbike, bottle, and a bicycle behind a bench marked difficult), grace_hopper "
            "(person); 11 boxes. Fixed split: train = astronaut, chelsea, motorcycle_left, grace_hopper; "
            "test = camera, motorcycle_right (the other view of a train photo, so not independent of train). "
            "Each photo is decoded to RGB (camera's grey repeated) and resized (Pillow bilinear) so its short "
            f"side is {MIN_SIDE} pixels unless the long side would pass {MAX_SIDE}. Arrays as voc2012's: "
            "pixels_<s> uint8, all images' HWC pixels concatenated; x_<s> int64 (N, 5) = offset into pixels, "
            "height, width, original height, original width; y_<s> int64 (N, 2) = first box, number of boxes; "
            "boxes_<s> float32 (M, 4) = x1, y1, x2, y2 in the resized image's continuous pixel coordinates "
            "(the XML's xmin - 1, ymin - 1, xmax, ymax, times the scale); labels_<s> int32 (M,); "
            "difficult_<s> uint8 (M,). "
            "A small offline stand-in for quick runs of a VOC detection workload: this is NOT PASCAL VOC, and "
            "its mAP is not comparable with VOC's."
        ),
        "source": SOURCE, "licence": LICENCE,
    },
    files=(WHEEL, MPL_WHEEL), build=build,
    targets={"frcnn-voc": StandInTarget(0.10, (
        "a third of the study's 0.3, which the quick suite's 30 epochs reach: in make run's store the "
        "reference passed it at epoch 28 and 8 of 9 frameworks by epoch 30; the mAP of 2 test photographs "
        "jumps from epoch to epoch, so a time to it is rough"))},
)
