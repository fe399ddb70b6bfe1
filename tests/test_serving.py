"""Inference mode, harness half (issue #31): the serving figures of a run (measure/serving.py) and a plan of
inference cells run end to end through the real command line with the fake framework, whose serving path
the real worker (worker/serve.py) drives as the inference protocol says."""
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import fake_dlbench
import numpy as np
import pytest

from dlbench.harness import cli
from dlbench.harness.environments import envs
from dlbench.harness.measure import serving
from dlbench.harness.plan import suite
from dlbench.harness.plan.suite import Cell, Serve, SuiteError
from dlbench.harness.run import cell_config
from dlbench.harness.store import Store
from dlbench.shared.cell_file import CELL_FILE, INFERENCE, CellFile
from dlbench.shared.protocol import SERVE_FIRST_CALL, SERVE_LATENCY, SERVE_THROUGHPUT

# twelve known latencies (seconds): their percentiles are numpy's, linear between the closest ranks
LATENCIES = [0.010, 0.012, 0.011, 0.030, 0.009, 0.010, 0.013, 0.050, 0.011, 0.010, 0.012, 0.014]


def test_percentiles_are_numpys_linear_ones_in_milliseconds():
    found = serving.percentiles_ms(LATENCIES)
    expected = np.percentile(LATENCIES, [50, 90, 99]) * 1000
    assert list(found.values()) == pytest.approx(list(expected), rel=1e-12)
    # by hand: sorted, p50 is halfway between the 6th and 7th values (0.011, 0.012); p90 at rank 9.9
    assert found["latency_p50_ms"] == pytest.approx(11.5)
    assert found["latency_p90_ms"] == pytest.approx((0.014 + 0.9 * (0.030 - 0.014)) * 1000)
    assert serving.percentiles_ms([]) == dict.fromkeys(serving.LATENCY_COLUMNS)


def test_summary_of_the_three_serve_events():
    events = [{"event": SERVE_FIRST_CALL, "batch_size": 1, "first_call_s": 0.7},
              {"event": SERVE_LATENCY, "batch_size": 1, "warmup_calls": 5, "latencies_s": LATENCIES},
              {"event": SERVE_THROUGHPUT, "batch_size": 32, "samples": 640, "seconds": 2.0, "first_call_s": 0.4}]
    row = serving.summary(events)
    assert row["first_call_s"] == 0.7 and row["first_batch_call_s"] == 0.4
    assert row["samples_per_s"] == 320.0 and row["serve_batch_size"] == 32 and row["throughput_samples"] == 640
    assert (row["warmup_calls"], row["latency_calls"]) == (5, 12)
    assert row["latency_p99_ms"] == pytest.approx(np.percentile(LATENCIES, 99) * 1000)
    assert serving.latencies(events) == LATENCIES
    # a run that failed after its first call keeps what it measured, and nothing else
    assert serving.summary(events[:1]) == {"first_call_s": 0.7}


SERVE_SUITE = """name: fakes-serve
frameworks: [fakefw]
threads: 1
mode: inference
serve: {warmup_calls: 3, latency_calls: 25, throughput_samples: 100}
workloads:
  - {workload: cnn-mnist, dataset: digits-28, batch_size: 16}
"""


