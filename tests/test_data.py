"""Tests of the offline quick datasets: layout, values, hashing, idempotence and atomic writes."""

from __future__ import annotations

import importlib.util
import json
import socket

import numpy as np
import pytest

import dlbench.harness.data as data
from dlbench.harness.data import DatasetError, dataset_names, describe, load_prepared, prepare
from dlbench.harness.data import prepared as prepared_module
from dlbench.harness.data import text as text_module

NAMES = ["digits-28", "lee-news-lm", "pang-lee-polarity"]
COMMON_META = [
    "name",
    "task",
    "description",
    "source",
    "licence",
    "n_train",
    "n_test",
    "input_shape",
    "input_dtype",
    "input_scale",
    "hash",
]


@pytest.fixture(scope="module", autouse=True)
def no_network():
    """Preparation must work offline: any connection attempt fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("dataset preparation tried to use the network")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", refuse)
        yield


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, no_network):
    root = tmp_path_factory.mktemp("data")
    return {name: prepare(name, root) for name in NAMES}


def arrays(ds):
    return {name: np.load(ds.path / f"{name}.npy") for name in prepared_module.ARRAY_NAMES}


def vocab(ds):
    return json.loads((ds.path / "vocab.json").read_text(encoding="utf-8"))


def test_names_and_descriptions():
    assert set(NAMES) <= set(dataset_names())
    for name in NAMES:
        info = describe(name)
        assert set(info) == {"name", "task", "description", "source", "licence"}
        assert "NOT" in info["description"]


@pytest.mark.parametrize("name", NAMES)
def test_meta_fields(prepared, name):
    ds = prepared[name]
    on_disk = json.loads((ds.path / "meta.json").read_text(encoding="utf-8"))
    assert on_disk == ds.meta
    assert all(key in ds.meta for key in COMMON_META)
    assert ds.name == ds.meta["name"] == name
    assert ds.hash == ds.meta["hash"] and len(ds.hash) == 64
    a = arrays(ds)
    assert a["x_train"].shape == (ds.meta["n_train"], *ds.meta["input_shape"])
    assert a["x_test"].shape == (ds.meta["n_test"], *ds.meta["input_shape"])
    assert str(a["x_train"].dtype) == ds.meta["input_dtype"]


def test_digits(prepared):
    ds = prepared["digits-28"]
    a = arrays(ds)
    assert ds.meta["n_train"] + ds.meta["n_test"] == 1797
    assert ds.meta["num_classes"] == 10 and ds.meta["class_names"] == [str(d) for d in range(10)]
    assert ds.meta["input_scale"] == 255.0
    for split in ("train", "test"):
        x, y = a[f"x_{split}"], a[f"y_{split}"]
        assert x.dtype == np.uint8 and x.shape[1:] == (28, 28, 1)
        assert y.dtype == np.int32 and y.shape == (len(x),)
        assert set(np.unique(y)) == set(range(10))
        assert x.max() == 255  # full 0..255 range is used
        # The 2-pixel frame is background, as in MNIST.
        assert not x[:, :2].any() and not x[:, -2:].any()
        assert not x[:, :, :2].any() and not x[:, :, -2:].any()


def test_polarity(prepared):
    ds = prepared["pang-lee-polarity"]
    meta, a, words = ds.meta, arrays(ds), vocab(ds)
    assert meta["task"] == "binary" and meta["num_classes"] == 2
    assert meta["n_train"] + meta["n_test"] == 200
    assert meta["input_scale"] is None
    assert len(words) == meta["vocab_size"] <= 3 + 5000
    assert words[:3] == ["<pad>", "<start>", "<oov>"]
    for split in ("train", "test"):
        x, y = a[f"x_{split}"], a[f"y_{split}"]
        assert x.dtype == np.int32 and x.shape[1:] == (50,)
        assert x.min() >= 0 and x.max() < meta["vocab_size"]
        assert y.dtype == np.int32 and set(np.unique(y)) == {0, 1}
        assert abs(int(y.sum()) - int((y == 0).sum())) <= 2
        # padding='pre': once a row's real tokens start, no padding follows.
        started = np.maximum.accumulate(x != meta["pad_id"], axis=1)
        assert not (started & (x == meta["pad_id"])).any()
        assert (x[:, -1] != meta["pad_id"]).all()
    # The vocabulary comes from train only, so unseen test words map to <oov>.
    assert (a["x_test"] == meta["oov_id"]).any()


def test_language_model(prepared):
    ds = prepared["lee-news-lm"]
    meta, a, words = ds.meta, arrays(ds), vocab(ds)
    assert meta["task"] == "language_model"
    assert len(words) == meta["vocab_size"] == 2000
    assert words[meta["unk_id"]] == "<unk>" and words[meta["eos_id"]] == "<eos>"
    assert meta["n_train_articles"] == 255 and meta["n_test_articles"] == 45
    for split in ("train", "test"):
        x, y = a[f"x_{split}"], a[f"y_{split}"]
        assert x.dtype == y.dtype == np.int32
        assert x.shape == y.shape and x.shape[1:] == (30,)
        assert x.min() >= 0 and x.max() < meta["vocab_size"]
        assert (y[:, :-1] == x[:, 1:]).all()
        # stride == seq_len: consecutive windows continue the same token stream.
        assert (y[:-1, -1] == x[1:, 0]).all()


@pytest.mark.parametrize("name", NAMES)
def test_hash_reproducible_across_folders(prepared, tmp_path, name):
    again = prepare(name, tmp_path)
    assert again.path != prepared[name].path
    assert again.hash == prepared[name].hash
    assert again.meta == prepared[name].meta


def test_second_prepare_does_not_rebuild(tmp_path, monkeypatch):
    first = prepare("pang-lee-polarity", tmp_path)
    mtime = (first.path / "x_train.npy").stat().st_mtime_ns

    def fail():
        raise AssertionError("rebuilt a dataset that was already prepared")

    monkeypatch.setattr(data.polarity, "build", fail)
    second = prepare("pang-lee-polarity", tmp_path)
    assert second == first
    assert (second.path / "x_train.npy").stat().st_mtime_ns == mtime


def test_interrupted_preparation_leaves_nothing(tmp_path, monkeypatch):
    real_write = prepared_module.write_array
    calls = []

    def write_then_die(path, array):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated interruption")
        real_write(path, array)

    monkeypatch.setattr(prepared_module, "write_array", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        prepare("lee-news-lm", tmp_path)
    assert list((tmp_path / "prepared").iterdir()) == []  # neither the dataset nor a temp folder

    monkeypatch.setattr(prepared_module, "write_array", real_write)
    ds = prepare("lee-news-lm", tmp_path)
    assert load_prepared(ds.path).hash == ds.hash


def test_invalid_prepared_folder_is_rebuilt(tmp_path):
    ds = prepare("pang-lee-polarity", tmp_path)
    np.save(ds.path / "y_test.npy", np.zeros(40, dtype=np.int32))
    with pytest.raises(DatasetError, match="hash"):
        load_prepared(ds.path)
    assert prepare("pang-lee-polarity", tmp_path).hash == ds.hash


def test_edited_vocab_is_detected(tmp_path):
    ds = prepare("pang-lee-polarity", tmp_path)
    (ds.path / "vocab.json").write_text("[]", encoding="utf-8")
    with pytest.raises(DatasetError, match="vocab.json"):
        load_prepared(ds.path)


def test_unknown_name_lists_known_names(tmp_path):
    for call in (lambda: prepare("emnist", tmp_path), lambda: describe("emnist")):
        with pytest.raises(DatasetError) as excinfo:
            call()
        assert "emnist" in str(excinfo.value)
        assert all(name in str(excinfo.value) for name in NAMES)


@pytest.mark.parametrize("content", [None, "{not json", "[]", '{"name": "x"}'])
def test_bad_meta_names_the_file(tmp_path, content):
    if content is not None:
        (tmp_path / "meta.json").write_text(content, encoding="utf-8")
    with pytest.raises(DatasetError, match="meta.json"):
        load_prepared(tmp_path)


def test_missing_gensim_names_the_package(tmp_path, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        text_module.importlib.util,
        "find_spec",
        lambda name, *args: None if name == "gensim" else real_find_spec(name, *args),
    )
    with pytest.raises(DatasetError, match="gensim"):
        prepare("pang-lee-polarity", tmp_path)
    assert not (tmp_path / "prepared" / "pang-lee-polarity").exists()
