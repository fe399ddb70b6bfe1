"""Findings sentences on stores built here: a winner only where the difference is shown, and the caveats."""
import json
import math
import re
import statistics
from pathlib import Path

import pytest
from synthetic_store import QUICK_FIRST, QUICK_SPEED, jitter, quick_store, synthetic_run

from dlbench.harness.analysis.findings import (
    COMPILATION_FACTOR,
    Finding,
    FirstEpoch,
    HeldOutSet,
    findings,
    findings_of_runs,
    shared_caveats,
)
from dlbench.harness.analysis.load import AnalysisError, held_out_sets
from dlbench.harness.analysis.stats import log_t_repetitions
from dlbench.harness.analysis.summary import summarise
from dlbench.harness.present import tables
from dlbench.harness.present.tables import study_tables
from dlbench.harness.store import Store

SAME = [1.00, 1.03, 0.97, 1.02, 0.98]  # run-to-run noise of a few percent
SAME_SHUFFLED = [0.99, 1.02, 1.01, 0.97, 1.03]


def store_findings(tmp_path: Path, runs: list[tuple],
                   held_out_sets: dict[str, HeldOutSet] | None = None) -> list[Finding]:
    with Store(tmp_path / "dlbench.sqlite") as store:
        for run in runs:
            store.save_run(*run)
        return findings_of_runs(store.runs(), held_out_sets=held_out_sets)


def repeated(framework: str, steadies: list[float], workload: str = "cnn-mnist", metric: float = 0.9,
             **kwargs) -> list[tuple]:
    return [synthetic_run(framework, workload, rep, steady, jitter(metric, rep, 0.01), **kwargs)
            for rep, steady in enumerate(steadies, start=1)]


def test_overlapping_repetitions_rank_nobody(tmp_path: Path) -> None:
    [finding] = store_findings(tmp_path, repeated("pytorch", SAME) + repeated("jax", SAME_SHUFFLED))
    assert finding.speed.startswith("No difference shown in steady epoch time between")
    assert "is the fastest" not in finding.speed
    assert "none of them is ranked" in finding.speed


def test_a_clear_gap_names_the_winner_and_its_size(tmp_path: Path) -> None:
    fast = [0.5 * v for v in SAME]
    [finding] = store_findings(tmp_path, repeated("pytorch", SAME) + repeated("jax", fast))
    assert finding.speed.startswith("jax is the fastest: steady epoch time 0.500 s.")
    assert "pytorch, at 1.00 s, takes 2.00x as long" in finding.speed
    assert "shown, Holm-adjusted p = " in finding.speed


def test_accuracy_ranks_by_the_workloads_direction(tmp_path: Path) -> None:
    # perplexity: lower is better, so the lower one is the most accurate
    runs = (repeated("pytorch", SAME, "lstm-ptb", metric=150.0)
            + repeated("jax", SAME_SHUFFLED, "lstm-ptb", metric=300.0))
    [finding] = store_findings(tmp_path, runs)
    assert finding.metric.startswith("pytorch is the most accurate: final perplexity 15")
    assert "lee-news-lm is not ptb, the study's dataset for lstm-ptb" in " ".join(finding.caveats)


def test_single_runs_get_no_interval_no_test_and_no_ranking(tmp_path: Path) -> None:
    [finding] = store_findings(tmp_path, repeated("pytorch", [1.0]) + repeated("jax", [0.5]))
    assert finding.speed == ("Single runs, steady epoch time: jax 0.500 s, pytorch 1.00 s. One run each: no interval "
                             "or test, so no framework is ranked.")
    assert "CI" not in finding.speed and " p = " not in finding.speed
    assert any(c.startswith("Single runs for jax, pytorch:") for c in finding.caveats)


def test_three_repetitions_show_a_twofold_gap(tmp_path: Path) -> None:
    # Welch's t on log times: 3 runs a side 3 % apart within, 2x apart between, give p far below 0.05 (the
    # Mann-Whitney test before it could never go below 0.1 with 3 a side)
    [finding] = store_findings(tmp_path, repeated("pytorch", SAME[:3]) + repeated("jax", [0.5 * v for v in SAME[:3]]))
    assert finding.speed.startswith("jax is the fastest: steady epoch time 0.500 s. The next, pytorch, at 1.00 s, "
                                    "takes 2.00x as long (95% CI of the ratio 1.")
    assert finding.needed is None and not [c for c in finding.caveats if c.startswith("Too few")]


