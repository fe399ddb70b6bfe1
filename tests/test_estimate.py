"""`dlbench estimate`: forecasts from a store of known epoch times, checked against figures worked out by hand."""
from dataclasses import replace
from pathlib import Path

import pytest
from synthetic_store import synthetic_run

from dlbench.harness import cli
from dlbench.harness.analysis.estimate import EstimateError, Estimator, Forecast, forecast_plan
from dlbench.harness.plan import makespan
from dlbench.harness.plan.suite import Cell
from dlbench.harness.plan.workloads import get_workload
from dlbench.harness.present import estimate as shown
from dlbench.harness.store import Store
from dlbench.shared import ir

HERE = {"cpu_model": "Test CPU @ 2.0GHz", "gpus": [], "logical_cores": 2}
MNIST_FLOPS = ir.train_flops(get_workload("cnn-mnist").model())  # digits-28 has MNIST's shapes: the same model


def cell(framework: str = "pytorch", workload: str = "cnn-mnist", dataset: str = "digits-28", epochs: int = 10,
         device: str = "cpu", timeout_s: float = 3600.0, train_samples: int | None = None) -> Cell:
    return Cell(suite="test", framework=framework, workload=workload, dataset=dataset, device=device, repetition=1,
                seed=0, epochs=epochs, batch_size=128, threads=2, timeout_s=timeout_s, train_samples=train_samples)


def run(framework: str, workload: str, repetition: int, steady: float, **fields) -> tuple[dict, list, list]:
    """A run of 4 epochs: a first of 1.5 x steady, evaluations of 0.05 s each, wall = training + 3 s."""
    row, epochs, samples = synthetic_run(framework, workload, repetition, steady, 0.9, position=repetition)
    row.update(fields)
    return row, epochs, samples


def make_store(path: Path, runs: list[tuple[dict, list, list]], peaks: tuple[dict, ...] = ()) -> Path:
    with Store(path / "dlbench.sqlite") as store:
        for row, epochs, samples in runs:
            store.save_run(row, epochs, samples)
        for peak in peaks:
            store.save_peak(peak)
    return path


@pytest.fixture()
def two_repetitions(tmp_path: Path) -> Path:
    """pytorch cnn-mnist on digits-28 twice: steady epochs of 1.0 s and 1.2 s, 1,000 training samples."""
    return make_store(tmp_path / "results", [
        run("pytorch", "cnn-mnist", 1, 1.0, n_train=1000, flops_per_sample=MNIST_FLOPS),
        run("pytorch", "cnn-mnist", 2, 1.2, n_train=1000, flops_per_sample=MNIST_FLOPS)])


def forecast(results: Path, cells: list[Cell], tmp_path: Path) -> list[Forecast]:
    return forecast_plan(cells, results, tmp_path / "no-data", HERE).forecasts


def test_a_cell_with_runs_of_its_own(two_repetitions: Path, tmp_path: Path) -> None:
    # run 1: epochs 1.5 + 3 x 1.0 s of training, 4 x 0.05 s of evaluation, wall 4.5 + 3 = 7.5 s; an epoch
    # costs 1.05 s, so the fixed cost is 7.5 - 4 x 1.05 = 3.3 s and 10 epochs take 3.3 + 10.5 = 13.8 s.
    # run 2: wall 1.8 + 3.6 + 3 = 8.4 s, epoch 1.25 s, fixed 3.4 s, 10 epochs 3.4 + 12.5 = 15.9 s.
    [found] = forecast(two_repetitions, [cell(epochs=10)], tmp_path)
    assert found.seconds == pytest.approx((13.8 + 15.9) / 2)
    assert (found.low, found.high) == (pytest.approx(13.8), pytest.approx(15.9))
    assert found.basis == "2 runs" and not found.extrapolated


def test_a_version_not_run_yet_goes_by_its_other_versions_runs(two_repetitions: Path, tmp_path: Path) -> None:
    """A sweep over releases: pytorch@2.8.0 has no run of its own, so its cell is forecast from the default
    version's runs of the same cell (the store's "pytorch" runs are of 2.13.0), and the basis names them."""
    [found] = forecast(two_repetitions, [cell("pytorch@2.8.0", epochs=10)], tmp_path)
    assert found.seconds == pytest.approx((13.8 + 15.9) / 2) and found.kind == "versions" and found.extrapolated
    assert found.basis == "2 runs of 2.13.0"
    [other] = forecast(two_repetitions, [cell("jax@0.6.2", epochs=10)], tmp_path)
    assert other.kind != "versions"  # another framework's runs are no version of it


