"""Suite files, the plan they describe, and the command line's answers to user errors."""
import csv
import dataclasses
import io
import json
import os
import textwrap
from pathlib import Path

import pytest
from user_errors import error_of

from dlbench.harness import data
from dlbench.harness.analysis import dataset_label
from dlbench.harness.cli import main
from dlbench.harness.environments import envs
from dlbench.harness.measure import cores
from dlbench.harness.plan import suite
from dlbench.harness.plan.suite import SuiteError
from dlbench.harness.run import cell_config

KNOWN = ", ".join(envs.RECIPES) + " (optionally name@version)"

PAPER_WORKLOADS = ("cnn-mnist, cnn-cifar10, cnn-cifar100, cnn-svhn, lstm-imdb, lstm-ptb, frcnn-voc, transformer-lm, "
                   "vit-cifar10")
ALL_WORKLOADS = ("cnn-mnist, cnn-cifar10, cnn-cifar100, cnn-svhn, lstm-imdb, lstm-ptb, seq2seq-manythings, frcnn-voc, "
                 "transformer-lm, vit-cifar10")
DATASETS = ", ".join(data.dataset_names())


@pytest.fixture
def empty_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DLBENCH_HOME", str(home))
    monkeypatch.delenv("DLBENCH_DATA", raising=False)
    return home