def test_failed_and_stopped_cells_are_caveats_with_their_reasons(tmp_path: Path) -> None:
    runs = repeated("pytorch", SAME) + repeated("jax", SAME_SHUFFLED)
    runs[6] = synthetic_run("jax", "cnn-mnist", 2, 1.0, 0.9, status="failed", done=0,
                            reason="worker exited with status 1: out of memory")
    runs[7] = synthetic_run("jax", "cnn-mnist", 3, 1.0, 0.9, status="timeout", done=2, epochs=4,
                            reason="timed out after 600 s")
    runs[8] = synthetic_run("jax", "cnn-mnist", 4, 1.0, 0.9, status="interrupted", done=1, epochs=4,
                            reason="interrupted by SIGTERM (1 epochs done); its worker was stopped")
    [finding] = store_findings(tmp_path, runs)
    assert ("jax, repetition 2 (of 5 runs): failed before its first epoch: worker exited with status 1: "
            "out of memory.") in finding.caveats
    assert "jax, repetition 3 (of 5 runs): timed out after 2 of 4 epochs: timed out after 600 s." in finding.caveats
    assert ("jax, repetition 4 (of 5 runs): interrupted after 1 of 4 epochs: interrupted by SIGTERM (1 epochs "
            "done); its worker was stopped.") in finding.caveats  # the harness was stopped, not the framework


def test_uncertified_pairs_and_compiling_first_epochs_are_caveats(tmp_path: Path) -> None:
    runs = repeated("pytorch", SAME_SHUFFLED) + repeated("jax", SAME, first=9.0, certificate="none")
    [finding] = store_findings(tmp_path, runs)
    text = " ".join(finding.caveats)
    assert ("jax held no passing equivalence certificate for cnn-mnist (no certificate of its environment, code "
            "and workload in this machine's store: run dlbench certify): it may not train") in text
    assert "pytorch held no" not in text
    # the slow first epoch is no sentence but a value, which the report's one table of first epochs shows
    assert finding.first_epochs == (FirstEpoch("jax", 9.0, 9.0, False),) and "first epoch" not in text


def test_frameworks_without_certificates_share_one_caveat_per_reason(tmp_path: Path) -> None:
    runs = (repeated("pytorch", SAME, certificate="reference") + repeated("jax", SAME, certificate="none")
            + repeated("mxnet", SAME, certificate="none") + repeated("chainer", SAME, certificate="failed"))
    [finding] = store_findings(tmp_path, runs)
    uncertified = [c for c in finding.caveats if "held no passing equivalence certificate" in c]
    assert uncertified == [
        "chainer held no passing equivalence certificate for cnn-mnist (its certificate failed): it may not train "
        "the same model as the reference, so its figures are not a like-for-like comparison.",
        "jax, mxnet held no passing equivalence certificate for cnn-mnist (no certificate of its environment, code "
        "and workload in this machine's store: run dlbench certify): they may not train the same model as the "
        "reference, so their figures are not a like-for-like comparison."]


def test_one_finding_per_workload_dataset_and_device(tmp_path: Path) -> None:
    runs = (repeated("pytorch", SAME) + repeated("pytorch", SAME, device="gpu")
            + repeated("pytorch", SAME, "lstm-imdb"))
    titles = [f.title for f in store_findings(tmp_path, runs)]
    assert sorted(titles) == ["cnn-mnist on digits-28 (cpu)", "cnn-mnist on digits-28 (gpu)",
                              "lstm-imdb on pang-lee-polarity (cpu)"]
    assert all("Only pytorch completed" in f.speed for f in store_findings(tmp_path / "again", runs))