def test_an_inference_plan_runs_end_to_end_and_stores_its_serving_figures(tmp_path, digits_dir, monkeypatch, capsys):
    monkeypatch.setitem(envs.RECIPES, "fakefw", fake_dlbench.RECIPE)
    suite_file = fake_dlbench.suite_file(tmp_path, monkeypatch, text=SERVE_SUITE)
    results = tmp_path / "results"
    assert cli.main(["run", str(suite_file), "--results", str(results), "--data-dir", str(digits_dir),
                     "--plain"]) == 0
    printed = capsys.readouterr().out
    assert "serving: 3 warm-up and 25 timed calls of 1, then 100 samples in batches of 16" in printed
    # the end-of-run table is the inference runs' own: it printed the training columns, every one '-'
    ended = printed[printed.index("\nInference runs\n"):]
    assert "p50/p90/p99 ms" in ended and "steady s" not in printed and "final metric" not in printed
    with Store(results / "dlbench.sqlite") as store:
        [run] = store.runs()
        latencies = store.latencies(run["id"])
    assert run["status"] == "ok" and run["mode"] == "inference" and run["epochs"] == []
    assert run["config"]["mode"] == "inference"
    assert run["config"]["serve"] == {"warmup_calls": 3, "latency_calls": 25, "throughput_batch": 16,
                                      "throughput_samples": 100}
    worker_cell = CellFile.read(Path(run["run_dir"]) / CELL_FILE)
    assert (worker_cell.mode, worker_cell.serve) == (INFERENCE, run["config"]["serve"])
    # what the fake's serving path takes: 2 ms a call and 0.5 ms a sample (tests/fake_framework.py)
    assert len(latencies) == 25 and min(latencies) >= 0.0025
    assert run["latency_p50_ms"] == pytest.approx(np.percentile(latencies, 50) * 1000)
    assert run["latency_p99_ms"] == pytest.approx(np.percentile(latencies, 99) * 1000)
    assert (run["serve_batch_size"], run["throughput_samples"], run["latency_calls"]) == (16, 96, 25)
    assert run["samples_per_s"] == pytest.approx(96 / run["throughput_s"])
    assert run["samples_per_s"] < 16 / (0.002 + 16 * 0.0005)  # no faster than the fake's sleeps allow
    assert run["first_call_s"] > 0 and run["first_batch_call_s"] > 0 and run["peak_rss_mb"] > 0
    assert run["steady_epoch_s"] is None and run["metric_value"] is None
    assert cli.main(["results", "--results", str(results)]) == 0
    table = capsys.readouterr().out
    served = table[table.index("Inference runs"):].split("\n\n")[0]  # the peaks' table follows it
    assert "p50/p90/p99 ms  samples/s  1st call s  peak MiB" in served.splitlines()[1]
    assert max(len(line) for line in served.splitlines()) <= 120
    row = served.splitlines()[3]
    assert f"{run['latency_p50_ms']:.3g}/{run['latency_p90_ms']:.3g}/{run['latency_p99_ms']:.3g}" in row
    assert "digits-28" in row and row.split()[4] == "16"  # the dataset, and the batch in its own column


# ---- the configuration and its hash ---------------------------------------------------------

# the hash of TRAINING (below) as dlbench computed it before inference mode (commit e404931, the same stand-ins
# for the dataset, environment and worker code): inference mode leaves training cells' hashes as they were
TRAINING_HASH = "678677252deca1a46d0ad7c8cd80a6ec6d20dd734b72c34eb4de3e2b5f175451"
TRAINING = Cell("s", "jax", "cnn-mnist", "digits-28", "cpu", 1, 0, 3, 32, 1, 60.0)


@pytest.fixture
def resolvable(monkeypatch):
    """cell_config.resolve without a prepared dataset or an environment: fixed stand-ins for both, and for the
    digest of the worker's code."""
    monkeypatch.setattr(cell_config.data, "prepare", lambda name, folder: SimpleNamespace(
        hash="d" * 64, meta={"input_shape": [28, 28, 1], "num_classes": 10, "n_test": 360, "n_train": 1438}))
    monkeypatch.setattr(cell_config.envs, "require", lambda name, device="cpu": SimpleNamespace(
        info=lambda: {"packages": {"jax": "0.10.2"}, "python_version": "3.11.0"}))
    monkeypatch.setattr(cell_config.sources, "framework_source", lambda name: "0" * 16)


def test_a_training_cells_configuration_and_hash_are_unchanged(resolvable, tmp_path):
    prepared = cell_config.resolve(TRAINING, tmp_path)
    assert "mode" not in prepared.config and "serve" not in prepared.config
    assert prepared.hash == TRAINING_HASH


