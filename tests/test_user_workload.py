"""A suite entry's own workload (a Python file declaring a dlbench.user.Workload) on its own dataset (an .npz or
a folder of .npy files): checked when the suite is loaded, prepared into the data cache by content hash, its
file's SHA-256 in the cell's configuration, and run end to end (fake framework, then one PyTorch cell)."""
import io
import os
import sys
import zipfile
from pathlib import Path

import fake_dlbench
import guard
import numpy as np
import pytest
from numpy.lib import format as npy_format
from test_initial_weights import address_space_capped
from user_errors import error_of

from dlbench.harness import cli, data
from dlbench.harness.data import npy_files
from dlbench.harness.data import user as user_data
from dlbench.harness.environments import envs
from dlbench.harness.plan import suite, user_workload, workloads
from dlbench.harness.run import cell_config, results_folder
from dlbench.harness.store import Store

MODEL = '''from dlbench import ir, user


def model(meta):
    return ir.model(meta["input_shape"], "float32", [
        ir.conv2d(4, kernel=3, padding="same"), ir.relu(), ir.flatten(), ir.dense(meta["num_classes"])])


WORKLOAD = user.Workload(name="mine", description="one conv, one dense", model=model,
                         optimizer={"name": "sgd", "lr": 0.1, "momentum": 0.0, "nesterov": False,
                                    "weight_decay": 0.0},
                         loss="softmax_cross_entropy", batch_size=8, epochs=2, metric="accuracy", target=0.5)
'''
TEXT_MODEL = '''from dlbench import ir, user


def model(meta):
    return ir.model(meta["input_shape"], "int32", [ir.embedding(10, 4), ir.lstm(3), ir.dense(1)])


WORKLOAD = user.Workload(description="a tiny LSTM", model=model, task="binary",
                         optimizer={"name": "adam", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7},
                         loss="sigmoid_cross_entropy", batch_size=4, epochs=1, metric="accuracy", target=0.6)
'''


@pytest.fixture(autouse=True)
def fresh_registries(user_registries):
    """Each test registers users' workloads and datasets in this process; none outlives it."""


def images(n_train: int = 24, n_test: int = 8, classes: int = 3, side: int = 6) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(0)
    return {"x_train": rng.randint(0, 256, (n_train, side, side, 1)).astype(np.uint8),
            "y_train": rng.randint(0, classes, n_train), "x_test": rng.randint(0, 256, (n_test, side, side, 1))
            .astype(np.uint8), "y_test": rng.randint(0, classes, n_test)}


def write(folder: Path, arrays: dict | None = None, model: str = MODEL, dataset: str = "data.npz",
          fields: str = "task: classification", frameworks: str = "[fakefw]") -> Path:
    """A workload file, an .npz (unless `dataset` is a folder written by the test) and a suite naming both."""
    (folder / "mine.py").write_text(model)
    if dataset.endswith(".npz"):
        np.savez(folder / dataset, **(images() if arrays is None else arrays))
    path = folder / "suite.yaml"
    path.write_text(f"name: mine\nframeworks: {frameworks}\nthreads: 1\nworkloads:\n"
                    f"  - workload: mine.py\n    dataset: {{path: {dataset}, {fields}}}\n")
    return path


def refused(path: Path, *expected: str) -> str:
    with pytest.raises(suite.SuiteError) as error:
        suite.load(str(path))
    for words in expected:
        assert words in str(error.value), str(error.value)
    return str(error.value)


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setitem(envs.RECIPES, "fakefw", fake_dlbench.RECIPE)


def test_a_valid_file_and_npz_load_plan_and_prepare_as_a_dataset(tmp_path, fake):
    path = write(tmp_path)
    loaded = suite.load(str(path))
    cells = suite.plan(loaded)
    assert [(c.workload, c.dataset, c.epochs, c.batch_size) for c in cells] == [("mine", "data", 2, 8)]
    fake_dlbench.make_environment(tmp_path / "home")
    os.environ["DLBENCH_HOME"] = str(tmp_path / "home")
    try:
        prepared = cell_config.resolve(cells[0], tmp_path / "cache")
    finally:
        del os.environ["DLBENCH_HOME"]
    meta = prepared.dataset.meta
    assert (meta["task"], meta["num_classes"], meta["input_shape"], meta["input_scale"]) == \
        ("classification", 3, [6, 6, 1], 255.0)
    assert prepared.dataset.path.name == f"data@{prepared.dataset.hash[:16]}"
    stored = np.load(prepared.dataset.path / "y_train.npy")
    assert stored.dtype == np.int32 and stored.tolist() == images()["y_train"].tolist()
    assert prepared.config["dataset_hash"] == prepared.dataset.hash
    assert prepared.config["workload_file"]["sha256"] == workloads.USER_FILES["mine"][1]
    assert prepared.config["model"]["layers"][-1]["units"] == 3
    assert prepared.config["recipe"]["optimizer"]["lr"] == 0.1


SCHEDULED = 'loss="softmax_cross_entropy", schedule={SCHEDULE}, '
WARMUP_COSINE = '{"name": "warmup_cosine", "warmup_fraction": 0.25, "total_steps": "auto", "final_lr_fraction": 0.1}'


