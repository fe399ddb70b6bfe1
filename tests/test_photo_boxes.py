"""photo-boxes: the hand-drawn VOC-style annotations stored in the package, and their preparation from
fixture wheels (scikit-learn's two photos resized to each annotation's size; nothing is downloaded)."""

import json
import shutil
import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest
from fixtures_data import photo_boxes_files, prepared_standin

from dlbench.harness import data
from dlbench.harness.data import DatasetError, photo_boxes, voc
from dlbench.harness.plan.workloads import get_workload
from dlbench.shared.detection import pipeline
from dlbench.shared.detection.boxes import encode
from dlbench.shared.detection.pipeline import DetectionSplit

# (width, height) of each photograph as scikit-image's and matplotlib's notes give it
PHOTO_SIZES = {"astronaut": (512, 512), "chelsea": (451, 300), "camera": (512, 512), "motorcycle_left": (741, 500),
               "motorcycle_right": (741, 500), "grace_hopper": (512, 600)}
OBJECTS = {"astronaut": ["person"], "chelsea": ["cat"], "camera": ["person"], "grace_hopper": ["person"],
           "motorcycle_left": ["motorbike", "bottle", "bicycle"],
           "motorcycle_right": ["motorbike", "bottle", "bicycle"]}
SCHEMA = ("filename", "size/width", "size/height", "size/depth", "segmented")
OBJECT_SCHEMA = ("name", "pose", "truncated", "difficult", "bndbox/xmin", "bndbox/ymin", "bndbox/xmax", "bndbox/ymax")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wheels")
    paths = {}
    for name, payload in photo_boxes_files().items():
        (folder / name).write_bytes(payload)
        paths[name] = folder / name
    return paths


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    ds = prepared_standin("photo-boxes", tmp_path_factory.mktemp("data"))
    return ds, {name: np.load(ds.path / f"{name}.npy") for name in data.prepared.array_names(ds.meta)}


def test_registered_as_a_detection_stand_in():
    assert "photo-boxes" in data.dataset_names()
    info = data.describe("photo-boxes")
    assert info["task"] == "detection" and "NOT PASCAL VOC" in info["description"]
    assert [spec.name for spec in data.files("photo-boxes")] == [photo_boxes.WHEEL.name, photo_boxes.MPL_WHEEL.name]
    assert photo_boxes.WHEEL is data.photos.WHEEL  # the photo sets' verified copy, not a second table
    assert (voc.MIN_SIDE, voc.MAX_SIDE) == (600, 1000)  # voc2012's scale is untouched


def test_split_covers_every_annotation_once():
    ids = [*photo_boxes.SPLIT["train"], *photo_boxes.SPLIT["test"]]
    assert sorted(ids) == sorted(photo_boxes.IMAGES)
    assert sorted(path.stem for path in photo_boxes.ANNOTATIONS.glob("*.xml")) == sorted(ids)
    assert (photo_boxes.ANNOTATIONS.parent / "LICENCE.md").is_file()


@pytest.mark.parametrize("image_id", sorted(PHOTO_SIZES))
def test_annotation_follows_voc_schema_and_its_boxes_lie_inside(image_id):
    path = photo_boxes.annotation(image_id)
    root = ElementTree.parse(path).getroot()
    assert root.tag == "annotation" and all(root.findtext(tag) for tag in SCHEMA)
    assert root.findtext("filename") == photo_boxes.IMAGES[image_id][1].rsplit("/", 1)[1]
    assert all(obj.findtext(tag) for obj in root.findall("object") for tag in OBJECT_SCHEMA)
    assert photo_boxes.annotated_size(path) == PHOTO_SIZES[image_id]
    boxes, labels, difficult = voc.parse_annotation(path)
    assert [voc.CLASSES[i] for i in labels] == OBJECTS[image_id]
    assert boxes.dtype == np.float32 and labels.dtype == np.int32 and difficult.dtype == np.uint8
    width, height = PHOTO_SIZES[image_id]
    assert (boxes[:, :2] >= 0).all() and (boxes[:, 2] <= width).all() and (boxes[:, 3] <= height).all()
    assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()  # positive area
    photo_boxes.check_annotation(path, (width, height))
    # only the bicycle, cut by the edge and behind a bench, is difficult
    assert [voc.CLASSES[i] for i in labels[difficult == 1]] == (["bicycle"] if "motorcycle" in image_id else [])


