"""Achieved FLOP/s and MFU, the GEMM peak (dlbench.peak, measured in the PyTorch environment), the cores a
run used against its threads, and how `dlbench results` shows them."""
import json
from pathlib import Path

import pytest
from analysis_runs import build_store, run_dict

from dlbench.harness.analysis import measures
from dlbench.harness.environments import disk, envs, process
from dlbench.harness.measure import cores, gemm_peak
from dlbench.harness.plan import suite
from dlbench.harness.present import listing, report
from dlbench.harness.run import cell_config, one_cell, plan_peaks, record
from dlbench.harness.run.cell_config import Options, Prepared
from dlbench.harness.run.local import run_plan
from dlbench.harness.store import Store


def test_achieved_gflops_and_mfu_arithmetic():
    # cnn-mnist on digits-28: 1,257 training samples a steady epoch of 0.8 s at 3x the forward FLOPs
    assert gemm_peak.achieved_gflops(60_000_000, 1257, 0.8) == pytest.approx(60e6 * 1257 / 0.8 / 1e9)
    assert gemm_peak.achieved_gflops(60_000_000, 1257, None) is None  # one epoch: no steady epoch
    assert gemm_peak.achieved_gflops(None, 1257, 0.8) is None
    assert gemm_peak.mfu(94.275, 62.85) == pytest.approx(1.5)
    assert gemm_peak.mfu(30.0, None) is None and gemm_peak.mfu(None, 60.0) is None


def sample(t: float, cpu: float, system: float = 0.0) -> dict:
    return {"t_s": t, "cpu_percent": cpu, "system_cpu_percent": system}


EVENTS = [{"event": "start"}, {"event": "ready"},
          {"event": "epoch_start", "epoch": 1}, {"event": "epoch_trained", "epoch": 1},
          {"event": "epoch", "epoch": 1, "train_time_s": 1.0, "eval_time_s": 0.5},
          {"event": "epoch_start", "epoch": 2}, {"event": "epoch_trained", "epoch": 2},
          {"event": "epoch", "epoch": 2, "train_time_s": 1.0, "eval_time_s": 0.5}, {"event": "done"}]
TIMES = [0.0, 1.0, 1.0, 2.0, 2.5, 2.5, 3.5, 4.0, 4.0]


def test_cores_used_counts_the_steady_training_only():
    # start-up and the first epoch on one core, evaluation on none, the steady epoch on two
    samples = [sample(t / 10, 200.0 if 25 < t <= 35 else 100.0 if t <= 25 else 0.0) for t in range(1, 41)]
    assert cores.training_windows(EVENTS, TIMES) == [(2.5, 3.5)]
    assert cores.used(samples, EVENTS, TIMES) == pytest.approx(2.0)
    assert cores.flag(2.0, 2) is None


def test_cores_windows_of_a_worker_without_boundary_events():
    old = [e for e in EVENTS if e["event"] not in ("epoch_start", "epoch_trained")]
    times = [t for e, t in zip(EVENTS, TIMES, strict=True) if e["event"] not in ("epoch_start", "epoch_trained")]
    assert cores.training_windows(old, times) == [(2.5, 3.5)]


def test_too_few_samples_give_no_figure_and_no_flag():
    samples = [sample(2.6 + i / 10, 100.0) for i in range(cores.MIN_SAMPLES - 1)]
    assert cores.used(samples, EVENTS, TIMES) is None
    assert cores.flag(None, 2) is None


def test_flags_far_fewer_and_far_more_cores_than_asked():
    assert cores.flag(0.96, 2) == "used 1.0 of 2 cores"
    assert cores.flag(1.17, 2) is None  # the fewest a normal run here used (Keras-TensorFlow's lstm-ptb)
    assert cores.flag(1.0, 32) == "used 1.0 of 32 cores"  # the study's MXNet
    assert cores.flag(1.9, 1) == "used 1.9 of 1 cores"
    assert cores.flag(1.05, 1) is None
    assert cores.flag(0.6, 2, busy=1.3) == "used 0.6 of 2 cores while other processes kept 1.3 cores busy"
    # Keras-TensorFlow's LSTM on the idle AMD EPYC: the framework's own doing, not the machine's
    assert cores.flag(1.02, 2, busy=0.03) == "used 1.0 of 2 cores while other processes were idle (0.03 cores)"
    assert cores.flag(1.02, 2, busy=0.49) == "used 1.0 of 2 cores while other processes were idle (0.49 cores)"
    assert cores.flag(1.02, 2, busy=0.5) == "used 1.0 of 2 cores while other processes kept 0.5 cores busy"
    assert cores.flag(1.9, 2, busy=0.01) is None
    samples = [sample(2.6 + i / 10, 50.0, system=75.0) for i in range(8)]  # 1.5 of 2 cores busy, 0.5 ours
    assert cores.others(samples, EVENTS, TIMES, 2) == pytest.approx(1.0)


