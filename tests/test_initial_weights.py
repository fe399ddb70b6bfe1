"""Starting weights from a file (a suite entry's `weights:`): the suite field, the checks of the file
against the model, the cell's configuration, and a real PyTorch run that starts from the file."""
import contextlib
import io
import json
import re
import resource
import sys
import zipfile
from pathlib import Path

import guard
import numpy as np
import pytest
from numpy.lib import format as npy_format

from dlbench.harness import data
from dlbench.harness.cli import main
from dlbench.harness.plan import initial_weights, suite
from dlbench.harness.plan.initial_weights import WeightsError
from dlbench.harness.plan.suite import SuiteError
from dlbench.harness.plan.workloads import get_workload
from dlbench.harness.run import cell_config
from dlbench.harness.store import Store
from dlbench.shared.initializers import canonical_init

MNIST_META = {"task": "classification", "input_shape": [28, 28, 1], "num_classes": 10}


def suite_file(folder: Path, weights: str | None, epochs: int = 1) -> Path:
    entry = {"workload": "cnn-mnist", "dataset": "digits-28", "epochs": epochs}
    if weights is not None:
        entry["weights"] = weights
    path = folder / "start.yaml"
    # one thread a cell, as in test_e2e: beside the other pytest worker, more threads fight for its core
    path.write_text(json.dumps({"name": "start", "frameworks": ["pytorch"], "threads": 1, "workloads": [entry]}))
    return path


def saved(folder: Path, weights: dict, name: str = "weights.npz") -> Path:
    np.savez(folder / name, **weights)
    return folder / name


def test_a_suite_entrys_weights_are_found_beside_the_suite_file(tmp_path):
    saved(tmp_path, canonical_init(get_workload("cnn-mnist").model(MNIST_META), 0))
    [cell] = suite.plan(suite.parse(suite_file(tmp_path, "weights.npz")))
    assert cell.weights == str(tmp_path / "weights.npz")
    [plain] = suite.plan(suite.parse(suite_file(tmp_path, None)))
    assert plain.weights is None


def test_a_missing_weights_file_is_refused_with_its_line(tmp_path):
    with pytest.raises(SuiteError, match=r"start.yaml:1: field 'weights': no file .*nothere.npz"):
        suite.parse(suite_file(tmp_path, "nothere.npz"))


@pytest.mark.parametrize("change, message", [
    (lambda w: w.pop("dense_2/bias"), r"lacks 1 of cnn-mnist's 8 weights, first 'dense_2/bias' of shape \(10,\)"),
    (lambda w: w.update(extra=np.zeros(3)), r"'extra' is not a weight of cnn-mnist"),
    (lambda w: w.update({"conv2d_1/kernel": np.zeros((3, 3, 32, 1))}), r"'conv2d_1/kernel' has shape \(3, 3, 32, 1\); "
                                                                       r"cnn-mnist needs \(3, 3, 1, 32\)"),
    (lambda w: w.update({"dense_1/bias": np.zeros(128, np.int32)}), r"'dense_1/bias' must hold finite floats"),
    (lambda w: w["dense_1/bias"].__setitem__(0, np.nan), r"'dense_1/bias' must hold finite floats .*NaN"),
])
def test_a_weights_file_that_does_not_fit_the_model_is_refused_naming_the_weight(tmp_path, change, message):
    model = get_workload("cnn-mnist").model(MNIST_META)
    weights = canonical_init(model, 0)
    change(weights)
    path = saved(tmp_path, weights)
    with pytest.raises(WeightsError, match=message):
        initial_weights.check(path, model, "cnn-mnist")


def test_a_file_that_is_not_an_npz_is_refused(tmp_path):
    (tmp_path / "weights.npz").write_text("not a zip")
    with pytest.raises(WeightsError, match=r"not an .npz \(zip\) file; expected an .npz as numpy.savez"):
        initial_weights.check(tmp_path / "weights.npz", get_workload("cnn-mnist").model(MNIST_META), "cnn-mnist")


# ---- files that are not what they claim, through `dlbench run` (exit 2, before any cell runs) ------------

ACCEPTED = "expected an .npz as numpy.savez or numpy.savez_compressed writes it, one '<weight>.npy' member per weight"


@pytest.fixture(scope="module")
def prepared_data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    data.prepare("digits-28", folder)
    return folder