def test_an_inference_cells_mode_and_serving_settings_enter_its_hash(resolvable, tmp_path):
    served = dataclasses.replace(TRAINING, epochs=0, mode="inference", serve=Serve(20, 200, 32, 1024))
    prepared = cell_config.resolve(served, tmp_path)
    # the throughput samples are capped by the test split's 360
    assert prepared.config["mode"] == "inference"
    assert prepared.config["serve"] == {"warmup_calls": 20, "latency_calls": 200, "throughput_batch": 32,
                                        "throughput_samples": 360}
    hashes = {prepared.hash, TRAINING_HASH}
    for changed in (Serve(21, 200, 32, 1024), Serve(20, 100, 32, 1024), Serve(20, 200, 16, 1024),
                    Serve(20, 200, 32, 100)):
        hashes.add(cell_config.resolve(dataclasses.replace(served, serve=changed), tmp_path).hash)
    assert len(hashes) == 6  # each setting changes the hash; none equals the training cell's
    # above the test split's size, more samples asked change nothing that runs: the same cell
    more = dataclasses.replace(served, serve=Serve(20, 200, 32, 5000))
    assert cell_config.resolve(more, tmp_path).hash == prepared.hash


def test_an_inference_cell_whose_batch_outgrows_its_throughput_samples_is_refused_before_it_runs(resolvable,
                                                                                                   tmp_path):
    served = dataclasses.replace(TRAINING, epochs=0, mode="inference", serve=Serve(20, 200, 512, 1024))
    with pytest.raises(SuiteError) as raised:
        cell_config.resolve(served, tmp_path)
    assert str(raised.value) == ("suite s: inference cell cnn-mnist on digits-28: batch size 512 is more than the "
                                 "360 samples its throughput serves (throughput_samples 1,024, test split 360); "
                                 "give the entry a batch_size of at most 360")


def test_every_cell_of_the_serve_suite_has_a_whole_batch_to_time():
    """The serve suite on the stand-ins' test splits: each cell's batch fits its throughput samples (the check
    above, with the prepared splits' sizes)."""
    sizes = {"digits-28": 359, "photo-patches-10": 100, "rt-snippets": 1000, "lee-news-lm": 294,
             "django-es-en": 132, "photo-boxes": 2}
    for cell in suite.plan(suite.load("serve"), frameworks=["pytorch"]):
        assert cell.serve.throughput_batch <= min(cell.serve.throughput_samples, sizes[cell.dataset]), cell.workload


def test_the_results_inference_table_tells_a_batch_sweep_apart(tmp_path, capsys):
    """A sweep of batch sizes: the dataset's label, which says the batch, is clipped to fit 120 columns, so
    the rows read the same but for their figures; the batch column tells them apart."""
    from synthetic_store import serving_run

    with Store(tmp_path / "dlbench.sqlite") as store:
        for position, batch in enumerate((32, 64, 128), 1):
            run, latencies = serving_run("pytorch", "cnn-mnist", 1, [0.002] * 10, 1000.0 + batch, position=position)
            run.update(cell_hash=f"sweep-{batch}", serve_batch_size=batch)
            run["config"]["serve"]["throughput_batch"] = run["config"]["recipe"]["batch_size"] = batch
            store.save_run(run, [], [], latencies)
        failed, _ = serving_run("pytorch", "cnn-mnist", 1, [], 1.0, status="failed", reason="worker exited",
                                position=4)
        failed["cell_hash"] = "sweep-failed"
        failed["config"]["serve"]["throughput_batch"] = 256  # never timed: its configuration's batch
        store.save_run(failed, [], [], [])
    assert cli.main(["results", "--results", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["Inference runs", "every run: framework pytorch, version 2.13.0, workload cnn-mnist, dataset "
                                           "digits-28, device cpu, rep 1, peak MiB 400.00"]
    assert lines[2].split()[:3] == ["batch", "status", "p50/p90/p99"]
    assert sorted((line.split()[0], line.split()[1]) for line in lines[4:]) == [
        ("128", "ok"), ("256", "failed"), ("32", "ok"), ("64", "ok")]