def test_a_run_without_a_cores_figure_says_why():
    def epochs(*train: float) -> list[dict]:
        return [{"epoch": n, "train_time_s": t} for n, t in enumerate(train, 1)]

    short = stored_run(epochs=epochs(3.0, 0.3, 0.4))  # 0.7 s of steady training: 3 samples of 0.2 s
    assert measures.cores_text(short) == ("n/a: steady training of 0.70 s, under the 1.0 s (5 samples) the sampler "
                                          "needs")
    assert measures.cores_text(stored_run(status="failed", epochs=[])) == (
        "n/a: the run ended failed before it timed an epoch")
    assert measures.cores_text(stored_run(mode="inference")) == "n/a: an inference run has no training to measure"
    assert measures.cores_text(stored_run(epochs=epochs(3.0, 2.0, 2.0))) == "-"  # long enough: stored before
    assert measures.cores_text(stored_run(cores_used=1.5, epochs=epochs(3.0, 0.3))) == "1.50"


def stored_run(**fields) -> dict:
    return {"framework": "pytorch", "workload": "cnn-mnist", "status": "ok", "device": "cpu", "epochs": [],
            **fields}


def saved(run: dict) -> dict:
    return {k: v for k, v in run.items() if k != "epochs"}


def test_results_table_shows_gflops_mfu_cores_and_energy():
    runs = [stored_run(achieved_gflops=31.25, mfu=0.4961, cores_used=1.96, n_train=100,
                       energy_source="cpu: no /sys/class/powercap; gpu: device cpu"),
            stored_run(framework="mxnet", achieved_gflops=12.0, peak_id=2, cores_used=0.98,
                       cores_flag="used 1.0 of 2 cores", n_train=100,
                       epochs=[{"epoch": 1, "metric_value": 0.5, "train_time_s": 1.0, "energy_cpu_j": 50.0},
                               {"epoch": 2, "metric_value": 0.6, "train_time_s": 1.0, "energy_cpu_j": 20.0}],
                       energy_source="cpu: RAPL package-0 (no dram zone); gpu: device cpu"),
            stored_run(framework="old")]
    heading, _, *rows = listing.table(runs, listing.column_names(), width=None).splitlines()
    for name in ("GFLOP/s", "MFU", "cores", "energy/sample"):
        assert name in heading.split()
    row = {line.split()[0]: line for line in rows}  # by framework: rows are sorted, not in stored order
    assert "31.2" in row["pytorch"] and "49.6% of 63 GFLOP/s" in row["pytorch"] and "1.96" in row["pytorch"]
    assert "n/a: no /sys/class/powercap" in row["pytorch"]
    assert "no peak" in row["mxnet"] and "FLAG used 1.0 of 2 cores" in row["mxnet"] and "cpu 0.2 J" in row["mxnet"]
    assert measures.mfu_text(runs[2]) == "-" and measures.cores_text(runs[2]) == "-"


@pytest.fixture
def fake_plan(tmp_path, monkeypatch):
    """run_plan with the worker replaced by a run row and the peak by `peaks` (framework -> gflops or an error)."""
    monkeypatch.setattr(cell_config.envs, "require", lambda framework, device="cpu": None)
    monkeypatch.setattr(disk, "mark_used", lambda env: None)  # no environment to stamp
    peaks: dict[str, float | None] = {}
    measured: list[tuple] = []

    env = envs.Environment("pytorch", tmp_path / "env")
    env.path.mkdir()
    env.info_file.write_text(json.dumps({"packages": {"numpy": "1.0"}, "python_version": "3.11"}))

    def resolve(cell: suite.Cell, data_dir: Path) -> Prepared:
        config = {"framework": cell.framework, "workload": cell.workload, "seed": cell.seed,
                  "repetition": cell.repetition, "threads": 2}
        return Prepared(cell, None, None, env, config)

    def run_cell(prepared: Prepared, options: Options, on_event) -> record.Ran:
        cell = prepared.cell
        return record.Ran({"cell_hash": prepared.hash, "framework": cell.framework, "workload": cell.workload,
                           "repetition": cell.repetition, "status": "ok", "achieved_gflops": 30.0})

    def measure_peak(prepared: Prepared, options: Options, threads: int) -> dict:
        measured.append((prepared.cell.framework, threads))
        gflops = peaks[prepared.cell.framework]
        return {"framework": prepared.cell.framework, "threads": threads, "device": prepared.cell.device,
                "gflops": gflops, "reason": None if gflops else "peak not measured: RuntimeError: no GEMM"}

    monkeypatch.setattr(cell_config, "resolve", resolve)
    monkeypatch.setattr(one_cell, "run_cell", run_cell)
    monkeypatch.setattr(plan_peaks, "measure_peak", measure_peak)
    monkeypatch.setattr(record, "certificate_status", lambda prepared: "none")
    return peaks, measured