def with_schedule(schedule: str) -> str:
    return MODEL.replace('loss="softmax_cross_entropy", ', SCHEDULED.format(SCHEDULE=schedule))


def test_a_schedule_reaches_the_cell_resolved_for_its_updates(tmp_path, fake, monkeypatch):
    """24 training samples in batches of 8 for 2 epochs: 6 updates, a quarter of them (1.5, rounded to 2) warm
    up; the worker sees numbers. A file without one trains at a constant rate."""
    fake_dlbench.make_environment(tmp_path / "home")
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))

    def recipe(model: str) -> dict:
        cells = suite.plan(suite.load(str(write(tmp_path, model=model))))
        return cell_config.resolve(cells[0], tmp_path / "cache").config["recipe"]

    assert recipe(with_schedule(WARMUP_COSINE))["schedule"] == {
        "name": "warmup_cosine", "warmup_steps": 2, "total_steps": 6, "final_lr_fraction": 0.1}
    assert "schedule" not in recipe(MODEL)


@pytest.mark.parametrize("schedule, words", [
    ('"warmup"', "schedule': expected a mapping with a 'name', got 'warmup'"),
    ('{"name": "cosine"}', "schedule 'cosine': unknown; known: warmup_cosine"),
    (WARMUP_COSINE.replace('"warmup_fraction": 0.25', '"warmup_steps": 6'),
     "total_steps: expected a whole number above warmup_steps (6), got 6"),
    (WARMUP_COSINE.replace("0.25", "1.5"), "schedule warmup_fraction 1.5; a number in [0, 1) is needed"),
    (WARMUP_COSINE.replace("0.1}", '0.1, "cycles": 2}'), "unknown setting(s) cycles"),
    (WARMUP_COSINE.replace('"auto"', "float('nan')"), "total_steps as a whole number above 0"),
])
def test_a_bad_schedule_is_refused_naming_the_file_and_the_setting(tmp_path, fake, schedule, words):
    message = refused(write(tmp_path, model=with_schedule(schedule)), "mine.py", words)
    assert '"warmup_fraction": 0.05 (or "warmup_steps": N)' in message  # what is accepted


VIT_MODEL = '''from dlbench import ir, user


def model(meta):
    return ir.model(meta["input_shape"], "float32", [
        ir.conv2d(8, kernel=2, stride=2), ir.to_sequence(), ir.positional_embedding(9),
        ir.residual([ir.layer_norm(), ir.attention(2, causal=False)]),
        ir.residual([ir.layer_norm(), ir.dense(16), ir.activation("gelu"), ir.dense(8)]),
        ir.sequence_mean(), ir.dense(meta["num_classes"])])


WORKLOAD = user.Workload(name="mine", description="a tiny ViT", model=model,
                         optimizer={"name": "adam", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7},
                         loss="softmax_cross_entropy", batch_size=8, epochs=1, metric="accuracy", target=0.5)
'''


def test_a_users_file_declares_a_transformer_with_the_public_ir(tmp_path, fake):
    """docs/ir.md's Transformer pieces, imported from `dlbench.ir` as a user's file imports them, plan a cell
    whose model holds them."""
    cells = suite.plan(suite.load(str(write(tmp_path, model=VIT_MODEL))))
    fake_dlbench.make_environment(tmp_path / "home")
    os.environ["DLBENCH_HOME"] = str(tmp_path / "home")
    try:
        layers = cell_config.resolve(cells[0], tmp_path / "cache").config["model"]["layers"]
    finally:
        del os.environ["DLBENCH_HOME"]
    assert [layer["type"] for layer in layers] == ["conv2d", "to_sequence", "positional_embedding", "residual",
                                                   "residual", "sequence_mean", "dense"]
    assert [layer["type"] for layer in layers[3]["layers"]] == ["layer_norm", "attention"]


def test_editing_the_file_or_the_data_changes_the_cell_hash(tmp_path, fake, monkeypatch):
    fake_dlbench.make_environment(tmp_path / "home")
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    path = write(tmp_path)

    def cell_hash() -> str:
        return cell_config.resolve(suite.plan(suite.load(str(path)))[0], tmp_path / "cache").hash

    first = cell_hash()
    assert cell_hash() == first
    (tmp_path / "mine.py").write_text(MODEL + "# a comment changes the file\n")
    edited = cell_hash()
    assert edited != first
    arrays = images()
    arrays["y_train"][0] = (arrays["y_train"][0] + 1) % 3
    np.savez(tmp_path / "data.npz", **arrays)
    assert cell_hash() not in (first, edited)


def test_a_folder_of_npy_files_prepares_as_the_npz_does(tmp_path, fake):
    npz = tmp_path / "a"
    npz.mkdir()
    from_npz = suite.load(str(write(npz)))
    hash_npz = data.user_dataset(from_npz.entries[0].dataset).hash
    fresh_registries_now()
    folder = tmp_path / "b"
    (folder / "data").mkdir(parents=True)
    for name, array in images().items():
        np.save(folder / "data" / f"{name}.npy", array)
    from_folder = suite.load(str(write(folder, dataset="data")))
    assert data.user_dataset(from_folder.entries[0].dataset).hash == hash_npz


def fresh_registries_now() -> None:
    workloads.USER_WORKLOADS.clear()
    workloads.USER_FILES.clear()
    for name in [name for name in data.dataset_names() if data.user_dataset(name)]:
        del data._DATASETS[name]