def test_a_finding_on_the_first_n_training_samples_says_so_in_its_title(tmp_path: Path) -> None:
    runs = repeated("pytorch", SAME) + repeated("jax", SAME_SHUFFLED)
    for row, _, _ in runs:
        row["config"].update(train_samples=768, dataset_n_train=1438)  # a suite entry's train_samples
    [finding] = store_findings(tmp_path, runs)
    assert finding.title == "cnn-mnist on digits-28 (first 768 of 1,438) (cpu)"
    # runs on the whole split do other work per epoch: their own cells and finding, never pooled with these
    whole = repeated("pytorch", [2.0] * 5, position=10)
    titles = sorted(f.title for f in store_findings(tmp_path / "both", runs + whole))
    assert titles == ["cnn-mnist on digits-28 (cpu)", "cnn-mnist on digits-28 (first 768 of 1,438) (cpu)"]
    with Store(tmp_path / "both" / "dlbench.sqlite") as store:
        cells = summarise(store.runs())
    assert sorted((c.framework, c.train_samples or 0, c.n_ok) for c in cells) == [
        ("jax", 768, 5), ("pytorch", 0, 5), ("pytorch", 768, 5)]


def test_a_sweeps_batch_sizes_and_threads_are_groups_of_their_own(tmp_path: Path) -> None:
    recipe = repeated("pytorch", SAME) + repeated("jax", SAME_SHUFFLED)  # the recipe's batch 128, 2 threads
    changed = repeated("pytorch", [2.0] * 5, position=10) + repeated("jax", [2.1] * 5, position=20)
    for row, _, _ in changed:
        row["config"]["recipe"]["batch_size"] = 64  # a suite entry's batch_size: a changed recipe
    [finding] = store_findings(tmp_path, changed)
    assert finding.title == "cnn-mnist on digits-28, batch 64 (recipe 128) (cpu)"
    titles = sorted(f.title for f in store_findings(tmp_path / "batches", recipe + changed))
    assert titles == ["cnn-mnist on digits-28 (cpu)", "cnn-mnist on digits-28, batch 64 (recipe 128) (cpu)"]
    # threads: never pooled either; the headings name them where the same work ran on other thread counts
    one = repeated("pytorch", [3.0] * 5, position=30)
    for row, _, _ in one:
        row["config"]["threads"] = 1
    titles = sorted(f.title for f in store_findings(tmp_path / "threads", recipe + one))
    assert titles == ["cnn-mnist on digits-28, 1 thread (cpu)", "cnn-mnist on digits-28, 2 threads (cpu)"]
    with Store(tmp_path / "threads" / "dlbench.sqlite") as store:
        cells = summarise(store.runs())
    assert sorted((c.framework, c.batch_size, c.threads, c.n_ok) for c in cells) == [
        ("jax", 128, 2, 5), ("pytorch", 128, 1, 5), ("pytorch", 128, 2, 5)]


def test_level_leaders_are_named_together_and_a_clear_laggard_apart(tmp_path: Path) -> None:
    runs = (repeated("pytorch", SAME) + repeated("jax", SAME_SHUFFLED)
            + repeated("tensorflow", [2 * v for v in SAME]))
    [finding] = store_findings(tmp_path, runs)
    # the geometric means (jax's 1.0038 s reads 1.00, where its median read 1.01)
    assert finding.speed == ("No difference shown in steady epoch time between pytorch (1.00 s) and jax (1.00 s): "
                             "none of them is ranked above the others. Shown behind all of these: tensorflow (2.00 s).")


def test_holm_covers_every_pair_of_the_workloads_frameworks(tmp_path: Path) -> None:
    """A 15 % gap that 3 runs a side show between two frameworks (Welch p about 0.005) is not shown when the
    workload holds 7 frameworks: Holm covers their 21 pairs, not only the 6 against the fastest."""
    slow = [1.15 * v for v in SAME[:3]]
    [alone] = store_findings(tmp_path / "two", repeated("jax", SAME[:3]) + repeated("pytorch", slow))
    assert alone.speed.startswith("jax is the fastest")
    others = ("tensorflow", "keras3", "mxnet", "chainer", "theano")
    runs = repeated("jax", SAME[:3]) + [run for name in ("pytorch", *others) for run in repeated(name, slow)]
    [seven] = store_findings(tmp_path / "seven", runs)
    assert seven.speed.startswith("No difference shown in steady epoch time between jax")
    assert seven.needed is not None and seven.needed.comparisons == 21


def test_holm_covers_each_workload_apart(tmp_path: Path) -> None:
    """Four workload x device groups of two frameworks: each group's one pair is its own family, so each
    shows its gap as it would alone (the report-wide family before showed none of them)."""
    def two_frameworks(workload: str, device: str) -> list[tuple]:
        return (repeated("pytorch", SAME, workload, device=device)
                + repeated("jax", [0.5 * v for v in SAME], workload, device=device))

    groups = [(w, d) for w in ("cnn-mnist", "lstm-imdb") for d in ("cpu", "gpu")]
    together = store_findings(tmp_path, [run for w, d in groups for run in two_frameworks(w, d)])
    assert len(together) == 4
    assert all(finding.speed.startswith("jax is the fastest") for finding in together)