def test_run_plan_measures_each_peak_once_and_links_runs_to_it(tmp_path, fake_plan):
    peaks, measured = fake_plan
    peaks.update(pytorch=60.0, theano=None)
    cells = [suite.Cell("s", framework, workload, "digits-28", "cpu", 1, 0, 2, 32, 2, 60.0)
             for framework in ("pytorch", "theano") for workload in ("cnn-mnist", "lstm-imdb")]
    run_plan(cells, Options(tmp_path / "results", tmp_path / "data"), lambda *args: None)
    assert measured == [("pytorch", 2), ("theano", 2)]  # once per environment, threads and device
    with Store(tmp_path / "results" / "dlbench.sqlite") as store:
        stored_peaks, runs = store.peaks(), store.runs()
    assert [(p["framework"], p["gflops"], p["reason"]) for p in stored_peaks] == [
        ("pytorch", 60.0, None), ("theano", None, "peak not measured: RuntimeError: no GEMM")]
    assert stored_peaks[0]["machine"]["logical_cores"] >= 1
    by_framework = {(r["framework"], r["workload"]): r for r in runs}
    assert by_framework[("pytorch", "cnn-mnist")]["mfu"] == pytest.approx(0.5)
    assert by_framework[("pytorch", "lstm-imdb")]["peak_id"] == stored_peaks[0]["id"]
    theano = by_framework[("theano", "cnn-mnist")]
    assert (theano["peak_id"], theano["mfu"]) == (stored_peaks[1]["id"], None)
    assert measures.mfu_text(theano) == "no peak"


@pytest.mark.framework
def test_peak_of_the_pytorch_environment(tmp_path):
    """A small product (the default, 2048, saturates the CPUs) through the harness's own call."""
    env = envs.require("pytorch")
    recipe = envs.get_recipe("pytorch")
    command = [str(env.python), "-m", "dlbench.worker.gemm_peak", recipe.adapter, "--threads", "1", "--size", "256",
               "--repeats", "3"]
    found = gemm_peak.run(command, process.worker_environment(tmp_path, 1, recipe.worker_env), tmp_path)
    assert found["method"] == "torch.matmul" and found["gflops"] > 0
    assert found["others_busy_cores"] >= 0  # what the rest of the machine ran meanwhile