def test_a_workload_file_that_does_not_exist(tmp_path, fake):
    path = write(tmp_path)
    (tmp_path / "mine.py").unlink()
    refused(path, "suite.yaml:5: field 'workload'", "mine.py: no such file", "WORKLOAD")


def test_a_file_that_raises_names_its_exception_and_line(tmp_path, fake):
    path = write(tmp_path, model=MODEL.replace("def model", "1 / 0\n\n\ndef model"))
    refused(path, "mine.py:4: the workload file raised ZeroDivisionError: division by zero")


def test_a_syntax_error_names_its_line(tmp_path, fake):
    path = write(tmp_path, model="from dlbench import ir\nWORKLOAD = (\n")
    refused(path, "mine.py:2", "SyntaxError")


def test_an_unknown_layer_type_is_refused_naming_the_file(tmp_path, fake):
    path = write(tmp_path, model=MODEL.replace("ir.conv2d(4, kernel=3, padding=\"same\")", "ir.conv3d(4)"))
    refused(path, "suite.yaml:5: field 'workload'", "mine.py:6: the model raised AttributeError", "conv3d")
    path = write(tmp_path, model=MODEL.replace("ir.relu()", "{'type': 'swish'}"))
    refused(path, "mine.py", "unknown layer type 'swish'; known: conv2d")


def test_a_file_that_declares_nothing_or_the_wrong_type(tmp_path, fake):
    path = write(tmp_path, model="x = 1\n")
    refused(path, "mine.py: declares no WORKLOAD")
    path = write(tmp_path, model="WORKLOAD = {'model': None}\n")
    refused(path, "WORKLOAD is a dict; expected a dlbench.user.Workload")


def test_a_recipe_outside_what_the_adapters_build(tmp_path, fake):
    path = write(tmp_path, model=MODEL.replace('"momentum": 0.0, ', ""))
    refused(path, "optimizer sgd: missing momentum; it takes lr, momentum, nesterov, weight_decay")
    path = write(tmp_path, model=MODEL.replace('loss="softmax_cross_entropy"', 'loss="mse"'))
    refused(path, "loss 'mse' for a classification task; accepted: 'softmax_cross_entropy'")


def test_wrong_input_shapes_are_refused_naming_both(tmp_path, fake):
    path = write(tmp_path, model=MODEL.replace('meta["input_shape"]', "[8, 8, 1]"))
    refused(path, f"data.npz: the model of mine ({tmp_path / 'mine.py'}) takes input_shape [8, 8, 1], but x_train's "
            "samples are [6, 6, 1]")


def test_labels_out_of_range_for_the_output_units(tmp_path, fake):
    path = write(tmp_path, model=MODEL.replace('ir.dense(meta["num_classes"])', "ir.dense(2)"))
    refused(path, "array y_train holds label 2, out of range for the 2 output units of dense_1, the last layer of "
            f"the model of mine ({tmp_path / 'mine.py'}) (labels 0 to 1)")
    path = write(tmp_path, fields="task: classification, num_classes: 2")
    refused(path, "holds label 2, out of range for num_classes 2")


def test_input_and_label_dtypes(tmp_path, fake):
    arrays = images()
    arrays["y_train"] = arrays["y_train"].astype(np.float32)
    refused(write(tmp_path, arrays), "array y_train is float32; labels are integers")
    arrays = images()
    arrays["x_train"] = arrays["x_train"].astype(np.float64)
    refused(write(tmp_path, arrays), "array x_train is float64; accepted: uint8 or float32")


def test_a_missing_array_and_a_length_mismatch(tmp_path, fake):
    arrays = images()
    del arrays["y_test"]
    refused(write(tmp_path, arrays), "data.npz: missing array y_test; it holds x_train, y_train, x_test")
    arrays = images()
    arrays["y_train"] = arrays["y_train"][:-1]
    refused(write(tmp_path, arrays), "x_train holds 24 samples and y_train 23")


def test_a_pickled_object_array_is_refused(tmp_path, fake):
    arrays = images()
    arrays["y_test"] = np.array([1, "two", None], dtype=object)
    refused(write(tmp_path, arrays), "array y_test cannot be read without pickles")


def test_a_missing_npy_file_in_a_folder(tmp_path, fake):
    (tmp_path / "data").mkdir()
    for name, array in images().items():
        if name != "x_test":
            np.save(tmp_path / "data" / f"{name}.npy", array)
    refused(write(tmp_path, dataset="data"), "missing x_test.npy")


def test_a_dataset_that_does_not_exist(tmp_path, fake):
    path = write(tmp_path)
    (tmp_path / "data.npz").unlink()
    refused(path, "suite.yaml:6: field 'dataset'", "data.npz: no such file or folder")


def test_token_ids_beyond_the_embedding_vocabulary(tmp_path, fake):
    rng = np.random.RandomState(1)
    arrays = {"x_train": rng.randint(0, 10, (12, 5)), "y_train": rng.randint(0, 2, 12),
              "x_test": rng.randint(0, 10, (4, 5)), "y_test": rng.randint(0, 2, 4)}
    suite.load(str(write(tmp_path, arrays, TEXT_MODEL, fields="task: binary")))  # ids 0..9: accepted
    arrays["x_test"][2, 3] = 10
    refused(write(tmp_path, arrays, TEXT_MODEL, fields="task: binary"),
            "array x_test holds token id 10, beyond the vocabulary of embedding_1 (10 ids: 0 to 9)")