def write_suite(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


# ---- run: names that do not exist -------------------------------------------------------------

def test_unknown_suite_lists_the_builtin_ones(capsys):
    message = error_of(capsys, ["run", "nosuch"])
    assert message.startswith("unknown suite 'nosuch'; built-in suites: modes, paper, paper-gpu, quick, quick-large, "
                              "releases, serve;")
    assert "(.yaml)" in message


def test_unknown_workload_lists_the_known_ones(capsys):
    assert error_of(capsys, ["run", "-w", "nosuch"]) == f"unknown workload 'nosuch'; known: {ALL_WORKLOADS}"


def test_unknown_framework_lists_the_known_ones(capsys):
    assert error_of(capsys, ["run", "-f", "nosuch"]) == f"unknown framework 'nosuch'; known: {KNOWN}"


def test_workload_outside_the_suite_lists_the_suites_workloads(capsys):
    message = error_of(capsys, ["run", "paper", "-w", "cnn-mnist", "-w", "seq2seq-manythings"])
    assert message == f"workload 'seq2seq-manythings' is not in suite 'paper'; its workloads: {PAPER_WORKLOADS}"


def test_missing_suite_file(capsys, tmp_path):
    path = tmp_path / "missing.yaml"
    assert error_of(capsys, ["run", str(path)]) == f"suite file {path} does not exist"


# ---- run: bad suite files -------------------------------------------------------------------

GOOD_HEAD = """
name: mine
frameworks: [pytorch]
"""


def test_unknown_top_level_field_names_its_line_and_the_accepted_fields(capsys, tmp_path):
    path = write_suite(tmp_path, """
        name: mine
        frameworks: [pytorch]
        # a comment, then the typo on line 4
        repeats: 3
        workloads:
          - {workload: cnn-mnist, dataset: digits-28}
    """)
    message = error_of(capsys, ["run", str(path)])
    assert message == (f"{path}:4: field 'repeats': unknown field; accepted: name, description, frameworks, "
                       "device, repeat, seed, threads, timeout_s, compile_cache, allocator, gpu_memory, executor, "
                       "mode, serve, execution, precision, workloads")


def test_bad_epochs_in_the_second_entry_names_its_line(capsys, tmp_path):
    path = write_suite(tmp_path, """
        name: mine
        frameworks: [pytorch]
        workloads:
          - workload: cnn-mnist
            dataset: digits-28
            epochs: 2
          - workload: lstm-imdb
            dataset: pang-lee-polarity
            epochs: abc
    """)
    assert error_of(capsys, ["run", str(path)]) == (
        f"{path}:9: field 'epochs': expected an integer from 1 to 100000, got 'abc'")


def test_unknown_field_in_an_entry_names_its_line(capsys, tmp_path):
    path = write_suite(tmp_path, GOOD_HEAD + """workloads:
  - workload: cnn-mnist
    dataset: digits-28
    epoch: 2
""")
    message = error_of(capsys, ["run", str(path)])
    assert message == (f"{path}:6: field 'epoch': unknown field; accepted: workload, dataset, epochs, batch_size, "
                       "threads, execution, precision, train_samples, weights")


def test_unknown_dataset_lists_the_known_ones(capsys, tmp_path):
    path = write_suite(tmp_path, GOOD_HEAD + """workloads:
  - workload: cnn-mnist
    dataset: emnist
""")
    assert error_of(capsys, ["run", str(path)]) == f"{path}:5: field 'dataset': 'emnist' is not one of: {DATASETS}"


def test_unknown_device(capsys, tmp_path):
    path = write_suite(tmp_path, GOOD_HEAD + """device: tpu
workloads:
  - {workload: cnn-mnist, dataset: digits-28}
""")
    assert error_of(capsys, ["run", str(path)]) == f"{path}:3: field 'device': 'tpu' is not one of: cpu, gpu"


def test_unknown_compile_cache(capsys, tmp_path):
    path = write_suite(tmp_path, GOOD_HEAD + """compile_cache: warm
workloads:
  - {workload: cnn-mnist, dataset: digits-28}
""")
    assert error_of(capsys, ["run", str(path)]) == (f"{path}:3: field 'compile_cache': 'warm' is not one of: "
                                                    "cold, shared")


@pytest.mark.parametrize(("line", "expected"), [("", "cold"), ("compile_cache: cold\n", "cold"),
                                                ("compile_cache: shared\n", "shared")])
def test_compile_cache_is_cold_unless_the_suite_shares_it(tmp_path, line, expected):
    path = write_suite(tmp_path, GOOD_HEAD + line + "workloads: [{workload: cnn-mnist, dataset: digits-28}]\n")
    parsed = suite.load(str(path))
    assert parsed.compile_cache == expected
    assert {c.compile_cache for c in suite.plan(parsed)} == {expected}
    assert {c.compile_cache for c in suite.plan(parsed, compile_cache="shared")} == {"shared"}  # --compile-cache
    assert {c.compile_cache for c in suite.plan(parsed, compile_cache="cold")} == {"cold"}


def test_the_quick_suite_shares_its_compile_cache_and_the_paper_suite_does_not():
    assert (suite.load("quick").compile_cache, suite.load("paper").compile_cache) == ("shared", "cold")


def test_workload_paired_with_a_dataset_of_another_task(capsys, tmp_path):
    path = write_suite(tmp_path, GOOD_HEAD + """workloads:
  - {workload: cnn-mnist, dataset: digits-28}
  - workload: lstm-imdb
    dataset: digits-28
""")
    message = error_of(capsys, ["run", str(path)])
    assert message == f"{path}:6: field 'dataset': 'digits-28' is a classification dataset; lstm-imdb needs binary"


def test_empty_workloads(capsys, tmp_path):
    path = write_suite(tmp_path, GOOD_HEAD + "workloads: []\n")
    message = error_of(capsys, ["run", str(path)])
    assert message == (f"{path}:3: field 'workloads': expected a non-empty list of mappings with "
                       "workload, dataset, epochs, batch_size, threads, execution, precision, train_samples, weights")


def test_invalid_yaml(capsys, tmp_path):
    path = write_suite(tmp_path, GOOD_HEAD + "workloads: [cnn-mnist\n")
    message = error_of(capsys, ["run", str(path)])
    # one line, at PyYAML's own mark: where the flow sequence ran out
    assert message == (f"{path}:4:1: not valid YAML: while parsing a flow sequence: expected ',' or ']', but got "
                       "'<stream end>'")


@pytest.mark.parametrize(("text", "line", "detail"), [
    ("- just\n- a list\n", 1, "a suite is a mapping with the fields name,"),
    ("frameworks: []\nworkloads: []\n", 1, f"field 'frameworks': expected 'all' or a list of frameworks from: {KNOWN}"),
    ("frameworks: [pytorch, nosuch]\nworkloads: []\n", 1,
     f"field 'frameworks': unknown framework 'nosuch'; known: {KNOWN}"),
    (GOOD_HEAD.lstrip() + "repeat: 0\nworkloads: [{workload: cnn-mnist, dataset: digits-28}]\n", 3,
     "field 'repeat': expected an integer from 1 to 10000, got 0"),
    (GOOD_HEAD.lstrip() + "timeout_s: true\nworkloads: [{workload: cnn-mnist, dataset: digits-28}]\n", 3,
     "field 'timeout_s': expected a finite number of seconds > 0, got True"),
    (GOOD_HEAD.lstrip() + "workloads: [cnn-mnist]\n", 3, "field 'workloads': each entry is a mapping"),
])
def test_other_shape_errors(tmp_path, text, line, detail):
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    with pytest.raises(SuiteError) as caught:
        suite.load(str(path))
    assert str(caught.value).startswith(f"{path}:{line}: {detail}")


# ---- run: a missing framework environment ---------------------------------------------------

def test_missing_environment_names_the_create_command_and_runs_nothing(capsys, tmp_path, empty_home):
    results = tmp_path / "results"
    message = error_of(capsys, ["run", "quick", "--results", str(results), "--data-dir", str(tmp_path / "data")])
    env_path = empty_home / "envs" / "pytorch"
    assert message == (f"the pytorch environment does not exist (looked in {env_path}); "
                       "create it with: dlbench env create pytorch")
    assert not (results / "runs").exists()
    assert not env_path.exists()
    # whatever the store holds, it holds no run
    if (results / "dlbench.sqlite").exists():
        assert main(["results", "--results", str(results)]) == 0
        assert capsys.readouterr().out.strip() == "no runs stored yet"


# ---- list and results -----------------------------------------------------------------------

def table_rows(out: str) -> dict[str, list[str]]:
    """A text table's rows by their first word, without the heading's underline."""
    return {line.split()[0]: line.split() for line in out.splitlines() if line.strip() and not line.startswith("--")}


def test_list_workloads(capsys):
    assert main(["list", "workloads"]) == 0
    rows = table_rows(capsys.readouterr().out)
    assert rows["workload"][:3] == ["workload", "study", "dataset"]
    assert rows["cnn-mnist"][:3] == ["cnn-mnist", "mnist", "1,199,882"]
    assert " ".join(rows["cnn-mnist"]).endswith("accuracy >= 0.985")
    assert " ".join(rows["cnn-mnist:"]) == "cnn-mnist: 2 conv + 2 dense CNN for 28x28 grey digits"  # below, whole
    assert "perplexity <= 200" in " ".join(rows["lstm-ptb"])
    assert rows["frcnn-voc"][:3] == ["frcnn-voc", "voc2012", "7,729,622"]
    assert " ".join(rows["frcnn-voc"]).endswith("mAP >= 0.3")  # the metric as people write it
    assert " ".join(rows["frcnn-voc:"]).startswith("frcnn-voc: Faster R-CNN: 4-block VGG-style backbone")
    assert set(rows) - {"------------------"} == {"workload", *ALL_WORKLOADS.split(", "),
                                                   *(name + ":" for name in ALL_WORKLOADS.split(", "))}


def test_list_datasets(capsys, tmp_path):
    assert main(["list", "datasets", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out.split("\n\n")[0])  # the table, without the targets' reasons below it
    assert set(rows) == {"dataset", *DATASETS.split(", ")}
    assert rows["digits-28"][1:4] == ["classification", "not", "prepared"]
    assert rows["pang-lee-polarity"][1] == "binary"
    assert rows["lee-news-lm"][1] == "language_model"
    # a stand-in's own target for the workload it stands in for, and why, whole below the table
    assert rows["digits-28"][4:8] == ["cnn-mnist", "accuracy", ">=", "0.5"]
    assert rows["photo-regions-100"][4:6] == ["cnn-cifar100", "none"] and rows["mnist"][4] == "-"
    assert "digits-28, cnn-mnist: 5x chance (10 classes)" in out
    assert "photo-regions-100, cnn-cifar100: at chance" in out


def test_list_suites(capsys):
    assert main(["list", "suites"]) == 0
    out = capsys.readouterr().out
    assert table_rows(out)["quick"][1:4] == ["two", "workloads", "on"]
    assert "offline stand-in data" in out


def test_list_frameworks_without_environments(capsys, empty_home):
    assert main(["list", "frameworks"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith(f"create the missing ones with:\n  dlbench env create {' '.join(envs.RECIPES)}")
    rows = table_rows(out)
    assert rows["pytorch"] == ["pytorch", "torch", "2.13.0", ">=2.1,<2.13", "torch==2.13.0", "numpy", "missing"]
    assert rows["jax"][:5] == ["jax", "jax", "0.10.2", ">=0.4.38,<0.10.2", "jax[cuda12]==0.10.2"]
    assert " ".join(rows["theano"][4:]).startswith("none (dlbench env create theano --")
    assert rows["theano"][-2:] == ["--…", "missing"]  # clipped to fit 120 columns
    assert widest_line(out) <= 120
    assert main(["list", "frameworks", "--format", "json"]) == 0
    theano = next(row for row in json.loads(capsys.readouterr().out) if row["framework"] == "theano")
    assert theano["CUDA build (--device gpu)"] == "none (dlbench env create theano --device gpu says why)"


def test_env_list_without_environments(capsys, empty_home):
    assert main(["env", "list"]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    for name, recipe in envs.RECIPES.items():
        assert rows[name] == [name, name, recipe.default_version, "-", "-", "-", "-", "-", "missing"]
    assert f"create the missing ones with:\n  dlbench env create {' '.join(envs.RECIPES)}" in out


def test_env_create_unknown_framework(capsys, empty_home):
    assert error_of(capsys, ["env", "create", "nosuch"]) == f"unknown framework 'nosuch'; known: {KNOWN}"
    assert list(empty_home.iterdir()) == []


def test_results_without_a_store_names_the_path(capsys, tmp_path):
    message = error_of(capsys, ["results", "--results", str(tmp_path)])
    assert message == (f"no results at {tmp_path / 'dlbench.sqlite'}; run a suite first (dlbench run) "
                       "or pass --results DIR")


# ---- suite.plan -----------------------------------------------------------------------------

@pytest.fixture
def two_frameworks(monkeypatch):
    """A second, fake framework, so the plan's framework order shows."""
    fake = envs.Recipe("fakefw", "3.11", ("numpy",), "fake_framework:Adapter", "numpy", "numpy",
                       cuda_packages=("numpy",))
    monkeypatch.setitem(envs.RECIPES, "fakefw", fake)


PLAN_SUITE = """
name: planned
frameworks: [pytorch, fakefw]
repeat: 2
seed: 7
threads: 3
timeout_s: 90
workloads:
  - {workload: cnn-mnist, dataset: digits-28, epochs: 2}
  - {workload: lstm-imdb, dataset: pang-lee-polarity, batch_size: 16}
"""


def test_plan_puts_repetitions_outermost(tmp_path, two_frameworks):
    cells = suite.plan(suite.load(str(write_suite(tmp_path, PLAN_SUITE))))
    # each repetition holds every cell once, with its own seed; the order inside one is tests/test_run_order.py's
    assert [(c.repetition, c.seed) for c in cells] == [(1, 7)] * 4 + [(2, 8)] * 4
    for repetition in (cells[:4], cells[4:]):
        assert sorted((c.workload, c.framework) for c in repetition) == [
            ("cnn-mnist", "fakefw"), ("cnn-mnist", "pytorch"), ("lstm-imdb", "fakefw"), ("lstm-imdb", "pytorch")]
    # entry settings, else the workload's recipe (cnn-mnist: batch 128; lstm-imdb: 50 epochs)
    assert {(c.workload, c.epochs, c.batch_size) for c in cells} == {("cnn-mnist", 2, 128), ("lstm-imdb", 50, 16)}
    assert {(c.suite, c.device, c.threads, c.timeout_s) for c in cells} == {("planned", "cpu", 3, 90.0)}


def test_plan_overrides(tmp_path, two_frameworks):
    planned = suite.load(str(write_suite(tmp_path, PLAN_SUITE)))
    cells = suite.plan(planned, frameworks=["fakefw"], workloads=["lstm-imdb"], device="gpu", repeat=3, epochs=5)
    assert [(c.repetition, c.workload, c.framework, c.seed) for c in cells] == [
        (1, "lstm-imdb", "fakefw", 7), (2, "lstm-imdb", "fakefw", 8), (3, "lstm-imdb", "fakefw", 9)]
    assert {(c.epochs, c.batch_size, c.device) for c in cells} == {(5, 16, "gpu")}
    # --epochs beats an entry's own epochs too
    assert {c.epochs for c in suite.plan(planned, epochs=1)} == {1}
    assert {c.threads for c in suite.plan(planned, threads=1)} == {1}  # --threads beats the suite's 3


SWEEP_SUITE = """
name: sweep
frameworks: [pytorch, fakefw]
threads: 3
workloads:
  - {workload: cnn-mnist, dataset: digits-28, epochs: 1, batch_size: [32, 64], threads: [1, 2, all]}
  - {workload: lstm-imdb, dataset: pang-lee-polarity, epochs: 1}
"""


def test_a_sweep_plans_the_product_of_its_axes(tmp_path, two_frameworks):
    sweep = suite.load(str(write_suite(tmp_path, SWEEP_SUITE)))
    cells = suite.plan(sweep, repeat=2, cores=8)  # `all`: the machine's cores at plan time, as the number
    assert len(cells) == 2 * (2 * 3 + 1) * 2
    for repetition in (cells[:14], cells[14:]):
        assert sorted((c.workload, c.batch_size, c.threads, c.framework) for c in repetition) == sorted(
            [("cnn-mnist", b, t, f) for b in (32, 64) for t in (1, 2, 8) for f in ("fakefw", "pytorch")]
            + [("lstm-imdb", 64, 3, f) for f in ("fakefw", "pytorch")])  # the recipe's batch, the suite's threads
    # shuffled as before: not in listed order
    assert [(c.batch_size, c.threads) for c in cells[:12]] != sorted((c.batch_size, c.threads) for c in cells[:12])
    # `all` coming to a listed value is planned once; --threads overrides every entry's threads
    assert {c.threads for c in suite.plan(sweep, cores=2) if c.workload == "cnn-mnist"} == {1, 2}
    assert len(suite.plan(sweep, cores=2)) == (2 * 2 + 1) * 2
    assert {c.threads for c in suite.plan(sweep, threads=4)} == {4}
    assert len(suite.plan(sweep, threads=4)) == (2 + 1) * 2


def test_a_sweep_too_large_is_refused_from_its_lists_lengths_before_any_cell_is_built(tmp_path, monkeypatch):
    """10,100 combinations of one entry's two lists: the count comes from their lengths, and no Cell is made. Four
    thread counts: the most any machine accepts (4 per logical core)."""
    batch_sizes, threads = list(range(1, 2526)), [1, 2, 3, 4]
    path = write_suite(tmp_path, f"name: huge\nframeworks: [pytorch]\nworkloads:\n  - {{workload: cnn-mnist, "
                                 f"dataset: digits-28, batch_size: {batch_sizes}, threads: {threads}}}\n")
    huge = suite.load(str(path))

    def no_cell(*args, **kwargs):
        raise AssertionError("a cell was built before the plan's size was checked")

    monkeypatch.setattr(suite, "Cell", no_cell)
    with pytest.raises(SuiteError) as refused:
        suite.plan(huge)
    assert "the plan would hold 10,100 cells" in str(refused.value)
    assert "a plan holds at most 10,000" in str(refused.value)


def test_a_long_axis_with_a_value_listed_twice_names_it(tmp_path):
    values = list(range(1, 20_001)) + [7]  # the duplicate found by a set, at the end of a long list
    path = write_suite(tmp_path, f"name: long\nframeworks: [pytorch]\nworkloads:\n  - {{workload: cnn-mnist, "
                                 f"dataset: digits-28, batch_size: {values}}}\n")
    with pytest.raises(SuiteError, match="value 7 is listed twice"):
        suite.load(str(path))


@pytest.mark.framework
def test_each_axis_value_enters_the_cells_configuration_and_hash(tmp_path):
    path = write_suite(tmp_path, """
        name: sweep
        frameworks: [pytorch]
        workloads:
          - {workload: cnn-mnist, dataset: digits-28, epochs: 1, batch_size: [32, 128], threads: [1, 2]}
    """)
    cells = suite.plan(suite.load(str(path)))
    configs = {(c.batch_size, c.threads): cell_config.resolve(c, tmp_path) for c in cells}
    assert set(configs) == {(32, 1), (32, 2), (128, 1), (128, 2)}
    for (batch_size, threads), prepared in configs.items():
        assert (prepared.config["recipe"]["batch_size"], prepared.config["threads"]) == (batch_size, threads)
    assert len({prepared.hash for prepared in configs.values()}) == 4
    # the recipe's own batch size (128) listed in a sweep is the cell an entry without batch_size plans
    plain = suite.plan(suite.load(str(write_suite(tmp_path, """
        name: sweep
        frameworks: [pytorch]
        threads: 1
        workloads:
          - {workload: cnn-mnist, dataset: digits-28, epochs: 1}
    """))))[0]
    assert cell_config.resolve(plain, tmp_path).hash == configs[(128, 1)].hash


@pytest.mark.framework
def test_a_run_on_one_thread_of_two_is_still_flagged_inside_a_sweep(tmp_path):
    path = write_suite(tmp_path, """
        name: sweep
        frameworks: [pytorch]
        workloads:
          - {workload: cnn-mnist, dataset: digits-28, epochs: 1, threads: [1, 2]}
    """)
    by_threads = {c.threads: cell_config.resolve(c, tmp_path).config for c in suite.plan(suite.load(str(path)))}
    assert cores.flag(1.0, by_threads[2]["threads"]) == "used 1.0 of 2 cores"
    assert cores.flag(1.0, by_threads[1]["threads"]) is None


@pytest.mark.parametrize("field, value, message", [
    ("threads", "[]", "an empty list; expected an integer from 1 to 8 (4 per logical core, and this machine has 2), "
                      "'all', or a non-empty list of distinct ones"),
    ("batch_size", "[]", "an empty list; expected an integer from 1 to 1048576, or a non-empty list of distinct ones"),
    ("threads", "[1, 2, 1]", "value 1 is listed twice"),
    ("threads", "[all, all]", "value 'all' is listed twice"),
    ("batch_size", "[32, 0]", "value 0 is not accepted; expected an integer from 1 to 1048576"),
    ("threads", "-2", "value -2 is not accepted"),
    ("batch_size", "[32, 1.5]", "value 1.5 is not accepted"),
    ("threads", "[1, true]", "value True is not accepted"),
    ("batch_size", "[32, all]", "value 'all' is not accepted ('all' is for threads only); expected an integer"),
    ("threads", "many", "value 'many' is not accepted"),
])
def test_a_bad_axis_is_refused_with_its_line_entry_and_value(tmp_path, monkeypatch, field, value, message):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # threads' bound: 4 per logical core
    path = write_suite(tmp_path, f"""
        name: sweep
        frameworks: [pytorch]
        workloads:
          - workload: cnn-mnist
            dataset: digits-28
            {field}: {value}
    """)
    with pytest.raises(SuiteError) as refused:
        suite.load(str(path))
    assert str(refused.value).startswith(f"{path}:6: field {field!r}: entry cnn-mnist on digits-28: {message}")


@pytest.mark.framework
def test_a_cell_without_threads_gets_the_cores_of_the_machine_that_runs_it(tmp_path):
    [cell] = suite.plan(suite.load("quick"), ["pytorch"], ["cnn-mnist"], repeat=1)
    assert cell.threads is None
    assert cell_config.resolve(cell, tmp_path).config["threads"] == os.cpu_count()
    assert cell_config.resolve(cell, tmp_path, cores=5).config["threads"] == 5  # a Ray node's
    assert cell_config.resolve(dataclasses.replace(cell, threads=1), tmp_path, cores=5).config["threads"] == 1


@pytest.mark.parametrize("name, entries", [
    ("quick", [("cnn-mnist", "digits-28", 4, 768), ("transformer-lm", "lee-news-lm", 3, 224)]),
    ("quick-large", [("lstm-imdb", "rt-snippets", 3, None), ("lstm-ptb", "lee-news-lm", 3, 860),
                     ("frcnn-voc", "photo-boxes", 30, None),
                     ("vit-cifar10", "photo-patches-10", 3, 256), ("cnn-cifar10", "photo-patches-10", 10, None),
                     ("seq2seq-manythings", "django-es-en", 3, None), ("cnn-cifar100", "photo-regions-100", 3, 128),
                     ("cnn-svhn", "photo-patches-10", 3, 128)])])
def test_quick_suite_plans(name, entries):
    """quick and quick-large hold the ten workloads between them, in every framework, each with two steady
    epochs at least; quick three runs of each cell, quick-large one."""
    cells = suite.plan(suite.load(name))  # every framework and repetition, in a shuffled order
    runs = 3 if name == "quick" else 1
    assert sorted((c.framework, c.workload, c.dataset, c.epochs, c.train_samples) for c in cells) == sorted(
        (framework, *entry) for entry in entries for framework in envs.RECIPES for _ in range(runs))
    assert sorted({c.repetition for c in cells}) == list(range(1, runs + 1))
    assert min(c.epochs for c in cells) >= 3
    assert {(c.device, c.timeout_s, c.threads) for c in cells} == {("cpu", 600.0, None)}


FIRST_N_SUITE = """
name: first-n
frameworks: [pytorch]
workloads:
  - workload: cnn-mnist
    dataset: digits-28
    train_samples: {value}
"""


@pytest.mark.parametrize("value, shown", [(0, "0"), (-5, "-5"), ("abc", "'abc'"), (1.5, "1.5"), ("true", "True")])
def test_train_samples_must_be_a_positive_integer(capsys, tmp_path, value, shown):
    path = write_suite(tmp_path, FIRST_N_SUITE.format(value=value))
    assert error_of(capsys, ["run", str(path)]) == (
        f"{path}:6: field 'train_samples': entry cnn-mnist on digits-28: expected a positive integer no larger than "
        f"digits-28's training samples (the first N of them are trained on), got {shown}")


@pytest.mark.framework
def test_train_samples_enter_the_cells_configuration_and_hash(tmp_path):
    def resolved(value: int | None) -> cell_config.Prepared:
        text = FIRST_N_SUITE.format(value=value) if value else FIRST_N_SUITE.replace("    train_samples: {value}\n", "")
        [cell] = suite.plan(suite.load(str(write_suite(tmp_path, text))))
        assert cell.train_samples == value
        return cell_config.resolve(cell, tmp_path / "data")

    whole, first, other = resolved(None), resolved(100), resolved(101)
    n_train = whole.dataset.meta["n_train"]
    assert "train_samples" not in whole.config  # cells of whole splits keep the hashes they had
    assert (first.config["train_samples"], first.config["dataset_n_train"]) == (100, n_train)
    assert len({whole.hash, first.hash, other.hash}) == 3
    assert resolved(n_train).config["train_samples"] == n_train  # the whole split, asked for, is accepted


@pytest.mark.framework
def test_train_samples_beyond_the_training_split_stop_the_plan_before_any_cell(capsys, tmp_path):
    [cell] = suite.plan(suite.load(str(write_suite(tmp_path, FIRST_N_SUITE.format(value=10**6)))))
    with pytest.raises(SuiteError) as raised:
        cell_config.resolve(cell, tmp_path / "data")
    n_train = data.prepare("digits-28", tmp_path / "data").meta["n_train"]
    assert str(raised.value) == (
        f"{tmp_path / 'suite.yaml'}:6: field 'train_samples': entry cnn-mnist on digits-28: expected a positive "
        f"integer no larger than digits-28's {n_train:,} training samples, got 1,000,000")
    results = tmp_path / "results"
    message = error_of(capsys, ["run", str(tmp_path / "suite.yaml"), "--results", str(results),
                                "--data-dir", str(tmp_path / "data")])
    assert message == str(raised.value)
    assert not (results / "runs").exists() or not any((results / "runs").iterdir())


def test_recipe_digest_covers_set_fields_but_not_defaults():
    base = envs.Recipe("x", "3.11", ("numpy",), "m:A", "numpy", "numpy")
    explicit = dataclasses.replace(base, find_links_from_pip=False, worker_env={})
    assert explicit.digest() == base.digest()  # a new optional field leaves existing environments valid
    assert dataclasses.replace(base, worker_env={"A": "1"}).digest() != base.digest()
    assert dataclasses.replace(base, packages=("numpy<2",)).digest() != base.digest()
    # whether the adapter compiles into a cache is not what the environment is built from
    assert dataclasses.replace(base, uses_compile_cache=True).digest() == base.digest()
    assert dataclasses.replace(base, adapter="elsewhere:Adapter").digest() == base.digest()  # code, not a build


def test_the_executor_field_and_its_errors(capsys, tmp_path):
    entries = "workloads: [{workload: cnn-mnist, dataset: digits-28}]\n"
    assert suite.load(str(write_suite(tmp_path, GOOD_HEAD + entries))).executor == "local"
    assert suite.load(str(write_suite(tmp_path, GOOD_HEAD + "executor: ray\n" + entries))).executor == "ray"
    path = write_suite(tmp_path, GOOD_HEAD + "executor: slurm\n" + entries)
    assert error_of(capsys, ["run", str(path)]) == f"{path}:3: field 'executor': 'slurm' is not one of: local, ray"


@pytest.mark.parametrize(("argv", "message"), [
    (["--executor", "dask"], "argument --executor: invalid choice: 'dask'"),
    (["--executor", "ray", "--cells-per-node", "0"],
     "argument --cells-per-node: expected an integer from 1 to 10000, got 0"),
    (["--executor", "ray", "--retries", "-1"], "argument --retries: expected an integer from 0 to 100, got -1"),
])
def test_bad_executor_options_exit_2_naming_them(capsys, argv, message):
    with pytest.raises(SystemExit) as exited:
        main(["run", "quick", *argv])
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_unknown_allocator(capsys, tmp_path):
    path = write_suite(tmp_path, GOOD_HEAD + """allocator: jemalloc
workloads:
  - {workload: cnn-mnist, dataset: digits-28}
""")
    assert error_of(capsys, ["run", str(path)]) == (f"{path}:3: field 'allocator': 'jemalloc' is not one of: "
                                                    "default, retain")


@pytest.mark.parametrize(("line", "expected"), [("", "default"), ("allocator: retain\n", "retain")])
def test_allocator_reaches_every_cell_and_the_command_line_overrides_it(tmp_path, line, expected):
    path = write_suite(tmp_path, GOOD_HEAD + line + "workloads: [{workload: cnn-mnist, dataset: digits-28}]\n")
    parsed = suite.load(str(path))
    assert parsed.allocator == expected
    assert {c.allocator for c in suite.plan(parsed)} == {expected}
    assert {c.allocator for c in suite.plan(parsed, allocator="retain")} == {"retain"}  # --allocator
    with pytest.raises(SuiteError, match="allocator 'tcmalloc' is not one of: default, retain"):
        suite.plan(parsed, allocator="tcmalloc")


# ---- tables that fit a terminal -------------------------------------------------------------

def widest_line(out: str) -> int:
    return max(len(line) for line in out.splitlines())


@pytest.fixture(scope="module")
def nine_runs(tmp_path_factory) -> Path:
    """A results folder of two workloads x three frameworks, stored out of order, with a failed run."""
    from synthetic_store import synthetic_run

    from dlbench.harness.store import Store

    folder = tmp_path_factory.mktemp("results")
    with Store(folder / "dlbench.sqlite") as store:
        for position, (framework, workload) in enumerate([("tensorflow", "lstm-ptb"), ("pytorch", "cnn-mnist"),
                                                          ("jax", "lstm-ptb"), ("tensorflow", "cnn-mnist"),
                                                          ("pytorch", "lstm-ptb"), ("jax", "cnn-mnist")]):
            failed = (framework, workload) == ("jax", "lstm-ptb")
            run, epochs, samples = synthetic_run(
                framework, workload, 1, 0.5 + position, 0.9 if workload == "cnn-mnist" else 150.0,
                status="failed" if failed else "ok", position=position,
                reason="RuntimeError: " + "the worker ran out of patience " * 8 if failed else None)
            store.save_run(run, epochs, samples)
    return folder


def test_results_fit_120_columns_sorted_by_workload_and_framework(capsys, nine_runs):
    assert main(["results", "--results", str(nine_runs)]) == 0
    out = capsys.readouterr().out
    runs = out[:out.index("\n\n")] if "\n\n" in out else out
    assert widest_line(runs) <= 120
    said_once, heading, _, *rows = runs.splitlines()
    assert said_once == "every run: device cpu, rep 1"  # the same in every row: said once, not a column
    assert heading.split()[:4] == ["framework", "version", "workload", "dataset"]
    assert [row.split()[:3:2] for row in rows] == [["jax", "cnn-mnist"], ["pytorch", "cnn-mnist"],
                                                    ["tensorflow", "cnn-mnist"], ["jax", "lstm-ptb"],
                                                    ["pytorch", "lstm-ptb"], ["tensorflow", "lstm-ptb"]]
    assert "accuracy 90.0%" in rows[0] and "perplexity 150 " in rows[4]  # as the report writes them
    failed = rows[3]
    assert "RuntimeError: the worker" in failed and failed.endswith("…") and len(failed) == 120


def test_results_columns_chosen_or_all(capsys, nine_runs):
    assert main(["results", "--results", str(nine_runs), "--columns", "workload,framework,steady s"]) == 0
    heading = capsys.readouterr().out.splitlines()[0]
    assert heading.split() == ["workload", "framework", "steady", "s"]
    assert main(["results", "--results", str(nine_runs), "--columns", "all"]) == 0
    out = capsys.readouterr().out
    assert "RuntimeError: " + "the worker ran out of patience " * 7 + "the worker ran out of patience" in out  # whole
    for heading in ("GFLOP/s", "MFU", "peak MiB", "epochs (metric@train s)", "code"):
        assert heading in out.splitlines()[0]


def test_results_unknown_column_exits_2_naming_the_known(capsys, nine_runs):
    with pytest.raises(SystemExit) as stopped:
        main(["results", "--results", str(nine_runs), "--columns", "framework,speed"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "--columns 'framework,speed': unknown column 'speed'; give 'all' or some of: framework, version," in err


@pytest.mark.parametrize("argv", [["list", "frameworks"], ["list", "datasets"], ["list", "workloads"],
                                  ["list", "suites"], ["data", "list"], ["env", "list"]])
def test_listings_fit_120_columns_and_csv_json_keep_every_character(capsys, tmp_path, argv):
    data_dir = ["--data-dir", str(tmp_path)] if argv[0] == "data" or argv[1] == "datasets" else []
    assert main([*argv, *data_dir]) == 0
    assert widest_line(capsys.readouterr().out) <= 120
    if argv == ["env", "list"]:
        return
    assert main([*argv, *data_dir, "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert main([*argv, *data_dir, "--format", "csv"]) == 0
    as_csv = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert as_csv == listed and len(listed) >= 3
    if argv == ["data", "list"]:
        assert next(row for row in listed if row["dataset"] == "photo-boxes")["source"].endswith(
            "boxes drawn by hand for dlbench (src/dlbench/data/photo-boxes/)")


def test_results_show_the_first_n_training_samples_a_run_trained_on(tmp_path):
    from synthetic_store import synthetic_run

    from dlbench.harness.present import listing

    runs = []
    for framework, train_samples in (("pytorch", 768), ("jax", None)):
        run, _, _ = synthetic_run(framework, "cnn-mnist", 1, 1.0, 0.5)
        run.update(id=len(runs) + 1, epochs=[])
        if train_samples:
            run["config"].update(train_samples=train_samples, dataset_n_train=1438)
        runs.append(run)
    rows = {line.split()[0]: line for line in listing.table(runs).splitlines()[2:]}
    # the table leaves out the split's size (1,438) to stay within 120 columns; the report gives it
    assert "digits-28 (first 768) " in rows["pytorch"]
    assert "digits-28 " in rows["jax"] and "first" not in rows["jax"]
    assert dataset_label.run_label(runs[0]) == "digits-28 (first 768 of 1,438)"


def test_results_label_a_changed_recipes_batch_size(tmp_path):
    from synthetic_store import synthetic_run

    from dlbench.harness.present import listing

    runs = []
    for framework, batch_size in (("pytorch", 64), ("jax", 128)):  # cnn-mnist's recipe: 128
        run, _, _ = synthetic_run(framework, "cnn-mnist", 1, 1.0, 0.5)
        run.update(id=len(runs) + 1, epochs=[])
        run["config"]["recipe"]["batch_size"] = batch_size
        runs.append(run)
    rows = {line.split()[0]: line for line in listing.table(runs).splitlines()[2:]}
    assert "digits-28, batch 64 (recipe 128) " in rows["pytorch"]
    assert "batch" not in rows["jax"]


# ---- mode: inference ------------------------------------------------------------------------

INFERENCE_HEAD = "name: served\nframeworks: [pytorch]\nmode: inference\n"


@pytest.mark.parametrize(("text", "line", "message"), [
    ("mode: serving\n", 3, "field 'mode': 'serving' is not one of: train, inference"),
    ("serve: {latency_calls: 10}\n", 3, "field 'serve': serving settings need `mode: inference`; a training "
     "suite serves nothing"),
    ("mode: inference\nserve: [10]\n", 4, "field 'serve': expected a mapping with some of: warmup_calls, "
     "latency_calls, throughput_samples"),
    ("mode: inference\nserve:\n  latency_calls: 10\n  batch: 4\n", 6, "field 'batch': unknown field; accepted: "
     "warmup_calls, latency_calls, throughput_samples"),
    ("mode: inference\nserve:\n  latency_calls: 0\n", 5, "field 'latency_calls': expected an integer from 1 to "
     "1000000, got 0"),
    ("mode: inference\nserve:\n  warmup_calls: -1\n", 5, "field 'warmup_calls': expected an integer from 0 to "
     "1000000, got -1"),
    ("mode: inference\nserve:\n  throughput_samples: 2.5\n", 5, "field 'throughput_samples': expected an integer "
     "from 1 to 1000000, got 2.5"),
])
def test_bad_mode_and_serve_fields_name_their_line(tmp_path, text, line, message):
    path = write_suite(tmp_path, "name: s\nframeworks: [pytorch]\n" + text
                       + "workloads: [{workload: cnn-mnist, dataset: digits-28}]\n")
    with pytest.raises(SuiteError) as raised:
        suite.load(str(path))
    assert str(raised.value) == f"{path}:{line}: {message}"


@pytest.mark.parametrize("field", ["epochs: 2", "train_samples: 64"])
def test_an_inference_entry_refuses_what_only_training_uses(tmp_path, field):
    path = write_suite(tmp_path, INFERENCE_HEAD + f"workloads:\n  - workload: cnn-mnist\n    dataset: digits-28\n"
                       f"    {field}\n")
    key = field.split(":")[0]
    with pytest.raises(SuiteError) as raised:
        suite.load(str(path))
    assert str(raised.value) == (f"{path}:7: field {key!r}: entry cnn-mnist on digits-28: an inference suite trains "
                                 f"nothing; leave {key} out (a trained model's weights come from `weights`)")


def test_inference_cells_carry_their_mode_and_serving_settings(tmp_path):
    path = write_suite(tmp_path, INFERENCE_HEAD + """serve: {latency_calls: 50}
workloads:
  - {workload: cnn-mnist, dataset: digits-28, batch_size: [16, 64]}
  - {workload: frcnn-voc, dataset: photo-boxes}
""")
    cells = suite.plan(suite.load(str(path)))
    assert {c.mode for c in cells} == {"inference"} and {c.epochs for c in cells} == {0}
    serves = {(c.workload, c.batch_size): c.serve for c in cells}
    # defaults but the suite's latency_calls; batches of the cell's batch size, a detector's of one image
    assert serves[("cnn-mnist", 16)] == suite.Serve(20, 50, 16, 1024)
    assert serves[("cnn-mnist", 64)] == suite.Serve(20, 50, 64, 1024)
    assert serves[("frcnn-voc", 1)] == suite.Serve(20, 50, 1, 32)
    training = suite.plan(suite.load("quick"))
    assert {(c.mode, c.serve) for c in training} == {("train", None)}


def test_the_serve_suite_serves_the_quick_suites_workloads_on_their_data():
    """The quick suite's two and the four that left it for quick-large, on the same stand-ins."""
    served, quick, large = suite.load("serve"), suite.load("quick"), suite.load("quick-large")
    assert served.mode == "inference" and served.serve == ()
    moved = [("lstm-imdb", "rt-snippets"), ("lstm-ptb", "lee-news-lm"), ("frcnn-voc", "photo-boxes"),
             ("vit-cifar10", "photo-patches-10")]
    assert set(moved) <= {(e.workload, e.dataset) for e in large.entries}
    assert sorted((e.workload, e.dataset) for e in served.entries) == sorted(
        [(e.workload, e.dataset) for e in quick.entries] + moved)
    assert all(e.weights is None for e in served.entries)  # canonical starting weights


def test_epochs_on_the_command_line_are_refused_for_an_inference_suite():
    with pytest.raises(SuiteError) as raised:
        suite.plan(suite.load("serve"), epochs=3)
    assert str(raised.value) == ("--epochs 3: suite 'serve' is an inference suite (mode: inference), which trains "
                                 "nothing; leave --epochs out")


def refuse_constant(name: str):
    raise AssertionError(f"the output holds {name}, which is not JSON")


def test_results_json_holds_no_nan_but_null_and_the_reason(capsys, tmp_path):
    """A run whose accuracy was NaN and a loss that was inf: Python's bare NaN and Infinity, which
    JavaScript's JSON.parse refuses, were printed before."""
    from synthetic_store import store_of, synthetic_run
    run, epochs, samples = synthetic_run("pytorch", "cnn-mnist", 1, 1.0, float("nan"))
    epochs[-1]["train_loss"] = float("inf")
    store_of(tmp_path / "results", [(run, epochs, samples)])
    assert main(["results", "--results", str(tmp_path / "results"), "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out, parse_constant=refuse_constant)
    last = listed[0]["epochs"][-1]
    assert (last["train_loss"], last["train_loss_reason"]) == (None, "was inf, which JSON cannot hold: written as null")
    assert (last["metrics"]["accuracy"], last["metrics"]["accuracy_reason"]) == (
        None, "was nan, which JSON cannot hold: written as null")


@pytest.mark.parametrize("command", [[], ["run"], ["list"], ["env"], ["certify"], ["data"], ["results"],
                                     ["compare"], ["estimate"], ["report"]])
def test_every_commands_help_prints(capsys, command):
    """`dlbench results --help` raised a TypeError: argparse formats help with %, and a column is 'cpu %'."""
    with pytest.raises(SystemExit) as ended:
        main([*command, "--help"])
    assert ended.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: dlbench {' '.join(command)}".rstrip())
    if command == ["results"]:
        assert "cpu %," in out