def test_prepared_arrays_have_voc2012s_layout(prepared):
    ds, a = prepared
    meta = ds.meta
    assert (meta["n_train"], meta["n_test"]) == (4, 2) and meta["num_classes"] == 20
    assert meta["class_names"] == voc.CLASSES and (meta["min_side"], meta["max_side"]) == (128, 213)
    assert meta["image_ids_train"] == ["astronaut", "chelsea", "motorcycle_left", "grace_hopper"]
    for part in ("train", "test"):
        x, y = a[f"x_{part}"], a[f"y_{part}"]
        ids = meta[f"image_ids_{part}"]
        assert x.dtype == y.dtype == np.int64 and x.shape == (len(ids), 5) and y.shape == (len(ids), 2)
        assert a[f"pixels_{part}"].dtype == np.uint8 and a[f"boxes_{part}"].dtype == np.float32
        assert a[f"labels_{part}"].dtype == np.int32 and a[f"difficult_{part}"].dtype == np.uint8
        assert len(a[f"pixels_{part}"]) == int((x[:, 1] * x[:, 2] * 3).sum())
        assert (x[:, 0] == np.concatenate([[0], np.cumsum(x[:, 1] * x[:, 2] * 3)[:-1]])).all()
        assert y[:, 1].tolist() == [len(OBJECTS[i]) for i in ids] and y[-1].sum() == len(a[f"labels_{part}"])
        for row, image_id in enumerate(ids):
            _, height, width, orig_h, orig_w = x[row]
            assert (orig_w, orig_h) == PHOTO_SIZES[image_id]
            assert min(height, width) == 128 or max(height, width) == 213
            first, count = y[row]
            assert [voc.CLASSES[i] for i in a[f"labels_{part}"][first:first + count]] == OBJECTS[image_id]
            boxes = a[f"boxes_{part}"][first:first + count]
            assert (boxes >= 0).all() and (boxes[:, 2] <= width).all() and (boxes[:, 3] <= height).all()
    assert meta["box_convention"] == "continuous"
    grace = a["x_train"][3]
    assert tuple(grace[1:3]) == (150, 128)  # 600x512 portrait: short side 128


def test_boxes_scale_with_the_image(wheels, tmp_path):
    (tmp_path / "small").mkdir()
    (tmp_path / "large").mkdir()
    small = photo_boxes.build_arrays(wheels, tmp_path / "small", 64, 107)
    large = photo_boxes.build_arrays(wheels, tmp_path / "large", 256, 427)
    for part, ids in photo_boxes.SPLIT.items():
        for row, image_id in enumerate(ids):
            raw, _, _ = voc.parse_annotation(photo_boxes.annotation(image_id))
            first, count = small[f"y_{part}"][row]
            for arrays, (min_side, max_side) in ((small, (64, 107)), (large, (256, 427))):
                scale, width, height = voc.scaled_size(*PHOTO_SIZES[image_id], min_side, max_side)
                assert tuple(arrays[f"x_{part}"][row][1:3]) == (height, width)
                assert np.allclose(arrays[f"boxes_{part}"][first:first + count], raw * np.float32(scale))
            small_boxes, large_boxes = (arrays[f"boxes_{part}"][first:first + count] for arrays in (small, large))
            nonzero = small_boxes > 0
            # the two scales are 4x apart, up to the rounding of the resized sizes
            assert np.allclose(large_boxes[nonzero] / small_boxes[nonzero], 4.0, rtol=0.02)


def test_voc_scale_is_unchanged_by_default():
    assert voc.scaled_size(500, 375) == (1.6, 800, 600)
    assert voc.scaled_size(500, 375, 128, 213) == pytest.approx((128 / 375, 171, 128))


@pytest.fixture
def edited(monkeypatch, tmp_path):
    folder = tmp_path / "Annotations"
    shutil.copytree(photo_boxes.ANNOTATIONS, folder)
    monkeypatch.setattr(photo_boxes, "ANNOTATIONS", folder)
    return folder


def test_a_malformed_annotation_is_named(edited, wheels, tmp_path):
    path = edited / "chelsea.xml"
    path.write_text(path.read_text().replace("</annotation>", ""))
    with pytest.raises(DatasetError, match=f"{path}: no readable <size>"):
        photo_boxes.build_arrays(wheels, tmp_path)
    with pytest.raises(DatasetError, match=f"{path}: not a VOC annotation"):
        voc.parse_annotation(path)


def test_an_unknown_class_is_named(edited, wheels, tmp_path):
    path = edited / "astronaut.xml"
    path.write_text(path.read_text().replace("<name>person</name>", "<name>astronaut</name>"))
    with pytest.raises(DatasetError, match=f"{path}: not a VOC annotation"):
        photo_boxes.build_arrays(wheels, tmp_path)