@pytest.mark.slow
def test_runs_end_to_end_through_the_fake_framework(tmp_path, monkeypatch):
    path = write(tmp_path)
    fake_dlbench.make_environment(tmp_path / "home")
    results = tmp_path / "results"
    done = guard.run([sys.executable, str(Path(fake_dlbench.__file__)), "run", str(path), "--results", str(results),
                      "--data-dir", str(tmp_path / "cache"), "--plain", "--no-live-report"], 120,
                     env=dict(os.environ, DLBENCH_HOME=str(tmp_path / "home")))
    assert done.returncode == 0, done.stdout + done.stderr
    with Store(results / "dlbench.sqlite") as store:
        runs = store.runs()
    assert [(run["workload"], run["dataset"], run["status"]) for run in runs] == [("mine", "data", "ok")]
    assert runs[0]["config"]["workload_file"]["file"] == str(tmp_path / "mine.py")


@pytest.mark.framework
def test_one_pytorch_cell_trains_on_a_users_data(tmp_path):
    """With the file's learning-rate schedule, which the worker validates and steps."""
    envs.require("pytorch")  # make test builds it; without it this fails naming the command
    path = write(tmp_path, frameworks="[pytorch]", model=with_schedule(WARMUP_COSINE))
    results = tmp_path / "results"
    done = guard.run([sys.executable, "-m", "dlbench", "run", str(path), "--results", str(results),
                      "--data-dir", str(tmp_path / "cache"), "--plain", "--no-live-report"], 600)
    assert done.returncode == 0, done.stdout + done.stderr
    with Store(results / "dlbench.sqlite") as store:
        runs = store.runs()
    assert [(run["framework"], run["workload"], run["status"]) for run in runs] == [("pytorch", "mine", "ok")]
    assert runs[0]["config"]["recipe"]["schedule"]["total_steps"] == 6
    epochs = runs[0]["epochs"]
    assert len(epochs) == 2 and all(0 <= epoch["metrics"]["accuracy"] <= 1 for epoch in epochs)


