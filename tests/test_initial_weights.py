"""Starting weights from a file (a suite entry's `weights:`): the suite field, the checks of the file
against the model, the cell's configuration, and a real PyTorch run that starts from the file."""
import json
import sys
from pathlib import Path

import guard
import numpy as np
import pytest

from dlbench.harness.plan import initial_weights, suite
from dlbench.harness.plan.initial_weights import WeightsError
from dlbench.harness.plan.suite import SuiteError
from dlbench.harness.plan.workloads import get_workload
from dlbench.harness.run import cell_config
from dlbench.harness.store import Store
from dlbench.shared.init import canonical_init

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
    with pytest.raises(WeightsError, match="not a readable .npz"):
        initial_weights.check(tmp_path / "weights.npz", get_workload("cnn-mnist").model(MNIST_META), "cnn-mnist")


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