def test_an_equal_metric_names_no_leader(tmp_path: Path) -> None:
    runs = repeated("pytorch", [1.0], metric=0.525) + repeated("jax", [0.5], metric=0.525)
    [finding] = store_findings(tmp_path, runs)
    assert finding.metric == "The same final accuracy in every framework, 53.0%: no framework is ranked."


def test_equal_speeds_name_no_leader(tmp_path: Path) -> None:
    [finding] = store_findings(tmp_path, repeated("pytorch", SAME) + repeated("jax", SAME))
    assert finding.speed == "The same steady epoch time in every framework, 1.00 s: no framework is ranked."
    # two level at the top, one shown behind: neither of the two is named ahead of the other
    runs = repeated("pytorch", SAME) + repeated("jax", SAME) + repeated("tensorflow", [2 * v for v in SAME])
    [three] = store_findings(tmp_path / "three", runs)
    assert three.speed.startswith("No difference shown in steady epoch time between ")
    assert three.speed.endswith("Shown behind all of these: tensorflow (2.00 s).") and "fastest" not in three.speed


def test_a_group_without_a_shown_gap_says_how_many_runs_would_show_ten_percent(tmp_path: Path) -> None:
    noisy, shuffled = [1.0, 1.2, 0.85, 1.1, 0.9], [0.9, 1.15, 1.05, 0.85, 1.2]  # about 14 % run to run
    [level] = store_findings(tmp_path / "level", repeated("pytorch", noisy) + repeated("jax", shuffled))
    needed = level.needed
    assert needed is not None and (needed.workload, needed.suite, needed.have, needed.comparisons) == (
        "cnn-mnist", "test", 5, 1)
    spreads = [statistics.stdev(math.log(v) for v in values) for values in (noisy, shuffled)]
    assert needed.sigma == pytest.approx(statistics.median(spreads))
    assert needed.runs == log_t_repetitions(needed.sigma, 0.10, 1) and needed.runs > 5
    # a synthetic run lasts a first epoch of 1.5 steady ones, 3 steady epochs and 3 s: the runs each framework
    # lacks, at its own median wall time
    walls = [statistics.median(4.5 * v + 3 for v in values) for values in (noisy, shuffled)]
    assert needed.more_s == pytest.approx(sum((needed.runs - 5) * wall for wall in walls))
    [single] = store_findings(tmp_path / "single", repeated("pytorch", [1.0]) + repeated("jax", [1.1]))
    assert single.needed is not None and (single.needed.sigma, single.needed.runs, single.needed.more_s) == (
        None, None, None)


def test_a_significant_gap_within_the_noise_threshold_ranks_nobody(tmp_path: Path) -> None:
    # 20 runs a side 0.5 % apart, spread 0.2 %: Welch's t rejects, but the gap is below the 2 % threshold
    base = [1.0 + 0.0001 * k for k in range(20)]
    runs = repeated("pytorch", [1.005 * v for v in base]) + repeated("jax", base)
    [finding] = store_findings(tmp_path, runs)
    assert finding.speed.startswith("No difference shown in steady epoch time between jax (1.00 s) and pytorch")
    assert "(a gap within the 2% noise threshold)" in finding.speed and "fastest" not in finding.speed
    [clear] = store_findings(tmp_path / "clear", repeated("pytorch", [1.1 * v for v in base]) + repeated("jax", base))
    assert clear.speed.startswith("jax is the fastest")


