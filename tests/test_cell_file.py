"""The cell file (shared/cell_file.CellFile): what the harness writes is what the worker reads, and read()
refuses a missing, unknown or mistyped field, naming the file, the field and what is accepted."""
import json
from dataclasses import fields, replace

import pytest

from dlbench.shared import ir
from dlbench.shared.cell_file import CELL_FILE, INFERENCE, CellFile, CellFileError

CELL = CellFile(adapter="fake_framework:Adapter", model=ir.model([4], "float32", [ir.dense(2)]),
                recipe={"batch_size": 4, "epochs": 2}, data_path="/data/digits", seed=3, epochs=2, device="cpu",
                threads=1)


def written(tmp_path, data: dict):
    path = tmp_path / CELL_FILE
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("cell", [
    CELL,
    replace(CELL, train_samples=8, weights="/suite/weights.npz"),
    replace(CELL, mode=INFERENCE, serve={"warmup_calls": 3, "latency_calls": 7, "throughput_batch": 2,
                                         "throughput_samples": 100}),
])
def test_what_the_harness_writes_the_worker_reads(tmp_path, cell):
    cell.write(tmp_path / CELL_FILE)
    read = CellFile.read(tmp_path / CELL_FILE)
    assert read == cell and read.inference == (cell.mode == INFERENCE)
    # every field is in the file, an unset one as null
    assert list(json.loads(cell.to_json())) == [field.name for field in fields(CellFile)]


@pytest.mark.parametrize("name", [field.name for field in fields(CellFile)])
def test_a_missing_field_is_refused_by_name(tmp_path, name):
    data = CELL.to_dict()
    del data[name]
    path = written(tmp_path, data)
    with pytest.raises(CellFileError) as refused:
        CellFile.read(path)
    assert f"cell file {path}: field {name} missing; a cell file holds every one of adapter, model" \
        in str(refused.value)


def test_an_unknown_field_is_refused_by_name(tmp_path):
    path = written(tmp_path, dict(CELL.to_dict(), batch_size=4))
    with pytest.raises(CellFileError) as refused:
        CellFile.read(path)
    assert str(refused.value) == (f"cell file {path}: unknown field batch_size; accepted: adapter, model, recipe, "
                                  "data_path, seed, epochs, device, threads, train_samples, weights, mode, serve")


@pytest.mark.parametrize("name, value, accepted", [
    ("adapter", "fake_framework.Adapter", "a string module:Class"),
    ("model", [1, 2], "a JSON object, the model's IR"),
    ("recipe", None, "a JSON object, the recipe"),
    ("data_path", 7, "a string, the prepared dataset's folder"),
    ("seed", "3", "a whole number"),
    ("epochs", 2.0, "a whole number"),
    ("epochs", True, "a whole number"),
    ("device", None, "a string, the cell's device (cpu or gpu)"),
    ("threads", 0, "a whole number, at least 1"),
    ("train_samples", "8", "a whole number, or null for the whole training split"),
    ("weights", "", "a string, the starting weights' .npz file, or null"),
    ("mode", "train", "'inference', or null for a training cell"),
    ("serve", [3, 7], "a JSON object, an inference cell's settings, or null"),
])
def test_a_mistyped_field_is_refused_with_what_is_accepted(tmp_path, name, value, accepted):
    path = written(tmp_path, dict(CELL.to_dict(), **{name: value}))
    with pytest.raises(CellFileError) as refused:
        CellFile.read(path)
    assert f"cell file {path}: field {name} is {value!r}; accepted: {accepted}" in str(refused.value)
    with pytest.raises(CellFileError, match=f"the cell record: field {name} is"):  # nor can the harness build it
        replace(CELL, **{name: value})


@pytest.mark.parametrize("text, named", [("[1, 2]", "a JSON object of the fields adapter"), ("{", "not JSON")])
def test_a_file_that_is_no_cell_is_refused(tmp_path, text, named):
    path = tmp_path / CELL_FILE
    path.write_text(text)
    with pytest.raises(CellFileError, match=named) as refused:
        CellFile.read(path)
    assert str(refused.value).startswith(f"cell file {path}: ")