def test_a_box_outside_its_photo_is_named(edited, wheels, tmp_path):
    path = edited / "camera.xml"
    path.write_text(path.read_text().replace("<xmax>331</xmax>", "<xmax>513</xmax>"))
    with pytest.raises(DatasetError, match=rf"{path}: box \(1, 64, 513, 512\) is empty or outside the 512x512"):
        photo_boxes.build_arrays(wheels, tmp_path)


def test_a_photo_of_another_size_is_named(edited, wheels, tmp_path):
    path = edited / "grace_hopper.xml"
    path.write_text(path.read_text().replace("<height>600</height>", "<height>601</height>"))
    with pytest.raises(DatasetError, match=f"{path}: size 512x601, but the photo is 512x600"):
        photo_boxes.build_arrays(wheels, tmp_path)


class Draw:
    """A stand-in for an image's RandomState whose first draw decides the flip."""

    def __init__(self, value):
        self.value = value

    def rand(self):
        return self.value


def test_boxes_cover_their_pixels_flipped_or_not(tmp_path):
    # an 80x50 photo, black but for one white object whose VOC box is xmin 11, ymin 6, xmax 30, ymax 15:
    # 1-based pixels, both ends included, so 0-based columns 10..29 and rows 5..14
    from PIL import Image

    pixels = np.zeros((50, 80, 3), np.uint8)
    pixels[5:15, 10:30] = 255
    Image.fromarray(pixels).save(tmp_path / "photo.png")
    xml = (tmp_path / "photo.xml")
    xml.write_text("<annotation><size><width>80</width><height>50</height><depth>3</depth></size><object>"
                   "<name>cat</name><difficult>0</difficult><bndbox><xmin>11</xmin><ymin>6</ymin><xmax>30</xmax>"
                   "<ymax>15</ymax></bndbox></object></annotation>")
    boxes, _, _ = voc.parse_annotation(xml)
    assert boxes.tolist() == [[10, 5, 30, 15]]  # continuous: 20 wide and 10 high, as the devkit counts them
    (tmp_path / "work").mkdir()
    (tmp_path / "prepared").mkdir()
    arrays = voc.pack_split([tmp_path / "photo.png"], [xml], "train", tmp_path / "work", 50, 80)  # scale 1
    for name, array in arrays.items():
        np.save(tmp_path / "prepared" / f"{name}.npy", array)
    split = DetectionSplit.load(str(tmp_path / "prepared"), "train")
    model = get_workload("frcnn-voc").model({"min_side": 64, "max_side": 96, "num_classes": 20})
    unflipped, flipped = (pipeline.training_image(split, 0, model, 255.0, Draw(draw)) for draw in (0.9, 0.1))
    for image in (unflipped, flipped):  # the box spans exactly the white pixels, in either orientation
        rows, cols = np.nonzero(image.x[0, :, :, 0])
        assert image.boxes.tolist() == [[cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]]
    assert flipped.boxes.tolist() == [[50, 5, 70, 15]]  # x -> 80 - x
    np.testing.assert_array_equal(flipped.x[0, :50, :80], unflipped.x[0, :50, ::-1][:, -80:])
    # flipping twice gives the original boxes
    twice = flip_boxes(flip_boxes(unflipped.boxes, 80), 80)
    assert twice.tolist() == unflipped.boxes.tolist()
    # a flipped target is the mirrored unflipped one: the anchor's regression target onto the box
    # changes the sign of dx alone
    anchor = np.array([[4, 2, 36, 18]], np.float32)
    straight = encode(anchor, unflipped.boxes)
    mirrored = encode(flip_boxes(anchor, 80), flipped.boxes)
    np.testing.assert_allclose(mirrored, straight * np.array([-1, 1, 1, 1], np.float32), atol=1e-6)


def flip_boxes(boxes, width):
    """The left-right flip of pipeline.training_image: x -> width - x."""
    return np.stack([width - boxes[:, 2], boxes[:, 1], width - boxes[:, 0], boxes[:, 3]], axis=1)


def test_a_detection_set_prepared_with_the_old_box_convention_is_refused(prepared, tmp_path):
    ds, _ = prepared
    old = tmp_path / "photo-boxes"
    shutil.copytree(ds.path, old)
    meta = json.loads((old / "meta.json").read_text())
    del meta["box_convention"]  # as dlbench wrote it while boxes ended a pixel short
    (old / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match=f"{old}: box_convention None in meta.json, but dlbench reads "
                                           "'continuous' boxes"):
        data.prepared.load_prepared(old)