@pytest.mark.framework
def test_certify_suite_certifies_a_users_workload(tmp_path):
    """`dlbench certify --suite` probes the user's model against the reference like a built-in workload's."""
    envs.require("pytorch")
    envs.require("jax")
    path = write(tmp_path, frameworks="[jax]")
    done = guard.run([sys.executable, "-m", "dlbench", "certify", "--suite", str(path), "--results",
                      str(tmp_path / "results")], 600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "jax" in done.stdout and "mine" in done.stdout and "pass" in done.stdout



LM_MODEL = '''from dlbench import ir, user


def model(meta):
    return ir.model(meta["input_shape"], "int32", [
        ir.embedding(meta["vocab_size"], 8), ir.residual([ir.rms_norm(), ir.grouped_query_attention(2, 1)]),
        ir.residual([ir.rms_norm(), ir.swiglu(12)]), ir.rms_norm(), ir.dense(meta["vocab_size"])])


WORKLOAD = user.Workload(name="mine", description="a tiny LLaMA", model=model, task="language_model",
                         optimizer={"name": "adam", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7},
                         loss="sequence_softmax_cross_entropy", batch_size=4, epochs=1, metric="perplexity",
                         target=20.0)
'''


def windows(vocabulary: int = 11, steps: int = 5) -> dict[str, np.ndarray]:
    """A language model's arrays: token windows and the same windows one token ahead."""
    stream = np.random.RandomState(2).randint(0, vocabulary, 16 * steps + 1)
    x, y = stream[:-1].reshape(16, steps), stream[1:].reshape(16, steps)
    return {"x_train": x[:12], "y_train": y[:12], "x_test": x[12:], "y_test": y[12:]}


def test_a_users_language_model_plans_with_its_vocabulary_window_and_perplexity_target(tmp_path, fake):
    """The LLaMA-style pieces from `dlbench.ir` in a user's file, on a language_model dataset: the meta holds the
    vocabulary (the largest id + 1) and the window, the target is a perplexity (lower is better)."""
    loaded = suite.load(str(write(tmp_path, windows(), LM_MODEL, fields="task: language_model")))
    [cell] = suite.plan(loaded)
    fake_dlbench.make_environment(tmp_path / "home")
    os.environ["DLBENCH_HOME"] = str(tmp_path / "home")
    try:
        prepared = cell_config.resolve(cell, tmp_path / "cache")
    finally:
        del os.environ["DLBENCH_HOME"]
    meta = prepared.dataset.meta
    assert (meta["task"], meta["vocab_size"], meta["seq_len"], meta["input_scale"]) == ("language_model", 11, 5, None)
    assert "num_classes" not in meta
    assert workloads.USER_WORKLOADS["mine"].target == {"metric": "perplexity", "value": 20.0,
                                                       "higher_is_better": False}
    assert prepared.config["recipe"]["loss"] == "sequence_softmax_cross_entropy"
    layers = prepared.config["model"]["layers"]
    assert [layer["type"] for layer in layers[1]["layers"]] == ["rms_norm", "grouped_query_attention"]
    assert layers[-1]["units"] == 11


def test_the_llama_example_plans_on_a_language_model_dataset(tmp_path, fake):
    """examples/llama-lm's model file and suite, on windows of its shape (64 steps, 92 ids) in place of prepare.py's
    text: two LLaMA blocks of the public IR's pieces, three runs a cell, a perplexity target."""
    example = Path(__file__).parent.parent / "examples" / "llama-lm"
    for name in ("model.py", "suite.yaml"):
        (tmp_path / name).write_text((example / name).read_text())
    np.savez(tmp_path / "llama-text.npz", **windows(vocabulary=92, steps=64))
    loaded = suite.load(str(tmp_path / "suite.yaml"))
    cells = suite.plan(loaded)
    assert {(c.framework, c.workload, c.dataset) for c in cells} == {
        (framework, "llama-lm", "llama-text") for framework in ("pytorch", "jax", "tensorflow")}
    assert len(cells) == 9
    model = workloads.USER_WORKLOADS["llama-lm"].model()
    kinds = [layer["type"] for block in model["layers"] for layer in block.get("layers", [block])]
    assert kinds == ["embedding"] + ["rms_norm", "grouped_query_attention", "rms_norm", "swiglu"] * 2 + [
        "rms_norm", "dense"]
    assert workloads.USER_WORKLOADS["llama-lm"].target["higher_is_better"] is False


def test_a_language_models_data_and_recipe_refusals_name_what_is_accepted(tmp_path, fake):
    fields = "task: language_model"
    arrays = windows()
    arrays["y_test"] = arrays["y_test"][:, :4]
    refused(write(tmp_path, arrays, LM_MODEL, fields=fields),
            "array y_test has shape [4, 4] and x_test [4, 5]; a language_model dataset's labels are the next token")
    arrays = dict(windows(), x_train=windows()["x_train"].astype(np.uint8))
    refused(write(tmp_path, arrays, LM_MODEL, fields=fields), "array x_train is uint8 of shape [12, 5]",
            "other than uint8")
    refused(write(tmp_path, windows(), LM_MODEL, fields=f"{fields}, num_classes: 10"),
            "holds token id 10, out of range for num_classes 10")
    refused(write(tmp_path, windows(), LM_MODEL.replace("target=20.0", "target=0.5"), fields=fields),
            "target 0.5; a perplexity target is a number above 1")
    refused(write(tmp_path, windows(), LM_MODEL.replace('metric="perplexity"', 'metric="accuracy"'), fields=fields),
            "metric 'accuracy' for a language_model task; accepted: 'perplexity'")
    flat = LM_MODEL.replace('ir.rms_norm(), ir.dense(meta["vocab_size"])',
                            'ir.rms_norm(), ir.flatten(), ir.dense(meta["vocab_size"])')
    refused(write(tmp_path, windows(), flat, fields=fields),
            "of output shape [11]; a language model's labels are the next token at each of the 5 positions")
    refused(write(tmp_path, windows(), MODEL.replace("loss=", 'task="language_model", loss='), fields=fields),
            "loss 'softmax_cross_entropy' for a language_model task; accepted: 'sequence_softmax_cross_entropy'")


def test_a_workload_file_needs_a_dataset_in_a_plain_format(tmp_path, fake):
    path = write(tmp_path)
    path.write_text("name: mine\nframeworks: [fakefw]\nworkloads:\n  - {workload: mine.py, dataset: digits-28}\n")
    refused(path, "suite.yaml:4: field 'workload'", "goes with a dataset in a plain format")


def test_a_built_in_workload_trains_on_a_users_dataset(tmp_path, fake):
    arrays = images(classes=10, side=10)
    path = write(tmp_path, arrays)
    path.write_text("name: mine\nframeworks: [fakefw]\nworkloads:\n"
                    "  - {workload: cnn-mnist, dataset: {path: data.npz, task: classification}}\n")
    cells = suite.plan(suite.load(str(path)))
    assert [(cell.workload, cell.dataset, cell.batch_size) for cell in cells] == [("cnn-mnist", "data", 128)]
    arrays = images(classes=10, side=4)  # cnn-mnist's two valid 3x3 convs leave nothing of 4x4 images
    np.savez(tmp_path / "data.npz", **arrays)
    refused(path, "suite.yaml:4: field 'dataset'", "cnn-mnist", "shrinks")


def test_the_ray_executor_refuses_a_users_workload(tmp_path):
    path = write(tmp_path)
    fake_dlbench.make_environment(tmp_path / "home")
    done = guard.run([sys.executable, str(Path(fake_dlbench.__file__)), "run", str(path), "--executor", "ray",
                      "--results", str(tmp_path / "results"), "--data-dir", str(tmp_path / "cache"), "--plain",
                      "--no-live-report"], 120, env=dict(os.environ, DLBENCH_HOME=str(tmp_path / "home")))
    assert done.returncode != 0
    assert f"workload mine ({tmp_path / 'mine.py'}) is a user's file: user workloads run with the local executor" \
        in done.stderr


def test_a_built_in_workload_that_needs_meta_a_plain_dataset_lacks(tmp_path, fake):
    rng = np.random.RandomState(1)
    arrays = {"x_train": rng.randint(0, 10, (12, 5)), "y_train": rng.randint(0, 2, 12),
              "x_test": rng.randint(0, 10, (4, 5)), "y_test": rng.randint(0, 2, 4)}
    path = write(tmp_path, arrays)
    path.write_text("name: mine\nframeworks: [fakefw]\nworkloads:\n"
                    "  - {workload: lstm-imdb, dataset: {path: data.npz, task: binary}}\n")
    refused(path, "lstm-imdb builds its model from meta 'seq_len', which a dataset in a plain format does not hold")


def test_a_name_that_could_not_name_a_folder_is_refused(tmp_path, fake):
    refused(write(tmp_path, fields="task: classification, name: ../up"),
            "the dataset's name '../up'; accepted: 1 to 64")
    refused(write(tmp_path, model=MODEL.replace('name="mine"', 'name="a b"')), "the workload's name 'a b'")


# ---- hostile and broken dataset files (issue #40): exit 2, one line naming the file and member, no traceback ------

def run_refused(capsys, monkeypatch, path: Path) -> str:
    """`dlbench run` of the suite: exit 2 and its one error line, naming the suite's line and field. Nothing to
    run: should a check let the input through, the run stops at the missing fakefw environment instead."""
    monkeypatch.setenv("DLBENCH_HOME", str(path.parent / "home"))
    message = error_of(capsys, ["run", str(path), "--results", str(path.parent / "results")])
    assert "\n" not in message and "Traceback" not in message, message
    return message


def dataset_error(path: Path) -> str:
    return f"{path}:6: field 'dataset': {path.parent / 'data.npz'}: "


def with_raw_member(path: Path, arrays: dict, key: str, header: dict, data: bytes, compress: bool = False) -> None:
    """An .npz of `arrays`, but member `key` holds this .npy header (numpy's own writer) and `data` after it."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            written = io.BytesIO()
            if name == key:
                npy_format.write_array_header_1_0(written, header)
                written.write(data)
            else:
                np.save(written, array)
            archive.writestr(f"{name}.npy", written.getvalue())


def test_a_truncated_npz_is_not_a_zip(capsys, monkeypatch, tmp_path, fake):
    path = write(tmp_path)
    whole = (tmp_path / "data.npz").read_bytes()
    (tmp_path / "data.npz").write_bytes(whole[:len(whole) // 2])  # zipfile.BadZipFile: a traceback
    assert run_refused(capsys, monkeypatch, path) == dataset_error(path) + (
        f"not an .npz (zip) file; expected {user_data.ACCEPTED}")


def test_a_member_whose_bytes_are_corrupt_is_named(capsys, monkeypatch, tmp_path, fake):
    path = write(tmp_path, images(side=20))  # x_train's 9,600 bytes: more than zipfile reads for its header
    content = bytearray((tmp_path / "data.npz").read_bytes())
    content[content.index(b"x_train.npy") + 5000] ^= 0xFF  # one byte of its data: a bad CRC
    (tmp_path / "data.npz").write_bytes(bytes(content))
    assert run_refused(capsys, monkeypatch, path) == dataset_error(path) + (
        f"'x_train' cannot be read (Bad CRC-32 for file 'x_train.npy'); expected {user_data.ACCEPTED}")


def test_a_header_claiming_364_tib_is_too_large_before_anything_is_allocated(capsys, monkeypatch, tmp_path, fake):
    path = write(tmp_path)
    huge = {"descr": "<f4", "fortran_order": False, "shape": (10**8, 10**6)}
    with_raw_member(tmp_path / "data.npz", images(), "x_train", huge, b"\0" * 64)
    with address_space_capped():  # numpy.load allocated it: _ArrayMemoryError, a traceback
        message = run_refused(capsys, monkeypatch, path)
    assert message.startswith(dataset_error(path) + (
        "too large: its arrays' headers declare 364 TiB (x_train: shape [100000000, 1000000] of float32); dlbench "
        "reads a dataset whole into memory, at most half the memory available now (")), message


def test_a_zip_bomb_is_refused_from_its_headers_without_reading_an_array(capsys, monkeypatch, tmp_path, fake):
    arrays = images(side=32)
    arrays["x_train"] = np.zeros((4096, 32, 32, 1), np.uint8)  # 4 MiB of zeros in a 4 KiB member
    arrays["y_train"] = np.arange(4096) % 3
    path = write(tmp_path, arrays)
    np.savez_compressed(tmp_path / "data.npz", **arrays)
    assert (tmp_path / "data.npz").stat().st_size < 64 * 1024
    monkeypatch.setattr(user_data, "memory_bound", lambda: 1 << 20)  # as if 2 MiB were available

    def never(*args):
        raise AssertionError("an array was read")

    monkeypatch.setattr(npy_files, "zip_array", never)
    assert run_refused(capsys, monkeypatch, path) == dataset_error(path) + (
        "too large: its arrays' headers declare 4.04 MiB (x_train: shape [4096, 32, 32, 1] of uint8); dlbench reads "
        "a dataset whole into memory, at most half the memory available now (1 MiB)")


@pytest.mark.parametrize(("shape", "data", "declared", "held"), [
    ((5 * 10**9, 1), b"\0" * 64, "(5000000000, 1) of uint8 (5,000,000,000 bytes, 4.66 GiB)", "64"),  # was "pickles"
    ((24, 6, 6, 1), b"\0" * 2000, "(24, 6, 6, 1) of uint8 (864 bytes)", "2,000"),  # inflates to more
])
def test_a_member_not_the_size_its_header_declares(capsys, monkeypatch, tmp_path, fake, shape, data, declared, held):
    path = write(tmp_path)
    header = {"descr": "|u1", "fortran_order": False, "shape": shape}
    with_raw_member(tmp_path / "data.npz", images(), "x_train", header, data, compress=True)
    monkeypatch.setattr(user_data, "memory_bound", lambda: 1 << 40)  # the claim within any machine's bound
    with address_space_capped():
        assert run_refused(capsys, monkeypatch, path) == dataset_error(path) + (
            f"'x_train' declares shape {declared} but holds {held} bytes of data: truncated, or not what its "
            f"header says; expected {user_data.ACCEPTED}")


@pytest.mark.parametrize(("field", "line"), [("dataset", 6), ("workload", 5)])
def test_a_path_that_is_a_symbolic_link_loop(capsys, monkeypatch, tmp_path, fake, field, line):
    path = write(tmp_path)
    looped = tmp_path / ("data.npz" if field == "dataset" else "mine.py")
    looped.unlink()
    looped.symlink_to(looped.name)  # Path.resolve: RuntimeError: Symlink loop, a traceback
    assert run_refused(capsys, monkeypatch, path) == (
        f"{path}:{line}: field '{field}': {looped}: a path that cannot be followed (Symlink loop from "
        f"'{looped}'); give a file, or a link that ends at one")


@pytest.mark.parametrize(("key", "index", "value"), [
    ("x_train", (3, 2, 1, 0), np.nan), ("x_test", (1, 0, 5, 0), np.inf), ("x_test", (6, 5, 5, 0), -np.inf)])
def test_nan_or_inf_in_an_input_is_refused_at_its_first_index(capsys, monkeypatch, tmp_path, fake, key, index, value):
    arrays = {name: array.astype(np.float32) if name.startswith("x_") else array for name, array in images().items()}
    arrays[key][index] = value
    arrays[key][-1, -1, -1, -1] = np.nan  # a later one: not the one named
    path = write(tmp_path, arrays)
    assert run_refused(capsys, monkeypatch, path) == dataset_error(path) + (
        f"array {key} holds {value} at index {list(index)}; inputs are finite numbers (no NaN or inf)")


@pytest.mark.parametrize(("fields", "label"), [("task: classification", 2), ("task: binary", 1),
                                               ("task: classification, num_classes: 4", 3)])
def test_labels_of_one_class_are_refused_as_num_classes_1_is(capsys, monkeypatch, tmp_path, fake, fields, label):
    arrays = images()
    arrays["y_train"][:], arrays["y_test"][:] = label, label
    path = write(tmp_path, arrays, fields=fields)
    assert run_refused(capsys, monkeypatch, path) == dataset_error(path) + (
        f"every label in y_train and y_test is {label}: one class; a {fields.split(',')[0][6:]} dataset's labels "
        "hold at least two classes (as num_classes is at least 2)")
    path = write(tmp_path, fields="task: classification, num_classes: 1")
    assert run_refused(capsys, monkeypatch, path) == (
        f"{path}:6: field 'dataset': num_classes 1; expected an integer >= 2")


def test_int64_inputs_are_called_int64(capsys, monkeypatch, tmp_path, fake):
    arrays = {name: array.astype(np.int64) for name, array in images().items()}
    path = write(tmp_path, arrays)
    assert run_refused(capsys, monkeypatch, path) == dataset_error(path) + (
        f"the model of mine ({tmp_path / 'mine.py'}) takes float32 inputs, but x_train is int64: int32 for token ids "
        "(any integer type), float32 for uint8 or float32 inputs")


@pytest.mark.parametrize(("model", "fields", "output", "needed"), [
    (MODEL.replace("ir.flatten(), ", ""), "task: classification", "dense_1 of output shape [6, 6, 2]",
     "a classification's labels are one class a sample, so its model ends in shape [classes] (flatten or pool "
     "before the last dense layer)"),
    (MODEL.replace('ir.dense(meta["num_classes"])', "ir.dense(2)"), "task: binary", "dense_1 of output shape [2]",
     "a binary task's model ends in shape [1] (one sigmoid logit a sample)"),
])
def test_a_wrong_output_shape_is_refused_once_naming_the_last_layer(capsys, monkeypatch, tmp_path, fake, model,
                                                                     fields, output, needed):
    arrays = images(classes=2)
    model = model.replace('loss="softmax_cross_entropy"', 'loss="sigmoid_cross_entropy", task="binary"') \
        if "binary" in fields else model
    path = write(tmp_path, arrays, model, fields=fields)
    assert run_refused(capsys, monkeypatch, path) == dataset_error(path) + (
        f"the model of mine ({tmp_path / 'mine.py'}) ends in layer {output}; {needed}")


def test_a_hand_written_layer_with_stride_0_names_the_layer(capsys, monkeypatch, tmp_path, fake):
    layer = "{'type': 'conv2d', 'filters': 2, 'kernel': 1, 'stride': 0, 'padding': 'valid'}"
    path = write(tmp_path, model=MODEL.replace("ir.relu()", layer))  # a ZeroDivisionError before
    message = run_refused(capsys, monkeypatch, path)
    assert message.startswith(f"{path}:5: field 'workload': {tmp_path / 'mine.py'}"), message
    assert message.endswith("layer conv2d_2: stride 0; a positive integer is needed"), message
# ---- the workload file is the user's code: where, when and how long it runs ------------------------------

@pytest.mark.slow
def test_a_file_that_never_returns_is_stopped_at_the_time_limit(tmp_path, fake, monkeypatch):
    monkeypatch.setattr(user_workload, "READ_TIMEOUT_S", 3)
    refused(write(tmp_path, model="while True:\n    pass\n" + MODEL), "mine.py", "still running after 3 s")


@pytest.mark.parametrize("where", ["import", "model"])
def test_sys_exit_in_the_file_is_an_error_never_success(tmp_path, fake, capsys, where):
    source = ("import sys\nsys.exit(0)\n" + MODEL if where == "import"
              else MODEL.replace("def model(meta):\n", "def model(meta):\n    import sys\n    sys.exit(0)\n"))
    path = write(tmp_path, model=source)
    code = cli.main(["run", str(path), "--results", str(tmp_path / "results"), "--plain", "--no-live-report"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("dlbench: error: ") and "mine.py" in err[-1] and "raised SystemExit: 0" in err[-1]
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["dlbench.lock"]  # no run folder


def test_a_file_that_ends_its_process_is_an_error(tmp_path, fake):
    refused(write(tmp_path, model=MODEL.replace("def model(meta):\n", "def model(meta):\n    import os\n"
                                                "    os._exit(0)\n")),
            "mine.py: the process reading it ended with exit status 0 before answering")


MARKER = "import pathlib\npathlib.Path(__file__).with_name('ran').touch()\n"


def test_a_refused_run_has_not_run_the_workload_file(tmp_path, fake, capsys):
    path = write(tmp_path, model=MARKER + MODEL)
    results = tmp_path / "results"
    with results_folder.locked(results):  # another run holds the folder
        message = error_of(capsys, ["run", str(path), "--results", str(results), "--plain"])
    assert "is in use by another dlbench run" in message
    (tmp_path / "a-file").write_text("")
    message = error_of(capsys, ["run", str(path), "--results", str(tmp_path / "a-file"), "--plain"])
    assert "--results" in message and "a-file" in message
    assert not (tmp_path / "ran").exists()
    suite.load(str(path))  # the marker does say when the file runs
    assert (tmp_path / "ran").exists()


def test_entries_sharing_a_file_and_dataset_run_the_file_once(tmp_path, fake):
    path = write(tmp_path, model="with open(__file__ + '.runs', 'a') as runs:\n    runs.write('ran\\n')\n" + MODEL)
    entries = "".join(f"  - {{workload: mine.py, dataset: {{path: data.npz, task: classification}}, "
                      f"batch_size: {size}}}\n" for size in range(1, 41))
    path.write_text(f"name: mine\nframeworks: [fakefw]\nthreads: 1\nworkloads:\n{entries}")
    cells = suite.plan(suite.load(str(path)))
    assert len(cells) == 40
    assert (tmp_path / "mine.py.runs").read_text() == "ran\n"


def test_a_model_that_raises_on_a_later_call_is_called_once(tmp_path, fake, monkeypatch):
    """The model the child read is the one every cell gets: the user's function is not called again."""
    once = MODEL.replace("def model(meta):\n", "CALLS = []\n\n\ndef model(meta):\n    CALLS.append(1)\n"
                         "    if len(CALLS) > 1:\n        raise RuntimeError('called twice')\n")
    path = write(tmp_path, model=once)
    cells = suite.plan(suite.load(str(path)))
    fake_dlbench.make_environment(tmp_path / "home")
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    prepared = cell_config.resolve(cells[0], tmp_path / "cache")
    assert prepared.config["model"]["layers"][-1]["units"] == 3
    mine = workloads.get_workload("mine")
    assert mine.model() == mine.model() == prepared.config["model"]
    with pytest.raises(user_workload.UserWorkloadError, match="its model was read for the dataset data of the suite"):
        mine.model(dict(mine.study_meta, num_classes=5))  # a meta no entry gave: an error, not a guess


@pytest.mark.framework
def test_certify_power_checks_only_the_suites_own_workload(tmp_path):
    """certify --power --suite runs the power check on the suite's workloads alone: here the user's."""
    envs.require("pytorch")  # the reference, which power runs with each value changed
    path = write(tmp_path, model=MODEL.replace('"momentum": 0.0', '"momentum": 0.9'), frameworks="[jax]")
    done = guard.run([sys.executable, "-m", "dlbench", "certify", "--power", "--suite", str(path), "--results",
                      str(tmp_path / "results")], 600)
    assert done.returncode == 0, done.stdout + done.stderr
    # the notice that the workload file runs, then the table's header and rule
    assert done.stdout.startswith(f"dlbench: running workload file {tmp_path / 'mine.py'} ")
    rows = [line.split()[0] for line in done.stdout.splitlines()[3:] if line.strip() and " of " not in line]
    assert rows and set(rows) == {"mine"}, done.stdout
    assert "conv2d_1.filters" in done.stdout
