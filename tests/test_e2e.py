"""dlbench run, end to end, on six workloads of the stand-ins (e2e_suite.yaml: the quick suite's shape before
it took its repetitions) with the real PyTorch environment: the results it stores, resuming, --force,
exports, and a harness killed with SIGKILL mid-suite."""
import csv
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import guard
import psutil
import pytest
from fixtures_data import STANDIN_WHEELS, prepared_standin

from dlbench.harness.environments import envs, sources
from dlbench.harness.store import Store

pytestmark = pytest.mark.framework

# The other frameworks run in test_adapters. One thread a cell: the tests run on two pytest workers, and
# a two-thread PyTorch cell beside a busy worker spins its OpenMP threads for the core it lacks (lstm-ptb's
# epoch took 53 s instead of 3 s beside one busy loop). test_suite_cli checks the default, all cores.
SUITE = Path(__file__).with_name("e2e_suite.yaml")
QUICK = ("run", str(SUITE), "-f", "pytorch", "--epochs", "2", "--threads", "1")
THREE = (*QUICK, "-w", "cnn-mnist", "-w", "lstm-imdb", "-w", "lstm-ptb")  # the suite's cheapest cells
WORKLOADS = ["cnn-mnist", "frcnn-voc", "lstm-imdb", "lstm-ptb", "transformer-lm", "vit-cifar10"]  # the suite's


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """The quick suite's stand-ins from wheels on PyPI are prepared from fixture wheels (no download);
    the others from their installed packages by the run itself."""
    envs.require("pytorch")  # make test builds it; without it this fails naming the command
    folder = tmp_path_factory.mktemp("data")
    for name in STANDIN_WHEELS:
        prepared_standin(name, folder)
    return folder


def dlbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return guard.run([sys.executable, "-m", "dlbench", *args], 1800, cwd=cwd)  # 356 s seen


def stored_runs(results: Path) -> list[dict]:
    with Store(results / "dlbench.sqlite") as store:
        return store.runs()


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, data_dir):
    """Given a relative results folder, as a user in a shell would."""
    folder = tmp_path_factory.mktemp("quick")
    done = dlbench(*QUICK, "--results", "results", "--data-dir", str(data_dir), cwd=folder)
    return folder / "results", done


def test_quick_suite_runs_every_cell_and_prints_the_table(quick_run):
    results, done = quick_run
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 ok" in done.stdout and "steady s" in done.stdout
    assert str((results / "dlbench.sqlite").resolve()) in done.stdout
    for workload in WORKLOADS:
        assert f"pytorch {workload}" in done.stdout
    assert "epoch 2/2" in done.stdout  # live progress


def test_stored_runs_hold_timings_metrics_and_resources(quick_run):
    results, _ = quick_run
    runs = sorted(stored_runs(results), key=lambda r: r["workload"])  # stored in the plan's shuffled order
    assert [r["workload"] for r in runs] == WORKLOADS
    assert sorted(r["plan_position"] for r in runs) == list(range(1, 7))
    assert {r["machine"]["logical_cores"] for r in runs} == {os.cpu_count()}
    for run in runs:
        epochs = run["epochs"]
        assert run["status"] == "ok" and [e["epoch"] for e in epochs] == [1, 2]
        assert run["train_time_s"] == pytest.approx(sum(e["train_time_s"] for e in epochs))
        assert run["first_epoch_s"] == epochs[0]["train_time_s"]
        assert run["steady_epoch_s"] == epochs[1]["train_time_s"]
        assert 0 < run["first_step_s"] <= run["first_epoch_s"]  # the first step is inside the first epoch
        assert run["eval_time_s"] == pytest.approx(sum(e["eval_time_s"] for e in epochs))
        # the cell's wall time holds startup, training and evaluation
        assert run["wall_time_s"] > run["startup_s"] + run["train_time_s"] + run["eval_time_s"]
        # the harness's own CPU while the worker ran: some (sampling, events), far less than the wall time
        assert 0 < run["harness_cpu_s"] < run["wall_time_s"]
        assert 0 < run["monitor_cpu_s"] <= run["harness_cpu_s"]  # the sampling thread is part of the harness
        assert run["worker_source"] == run["config"]["worker_source"] == sources.framework_source("pytorch")
        assert run["metric_value"] == epochs[-1]["metric_value"]
        assert run["framework_version"].startswith("2.") and run["packages"]["torch"] == run["framework_version"]
        assert run["threads"] == 1 and run["python"].startswith("3.11")
        assert run["peak_rss_mb"] > 100 and run["mean_cpu_percent"] > 10
        assert run["mean_gpu_util_percent"] is None and run["peak_gpu_mem_mb"] is None
        # FLOP/s of the steady epoch against the environment's GEMM peak, measured once for the suite
        assert run["n_train"] > 0 and run["achieved_gflops"] > 0 and run["mfu"] > 0
        assert run["energy_source"].startswith("cpu: ") and run["energy_source"].endswith("gpu: device cpu")
    with Store(results / "dlbench.sqlite") as store:
        [peak] = store.peaks()
    assert (peak["framework"], peak["threads"], peak["device"], peak["matrix_size"]) == ("pytorch", 1, "cpu", 2048)
    assert peak["gflops"] > 0 and {r["peak_id"] for r in runs} == {peak["id"]}
    for run in runs:
        with Store(results / "dlbench.sqlite") as store:
            assert len(store.samples(run["id"])) >= 5
        run_dir = Path(run["run_dir"])
        assert (run_dir / "cell.json").is_file() and (run_dir / "stderr.log").is_file()
        assert (run_dir / "home").is_dir() and (run_dir / "tmp").is_dir()  # caches stay in the run folder
    mnist, imdb, ptb = (runs[WORKLOADS.index(name)] for name in ("cnn-mnist", "lstm-imdb", "lstm-ptb"))
    assert mnist["metric_name"] == "accuracy" and mnist["metric_value"] > 0.3  # 10 classes: chance is 0.1
    assert mnist["params"] == 1_199_882
    assert imdb["metric_name"] == "accuracy" and 0 <= imdb["metric_value"] <= 1
    assert ptb["metric_name"] == "perplexity" and ptb["metric_value"] < 2000  # vocabulary of 2,000
    gpt, vit = (runs[WORKLOADS.index(name)] for name in ("transformer-lm", "vit-cifar10"))
    assert gpt["metric_name"] == "perplexity" and gpt["metric_value"] < 2000 and gpt["n_train"] == 320
    assert gpt["config"]["recipe"]["schedule"] == {"name": "warmup_cosine", "warmup_steps": 1, "total_steps": 20,
                                                   "final_lr_fraction": 0.1}  # 2 epochs of 10 batches of 32
    assert vit["metric_name"] == "accuracy" and 0 <= vit["metric_value"] <= 1 and vit["params"] == 809_098
    frcnn = runs[WORKLOADS.index("frcnn-voc")]  # photo-boxes: 4 training images, 2 test images
    assert frcnn["metric_name"] == "map" and 0 <= frcnn["metric_value"] <= 1 and frcnn["n_train"] == 4
    assert frcnn["params"] == 7_729_622 and frcnn["config"]["model"]["input_shape"] == [128, 224, 3]
    split = ("host_time_s", "nms_time_s", "framework_time_s")
    for epoch in frcnn["epochs"]:  # where the detector's training time went, each part measured on its own
        assert all(epoch[key] > 0 for key in split)
        rest = epoch["train_time_s"] - sum(epoch[key] for key in split)  # the loop around the timed parts
        assert 0 <= rest < 0.05 * epoch["train_time_s"], epoch
    assert all(epoch[key] is None for run in runs if run is not frcnn for epoch in run["epochs"] for key in split)