@contextlib.contextmanager
def address_space_capped(extra_bytes: int = 1 << 30):
    """This process may map at most `extra_bytes` more while inside (a soft RLIMIT_AS, restored after): a
    check that allocated what a file's header claims would fail the test with MemoryError instead of taking
    the machine's memory."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    in_use = int(re.search(r"VmSize:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024
    cap = in_use + extra_bytes if hard == resource.RLIM_INFINITY else min(in_use + extra_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def run_refused(capsys, folder: Path, weights: Path, data_dir: Path) -> str:
    """`dlbench run` of a suite that starts cnn-mnist from `weights`: exit 2 and the message, before any cell.
    The suite's timeout of 5 s bounds the cell that would run if the file were let through."""
    entry = {"workload": "cnn-mnist", "dataset": "digits-28", "epochs": 1, "weights": weights.name}
    path = folder / "start.yaml"
    path.write_text(json.dumps({"name": "start", "frameworks": ["pytorch"], "threads": 1, "timeout_s": 5,
                                "workloads": [entry]}))
    code = main(["run", str(path), "--results", str(folder / "results"), "--data-dir", str(data_dir)])
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.err.startswith("dlbench: error: "), captured.err
    return captured.err.removeprefix("dlbench: error: ").strip()


def with_member(path: Path, name: str, header: dict, data: bytes = b"") -> Path:
    """Adds a member of that name holding an .npy header (numpy's own writer) and `data` after it."""
    written = io.BytesIO()
    npy_format.write_array_header_1_0(written, header)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(name, written.getvalue() + data)
    return path


def canonical_file(folder: Path, change=lambda weights: None) -> Path:
    weights = canonical_init(get_workload("cnn-mnist").model(MNIST_META), 0)
    change(weights)
    return saved(folder, weights)


@pytest.mark.framework
def test_an_empty_weights_file_is_not_an_npz(capsys, tmp_path, prepared_data):
    (tmp_path / "weights.npz").write_bytes(b"")  # numpy.load raised EOFError: a traceback
    assert run_refused(capsys, tmp_path, tmp_path / "weights.npz", prepared_data) == (
        f"{tmp_path / 'weights.npz'}: not an .npz (zip) file; {ACCEPTED}")


@pytest.mark.framework
def test_a_weights_file_that_is_not_a_zip_says_so_and_never_suggests_unpickling(capsys, tmp_path, prepared_data):
    # numpy.load took it for a pickle and advised loading it "unsafely using the allow_pickle= keyword"
    (tmp_path / "weights.npz").write_text("these are not weights\n")
    message = run_refused(capsys, tmp_path, tmp_path / "weights.npz", prepared_data)
    assert message == f"{tmp_path / 'weights.npz'}: not an .npz (zip) file; {ACCEPTED}"


HUGE = {"descr": "<f4", "fortran_order": False, "shape": (10**10,)}  # 37 GiB of float32, in a header of 128 bytes


@pytest.mark.framework
def test_an_extra_member_whose_header_claims_37_gib_is_refused_by_its_name(capsys, tmp_path, prepared_data):
    weights = with_member(canonical_file(tmp_path), "extra.npy", HUGE, b"\0" * 64)
    with address_space_capped():  # numpy.load allocated 37 GiB for it
        message = run_refused(capsys, tmp_path, weights, prepared_data)
    assert message.startswith(f"{weights}: 'extra' is not a weight of cnn-mnist; its weights: conv2d_1/kernel, ")


@pytest.mark.framework
def test_a_weight_whose_header_claims_37_gib_is_refused_by_its_shape_before_its_data_is_read(
        capsys, tmp_path, prepared_data):
    weights = with_member(canonical_file(tmp_path, lambda w: w.pop("dense_2/bias")), "dense_2/bias.npy", HUGE)
    with address_space_capped():
        message = run_refused(capsys, tmp_path, weights, prepared_data)
    assert message == f"{weights}: 'dense_2/bias' has shape (10000000000,); cnn-mnist needs (10,)"


def test_a_pickled_object_array_is_refused_by_its_header_and_never_unpickled(tmp_path):
    objects = np.empty(10, dtype=object)  # numpy.savez pickles it
    weights = canonical_file(tmp_path, lambda w: w.update({"dense_2/bias": objects}))
    with pytest.raises(WeightsError, match=r"^.*'dense_2/bias' must hold finite floats \(found object\)$"):
        initial_weights.check(weights, get_workload("cnn-mnist").model(MNIST_META), "cnn-mnist")