def test_an_accuracy_gap_within_the_test_sets_sampling_error_ranks_nobody(tmp_path: Path) -> None:
    # 90 % against 92 % on 359 test samples: standard errors of 1.6 and 1.4 points, 2 points is within 1.96 of the
    # difference's; the test itself shows the gap (5 runs a side, fully apart)
    runs = (repeated("pytorch", SAME, metric=0.90, epochs=4) + repeated("jax", SAME_SHUFFLED, metric=0.92, epochs=4))
    sets = {"digits-28": HeldOutSet(359, 10)}
    [finding] = store_findings(tmp_path, runs, sets)
    assert finding.metric.startswith("No difference shown in final accuracy between jax (92.")
    assert "and pytorch (90." in finding.metric and "(within the test set's sampling error)" in finding.metric
    [error] = [c for c in finding.caveats if c.startswith("Accuracy is measured on 359 test samples: at 91.")]
    assert "its standard error is 1.5 points" in error
    [unknown] = store_findings(tmp_path / "unknown", runs)  # no test set size: the test alone decides
    assert unknown.metric.startswith("jax is the most accurate")
    # on 100,000 test samples the same gap is far outside the sampling error
    [large] = store_findings(tmp_path / "large", runs, {"digits-28": HeldOutSet(100_000, 10)})
    assert large.metric.startswith("jax is the most accurate")


def test_accuracies_at_chance_level_are_not_ordered(tmp_path: Path) -> None:
    runs = (repeated("pytorch", SAME, metric=0.10, epochs=4) + repeated("jax", SAME_SHUFFLED, metric=0.12, epochs=4))
    [finding] = store_findings(tmp_path, runs, {"digits-28": HeldOutSet(359, 10)})
    assert finding.metric.startswith("Every framework's final accuracy is at chance level (10.0%, one guess in 10)")
    assert "no framework is ranked" in finding.metric


def test_two_epoch_runs_say_their_steady_time_is_one_epoch(tmp_path: Path) -> None:
    runs = repeated("pytorch", SAME, epochs=2) + repeated("jax", SAME_SHUFFLED)
    [finding] = store_findings(tmp_path, runs)
    assert ("pytorch ran 2 epochs: its steady epoch time is the second epoch alone, not a median over several."
            in finding.caveats)
    assert not any(c.startswith("jax ran") for c in finding.caveats)


def cached(framework: str, rep: int, first: float, state: str | None, steady: float = 1.0) -> tuple:
    run, epochs, samples = synthetic_run(framework, "cnn-mnist", rep, steady, 0.99, first=first)
    return {**run, "compile_cache": state}, epochs, samples


def test_a_warm_first_epoch_is_never_pooled_with_cold_ones(tmp_path: Path) -> None:
    """theano: one cold run (compiling, 30 s first epoch), two warm ones (3 s): its first epoch, training
    time and time to target are the cold run's alone; its steady epoch takes every run."""
    runs = [cached("theano", 1, 30.0, "cold"), cached("theano", 2, 3.0, "warm"), cached("theano", 3, 3.0, "warm"),
            *(cached("pytorch", rep, 1.5, None) for rep in (1, 2, 3))]
    with Store(tmp_path / "dlbench.sqlite") as store:
        for run in runs:
            store.save_run(*run)
        stored = store.runs()
    theano = next(cell for cell in summarise(stored) if cell.framework == "theano")
    assert (theano.first_epoch_s.n, theano.first_epoch_s.median) == (1, 30.0)
    assert (theano.train_time_s.median, theano.time_to_target_s.n) == (33.0, 1)
    assert theano.steady_epoch_s.n == 3
    assert (theano.compile_cache, theano.warm, theano.warm_runs_left_out) == ("cold", False, 2)
    [finding] = findings_of_runs(stored)
    assert ("theano: 2 runs with a warm compile cache are left out of its first epoch, training time and time "
            "to target, which its cold runs give.") in finding.caveats
    assert not any("warm" in caveat for caveat in finding.caveats if caveat.startswith("pytorch"))


def test_a_cell_whose_runs_were_all_warm_is_labelled_so(tmp_path: Path) -> None:
    runs = [cached("theano", rep, 3.0, "warm") for rep in (1, 2)] + [cached("pytorch", rep, 1.5, None)
                                                                     for rep in (1, 2)]
    with Store(tmp_path / "dlbench.sqlite") as store:
        for run in runs:
            store.save_run(*run)
        stored = store.runs()
    cells = {cell.framework: cell for cell in summarise(stored)}
    assert (cells["theano"].compile_cache, cells["theano"].warm, cells["theano"].first_epoch_s.n) == ("warm", True, 2)
    assert (cells["pytorch"].compile_cache, cells["pytorch"].warm) == (None, False)
    [finding] = findings_of_runs(stored)
    # warm, though its first epoch is no more than 3x its steady one: the first-epoch table marks it
    [theano] = finding.first_epochs
    assert (theano.label, theano.seconds, theano.warm) == ("theano", 3.0, True)
    assert tables.first_epoch_table([finding]).rows == [["theano", f"{theano.ratio:.1f}x (3.00 s), warm cache"]]