def test_rerun_skips_completed_cells_and_force_reruns(quick_run, data_dir):
    results, _ = quick_run
    common = ["--results", str(results), "--data-dir", str(data_dir)]
    again = dlbench(*QUICK, *common)
    assert again.returncode == 0 and "6 skipped" in again.stdout
    assert len(stored_runs(results)) == 6
    forced = dlbench(*QUICK, "-w", "lstm-imdb", "--force", *common)
    assert forced.returncode == 0 and "1 ok" in forced.stdout
    runs = stored_runs(results)
    imdb = next(r for r in runs[:6] if r["workload"] == "lstm-imdb")
    assert len(runs) == 7 and runs[-1]["cell_hash"] == imdb["cell_hash"]


def test_results_exports(quick_run):
    results, _ = quick_run
    as_csv = dlbench("results", "--results", str(results), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert len(rows) == len(stored_runs(results)) and "cnn-mnist" in {row["workload"] for row in rows}
    assert json.loads(rows[0]["epochs"])[0]["epoch"] == 1
    as_json = json.loads(dlbench("results", "--results", str(results), "--format", "json").stdout)
    mnist = next(run for run in as_json if run["workload"] == "cnn-mnist")
    assert mnist["config"]["model"]["layers"][0]["type"] == "conv2d"
    table = dlbench("results", "--results", str(results), "--columns", "all").stdout
    assert "cnn-mnist" in table and "1:" in table
    heading, _, *rows = table.splitlines()[:1 + 1 + 6]
    code = heading.index(" code ") + 1  # every run came from the code this dlbench runs now
    assert {row[code:code + len("current")] for row in rows} == {"current"}


def test_sigkill_of_the_harness_loses_no_completed_run(tmp_path, data_dir):
    command = [sys.executable, "-m", "dlbench", *THREE, "--results", str(tmp_path), "--data-dir", str(data_dir)]
    harness = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    # the first cell is stored, the second is running
    guard.read_until(harness, lambda line: line.startswith("[2/3]"), 1200, "the harness's second cell")
    workers = psutil.Process(harness.pid).children(recursive=True)
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    gone, alive = psutil.wait_procs(workers, timeout=guard.bound(120))
    assert not alive, f"a worker outlived its harness by {guard.bound(120):g} s"
    runs = stored_runs(tmp_path)
    assert [(r["plan_position"], r["status"], len(r["epochs"])) for r in runs] == [(1, "ok", 2)]

    resumed = dlbench(*THREE, "--results", str(tmp_path), "--data-dir", str(data_dir))
    assert resumed.returncode == 0 and "1 skipped" in resumed.stdout and "2 ok" in resumed.stdout
    runs = stored_runs(tmp_path)
    assert sorted(r["workload"] for r in runs) == ["cnn-mnist", "lstm-imdb", "lstm-ptb"]
    assert len({r["cell_hash"] for r in runs}) == 3