def test_repetitions_and_the_makespan_on_nodes(two_repetitions: Path, tmp_path: Path) -> None:
    cells = [cell(epochs=10), cell(epochs=4), cell(epochs=20)]
    seconds = [f.seconds for f in forecast(two_repetitions, cells, tmp_path)]
    # fixed (3.3 + 3.4) / 2 = 3.35 s plus epochs x (1.05 + 1.25) / 2 = 1.15 s
    assert seconds == [pytest.approx(3.35 + e * 1.15) for e in (10, 4, 20)]
    # two nodes in plan order: 14.85 on node 1, 7.95 on node 2, then 26.35 on node 2 from 7.95: ends at 34.3
    assert makespan.list_schedule(seconds, 2) == pytest.approx(7.95 + 26.35)
    # longest first: 26.35 on node 1, 14.85 and then 7.95 on node 2: ends at 26.35
    assert makespan.longest_first(seconds, 2) == pytest.approx(26.35)
    assert makespan.list_schedule(seconds, 1) == pytest.approx(sum(seconds))
    assert makespan.list_schedule(seconds, 16) == pytest.approx(26.35)


def test_plan_order_is_not_longest_first() -> None:
    assert makespan.list_schedule([1, 1, 4], 2) == 5  # the 4 waits for a node freed at 1
    assert makespan.longest_first([1, 1, 4], 2) == 4
    assert makespan.lower_bound([1, 1, 4], 2) == 4
    with pytest.raises(ValueError):
        makespan.list_schedule([1.0], 0)


def test_another_dataset_is_scaled_by_work(two_repetitions: Path, tmp_path: Path) -> None:
    # MNIST's 60,000 training samples of the same model against the runs' 1,000: every epoch 60 times the
    # work (digits-28 is not prepared in the test's data folder, so its evaluation scales with training)
    [found] = forecast(two_repetitions, [cell(dataset="mnist", epochs=15)], tmp_path)
    assert found.seconds == pytest.approx(((3.3 + 15 * 1.05 * 60) + (3.4 + 15 * 1.25 * 60)) / 2)
    assert found.extrapolated and found.kind == "scaled" and found.basis == "scaled from digits-28"


def test_the_first_n_training_samples_scale_the_work(two_repetitions: Path, tmp_path: Path) -> None:
    # half of MNIST's 60,000 training samples: every epoch 30 times the runs' 1,000-sample work, not 60 times
    [half] = forecast(two_repetitions, [cell(dataset="mnist", epochs=15, train_samples=30_000)], tmp_path)
    assert half.seconds == pytest.approx(((3.3 + 15 * 1.05 * 30) + (3.4 + 15 * 1.25 * 30)) / 2)
    assert half.basis == "scaled from digits-28"
    assert shown.cell_table([half]).splitlines()[-1] == "cnn-mnist on mnist trains on its first 30,000 training samples"
    # the runs trained on all of digits-28: they are not the cell's own runs when it trains on its first 500
    [first] = forecast(two_repetitions, [cell(epochs=10, train_samples=500)], tmp_path)
    assert first.kind == "none"  # digits-28 is not prepared in the test's data folder: its size is unknown
    # runs of the first 500 are the own runs of a cell of the first 500, and the basis says what they trained on
    row, epochs, samples = run("pytorch", "cnn-mnist", 1, 1.0, n_train=500, flops_per_sample=MNIST_FLOPS)
    row["config"].update(train_samples=500, dataset_n_train=1000)
    results = make_store(tmp_path / "first", [(row, epochs, samples)])
    [own] = forecast(results, [cell(epochs=10, train_samples=500)], tmp_path)
    assert own.kind == "runs" and own.seconds == pytest.approx(13.8)
    [more] = forecast(results, [cell(dataset="mnist", epochs=15, train_samples=1000)], tmp_path)
    assert more.basis == "scaled from digits-28 (first 500 of 1,000)"
    assert more.seconds == pytest.approx(3.3 + 15 * 1.05 * 2)