def test_a_warm_first_epoch_that_is_still_slow_is_not_called_compilation(tmp_path: Path) -> None:
    runs = [cached("theano", rep, 9.0, "warm") for rep in (1, 2)] + [cached("pytorch", rep, 1.5, None)
                                                                     for rep in (1, 2)]
    [finding] = store_findings(tmp_path, runs)
    assert not [c for c in finding.caveats if "first epoch" in c]
    table = tables.first_epoch_table([finding])
    assert table.rows == [["theano", f"{finding.first_epochs[0].ratio:.1f}x (9.00 s), warm cache"]]
    # the note says once what a warm cache means, and that a slow warm first epoch is not all compilation
    assert "compilation its cache did not hold" in table.note and "not comparable with cold ones" in table.note


def test_held_out_sets_come_from_the_prepared_dataset_the_runs_used(tmp_path: Path) -> None:
    prepared = tmp_path / "prepared"
    for name, digest in (("digits-28", "abc"), ("photo-boxes", "other-content")):
        (prepared / name).mkdir(parents=True)
        (prepared / name / "meta.json").write_text(json.dumps({"hash": digest, "n_test": 359, "num_classes": 10}))
    runs = [{"dataset": "digits-28", "dataset_hash": "abc"}, {"dataset": "photo-boxes", "dataset_hash": "xyz"},
            {"dataset": "rt-snippets", "dataset_hash": "def"}]  # prepared from other content; not prepared
    assert held_out_sets(runs, tmp_path) == {"digits-28": HeldOutSet(359, 10)}
    (prepared / "digits-28" / "meta.json").write_text("{not json")
    with pytest.raises(AnalysisError, match="digits-28/meta.json is not readable JSON"):
        held_out_sets(runs, tmp_path)


def test_relative_speed_of_single_runs_calls_no_framework_fastest(tmp_path: Path) -> None:
    with Store(tmp_path / "dlbench.sqlite") as store:
        for run in repeated("pytorch", [1.0]) + repeated("jax", [0.5]):
            store.save_run(*run)
        cells = summarise(store.runs())
    [relative] = [t for t in study_tables(cells) if t.title == "Steady epoch time relative to the lowest median, cpu"]
    assert relative.rows == [["cnn-mnist (digits-28)", "lowest median, 0.500 s", "2.00x"]]
    assert not any("fastest" in text for row in relative.rows for text in row)


def test_caveats_that_hold_for_every_workload_are_said_once(tmp_path: Path) -> None:
    """jax is uncertified on both workloads and every framework ran once on both: said once for the report;
    mxnet is uncertified on one workload only: said there."""
    runs = [run for workload in ("cnn-mnist", "lstm-imdb") for run in
            repeated("pytorch", [1.0], workload, certificate="reference") + repeated("jax", [0.5], workload,
                                                                                     certificate="none")
            + repeated("mxnet", [0.7], workload, certificate="none" if workload == "cnn-mnist" else "passed")]
    cells = stored_cells(tmp_path / "both", runs)
    shared, found = shared_caveats(cells, findings(cells))
    assert [note.split(":")[0] for note in shared] == [
        "jax held no passing equivalence certificate for any workload of this report (no certificate of its "
        "environment, code and workload in this machine's store",
        "Every workload runs on stand-in data (digits-28 for mnist, pang-lee-polarity for imdb), not the study's "
        "datasets", "Single runs for jax, mxnet, pytorch"]
    mnist, imdb = found
    assert [c for c in mnist.caveats if "certificate" in c] == [
        "mxnet held no passing equivalence certificate for cnn-mnist (no certificate of its environment, code and "
        "workload in this machine's store: run dlbench certify): it may not train the same model as the reference, "
        "so its figures are not a like-for-like comparison."]
    assert not [c for c in imdb.caveats if "certificate" in c or c.startswith("Single runs")]
    assert not [c for c in mnist.caveats + imdb.caveats if "stand-in" in c or "is not" in c]  # said once above
    # one group: nothing is shared
    one = stored_cells(tmp_path / "one", runs[:3])
    assert shared_caveats(one, findings(one)) == ([], findings(one))