@pytest.mark.parametrize(("name", "header", "content", "message"), [
    ("notes.txt", None, b"hello", r"its member 'notes.txt' is not an array \(.npy\)"),
    ("dense_2/bias.npy", None, b"not an array", r"'dense_2/bias' is not a readable .npy array \(the magic string"),
    ("dense_2/bias.npy", {"descr": "<f4", "fortran_order": False, "shape": (10,)}, b"\0" * 12,
     r"'dense_2/bias' declares shape \(10,\) of float32 \(40 bytes\) but holds 12 bytes of data: truncated, or "
     r"not what its header says; expected "),
])
def test_members_that_are_not_whole_arrays_are_refused(tmp_path, name, header, content, message):
    weights = canonical_file(tmp_path, lambda w: w.pop("dense_2/bias"))
    if header:
        with_member(weights, name, header, content)
    else:
        with zipfile.ZipFile(weights, "a") as archive:
            archive.writestr(name, content)
    with pytest.raises(WeightsError, match=message):
        initial_weights.check(weights, get_workload("cnn-mnist").model(MNIST_META), "cnn-mnist")


def test_a_zip_that_zipfile_cannot_read_is_refused(tmp_path):
    weights = canonical_file(tmp_path)
    content = bytearray(weights.read_bytes())
    directory = content.index(b"PK\x01\x02")  # the first member's entry in the zip's central directory
    content[directory + 6:directory + 8] = (182).to_bytes(2, "little")  # "needs zip version 18.2 to extract"
    weights.write_bytes(bytes(content))
    with pytest.raises(WeightsError, match=r"weights.npz: not a readable .npz \(zip file version 18.2\); expected "):
        initial_weights.check(weights, get_workload("cnn-mnist").model(MNIST_META), "cnn-mnist")


@pytest.mark.framework
def test_the_files_digest_enters_the_configuration_and_the_hash(tmp_path):
    data_dir = tmp_path / "data"
    saved(tmp_path, canonical_init(get_workload("cnn-mnist").model(MNIST_META), 0))
    [with_file] = suite.plan(suite.parse(suite_file(tmp_path, "weights.npz")))
    [plain] = suite.plan(suite.parse(suite_file(tmp_path, None)))
    resolved = cell_config.resolve(with_file, data_dir)
    assert resolved.config["initial_weights"] == {"file": with_file.weights,
                                                  "sha256": initial_weights.digest(tmp_path / "weights.npz")}
    assert "initial_weights" not in cell_config.resolve(plain, data_dir).config
    assert resolved.hash != cell_config.resolve(plain, data_dir).hash


def run(suite_path: Path, results: Path, data_dir: Path) -> dict:
    done = guard.run([sys.executable, "-m", "dlbench", "run", str(suite_path), "--results", str(results),
                      "--data-dir", str(data_dir)], 1200)
    assert done.returncode == 0, done.stdout + done.stderr
    with Store(results / "dlbench.sqlite") as store:
        return store.runs()[-1]


@pytest.mark.framework
def test_a_run_starts_from_the_file(tmp_path):
    """The canonical weights written to a file train exactly as the canonical start does; all-zero
    weights leave only the last bias able to learn, so the test accuracy is at most the commonest
    class's share."""
    model = get_workload("cnn-mnist").model(MNIST_META)
    results, data_dir = tmp_path / "results", tmp_path / "data"
    canonical = run(suite_file(tmp_path, None), results, data_dir)
    saved(tmp_path, canonical_init(model, 0), "same.npz")
    same = run(suite_file(tmp_path, "same.npz"), results, data_dir)
    assert same["config"]["initial_weights"]["file"] == str(tmp_path / "same.npz")
    assert [e["train_loss"] for e in same["epochs"]] == [e["train_loss"] for e in canonical["epochs"]]
    assert same["metric_value"] == canonical["metric_value"]
    saved(tmp_path, {key: np.zeros_like(value) for key, value in canonical_init(model, 0).items()}, "zeros.npz")
    zeros = run(suite_file(tmp_path, "zeros.npz"), results, data_dir)
    labels = np.load(data_dir / "prepared" / "digits-28" / "y_test.npy")
    commonest = np.bincount(labels).max() / len(labels)
    assert zeros["metric_value"] <= commonest < canonical["metric_value"]
