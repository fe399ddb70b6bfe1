"""The study side by side: the study's shipped figures and their loader, rankings and Kendall's tau against
dlbench's runs, and the report's section on a store with runs on the study's dataset and on one with
stand-ins only."""
from pathlib import Path

import pytest
from scipy.stats import kendalltau
from synthetic_store import synthetic_run

from dlbench.harness.analysis import study_rankings
from dlbench.harness.present import contents, html, markdown
from dlbench.harness.store import Store

HEADER = ",".join(study_rankings.COLUMNS)
GOOD_ROW = "cnn-mnist,mnist,cpu,pytorch,98.40,0.46,h,15,15,no,yes,"


def test_tau_is_scipys_on_a_hand_case() -> None:
    # b and c swap places: 1 discordant pair of 6, so tau = (5 - 1) / 6
    _, _, _, tau, p = study_rankings.agreement({"a": 1, "b": 2, "c": 3, "d": 4}, {"a": 10, "b": 30, "c": 20, "d": 40},
                                      higher_is_better=False)
    expected = kendalltau([1, 2, 3, 4], [1, 3, 2, 4])
    assert tau == pytest.approx(2 / 3)
    assert (tau, p) == pytest.approx((expected.statistic, expected.pvalue))


def test_ranks_with_ties_and_frameworks_one_side_lacks() -> None:
    ours = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "f": 0.5}  # f: dlbench only
    common, study_rank, our_rank, tau, _ = study_rankings.agreement(
        {"a": 10.0, "b": 20.0, "c": 20.0, "d": 30.0, "e": 5.0}, ours, higher_is_better=False)  # e: study only
    assert common == ("a", "b", "c", "d")
    assert study_rank == {"a": 1.0, "b": 2.5, "c": 2.5, "d": 4.0}
    assert our_rank == {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    # 5 concordant pairs, none discordant, one tied in the study alone: tau-b = 5 / sqrt(5 x 6)
    assert tau == pytest.approx(5 / 30 ** 0.5)
    assert study_rankings.rank({"x": 90.0, "y": 95.0}, higher_is_better=True) == {"x": 2.0, "y": 1.0}


def test_a_side_that_ties_everything_measures_no_agreement_and_moves_nothing() -> None:
    ranking = study_rankings.ranking("accuracy", {"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 5.0, "b": 5.0, "c": 5.0},
                            lambda aspect, framework: ())
    assert ranking.tau is None and ranking.p is None and ranking.disagreements == ()


@pytest.mark.parametrize(("row", "field"), [
    ("cnn-mnist,mnist,cpu,pytorch,ninety,0.46,h,15,15,no,yes,", "accuracy_percent"),
    ("cnn-mnist,mnist,cpu,pytorch,984,0.46,h,15,15,no,yes,", "accuracy_percent"),
    ("cnn-mnist,digits-28,cpu,pytorch,98.4,0.46,h,15,15,no,yes,", "dataset"),  # a stand-in is not the study's
    ("cnn-mnist,mnist,cpu,pytorch,98.4,0.46,days,15,15,no,yes,", "time_unit"),
    ("cnn-mnist,mnist,cpu,pytorch,98.4,0.46,h,15,16,yes,yes,", "epochs_done"),
    ("cnn-mnist,mnist,cpu,paddle,98.4,0.46,h,15,15,no,yes,", "framework"),
])
def test_the_loader_refuses_a_malformed_row_naming_file_line_and_field(row: str, field: str) -> None:
    with pytest.raises(study_rankings.StudyDataError, match=rf"^bad\.csv, line 3: field {field}:"):
        study_rankings.read_results("\n".join([HEADER, GOOD_ROW.replace("pytorch", "mxnet"), row]), "bad.csv")


def test_the_loader_refuses_a_row_with_fields_missing_and_a_second_row_for_one_framework() -> None:
    with pytest.raises(study_rankings.StudyDataError, match=r"^bad\.csv, line 2: 12 fields expected"):
        study_rankings.read_results(f"{HEADER}\ncnn-mnist,mnist,cpu\n", "bad.csv")
    with pytest.raises(study_rankings.StudyDataError,
                       match=r"^bad\.csv, line 3: a second row for cnn-mnist cpu pytorch"):
        study_rankings.read_results(f"{HEADER}\n{GOOD_ROW}\n{GOOD_ROW}\n", "bad.csv")


def test_the_shipped_figures_cover_the_studys_six_frameworks_per_setting() -> None:
    data = study_rankings.load()
    settings: dict[tuple[str, str], set[str]] = {}
    for row in data.rows:
        settings.setdefault((row.workload, row.device), set()).add(row.framework)
    assert len(settings) == 13  # 7 on the GPU, 6 on the CPU (the study ran no SVHN there)
    assert all(frameworks == {"keras-tensorflow", "tensorflow", "pytorch", "mxnet", "chainer", "theano"}
               for frameworks in settings.values())
    keras_mnist = next(r for r in data.rows if (r.workload, r.device, r.framework) == ("cnn-mnist", "cpu",
                                                                                          "keras-tensorflow"))
    assert keras_mnist.time_per_epoch_s == pytest.approx(0.12 * 3600 / 15)
    assert len({reason.id for reason in data.reasons}) == len(data.reasons) and data.caveats


# dlbench's steady epochs and final accuracies on cnn-mnist over mnist: mxnet moves from the study's 5th
# place in time to 1st, chainer from the study's last in accuracy to 1st; jax has no study figure
STEADY = {"mxnet": 0.5, "tensorflow": 1.0, "keras-tensorflow": 1.1, "pytorch": 1.2, "theano": 1.3, "chainer": 1.4,
          "jax": 0.3}
ACCURACY = {"chainer": 0.99, "tensorflow": 0.985, "pytorch": 0.984, "theano": 0.983, "keras-tensorflow": 0.982,
            "mxnet": 0.981, "jax": 0.98}


def _save(store: Store, framework: str, repetition: int, steady: float, accuracy: float, dataset: str) -> None:
    run, epochs, samples = synthetic_run(framework, "cnn-mnist", repetition, steady, accuracy, n_samples=0,
                                         position=repetition)
    store.save_run(dict(run, dataset=dataset, cell_hash=f"{run['cell_hash']}-{dataset}"), epochs, samples)


@pytest.fixture(scope="module")
def on_study_data(tmp_path_factory: pytest.TempPathFactory) -> contents.Report:
    path = tmp_path_factory.mktemp("study") / "dlbench.sqlite"
    with Store(path) as store:
        for framework in STEADY:
            for repetition in (1, 2):
                _save(store, framework, repetition, STEADY[framework], ACCURACY[framework], "mnist")
        _save(store, "mxnet", 1, 50.0, 0.1, "digits-28")  # a stand-in run: never beside the study's
    return contents.load(path)


def test_the_section_ranks_both_sides_and_names_where_they_disagree(on_study_data: contents.Report) -> None:
    text = markdown.render(on_study_data)
    assert "### cnn-mnist on mnist (cpu): the study beside dlbench's 14 runs" in text
    # the study's time ranks (keras-tensorflow and tensorflow tie at 0.12 h) against dlbench's steady epochs
    order = ["keras-tensorflow", "tensorflow", "pytorch", "theano", "mxnet", "chainer"]
    expected = kendalltau([1.5, 1.5, 3, 4, 5, 6], [3, 2, 4, 5, 1, 6])
    assert f"Time: Kendall's tau {expected.statistic:+.2f} (p = {expected.pvalue:.2g}) over the 6 frameworks" in text
    assert "| mxnet | 98.13 | 98.10 | 9.58x | 1.67x | 5 / 1 | 5 / 6 |" in text  # ratios within each side only
    assert "| jax | - | 98.00 | - | 1.00x | - | - |" in text
    lines = text.splitlines()
    mxnet = next(line for line in lines if line.startswith("- mxnet's time ranks 5 of 6 in the study and 1 here"))
    assert "batch 1" in mxnet and "hybridiz" in mxnet
    chainer = next(line for line in lines if line.startswith("- chainer's accuracy ranks 6 of 6 in the study and 1"))
    assert "softmax" in chainer
    # a move of one or two half-places is not named
    assert not any(line.startswith(f"- {f}'s") for line in lines for f in order if f not in ("mxnet", "chainer"))
    assert "`dlbench run paper-gpu -w cnn-mnist" in text  # the study's GPU settings have no runs here
    assert "- dlbench's runs trained 4 epochs, the study's 15: the accuracies are from other points" in text
    assert "once here" not in text  # two runs a framework


def test_the_section_is_on_the_page(on_study_data: contents.Report) -> None:
    page = html.render(on_study_data)
    assert '<a href="#study">' in page and '<h2 id="study">The study side by side</h2>' in page
    assert "mxnet&#x27;s time ranks 5 of 6 in the study and 1 here" in page
    assert "<code>dlbench run paper-gpu -w cnn-mnist" in page


def test_stand_in_runs_are_never_compared_and_the_section_says_what_to_run(tmp_path: Path) -> None:
    with Store(tmp_path / "dlbench.sqlite") as store:
        for framework in ("pytorch", "mxnet"):
            _save(store, framework, 1, STEADY[framework], ACCURACY[framework], "digits-28")
    section = contents.load(tmp_path / "dlbench.sqlite").study
    assert section.blocks == []
    assert section.to_run[0].startswith("No run here used the study's datasets (these used digits-28)")
    on_cpu = next(line for line in section.to_run if line.startswith("On the cpu:"))
    assert "`dlbench data fetch mnist cifar10 cifar100 imdb ptb` then `dlbench run paper -w cnn-mnist" in on_cpu
    assert "seq2seq-manythings: no built-in suite runs it on manythings" in on_cpu


def test_runs_on_two_hardware_models_are_compared_apart() -> None:
    runs = [{"id": i, "status": "ok", "framework": f, "framework_version": "1", "workload": "cnn-mnist",
             "dataset": "mnist", "device": device, "steady_epoch_s": steady, "metric_name": "accuracy",
             "metric_value": 0.98, "epochs": [{}]}
            for i, (f, device, steady) in enumerate([("pytorch", "cpu: A", 1.0), ("mxnet", "cpu: A", 2.0),
                                                     ("pytorch", "cpu: B", 2.0), ("mxnet", "cpu: B", 1.0)])]
    comparisons, missing = study_rankings.compare(runs, study_rankings.load())
    assert [(c.device, c.time.dlbench_rank) for c in comparisons] == [
        ("cpu: A", {"mxnet": 2.0, "pytorch": 1.0}), ("cpu: B", {"mxnet": 1.0, "pytorch": 2.0})]
    assert ("cnn-mnist", "cpu") not in {(m.workload, m.device) for m in missing}


def test_a_framework_in_several_versions_counts_with_its_newest() -> None:
    runs = [{"id": i, "status": "ok", "framework": f, "framework_version": version, "workload": "lstm-ptb",
             "dataset": "ptb", "device": "cpu", "steady_epoch_s": steady, "metric_name": "perplexity",
             "metric_value": 150.0, "epochs": [{"metrics": {"accuracy": 0.2}}]}
            for i, (f, version, steady) in enumerate([("pytorch", "2.9.0", 9.0), ("pytorch", "2.13.0", 1.0),
                                                      ("mxnet", "1.9.1", 2.0)])]
    [comparison] = [c for c in study_rankings.compare(runs, study_rankings.load())[0] if c.workload == "lstm-ptb"]
    assert comparison.time.dlbench == {"pytorch": 1.0, "mxnet": 2.0}
    assert comparison.accuracy is not None and comparison.accuracy.dlbench == {"pytorch": 20.0, "mxnet": 20.0}
    assert "pytorch: its newest version here, 2.13.0, of 2.9.0, 2.13.0." in comparison.notes


def test_a_reason_with_an_unknown_scope_is_refused_naming_file_entry_and_field() -> None:
    about = ("citation: c\nderived_from: d\nsetup: s\ncaveats: [x]\nreasons:\n"
             "  - {id: r, aspect: time, frameworks: [pytroch], workloads: [all], devices: [all], text: t, source: s}\n")
    with pytest.raises(study_rankings.StudyDataError, match=r"^study\.yaml, reason 1: field frameworks:"):
        study_rankings.read_about(about, "study.yaml")