def test_results_lists_the_peaks_with_the_reason_of_a_failed_one(tmp_path, capsys):
    from dlbench.harness import cli
    with Store(tmp_path / "dlbench.sqlite") as store:
        store.save_run(saved(stored_run(cell_hash="h", peak_id=1, achieved_gflops=30.0, mfu=0.5)), [], [])
        store.save_peak({"framework": "pytorch", "framework_version": "2.13.0", "threads": 2, "device": "cpu",
                         "matrix_size": 2048, "gflops": 60.0, "method": "torch.matmul", "others_busy_cores": 0.1})
        store.save_peak({"framework": "theano", "threads": 2, "device": "cpu", "matrix_size": 2048,
                         "reason": "peak not measured: RuntimeError: no GEMM"})
    assert cli.main(["results", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    peaks = out[out.index("peak  "):].splitlines()
    assert "60.00" in peaks[2] and "torch.matmul" in peaks[2] and "0.1000" in peaks[2]
    assert "- (peak not measured: RuntimeError: no GEMM)" in peaks[3]


@pytest.mark.framework
def test_a_peak_that_cannot_be_measured_is_null_with_its_reason(tmp_path):
    env = envs.require("pytorch")
    command = [str(env.python), "-m", "dlbench.worker.gemm_peak", "dlbench.worker.frameworks.no_such_framework:Adapter",
               "--size", "64"]
    found = gemm_peak.run(command, process.worker_environment(tmp_path, 1, {}), tmp_path)
    assert found["gflops"] is None and found["reason"].startswith("peak not measured: ModuleNotFoundError")
    missing = gemm_peak.run([str(tmp_path / "no-python")], {}, tmp_path)
    assert missing["gflops"] is None and "No such file" in missing["reason"]


def test_report_shows_mfu_per_cell_and_flags_runs_in_the_run_order(tmp_path):
    runs = []
    for framework, gflops, mfu, flag in (("pytorch", 30.0, 0.5, None), ("mxnet", 10.0, None, "used 1.0 of 2 cores")):
        for repetition in (1, 2):
            runs.append({**run_dict(framework, "cnn-mnist", 1.0, repetition), "achieved_gflops": gflops + repetition,
                         "mfu": mfu, "peak_id": 1, "cores_used": 1.96 if flag is None else 0.98, "cores_flag": flag,
                         "n_train": 100, "energy_source": "cpu: no /sys/class/powercap; gpu: device cpu"})
    build_store(tmp_path, runs)
    with Store(tmp_path / "dlbench.sqlite") as store:  # peak 1, measured beside 1.2 busy cores
        store.save_peak({"framework": "pytorch", "threads": 2, "device": "cpu", "matrix_size": 2048, "gflops": 63.0,
                         "method": "torch.matmul", "others_busy_cores": 1.2})
    loaded = report.load(tmp_path / "dlbench.sqlite")
    table = next(t for t in loaded.study_tables if t.title == "Achieved FLOP/s and MFU, cpu")
    by_column = dict(zip(table.header, table.rows[0], strict=True))
    # 2 runs: [min-max] covers the median half the time, and says so; the MFU is against the machine's peak, the
    # only one here (31 and 32 of 63), and PyTorch's own GEMM is all of it
    assert by_column["pytorch"] == ("GFLOP/s 31.5 [31-32, 50%]; MFU 50.0% [49.2-50.8, 50%] of 63 GFLOP/s, own GEMM "
                                    "100% ‡")
    # MXNet's own peak failed (no mfu): its MFU is still against the machine's, its own GEMM share unknown
    assert by_column["mxnet"] == "GFLOP/s 11.5 [11-12, 50%]; MFU 18.3% [17.5-19.0, 50%] of 63 GFLOP/s ‡ †"
    assert "one denominator for every framework" in table.note and "(machine's peak here 63 GFLOP/s)" in table.note
    assert "GEMM peaks differ" not in table.note  # one framework's peak: nothing to compare
    assert "‡: a peak measured while other processes kept 0.5 cores or more busy" in table.note
    assert "†: a run of this cell used far fewer or more cores than its threads" in table.note
    training = next(t for t in loaded.study_tables if t.title == "Training time, cpu")
    assert training.rows[0][training.header.index("mxnet")].endswith(" †")
    assert not training.rows[0][training.header.index("pytorch")].endswith(" †")
    order = next(t for t in loaded.manifest if t.title == "Run order")
    columns = {name: [row[i] for row in order.rows] for i, name in enumerate(order.header)}
    assert "FLAG used 1.0 of 2 cores" in columns["cores busy"] and "1.96" in columns["cores busy"]
    assert set(columns["energy/sample"]) == {"n/a: no /sys/class/powercap"}
    assert set(columns["MFU"]) == {"50.0% of 62 GFLOP/s", "50.0% of 64 GFLOP/s", "no peak"}
    [finding] = loaded.findings
    assert any(c.startswith("Threads not used as asked: mxnet rep 1 used 1.0 of 2 cores; mxnet rep 2 used")
               for c in finding.caveats)
    assert "Achieved FLOP/s and MFU, cpu" in report.render(loaded, "md")


def test_mfu_has_one_denominator_the_machines_best_gemm_and_the_gap_is_stated(tmp_path):
    """The AMD EPYC of issue 41: torch.matmul 207 GFLOP/s, JAX 477. PyTorch's MFU is against 477, its own GEMM
    43 % of it; the gap between the peaks is said in the table's note."""
    runs = [{**run_dict(framework, "cnn-mnist", 1.0, repetition), "achieved_gflops": gflops, "peak_id": peak_id,
             "mfu": gflops / own, "n_train": 100}
            for framework, gflops, peak_id, own in (("pytorch", 150.0, 1, 207.0), ("jax", 48.0, 2, 477.0))
            for repetition in (1, 2)]
    build_store(tmp_path, runs)
    machine = {"cpu_model": "AMD EPYC 9R45", "logical_cores": 2}
    with Store(tmp_path / "dlbench.sqlite") as store:
        for framework, gflops, method in (("pytorch", 207.0, "torch.matmul"), ("jax", 477.0, "jnp.matmul")):
            store.save_peak({"framework": framework, "threads": 2, "device": "cpu", "matrix_size": 2048,
                             "gflops": gflops, "method": method, "machine": machine, "others_busy_cores": 0.02})
        peak_rows = store.peaks()
    assert [p["gflops"] for p in measures.machine_peaks(peak_rows).values()] == [477.0]
    assert measures.gemm_gap(peak_rows) == ["float32 GEMM peaks differ between frameworks on AMD EPYC 9R45 (cpu, 2 "
                                            "threads): pytorch 207 GFLOP/s to jax 477 GFLOP/s, 2.3x"]
    loaded = report.load(tmp_path / "dlbench.sqlite")
    table = next(t for t in loaded.study_tables if t.title == "Achieved FLOP/s and MFU, cpu")
    by_column = dict(zip(table.header, table.rows[0], strict=True))
    assert by_column["pytorch"] == "GFLOP/s 150 [150-150, 50%]; MFU 31.4% [31.4-31.4, 50%] of 477 GFLOP/s, own GEMM 43%"
    assert by_column["jax"] == "GFLOP/s 48 [48-48, 50%]; MFU 10.1% [10.1-10.1, 50%] of 477 GFLOP/s, own GEMM 100%"
    assert "pytorch 207 GFLOP/s to jax 477 GFLOP/s, 2.3x" in table.note
    # and at the top of the report, a finding about the machine's libraries, not a footnote
    assert ("float32 GEMM peaks differ between frameworks on AMD EPYC 9R45 (cpu, 2 threads): pytorch 207 GFLOP/s to "
            "jax 477 GFLOP/s, 2.3x: the frameworks' matrix-multiply libraries differ; every MFU here is against the "
            "best") in loaded.caveats


def detector_epochs(splits: list[tuple[float, float, float, float]]) -> list[dict]:
    """Epochs of (train s, host s, NMS s, framework s)."""
    return [{"epoch": e, "train_time_s": train, "metric_value": 0.1, "host_time_s": host, "nms_time_s": nms,
             "framework_time_s": framework} for e, (train, host, nms, framework) in enumerate(splits, start=1)]


def test_results_and_report_show_where_a_detector_epoch_went(tmp_path):
    # the first epoch (compilation) is left out; the steady ones' medians: host 0.2, NMS 0.1, framework 0.6
    splits = {"pytorch": [(9.0, 1.0, 1.0, 6.0), (1.0, 0.2, 0.1, 0.6), (1.0, 0.3, 0.1, 0.5), (1.0, 0.2, 0.1, 0.65)],
              "chainer": [(2.0, 0.5, 0.5, 0.9), (2.0, 0.5, 0.5, 0.9)]}
    with Store(tmp_path / "dlbench.sqlite") as store:
        for framework, epochs in splits.items():
            store.save_run({**run_dict(framework, "frcnn-voc", 1.0, 1, dataset="photo-boxes"), "metric_name": "map"},
                           detector_epochs(epochs), [])
        store.save_run(run_dict("mxnet", "cnn-mnist", 1.0, 1), [{"epoch": 1, "train_time_s": 1.0}], [])
        runs = store.runs()
    assert measures.time_split(runs[0]) == pytest.approx(
        {"host": 0.2, "NMS": 0.1, "framework": 0.6, "rest": 0.1, "framework share": 0.6})
    assert measures.time_split(runs[2]) == {}
    heading, _, *rows = listing.table(runs, listing.column_names(), width=None).splitlines()
    assert "detector epoch" in heading
    row = {line.split()[0]: line for line in rows}  # by framework: rows are sorted, not in stored order
    assert "host 0.2, NMS 0.1, framework 0.6, rest 0.1 s (framework 60%)" in row["pytorch"]
    assert "host 0.5, NMS 0.5, framework 0.9, rest 0.1 s (framework 45%)" in row["chainer"]
    loaded = report.load(tmp_path / "dlbench.sqlite")
    [table] = [t for t in loaded.study_tables if t.title == "Detector epoch time by where it went, cpu"]
    assert table.header == ["workload (dataset)", "framework", "host s", "NMS s", "framework s", "rest s",
                            "framework share", "runs"]
    assert table.rows == [["frcnn-voc (photo-boxes)", "chainer 1.0", "0.5", "0.5", "0.9", "0.1", "45%", "1"],
                          ["frcnn-voc (photo-boxes)", "pytorch 1.0", "0.2", "0.1", "0.6", "0.1", "60%", "1"]]
    assert "Detector epoch time by where it went, cpu" in report.render(loaded, "md")
