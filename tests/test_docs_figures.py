"""The README's counts against the suites, and benchmarks/docs_figures.py's blocks from a synthetic store:
their numbers are the store's, a second run changes nothing, bad input exits 2 with one line and writes
nothing. Harness only: no framework environment, no browser (the results folder holds no report.html)."""
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from synthetic_store import store_of, synthetic_run

from dlbench.harness.plan import suite

REPO = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("docs_figures", REPO / "benchmarks" / "docs_figures.py")
docs_figures = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = docs_figures
spec.loader.exec_module(docs_figures)

NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
                "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
README = (REPO / "README.md").read_text(encoding="utf-8")
# steady epoch seconds and final metric of each synthetic run; wall times follow from them (synthetic_run)
SPEEDS = {"pytorch": 1.0, "jax": 2.0}
METRIC = {("pytorch", "cnn-mnist"): 0.612, ("jax", "cnn-mnist"): 0.587,
          ("pytorch", "lstm-ptb"): 247.3, ("jax", "lstm-ptb"): 251.9}


def count(word: str) -> int:
    return int(word) if word.isdigit() else NUMBER_WORDS[word]


def cells_of(name: str) -> list[suite.Cell]:
    return suite.plan(suite.load(name), cores=2)


def test_the_readme_counts_the_quick_suite_as_the_code_plans_it() -> None:
    found = re.search(r"the quick suite: (\d+) cells, its (\w+) workloads \(([^:)]*)[^)]*\) (\w+) times in each of "
                      r"the (\w+) frameworks", " ".join(README.split()))
    assert found, "README.md no longer states the quick suite's cells, workloads and frameworks"
    cells = cells_of("quick")
    workloads = [name.strip() for name in found.group(3).split(",")]
    assert int(found.group(1)) == len(cells)
    assert count(found.group(2)) == len(workloads) == len({c.workload for c in cells})
    assert set(workloads) == {c.workload for c in cells}
    assert count(found.group(4)) == len({c.repetition for c in cells}) == suite.load("quick").repeat
    assert count(found.group(5)) == len({c.framework for c in cells})
    pairs = re.search(r"certifies the quick suite's (\d+) pairs", " ".join(README.split()))
    assert pairs and int(pairs.group(1)) == len({(c.framework, c.workload) for c in cells if c.framework != "pytorch"})


@pytest.mark.parametrize("name", ["paper", "paper-gpu"])
def test_the_readme_counts_the_study_suites_as_the_code_plans_them(name: str) -> None:
    found = re.search(rf"`{name}` \((\w+) workloads, (\d+) cells\)", " ".join(README.split()))
    assert found, f"README.md no longer states {name}'s workloads and cells"
    cells = cells_of(name)
    assert count(found.group(1)) == len({c.workload for c in cells})
    assert int(found.group(2)) == len(cells)


def test_every_block_in_the_docs_is_one_the_script_writes() -> None:
    for path in docs_figures.doc_files(REPO):
        text = path.read_text(encoding="utf-8")
        opened = re.findall(r"<!-- figures:([\w-]+) -->", text)
        closed = re.findall(r"<!-- /figures:([\w-]+) -->", text)
        assert opened == closed, path
        assert set(opened) <= {"make-run", "quick-metrics", "quick-epochs", "forecasts", "screenshot"}, path
        assert len(docs_figures.BLOCK.findall(text)) == len(opened), path


def quick_run(framework: str, workload: str, position: int) -> tuple[dict, list, list]:
    run, rows, samples = synthetic_run(framework, workload, 1, SPEEDS[framework], METRIC[framework, workload],
                                       position=position)
    # what a real run records, so that every paper cell is forecast (scaled by work, or at its GFLOP/s)
    run.update(suite="quick", n_train=1000, flops_per_sample=1_000_000, achieved_gflops=5.0)
    return run, rows, samples


@pytest.fixture
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    store_of(folder, [quick_run(f, w, i) for i, (f, w) in enumerate(METRIC)])
    return folder


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A checkout's README and docs with every block, holding text the script replaces."""
    folder = tmp_path / "repo"
    (folder / "docs").mkdir(parents=True)
    (folder / "README.md").write_text("# x\n\n<!-- figures:make-run -->\nold\n<!-- /figures:make-run -->\n\nkept\n\n"
                                      "<!-- figures:forecasts -->\n<!-- /figures:forecasts -->\n"
                                      "<!-- figures:screenshot -->\nold picture\n<!-- /figures:screenshot -->\n")
    (folder / "docs" / "quick-suite.md").write_text(
        "<!-- figures:quick-metrics -->\nold\n<!-- /figures:quick-metrics -->\n"
        "<!-- figures:quick-epochs -->\n<!-- /figures:quick-epochs -->\n")
    return folder


def run_script(repo: Path, results: Path, *extra: str) -> int:
    return docs_figures.main(["--results", str(results), "--repo", str(repo), "--data-dir", str(repo / "no-data"),
                              *extra])