def test_a_workload_without_runs_goes_by_the_frameworks_gflops(tmp_path: Path) -> None:
    results = make_store(tmp_path / "results", [
        run("jax", "lstm-ptb", 1, 1.0, achieved_gflops=10.0), run("jax", "lstm-imdb", 1, 2.0, achieved_gflops=40.0)])
    [found] = forecast(results, [cell("jax", dataset="mnist", epochs=2)], tmp_path)
    # the fixed costs are 3.3 s and (3 + 3 + 6) - 4 x 2.05 = 3.8 s; the rates 10 and 40 GFLOP/s; an epoch is
    # 60,000 training samples and 10,000 test samples at a third of a training sample's FLOPs
    flops = 60_000 * MNIST_FLOPS + 10_000 * MNIST_FLOPS / 3
    assert found.seconds == pytest.approx(3.55 + 2 * flops / 25e9)
    assert (found.low, found.high) == (pytest.approx(3.55 + 2 * flops / 40e9), pytest.approx(3.55 + 2 * flops / 10e9))
    assert found.kind == "rate" and found.basis == "jax GFLOP/s"
    # a framework the store never ran: every framework's rates
    [other] = forecast(results, [cell("pytorch", dataset="mnist", epochs=2)], tmp_path)
    assert other.kind == "all rate" and other.seconds == pytest.approx(found.seconds)


def test_a_gpu_cell_from_a_cpu_store_says_so(two_repetitions: Path, tmp_path: Path) -> None:
    [found] = forecast(two_repetitions, [cell(device="gpu")], tmp_path)
    assert found.stand_in == "cpu" and found.extrapolated and found.basis == "cpu: 2 runs"
    assert found.cell.device == "gpu" and found.seconds == pytest.approx((13.8 + 15.9) / 2)


def test_a_cell_stops_at_its_timeout(two_repetitions: Path, tmp_path: Path) -> None:
    [found] = forecast(two_repetitions, [cell(timeout_s=10.0)], tmp_path)
    assert found.capped and found.seconds == 10.0 and found.uncapped_s == pytest.approx(14.85)


def test_every_line_fits_120_columns(two_repetitions: Path, tmp_path: Path) -> None:
    cells = [cell(dataset="mnist", device="gpu", timeout_s=60.0, epochs=1000), cell("keras-tensorflow", device="gpu")]
    estimate = forecast_plan(cells, two_repetitions, tmp_path / "no-data", HERE)
    text = shown.cell_table(estimate.forecasts) + "\n" + shown.summary(estimate, 16)
    assert "TIMEOUT" in text and "cpu runs stand in" in text
    assert max(len(line) for line in text.splitlines()) <= 120


def test_nothing_to_go_by(tmp_path: Path) -> None:
    estimator = Estimator([], tmp_path)
    assert estimator.forecast(cell()).seconds is None
    # a stand-in dataset that is not prepared has no known size to scale to
    results = make_store(tmp_path / "results", [run("pytorch", "lstm-ptb", 1, 1.0)])
    [found] = forecast(results, [cell(dataset="photo-patches-10", workload="cnn-cifar10")], tmp_path)
    assert found.seconds is None and found.kind == "none" and "not prepared" in found.basis


def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text("name: small\nframeworks: [pytorch]\nthreads: 2\n"
                    "workloads:\n  - workload: cnn-mnist\n    dataset: digits-28\n    epochs: 10\n")
    return path


def test_the_command_prints_cells_and_totals(two_repetitions: Path, tmp_path: Path, capsys) -> None:
    assert cli.main(["estimate", str(suite_file(tmp_path)), "--results", str(two_repetitions), "--repeat", "3",
                     "--nodes", "2", "--data-dir", str(tmp_path / "no-data")]) == 0
    out = capsys.readouterr().out
    assert "forecast of small: 3 cells" in out
    assert out.count("14.9s 13.8s-15.9s") == 3  # each repetition's line: forecast and interval
    assert "on one node (the local executor): 44.6s [41.4s-47.7s]: 3 cells and 1 GEMM peaks (0.0s)" in out
    assert "on 2 nodes, cells in plan order as the Ray executor dispatches them: 29.7s" in out
    assert max(len(line) for line in out.splitlines()) <= 120


@pytest.mark.parametrize("nodes", ["0", "-1", "nan", "NaN", "1.5"])
def test_bad_nodes_exit_2(nodes: str, two_repetitions: Path, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["estimate", "quick", "--results", str(two_repetitions), f"--nodes={nodes}"])
    assert stopped.value.code == 2
    assert "--nodes" in capsys.readouterr().err


def test_unknown_suite_and_missing_store_exit_2(tmp_path: Path, capsys) -> None:
    assert cli.main(["estimate", "no-such-suite", "--results", str(tmp_path)]) == 2
    assert "unknown suite 'no-such-suite'" in capsys.readouterr().err
    assert cli.main(["estimate", "quick", "--results", str(tmp_path / "none")]) == 2
    assert "no results store at" in capsys.readouterr().err
    with pytest.raises(EstimateError):
        forecast_plan([cell()], tmp_path / "none", tmp_path, HERE)