def stored_cells(folder: Path, runs: list[tuple]) -> list:
    with Store(folder / "dlbench.sqlite") as store:
        for run in runs:
            store.save_run(*run)
        return summarise(store.runs())


def test_runs_that_shared_the_machine_are_counted_once_above_every_workload(tmp_path: Path) -> None:
    """Two of six runs flagged by measure.cores as slowed by other processes: the top says how many, and the
    workload's own findings still name them."""
    busy = "used 0.7 of 2 cores while other processes kept 1.3 cores busy"
    runs = [run for workload in ("cnn-mnist", "lstm-imdb") for run in repeated("pytorch", [1.0], workload)
            + repeated("jax", [0.5], workload) + repeated("mxnet", [0.7], workload)]
    for run, _, _ in runs[:2]:
        run["cores_flag"] = busy
    cells = stored_cells(tmp_path / "busy", runs)
    shared, found = shared_caveats(cells, findings(cells))
    assert [note for note in shared if note.startswith("Other processes")] == [
        "Other processes kept this machine's cores busy during the steady training of 2 of 6 runs: their times "
        "are slower than the machine's own, and ratios between them say more about the other load than about the "
        "frameworks (each workload's findings name the runs)."]
    assert any(busy in caveat for caveat in found[0].caveats)
    quiet = stored_cells(tmp_path / "quiet", [(dict(run, cores_flag="used 1.0 of 2 cores"), rows, samples)
                                              for run, rows, samples in runs])
    assert not [note for note in shared_caveats(quiet, findings(quiet))[0] if note.startswith("Other processes")]


def test_a_framework_that_leaves_cores_idle_by_itself_is_said_to_be_its_own(tmp_path: Path) -> None:
    """Keras-TensorFlow's LSTM kept one of two cores busy while other processes were idle: the note is about the
    framework, never that other processes were busy."""
    alone = "used 1.0 of 2 cores while other processes were idle (0.03 cores)"
    runs = repeated("pytorch", [1.0, 1.1]) + repeated("jax", [0.5, 0.6])
    runs[0][0]["cores_flag"] = alone
    cells = stored_cells(tmp_path, runs)
    shared, found = shared_caveats(cells, findings(cells))
    assert not [note for note in shared if note.startswith("Other processes")]
    caveats = [c for f in found for c in f.caveats] + shared
    assert [c for c in caveats if alone in c] == [
        f"The framework's own threading, not the machine: pytorch rep 1 {alone} in the steady epochs' "
        "training; these times are the framework's at the cores it keeps busy by itself."]
    assert not [c for c in caveats if c.startswith("Threads not used as asked")]


@pytest.mark.slow
def test_nine_frameworks_on_six_workloads_say_each_caveat_once_and_their_first_epochs_in_one_table(
        tmp_path: Path) -> None:
    """Issue 41's report said 45 caveats, most "X's first epoch takes N times its steady epoch" once per
    framework and workload: 42 such sentences on this store (7 compiling frameworks x 6 workloads) before,
    none now, and one row per compiling framework in one table."""
    with Store(quick_store(tmp_path)) as store:
        cells = summarise(store.runs())
    shared, found = shared_caveats(cells, findings(cells))
    said = shared + [caveat for finding in found for caveat in finding.caveats]
    assert len(said) == len(set(said)) == 1  # the stand-in data, once for every workload
    assert not [caveat for caveat in said if "first epoch" in caveat]
    table = tables.first_epoch_table(found)
    compiling = sorted(name for name, first in QUICK_FIRST.items() if first > COMPILATION_FACTOR)
    assert [row[0] for row in table.rows] == compiling and len(compiling) == 7
    assert table.header[1:] == [f"{f.workload} ({f.dataset})" for f in found] and len(found) == 6
    theano = next(row for row in table.rows if row[0] == "theano")
    # cnn-mnist first: about 40 x 2.2 x 1.9 s, its runs a few per cent apart
    assert re.fullmatch(r"40\.0x \(1[67]\d s\)", theano[1]) and QUICK_SPEED["theano"] == 2.2
    assert "pytorch" not in [row[0] for row in table.rows]  # 1.3x: within the threshold