def test_the_blocks_hold_the_stores_numbers(repo: Path, results: Path, capsys) -> None:
    assert run_script(repo, results, "--make-run-time", "17 min 8 s") == 0
    readme = (repo / "README.md").read_text()
    metrics = (repo / "docs" / "quick-suite.md").read_text()
    # the provenance: the runs, their machine and commit (synthetic_store.MACHINE)
    assert "From the store of 4 runs of the `quick` suite (run 2026-12-03 10:00 to 10:00 UTC; dlbench commit " \
           "0123456789) on Test CPU @ 2.0GHz (2 logical cores, 8 GiB memory, no GPU)." in readme
    assert "**17 min 8 s** in all" in readme
    # wall time = 4 epochs (the first 1.5 x steady) + 3 s: pytorch 7.5 s, jax 12 s, on each workload
    assert "| cnn-mnist | 2 | 20 s |" in readme and "| lstm-ptb | 2 | 20 s |" in readme
    assert "| cnn-mnist on digits-28 (4 epochs) | 58.7% | 61.2% |" in metrics
    assert "| lstm-ptb on lee-news-lm (4 epochs), perplexity | 251.9 | 247.3 |" in metrics
    assert "4: 58.7%-61.2%" in metrics
    rows = {row.split(" | ")[0].lstrip("| "): row.split(" | ") for row in readme.splitlines()
            if row.startswith("| paper")}
    assert rows["paper (cpu)"][1] == str(len(cells_of("paper"))) and rows["paper-gpu (gpu)"][1] == "56"
    assert all(row[2] != "-" for row in rows.values())
    assert "kept" in readme and "old picture" in readme  # outside the blocks, and the skipped screenshot's
    assert "screenshot skipped: " in capsys.readouterr().out  # no chromium, or (in CI) no report.html


def test_a_second_run_changes_nothing(repo: Path, results: Path, capsys) -> None:
    assert run_script(repo, results) == 0
    before = {p: p.read_text() for p in docs_figures.doc_files(repo)}
    assert run_script(repo, results) == 0
    assert {p: p.read_text() for p in docs_figures.doc_files(repo)} == before
    assert "every figure block is up to date" in capsys.readouterr().out


def error_of(capsys, repo: Path, results: Path, *extra: str) -> str:
    before = {p: p.read_text() for p in docs_figures.doc_files(repo)}
    assert run_script(repo, results, *extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("docs_figures: error: ") and err.count("\n") == 1, err
    assert {p: p.read_text() for p in docs_figures.doc_files(repo)} == before  # nothing written
    return err


def test_bad_input_exits_2_with_one_line_and_writes_nothing(repo: Path, results: Path, tmp_path: Path,
                                                           capsys) -> None:
    assert "no results store at" in error_of(capsys, repo, tmp_path / "empty")
    assert "'17 minutes': expected a duration such as '17 min 8 s'" in error_of(
        capsys, repo, results, "--make-run-time", "17 minutes")
    assert "holds no run of suite 'paper'" in error_of(capsys, repo, results, "--suite", "paper")
    with (repo / "docs" / "quick-suite.md").open("a") as file:
        file.write("<!-- figures:made-up -->\n<!-- /figures:made-up -->\n")
    assert "docs/quick-suite.md: unknown figure block 'made-up'; known: forecasts, make-run" in error_of(
        capsys, repo, results)


@pytest.mark.parametrize(("seconds", "text"), [(59.6, "1 min 0 s"), (1028, "17 min 8 s"), (7500, "2 h 5 min"),
                                               (3_348_000, "38 days 18 h")])
def test_durations_read_as_the_docs_write_them(seconds: float, text: str) -> None:
    assert docs_figures.spoken(seconds) == text


@pytest.mark.parametrize(("text", "seconds"), [("17 min 8 s", 1028), ("1 h 2 min", 3720), ("1028 s", 1028)])
def test_make_run_time_is_read_in_hours_minutes_and_seconds(text: str, seconds: int) -> None:
    assert docs_figures.parse_duration(text) == seconds


def test_the_metric_table_takes_the_median_of_each_frameworks_runs(repo: Path, tmp_path: Path) -> None:
    """Three runs a framework: the median, not the run stored last."""
    runs = []
    for repetition, accuracy in enumerate((0.50, 0.70, 0.40), start=1):
        run, rows, samples = synthetic_run("pytorch", "cnn-mnist", repetition, 1.0, accuracy, position=repetition)
        run.update(suite="quick", n_train=1000, flops_per_sample=1_000_000, achieved_gflops=5.0)
        runs.append((run, rows, samples))
    store_of(tmp_path / "three", runs)
    assert run_script(repo, tmp_path / "three") == 0
    assert "| cnn-mnist on digits-28 (4 epochs) | 50.0% |" in (repo / "docs" / "quick-suite.md").read_text()
