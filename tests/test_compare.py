"""dlbench compare on stores built in the test: a planted slowdown is found and fails the guard, none passes."""
import sys
from pathlib import Path

import guard
import numpy as np
import pytest
from analysis_runs import build_store, noisy, run_dict

from dlbench.harness.analysis import compare, stats
from dlbench.harness.cli import main

REPO = Path(__file__).resolve().parents[1]


def cells_of(folder: Path, medians: dict[str, float], reps: int, seed: int, metric: float = 0.9,
             version: str = "1.0") -> list[dict]:
    runs = []
    for i, (framework, median) in enumerate(medians.items()):
        for repetition, steady in enumerate(noisy(median, reps, 0.01, seed + 10 * i), 1):
            runs.append(run_dict(framework, "cnn-mnist", steady, repetition, metric=metric, version=version))
    return runs


def row(out: str, label: str) -> str:
    [line] = [line for line in out.splitlines() if line.endswith(label)]
    return line


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["compare", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def before(tmp_path) -> Path:
    return build_store(tmp_path / "before", cells_of(tmp_path, {"pytorch": 2.0, "jax": 1.0}, 5, seed=1))


def test_a_planted_slowdown_is_found_and_fails_the_guard(capsys, tmp_path, before):
    after_runs = cells_of(tmp_path, {"pytorch": 2.4, "jax": 1.0}, 5, seed=100, metric=0.85)
    after_runs.append(run_dict("jax", "lstm-imdb", 3.0, 1))  # a cell only B has
    after = build_store(tmp_path / "after", after_runs)
    code, out, _ = cli(capsys, "--baseline", str(before), "--results", str(after), "--fail-above", "5%")
    assert code == 1
    torch = row(out, "pytorch cnn-mnist digits-28 cpu").split()
    assert torch[0] == "+" and "slower;" in torch and "FAILS" in torch and "5/5" in torch
    assert float(torch[3]) == pytest.approx(1.2, abs=0.03) and "-5.0" in torch  # ratio B/A, metric B - A in points
    jax = row(out, "jax cnn-mnist digits-28 cpu")
    assert "no difference shown" in jax and "FAILS" not in jax
    assert "only in B:\n  jax lstm-imdb digits-28 cpu" in out
    assert "--fail-above 5%: 1 cell(s) slower by more than that" in out
    # a guard of 25 % lets the 20 % slowdown through, though it is still shown
    code, out, _ = cli(capsys, "--baseline", str(before), "--results", str(after), "--fail-above", "25")
    assert code == 0 and "slower" in row(out, "pytorch cnn-mnist digits-28 cpu")


def test_no_slowdown_passes(capsys, tmp_path, before):
    after = build_store(tmp_path / "after", cells_of(tmp_path, {"pytorch": 2.0, "jax": 1.0}, 5, seed=200))
    code, out, _ = cli(capsys, "--baseline", str(before / "dlbench.sqlite"), "--results", str(after),
                       "--fail-above", "5%")
    assert code == 0
    for framework in ("pytorch", "jax"):
        assert "no difference shown" in row(out, f"{framework} cnn-mnist digits-28 cpu")
    assert "no cell slower by more than that" in out


def test_comparison_values(tmp_path, before):
    after = build_store(tmp_path / "after", cells_of(tmp_path, {"pytorch": 2.4, "jax": 1.0}, 5, seed=100))
    result = compare.compare_stores(before, after)
    [torch] = [c for c in result.cells if c.label.startswith("pytorch")]
    a = [r["steady_epoch_s"] for r in cells_of(tmp_path, {"pytorch": 2.0}, 5, seed=1)]
    b = [r["steady_epoch_s"] for r in cells_of(tmp_path, {"pytorch": 2.4}, 5, seed=100)]
    assert torch.a.median == pytest.approx(np.median(a)) and torch.b.median == pytest.approx(np.median(b))
    assert torch.test.ratio.median == pytest.approx(np.median(b) / np.median(a))
    assert torch.test.p_value == pytest.approx(stats.mann_whitney(b, a))
    assert torch.test.p_adjusted == pytest.approx(min(1.0, 2 * torch.test.p_value))  # Holm over two cells
    assert torch.test.verdict == "slower" and torch.on_medians_alone is False


def test_single_runs_are_guarded_on_their_values_and_say_so(capsys, tmp_path):
    before = build_store(tmp_path / "a", [run_dict("pytorch", "cnn-mnist", 2.0, 1)])
    after = build_store(tmp_path / "b", [run_dict("pytorch", "cnn-mnist", 2.3, 1)])
    code, out, _ = cli(capsys, "--baseline", str(before), "--results", str(after), "--fail-above", "10%")
    assert code == 1 and "single runs; FAILS --fail-above 10%" in out
    assert "compares their medians (single values) alone" in out
    assert cli(capsys, "--baseline", str(before), "--results", str(after), "--fail-above", "20%")[0] == 0
    assert cli(capsys, "--baseline", str(before), "--results", str(after))[0] == 0  # no guard asked for


def test_cells_differing_in_recipe_do_not_match(capsys, tmp_path):
    before = build_store(tmp_path / "a", [run_dict("pytorch", "cnn-mnist", 2.0, 1, planned=3)])
    after = build_store(tmp_path / "b", [run_dict("pytorch", "cnn-mnist", 2.0, 1, planned=4)])
    result = compare.compare_stores(before, after)
    # alike in framework, workload, dataset and device: a digest of each configuration tells them apart
    [only_a], [only_b] = result.only_a, result.only_b
    assert result.cells == () and only_a != only_b
    assert {label.rsplit(" #", 1)[0] for label in (only_a, only_b)} == {"pytorch cnn-mnist digits-28 cpu"}
    code, out, _ = cli(capsys, "--baseline", str(before), "--results", str(after))
    assert code == 0 and "no cell has runs on both sides" in out


def on_axes(run: dict, threads: int, batch_size: int) -> dict:
    run["config"]["threads"] = threads
    run["config"]["recipe"]["batch_size"] = batch_size
    return run


def test_cells_of_other_threads_or_batch_sizes_match_only_across_those_axes(capsys, tmp_path):
    before = build_store(tmp_path / "a", [on_axes(run_dict("pytorch", "cnn-mnist", 2.0, rep), 1, 128)
                                          for rep in (1, 2, 3)])
    after = build_store(tmp_path / "b", [on_axes(run_dict("pytorch", "cnn-mnist", 1.0, rep), 2, 64)
                                         for rep in (1, 2, 3)])
    alone = compare.compare_stores(before, after)
    assert alone.cells == () and len(alone.only_a) == len(alone.only_b) == 1
    # one axis is not enough: the batch sizes differ too
    assert compare.compare_stores(before, after, across=["threads"]).cells == ()
    both = compare.compare_stores(before, after, across=["threads", "batch_size"])
    [cell] = both.cells
    assert cell.label == "pytorch cnn-mnist digits-28 cpu (threads 1 vs 2, batch_size 128 vs 64)"
    assert cell.test.ratio.median == pytest.approx(0.5)
    code, out, _ = cli(capsys, "--baseline", str(before), "--results", str(after))
    assert code == 0 and "no cell has runs on both sides" in out
    code, out, _ = cli(capsys, "--baseline", str(before), "--results", str(after), "--across", "threads",
                       "--across", "batch_size")
    assert code == 0 and "(threads 1 vs 2, batch_size 128 vs 64)" in out
    # a side holding several values of an axis in one cell is refused, naming them
    mixed = build_store(tmp_path / "c", [on_axes(run_dict("pytorch", "cnn-mnist", 1.0, rep), rep, 64)
                                         for rep in (1, 2)])
    with pytest.raises(compare.AnalysisError, match=r"--across threads: .* on several values of threads \(1, 2\)"):
        compare.compare_stores(before, mixed, across=["threads", "batch_size"])


def test_two_framework_versions_in_one_store(capsys, tmp_path):
    runs = cells_of(tmp_path, {"pytorch": 2.0}, 5, seed=1, version="2.8.0")
    runs += cells_of(tmp_path, {"pytorch": 2.4}, 5, seed=2, version="2.13.0")
    for run in runs[5:]:
        run["cell_hash"] += "-new"
    store = build_store(tmp_path / "r", runs)
    code, out, _ = cli(capsys, "--results", str(store), "--versions", "pytorch@2.8.0", "pytorch@2.13.0",
                       "--fail-above", "5%")
    assert code == 1 and "A: pytorch@2.8.0" in out and "slower" in row(out, "cnn-mnist digits-28 cpu")
    code, _, err = cli(capsys, "--results", str(store), "--versions", "pytorch@2.9", "pytorch@2.13.0")
    assert code == 2 and "no runs of pytorch@2.9 in" in err and "there: pytorch@2.13.0, pytorch@2.8.0" in err


@pytest.mark.parametrize("argv, message", [
    (["--baseline", "{missing}", "--results", "{store}"],
     "{missing} does not exist; give a results folder or a dlbench.sqlite file"),
    (["--baseline", "{empty}", "--results", "{store}"],
     "no results store in {empty} (expected {empty}/dlbench.sqlite)"),
    (["--baseline", "{store}", "--results", "{missing}"],
     "{missing} does not exist; give a results folder or a dlbench.sqlite file"),
    (["--baseline", "{store}", "--results", "{store}", "--fail-above", "five"],
     "--fail-above 'five' is not a percentage; expected a number"),
    (["--baseline", "{store}", "--results", "{store}", "--fail-above=-5%"], "--fail-above '-5%' is not a percentage"),
    (["--baseline", "{store}", "--results", "{store}", "--metric", "speed"],
     "--metric 'speed' is not one of: steady_epoch_s, train_time_s"),
    (["--results", "{store}", "--versions", "pytorch", "pytorch@2"], "--versions 'pytorch' is not FRAMEWORK@VERSION"),
])
def test_bad_input_exits_2_naming_the_value(capsys, tmp_path, argv, message):
    paths = {"missing": tmp_path / "nowhere", "empty": tmp_path / "empty",
             "store": build_store(tmp_path / "s", [run_dict("pytorch", "cnn-mnist", 2.0, 1)])}
    paths["empty"].mkdir()
    code, _, err = cli(capsys, *(arg.format(**paths) for arg in argv))
    assert code == 2 and err.startswith(f"dlbench: error: {message.format(**paths)}"), err
    assert not paths["missing"].exists()  # nothing created


@pytest.mark.parametrize("argv", [["{store}", "{store}"], ["{store}", "--versions", "pytorch@2.8.0", "pytorch@2.13.0"],
                                  [], ["--baseline", "{store}", "--versions", "pytorch@2.8.0", "pytorch@2.13.0"]])
def test_the_old_positional_form_and_a_missing_side_are_usage_errors_naming_the_new_form(capsys, tmp_path, argv):
    """Results folders as arguments were compare's old form: argparse refuses them, saying --results and
    --baseline; without --baseline or --versions (or with both) there is nothing to compare."""
    store = build_store(tmp_path / "s", [run_dict("pytorch", "cnn-mnist", 2.0, 1)])
    with pytest.raises(SystemExit) as stopped:
        main(["compare", *(arg.format(store=store) for arg in argv)])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.startswith("usage: dlbench compare") and "--baseline" in err
    if argv[:1] == ["{store}"]:
        assert f"results folders are no longer given as arguments ({store}" in err
        assert "use --results NEW --baseline OLD for two stores, or --results DIR --versions" in err


def test_results_defaults_to_the_results_folder_of_the_other_commands(capsys, tmp_path, before, monkeypatch):
    """--results is ./dlbench-results when not given, as in results, report and estimate."""
    build_store(tmp_path / "dlbench-results", cells_of(tmp_path, {"pytorch": 2.0, "jax": 1.0}, 5, seed=200))
    monkeypatch.chdir(tmp_path)
    code, out, _ = cli(capsys, "--baseline", str(before))
    assert code == 0 and f"B: {Path('dlbench-results') / 'dlbench.sqlite'}" in out


def test_noise_script_prints_cv_and_repetitions(tmp_path):
    runs = cells_of(tmp_path, {"pytorch": 2.0, "jax": 1.0}, 5, seed=1)
    runs.append(run_dict("jax", "lstm-imdb", 3.0, 1))
    store = build_store(tmp_path / "r", runs)
    done = guard.run([sys.executable, str(REPO / "benchmarks" / "noise.py"), str(store)], 600,
                     env={"PYTHONPATH": str(REPO / "src")})
    assert done.returncode == 0, done.stderr
    torch = [r["steady_epoch_s"] for r in runs if r["framework"] == "pytorch"]
    cv = np.std(torch, ddof=1) / np.mean(torch)
    line = [line for line in done.stdout.splitlines() if line.startswith("pytorch ")][0].split()
    assert float(line[-2]) == pytest.approx(cv, abs=5e-4)  # printed to 3 decimals
    assert int(line[-1]) == stats.repetitions_needed(cv)
    assert "jax lstm-imdb" in done.stdout and "1 run" in done.stdout


def theano_runs(state: str, shared: bool) -> list[dict]:
    runs = [run_dict("theano", "cnn-mnist", steady, rep) for rep, steady in enumerate(noisy(1.0, 3, 0.01, 5), 1)]
    for run in runs:
        run["compile_cache"] = state
        if shared:  # what the runner adds to a shared suite's theano configuration
            run["config"]["compile_cache"] = "shared"
    return runs


def test_first_epochs_match_only_runs_of_the_same_compile_cache_state():
    """A cold suite's theano runs against a shared suite's warm ones: their steady epochs compare (the
    setting changes none), their first epochs and training times never do."""
    cold, warm = theano_runs("cold", shared=False), theano_runs("warm", shared=True)
    steady = compare.compare_runs(cold, warm)
    assert [cell.label for cell in steady.cells] == ["theano cnn-mnist digits-28 cpu"]
    for metric in ("first_epoch_s", "train_time_s", "wall_time_s"):
        first = compare.compare_runs(cold, warm, metric=metric)
        assert first.cells == ()
        assert (first.only_a, first.only_b) == (("theano cnn-mnist digits-28 cpu (cold compile cache)",),
                                                ("theano cnn-mnist digits-28 cpu (warm compile cache)",))
    same = compare.compare_runs(cold, theano_runs("cold", shared=True), metric="first_epoch_s")
    assert [cell.label for cell in same.cells] == ["theano cnn-mnist digits-28 cpu (cold compile cache)"]


def on(cpu_model: str, run: dict) -> dict:
    return dict(run, machine={"hostname": "node", "cpu_model": cpu_model, "gpus": []})


def test_runs_on_different_cpu_models_are_never_matched_and_labels_say_which(tmp_path):
    before = build_store(tmp_path / "a", [on("CPU X", run_dict("pytorch", "cnn-mnist", 2.0, r)) for r in (1, 2)])
    after = build_store(tmp_path / "b", [on("CPU Y", run_dict("pytorch", "cnn-mnist", 1.0, r)) for r in (1, 2)])
    result = compare.compare_stores(before, after)
    assert result.cells == ()
    assert result.only_a == ("pytorch cnn-mnist digits-28 cpu: CPU X",)
    assert result.only_b == ("pytorch cnn-mnist digits-28 cpu: CPU Y",)
    same = build_store(tmp_path / "c", [on("CPU X", run_dict("pytorch", "cnn-mnist", 1.0, r)) for r in (1, 2)])
    [cell] = compare.compare_stores(before, same).cells
    assert cell.label == "pytorch cnn-mnist digits-28 cpu"  # one model: labels as before


def test_summaries_and_findings_of_a_mixed_cluster_group_by_cpu_model():
    from dlbench.harness.analysis.findings import findings
    from dlbench.harness.analysis.load import device_with_hardware
    from dlbench.harness.analysis.summary import summarise

    runs = [on(model, dict(run_dict(framework, "cnn-mnist", steady, r), id=i, epochs=[]))
            for i, (model, framework, steady, r) in enumerate(
                [(m, f, s, r) for m in ("CPU X", "CPU Y") for f, s in (("pytorch", 2.0), ("jax", 1.0))
                 for r in (1, 2, 3)])]
    summaries = summarise(device_with_hardware(runs))
    assert sorted({s.device for s in summaries}) == ["cpu: CPU X", "cpu: CPU Y"]
    assert all(s.n_ok == 3 for s in summaries) and len(summaries) == 4
    titles = sorted(f.title for f in findings(summaries))
    assert titles == ["cnn-mnist on digits-28 (cpu: CPU X)", "cnn-mnist on digits-28 (cpu: CPU Y)"]


def test_a_significant_gap_inside_the_noise_threshold_is_within_noise(capsys, tmp_path):
    # 12 runs a side, 0.5 % slower with almost no spread: the exact test rejects, the 2 % threshold does not
    a = [run_dict("pytorch", "cnn-mnist", 1.0 + 1e-5 * r, r) for r in range(1, 13)]
    b = [run_dict("pytorch", "cnn-mnist", 1.005 + 1e-5 * r, r) for r in range(1, 13)]
    code, out, _ = cli(capsys, "--baseline", str(build_store(tmp_path / "a", a)), "--results",
                         str(build_store(tmp_path / "b", b)))
    torch = row(out, "pytorch cnn-mnist digits-28 cpu")
    assert code == 0 and "within noise" in torch and not torch.startswith("+")
    assert "98.7%" in torch  # the ratio interval's level: 12 a side, each side's [x_(2), x_(11)] at 99.37 %, squared
    assert f"reaches into 1 +- 2% is {stats.WITHIN_NOISE}" in out


def test_inference_runs_are_left_out_of_the_comparison(tmp_path, before):
    """An inference run has no epochs: compare, whose metrics are all training times, neither matches it nor
    lists it as unmatched."""
    from synthetic_store import serving_run

    runs = cells_of(tmp_path, {"pytorch": 2.0, "jax": 1.0}, 5, seed=2)
    served = [serving_run("pytorch", "cnn-mnist", rep, [0.002] * 10, 900.0)[0] for rep in (1, 2)]
    result = compare.compare_runs(runs, runs + served)
    assert sorted(cell.label.split()[0] for cell in result.cells) == ["jax", "pytorch"]
    assert result.only_a == () and result.only_b == ()
