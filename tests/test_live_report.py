"""The report `dlbench run` rewrites after each cell (run/live_report.py): read between cells, it shows the
cells stored so far, says it is live and has no charts; at the end it is the full report. A rewrite that
fails does not stop the run, a reader never sees a part of the file, and --no-live-report leaves it to the
end. Through the real command line, in this process, with the fake framework (about a second a cell)."""
import json
import threading
import time
from pathlib import Path

import fake_dlbench
import pytest

from dlbench.harness import cli
from dlbench.harness.environments import envs
from dlbench.harness.present import report
from dlbench.harness.run import live_report, one_cell


@pytest.fixture
def two_cells(tmp_path, monkeypatch) -> Path:
    """The fake framework's suite, two repetitions of its one cell, its environment under a DLBENCH_HOME of
    this test's own."""
    monkeypatch.setitem(envs.RECIPES, "fakefw", fake_dlbench.RECIPE)
    return fake_dlbench.suite_file(tmp_path, monkeypatch, "repeat: 2\n")


@pytest.fixture
def seen_at_each_cell(monkeypatch) -> list[str | None]:
    """report.html as it reads when each cell's worker is about to start (None: no such file)."""
    seen: list[str | None] = []
    run_cell = one_cell.run_cell

    def reading_first(prepared, options, on_event=None):
        page = options.results / "report.html"
        seen.append(page.read_text() if page.exists() else None)
        return run_cell(prepared, options, on_event)

    monkeypatch.setattr(one_cell, "run_cell", reading_first)
    return seen


def run(suite_file: Path, results: Path, digits_dir: Path, *more: str) -> int:
    return cli.main(["run", str(suite_file), "--results", str(results), "--data-dir", str(digits_dir), "--plain",
                     *more])


def test_the_report_is_rewritten_between_cells_and_written_whole_at_the_end(tmp_path, two_cells, digits_dir,
                                                                             seen_at_each_cell, capsys):
    results = tmp_path / "results"
    page = results / "report.html"
    partial_or_missing: list[str] = []
    stop = threading.Event()

    def reader() -> None:  # reads the page as a browser would, all through the run
        appeared = False
        while not stop.is_set():
            time.sleep(0.001)
            try:
                text = page.read_text()
            except FileNotFoundError:
                if appeared:
                    partial_or_missing.append("missing after it was written")
                continue
            appeared = True
            if not text.rstrip().endswith("</html>"):
                partial_or_missing.append(text[-80:])

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        assert run(two_cells, results, digits_dir) == 0
    finally:
        stop.set()
        thread.join()
    first, second = seen_at_each_cell
    assert first is None  # nothing stored yet, nothing written
    assert second is not None
    assert "Live: 1 of 2 cells done, rewritten at " in second
    assert "charts are drawn when the run ends. This page reloads every 30 s." in second
    assert '<meta http-equiv="refresh" content="30">' in second
    assert "<svg" not in second and "1 runs (1 ok, 0 failed or stopped) of 1 frameworks" in second
    assert "fakefw" in second

    final = page.read_text()
    assert "http-equiv" not in final and 'id="live"' not in final and "<svg" in final
    assert "2 runs (2 ok, 0 failed or stopped)" in final
    assert partial_or_missing == []
    assert sorted(p.name for p in results.iterdir() if p.name.startswith(".")) == []  # no temporary file left

    out = capsys.readouterr().out
    assert f"report: {page}" in out
    assert "live report rewritten after 1 cell: median " in out and "; full report " in out
    [kept] = json.loads((results / live_report.COST_FILE).read_text())
    assert kept["cells"] == 2 and kept["live"] and len(kept["rewrites_s"]) == 1 and kept["full_report_s"] > 0


def test_a_rewrite_that_fails_does_not_stop_the_run(tmp_path, two_cells, digits_dir, seen_at_each_cell,
                                                    monkeypatch, capsys):
    def broken(store_path):
        raise ValueError("an analysis that cannot read this store")

    monkeypatch.setattr(report, "load", broken)
    results = tmp_path / "results"
    assert run(two_cells, results, digits_dir) == 1  # both cells ok, but no report: make run fails
    out = capsys.readouterr().out
    assert out.count("live report: not rewritten after 1 of 2 cells (ValueError: an analysis that cannot") == 1
    assert "report: not written (ValueError" in out
    assert seen_at_each_cell == [None, None] and not (results / "report.html").exists()
    with cli.Store(results / "dlbench.sqlite", for_reading=True) as store:
        runs = store.runs()
    assert [r["status"] for r in runs] == ["ok", "ok"]


def test_no_live_report_writes_the_report_at_the_end_only(tmp_path, two_cells, digits_dir, seen_at_each_cell,
                                                          capsys):
    results = tmp_path / "results"
    assert run(two_cells, results, digits_dir, "--no-live-report") == 0
    assert seen_at_each_cell == [None, None]
    assert "<svg" in (results / "report.html").read_text()
    assert "report not rewritten between cells (--no-live-report); full report " in capsys.readouterr().out


def test_a_cost_file_that_is_not_a_list_of_runs_is_left_as_it_is(tmp_path):
    """live-report.json holds earlier runs' figures: one this run cannot read is said and kept, not replaced."""
    said: list[str] = []
    for text in ("{not json", '{"cells": 2}'):
        (tmp_path / live_report.COST_FILE).write_text(text)
        live_report.LiveReport(tmp_path, 2, cli.write_report, say=said.append).keep_cost(1.0)
        assert (tmp_path / live_report.COST_FILE).read_text() == text
    assert [line.split(" (")[0] for line in said] == [
        f"live report: its cost not kept: {tmp_path / live_report.COST_FILE} is not a JSON list of runs"] * 2
    assert said[1].endswith("(it holds a JSON dict); left as it is")


@pytest.mark.parametrize(("rewrites", "failures", "line"), [
    # it said 'no cell ended before the last (3 rewrites failed)': three cells had ended
    ([], 3, "report not rewritten between cells (3 rewrites, all failed); full report 2.0 s"),
    ([], 1, "report not rewritten between cells (1 rewrite, all failed); full report 2.0 s"),
    ([], 0, "report not rewritten between cells (no cell ended before the last); full report 2.0 s"),
    ([0.5, 0.25], 1, "live report rewritten after 2 cells: median 0.38 s, 0.8 s in all (1 rewrite failed); "
                     "full report 2.0 s"),
    ([0.5], 2, "live report rewritten after 1 cell: median 0.50 s, 0.5 s in all (2 rewrites failed); "
               "full report 2.0 s"),
])
def test_the_cost_line_says_what_the_rewrites_did(tmp_path, rewrites, failures, line):
    live = live_report.LiveReport(tmp_path, 5, cli.write_report)
    live.rewrites, live.failures = rewrites, failures
    assert live.cost_line(2.0) == line
