"""The worker's inference mode (worker/serve.py, started as the harness starts every cell:
`python -m dlbench.worker.train CELL.json`): in PyTorch's environment on a tiny prepared test split, its events
follow the inference protocol; in the harness's interpreter, bad serve settings are refused by name before any
framework is imported."""
import json
import sys
from dataclasses import replace
from pathlib import Path

import guard
import numpy as np
import pytest
from fixtures_data import prepared_standin
from test_detector import SMALL

from dlbench.harness.environments import envs
from dlbench.harness.environments.process import PACKAGE_PARENT
from dlbench.harness.plan.workloads import get_workload
from dlbench.shared.cell_file import CELL_FILE, INFERENCE, CellFile
from dlbench.shared.protocol import (
    DONE,
    ERROR,
    KIND,
    META_FILE,
    READY,
    SERVE_FIRST_CALL,
    SERVE_LATENCY,
    SERVE_THROUGHPUT,
    START,
    array_file,
)

N_TEST = 5  # fewer than the latency calls: call i serves sample i % N_TEST
SERVE = {"warmup_calls": 3, "latency_calls": 7, "throughput_batch": 2, "throughput_samples": 1024}


@pytest.fixture(scope="module")
def data_path(tmp_path_factory) -> Path:
    """cnn-mnist's inputs as a prepared dataset stores them: uint8 pixels, N_TEST test samples."""
    folder = tmp_path_factory.mktemp("served")
    rng = np.random.RandomState(0)
    for part, count in (("train", 4), ("test", N_TEST)):
        np.save(folder / array_file("x_" + part), rng.randint(0, 256, (count, 28, 28, 1)).astype(np.uint8))
        np.save(folder / array_file("y_" + part), rng.randint(0, 10, count).astype(np.int32))
    (folder / META_FILE).write_text(json.dumps({"task": "classification", "input_scale": 255.0}))
    return folder


def cell(data_path: Path, **serve) -> CellFile:
    workload = get_workload("cnn-mnist")
    return CellFile(mode=INFERENCE, serve=dict(SERVE, **serve), model=workload.model(), recipe=workload.recipe,
                    data_path=str(data_path), adapter=envs.get_recipe("pytorch").adapter, device="cpu", threads=1,
                    seed=0, epochs=1)


def events_of(python: str, config: CellFile, folder: Path, extra: dict) -> tuple[int, list[dict]]:
    """The worker's events for the cell file `config` (a dict: a file CellFile would never write)."""
    path = folder / CELL_FILE
    if isinstance(config, CellFile):
        config.write(path)
    else:
        path.write_text(json.dumps(config))
    variables = {"PYTHONPATH": str(PACKAGE_PARENT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                 "DLBENCH_THREADS": "1", "HOME": str(folder), **extra}
    done = guard.run([python, "-m", "dlbench.worker.train", str(path)], 600, env=variables)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.framework
def test_pytorch_serves_a_cell_as_the_protocol_says(data_path, tmp_path):
    recipe = envs.get_recipe("pytorch")
    code, events = events_of(str(envs.require("pytorch").python), cell(data_path), tmp_path, recipe.worker_env)
    kinds = [event[KIND] for event in events]
    assert code == 0, events
    assert kinds == [START, READY, SERVE_FIRST_CALL, SERVE_LATENCY, SERVE_THROUGHPUT, DONE]
    ready, first, latency, throughput = events[1:5]
    assert ready["n_test"] == N_TEST and ready["n_train"] == 0 and ready["threads"] == 1
    assert first["batch_size"] == 1 and first["first_call_s"] > 0
    assert latency["batch_size"] == 1 and latency["warmup_calls"] == SERVE["warmup_calls"]
    assert len(latency["latencies_s"]) == SERVE["latency_calls"] and min(latency["latencies_s"]) > 0
    # whole batches of 2 out of the 5 test samples (throughput_samples 1024 is capped by the split)
    assert throughput["batch_size"] == 2 and throughput["samples"] == 4
    assert throughput["seconds"] > 0 and throughput["first_call_s"] > 0


@pytest.mark.framework
def test_pytorch_serves_a_detector_image_by_image(session_dir, tmp_path):
    """frcnn-voc on the photo-boxes stand-in: every call one image, the throughput's samples images."""
    dataset = prepared_standin("photo-boxes", session_dir / "standins")
    workload = get_workload("frcnn-voc")
    config = replace(cell(dataset.path, latency_calls=3, warmup_calls=1, throughput_batch=1, throughput_samples=2),
                     model=workload.model(dataset.meta), recipe=dict(workload.recipe, detection=SMALL))
    recipe = envs.get_recipe("pytorch")
    code, events = events_of(str(envs.require("pytorch").python), config, tmp_path, recipe.worker_env)
    assert code == 0, events
    assert [event[KIND] for event in events][2:] == [SERVE_FIRST_CALL, SERVE_LATENCY, SERVE_THROUGHPUT, DONE]
    assert len(events[3]["latencies_s"]) == 3
    assert events[4]["batch_size"] == 1 and events[4]["samples"] == 2


@pytest.mark.parametrize("change, named", [
    ({"serve": None}, "an inference cell needs \"serve\""),
    ({"serve": dict(SERVE, latency_calls=0)}, "serve.latency_calls 0"),
    ({"serve": dict(SERVE, warmup_calls=-1)}, "serve.warmup_calls -1"),
    ({"serve": dict(SERVE, throughput_batch=2.5)}, "serve.throughput_batch 2.5"),
    ({"serve": dict(SERVE, throughput_batch=8)}, "serve.throughput_batch 8: more than the 5 samples served"),
    ({"model": get_workload("frcnn-voc").model(), "serve": dict(SERVE, throughput_batch=2)},
     "serve.throughput_batch 2: a detector serves one image a call; accepted: 1"),
])
def test_bad_settings_are_refused_by_name(data_path, tmp_path, change, named):
    """Checked before the framework is imported: the harness's own interpreter runs these."""
    code, events = events_of(sys.executable, replace(cell(data_path), **change), tmp_path, {})
    assert code == 1 and events[-1][KIND] == ERROR
    assert named in events[-1]["message"]


@pytest.mark.parametrize("change, named", [
    ({"mode": "distil"}, "field mode is 'distil'; accepted: 'inference', or null for a training cell"),
    ({"serve": [1, 2]}, "field serve is [1, 2]; accepted: a JSON object"),
])
def test_a_cell_file_the_record_refuses_ends_the_worker_by_name(data_path, tmp_path, change, named):
    """A cell file CellFile would not write (written by hand here): the worker refuses it before anything else."""
    code, events = events_of(sys.executable, dict(cell(data_path).to_dict(), **change), tmp_path, {})
    assert code == 1 and events[-1][KIND] == ERROR
    assert named in events[-1]["message"]
