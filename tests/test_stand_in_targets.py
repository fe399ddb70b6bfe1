"""A stand-in dataset's own target: declared beside the dataset, carried in the cell's configuration (and so
its hash), measured against by the run, and shown with its reason in the report's time-to-target table."""
from pathlib import Path
from types import SimpleNamespace

import pytest
from synthetic_store import synthetic_run

from dlbench.harness import data
from dlbench.harness.analysis import compare, findings
from dlbench.harness.analysis.summary import summarise
from dlbench.harness.data import StandInTarget
from dlbench.harness.plan.suite import Cell
from dlbench.harness.present import tables
from dlbench.harness.run import cell_config
from dlbench.harness.run.record import timing_summary
from dlbench.harness.store import Store

# (dataset, workload) of the quick and quick-large suites: with a target, and with none (and its reason)
QUICK = [("digits-28", "cnn-mnist"), ("photo-patches-10", "cnn-cifar10"), ("rt-snippets", "lstm-imdb"),
         ("lee-news-lm", "lstm-ptb"), ("photo-boxes", "frcnn-voc"), ("lee-news-lm", "transformer-lm"),
         ("photo-patches-10", "vit-cifar10")]
NONE = [("photo-regions-100", "cnn-cifar100"), ("django-es-en", "seq2seq-manythings")]


@pytest.fixture
def resolve(monkeypatch):
    """cell_config.resolve without a prepared dataset or an environment."""
    monkeypatch.setattr(cell_config.data, "prepare", lambda name, folder: SimpleNamespace(
        hash="d" * 64, meta={}))  # no meta: each workload builds on its study shapes
    monkeypatch.setattr(cell_config.envs, "require", lambda name, device="cpu": SimpleNamespace(
        info=lambda: {"packages": {"torch": "2.13.0"}, "python_version": "3.11.0"}))

    def resolved(dataset: str, workload: str = "cnn-mnist") -> cell_config.Prepared:
        return cell_config.resolve(Cell("s", "pytorch", workload, dataset, "cpu", 1, 0, 1, 32, 1, 60.0), Path("."))
    return resolved


def test_every_stand_in_of_the_quick_suite_declares_a_target_or_none_with_its_reason():
    for dataset, workload in QUICK + NONE:
        target = data.stand_in_target(dataset, workload)
        assert target is not None and len(target.reason) > 40, dataset
        assert (target.value is None) == ((dataset, workload) in NONE)
    assert data.stand_in_target("photo-patches-10", "cnn-svhn").value is None  # at chance: passed by noise
    assert data.stand_in_target("mnist", "cnn-mnist") is None  # the study's datasets: the workload's target
    assert data.stand_in_target("no-such-set", "cnn-mnist") is None  # a stored run's unknown name
    # beside the dataset, not in its meta: declaring a target leaves the dataset's hash as it was
    assert all("target" not in data.describe(name) for name, _ in QUICK)


def test_a_stand_in_target_enters_the_cells_configuration_and_hash(resolve, monkeypatch):
    on_stand_in = resolve("digits-28")
    assert on_stand_in.config["target"] == {"metric": "accuracy", "value": 0.5, "higher_is_better": True,
                                            "set_by": "digits-28"}
    assert on_stand_in.target is on_stand_in.config["target"]
    on_study = resolve("mnist")
    assert "target" not in on_study.config and on_study.target == on_study.workload.target  # hash as before
    # another declared value is another cell
    monkeypatch.setitem(data.digits.TARGETS, "cnn-mnist", StandInTarget(0.7, "a test's"))
    assert resolve("digits-28").hash != on_stand_in.hash
    # no meaningful target is declared too, and differs from the workload's
    none = resolve("photo-regions-100", "cnn-cifar100")
    assert none.config["target"]["value"] is None and none.target["value"] is None


def test_a_run_on_a_stand_in_reports_time_to_target_against_the_stand_ins_target(resolve):
    """digits-28's 50 %, not MNIST's 98.5 %: reached at the third epoch here; nothing where none is declared."""
    epochs = [{"train_time_s": t, "eval_time_s": 0.1, "metric_value": v}
              for t, v in ((3.0, 0.38), (2.0, 0.44), (2.0, 0.64), (2.0, 0.79))]
    assert timing_summary(epochs, resolve("digits-28").target)["time_to_target_s"] == 7.0
    assert "time_to_target_s" not in timing_summary(epochs, resolve("mnist").target)
    assert "time_to_target_s" not in timing_summary(epochs, resolve("photo-regions-100", "cnn-cifar100").target)
    ptb = [{"train_time_s": 5.0, "eval_time_s": 0.1, "metric_value": v} for v in (300.0, 245.0)]  # lower is better
    assert timing_summary(ptb, resolve("lee-news-lm", "lstm-ptb").target)["time_to_target_s"] == 10.0


def stand_in_run(framework: str, repetition: int, target: float | None, reached: float | None) -> tuple:
    run, rows, samples = synthetic_run(framework, "cnn-mnist", repetition, 1.0, 0.79, position=repetition)
    run["config"]["target"] = {"metric": "accuracy", "value": target, "higher_is_better": True,
                               "set_by": "digits-28"}
    run.update(target_value=target, time_to_target_s=reached, cell_hash=run["cell_hash"] + "-own")
    return run, rows, samples


def test_the_table_shows_times_to_the_stand_ins_own_target_with_its_reason(tmp_path):
    with Store(tmp_path / "dlbench.sqlite") as store:
        for rep in (1, 2, 3):
            store.save_run(*stand_in_run("pytorch", rep, 0.5, 4.5 + 0.1 * rep))
            store.save_run(*stand_in_run("jax", rep, 0.5, None))
        # a stand-in that declares no target: left out, saying why
        run, rows, samples = stand_in_run("pytorch", 1, None, None)
        run.update(workload="cnn-cifar100", dataset="photo-regions-100", cell_hash="cifar100")
        store.save_run(run, rows, samples)
        runs = store.runs()
    table = tables.time_to_target(summarise(runs), ["jax", "pytorch"], "cpu")
    # the caveat of every workload on stand-in data says whose target it is
    assert "its times to target are to each stand-in's own target, or none" in findings._stand_ins_note(summarise(runs))
    assert table.rows == [["cnn-mnist (digits-28)", "not reached (0 of 3 runs)", "4.70 s [4.60-4.80, 75%]"]]
    assert ("The stand-in's own target, not the study's (which was set for the study's dataset and is out of "
            "reach of a quick run on a stand-in): cnn-mnist (digits-28): accuracy >= 0.5, 5x chance") in table.note
    assert ("Left out: cnn-cifar100 (photo-regions-100): no target, the stand-in declares none: at chance after "
            "the quick-large suite's 2 epochs") in table.note


def test_compare_matches_runs_before_and_after_the_stand_ins_had_their_own_target():
    """The target changes no time compared: a store from before matches one from after, cell by cell."""
    before, _, _ = synthetic_run("pytorch", "cnn-mnist", 1, 1.0, 0.79)
    after, _, _ = stand_in_run("pytorch", 1, 0.6, 4.6)
    assert "target" in after["config"] and "target" not in before["config"]
    assert compare.match_key(before) == compare.match_key(after)