def test_runs_of_other_hardware() -> None:
    from dlbench.harness.analysis.estimate import usable_runs

    mine, other = {"device": "cpu", "machine": HERE}, {"device": "cpu", "machine": {"cpu_model": "Other CPU"}}
    assert usable_runs([mine, other], HERE) == ([mine], "1 runs of other hardware left out")
    kept, note = usable_runs([other], HERE)
    assert kept == [other] and note is not None and "forecast from Other CPU" in note


def test_plan_peakss_cost_once_per_framework_and_node(tmp_path: Path) -> None:
    # the synthetic runs start at 10:00:01 and 10:00:02; the peak began at 10:00:00: it took 1 s
    peak = {"framework": "pytorch", "threads": 2, "device": "cpu", "measured_at": "2026-12-03T10:00:00+0000",
            "gflops": 50.0}
    runs = [run("pytorch", "cnn-mnist", 1, 1.0), run("pytorch", "cnn-mnist", 2, 1.2)]
    results = make_store(tmp_path / "results", runs, (peak,))
    estimate = forecast_plan([cell(epochs=e) for e in (10, 4, 20)], results, tmp_path / "no-data", HERE)
    assert estimate.setup("pytorch") == 1.0 and estimate.setup("jax") == 1.0  # a framework without one: the median
    seconds = [f.seconds for f in estimate.forecasts]
    keys = ["pytorch"] * 3
    assert makespan.list_schedule(seconds, 1, keys, estimate.setup) == pytest.approx(sum(seconds) + 1)
    # each of the two nodes measures pytorch's peak before its first cell; the third cell runs on a node that has
    assert makespan.list_schedule(seconds, 2, keys, estimate.setup) == pytest.approx(1 + 7.95 + 26.35)


def test_evaluation_scales_with_the_prepared_test_sets(two_repetitions: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    for name, n_train, n_test in (("digits-28", 1000, 250), ("mnist", 60_000, 10_000)):
        (data_dir / "prepared" / name).mkdir(parents=True)
        (data_dir / "prepared" / name / "meta.json").write_text(
            f'{{"n_train": {n_train}, "n_test": {n_test}, "input_shape": [28, 28, 1], "num_classes": 10}}')
    [found] = forecast_plan([cell(dataset="mnist", epochs=15)], two_repetitions, data_dir, HERE).forecasts
    # an epoch's training (1.0 s, 1.2 s) 60 times over, its evaluation (0.05 s) 10,000 / 250 = 40 times
    assert found.seconds == pytest.approx(((3.3 + 15 * (60 + 2)) + (3.4 + 15 * (72 + 2))) / 2)


def test_the_serve_suite_forecasts_from_inference_runs_or_says_it_has_none(two_repetitions: Path, tmp_path: Path,
                                                                           capsys) -> None:
    """An inference cell has no epochs: a training store has nothing to forecast it from, and says so per cell;
    the store's inference runs of the same cell (same serving settings) give its wall time."""
    assert cli.main(["estimate", "serve", "--results", str(two_repetitions), "-f", "pytorch",
                     "--data-dir", str(tmp_path / "no-data")]) == 0
    out = capsys.readouterr().out
    assert "forecast of serve: 6 cells" in out and out.count("no inference run of this cell") == 6 + 1
    assert "not forecast, left out of the totals: 6 cells (no inference run of this cell)" in out
    assert max(len(line) for line in out.splitlines()) <= 120
    from synthetic_store import serving_run

    from dlbench.harness.plan.suite import Serve

    with Store(two_repetitions / "dlbench.sqlite") as store:
        for repetition, wall in ((1, 9.0), (2, 11.0)):
            row, latencies = serving_run("pytorch", "cnn-mnist", repetition, [0.002] * 50, 900.0)
            store.save_run(dict(row, wall_time_s=wall), [], [], latencies)
    served = replace(cell(epochs=0), mode="inference", serve=Serve(20, 50, 128, 1024))
    other = replace(served, serve=Serve(20, 200, 128, 1024))  # other latency calls: another cell
    found, none = forecast(two_repetitions, [served, other], tmp_path)
    assert (found.seconds, found.low, found.high, found.basis, found.kind) == (10.0, 9.0, 11.0, "2 runs", "runs")
    assert (none.seconds, none.kind, none.basis) == (None, "none", "no inference run of this cell")
    # training cells are forecast from the training runs alone, as before
    [trained] = forecast(two_repetitions, [cell(epochs=10)], tmp_path)
    assert trained.basis == "2 runs" and trained.seconds == pytest.approx((13.8 + 15.9) / 2)
