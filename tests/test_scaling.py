"""Scaling over a sweep's axes: speed-up, parallel efficiency and training throughput against hand-computed
values, the base named where it is not 1 thread, the intervals, and the report's Scaling section (the HTML
parsed, the Markdown), which a store without a sweep does not get."""
from html.parser import HTMLParser
from pathlib import Path

import pytest
from synthetic_store import store_of, study_store, sweep_run, thread_sweep

from dlbench.harness.analysis.scaling import BATCH_SIZE, THREADS, scaling
from dlbench.harness.present import charts, html, report
from dlbench.harness.present import scaling as scaling_text
from dlbench.harness.store import Store


def by_value(line) -> dict:
    return {p.value: p for p in line.points}


def test_speed_up_and_efficiency_over_thread_counts(tmp_path: Path) -> None:
    [figure] = scaling(store_of(tmp_path, thread_sweep()))
    assert figure.axis == THREADS and figure.title == "cnn-mnist on digits-28 (cpu)"
    jax, pytorch = figure.lines
    assert (jax.label, jax.base, pytorch.label, pytorch.base) == ("jax", 2, "pytorch", 1)
    points = by_value(pytorch)
    assert points[1].figure.median == 1.0 and points[1].efficiency.median == 1.0
    # medians 10 / 5.5 and 10 / 3; intervals [min_1 / max_T, max_1 / min_T] at 3 runs a side (75% each)
    assert points[2].figure.median == pytest.approx(10 / 5.5)
    assert (points[2].figure.low, points[2].figure.high) == pytest.approx((9 / 6, 11 / 5))
    assert points[2].figure.level == pytest.approx(0.75 ** 2)
    assert points[2].efficiency.median == pytest.approx(10 / 5.5 / 2)
    assert (points[2].efficiency.low, points[2].efficiency.high) == pytest.approx((9 / 6 / 2, 11 / 5 / 2))
    assert points[4].figure.median == pytest.approx(10 / 3)
    assert points[4].efficiency.median == pytest.approx(10 / 3 / 4)
    assert points[4].steady_epoch_s.median == 3.0
    for point in pytorch.points[1:]:
        assert point.figure.low <= point.figure.median <= point.figure.high
    # jax holds no 1-thread runs: its base is its smallest count, 2, and efficiency is over 4 / 2
    assert by_value(jax)[4].figure.median == pytest.approx(1.5)
    assert by_value(jax)[4].efficiency.median == pytest.approx(0.75)


def test_a_base_other_than_one_thread_is_named_everywhere(tmp_path: Path) -> None:
    runs = store_of(tmp_path, thread_sweep())
    [mixed] = scaling(runs)
    assert scaling_text.y_label(mixed) == "speed-up over each line's base"
    assert [scaling_text.line_label(line, mixed) for line in mixed.lines] == [
        "jax (speed-up over 2 threads)", "pytorch (speed-up over 1 thread)"]
    [jax_only] = scaling([run for run in runs if run["framework"] == "jax"])
    table = scaling_text.table(jax_only)
    assert table.header == ["framework", "threads", "steady epoch", "speed-up over 2 threads",
                            "parallel efficiency"]
    assert table.rows == [["jax", "2", "6.00 s [6.00-6.00, 75%]", "1.00x [1.00-1.00]", "100% [100-100]"],
                          ["jax", "4", "4.00 s [4.00-4.00, 75%]", "1.50x [1.50-1.50, 56.2%]",
                           "75% [75-75, 56.2%]"]]
    assert ">speed-up over 2 threads</text>" in html.scaling_chart(jax_only, "jax-threads")


def test_the_interval_narrows_with_more_repetitions_and_one_run_has_none(tmp_path: Path) -> None:
    few = {("pytorch", 1): [9.0, 10.0, 11.0], ("pytorch", 2): [4.5, 5.0, 5.5]}
    many = {("pytorch", 1): [9.0, 9.9, 9.95, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.05, 10.1, 11.0],
            ("pytorch", 2): [4.5, 4.95, 4.97, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.02, 5.05, 5.5]}
    single = {("pytorch", 1): [10.0], ("pytorch", 2): [5.0]}
    speed_ups = []
    for name, times in (("few", few), ("many", many), ("single", single)):
        [figure] = scaling(store_of(tmp_path / name, thread_sweep(times)))
        speed_ups.append(by_value(figure.lines[0])[2].figure)
    few_up, many_up, single_up = speed_ups
    assert few_up.median == many_up.median == single_up.median == 2.0
    assert many_up.low <= 2.0 <= many_up.high
    assert many_up.high - many_up.low < few_up.high - few_up.low
    # 12 runs a side: [x_(2), x_(11)] of each, at 99.4% each
    assert (many_up.low, many_up.high) == pytest.approx((9.9 / 5.05, 10.1 / 4.95))
    assert single_up.low is single_up.high is None
    [figure] = scaling(store_of(tmp_path / "single-table", thread_sweep(single)))
    table = scaling_text.table(figure)
    assert table.rows[1][3] == "2.00x" and "a value of one run has no interval" in table.note


def test_a_thread_count_whose_runs_were_flagged_for_their_cores_is_marked(tmp_path: Path) -> None:
    runs = thread_sweep({("pytorch", 1): [10.0, 10.0], ("pytorch", 4): [6.0, 6.0]})
    for run, _, _ in runs[2:]:
        run["cores_flag"] = "used 1.9 of 4 cores"  # 4 threads on a 2-core machine
    [figure] = scaling(store_of(tmp_path, runs))
    table = scaling_text.table(figure)
    assert [row[2] for row in table.rows] == ["10.0 s [10.0-10.0, 50%]", "6.00 s [6.00-6.00, 50%] †"]
    assert table.note.endswith("the findings' caveats name it and say whether other processes were busy meanwhile or "
                               "the framework did it by itself")


def test_throughput_over_batch_sizes_says_the_changed_recipe(tmp_path: Path) -> None:
    times = {32: [2.0, 2.5], 64: [1.0, 1.0], 128: [0.8]}
    runs = store_of(tmp_path, [sweep_run("pytorch", t, rep, batch_size=batch, position=batch + rep)
                               for batch, values in times.items() for rep, t in enumerate(values, 1)])
    [figure] = scaling(runs)
    assert figure.axis == BATCH_SIZE and figure.title == "cnn-mnist on digits-28, 2 threads (cpu)"
    assert figure.recipe_batch_size == 128 and figure.lines[0].base is None
    points = by_value(figure.lines[0])
    # 1000 samples over 2.0 and 2.5 s: 500 and 400 samples/s, median 450, [400-500] at 50%
    assert (points[32].figure.median, points[32].figure.low, points[32].figure.high) == (450.0, 400.0, 500.0)
    assert points[64].figure.median == 1000.0
    assert points[128].figure.median == 1250.0 and points[128].figure.low is None
    table = scaling_text.table(figure)
    assert table.header == ["framework", "batch size", "steady epoch", "samples/s"]
    assert [row[1] for row in table.rows] == ["32 (recipe 128)", "64 (recipe 128)", "128 (recipe)"]
    assert [row[3] for row in table.rows] == ["450 [400-500, 50%]", "1000 [1000-1000, 50%]", "1250"]


def test_a_cell_without_another_value_of_the_axis_makes_no_figure(tmp_path: Path) -> None:
    runs = store_of(tmp_path, [sweep_run("pytorch", 1.0, rep, position=rep) for rep in (1, 2)]
                    + [sweep_run("jax", 1.0, 1, threads=1, position=5)])  # jax: one thread count only
    assert scaling(runs) == []
    with Store(study_store(tmp_path / "study", repetitions=2), for_reading=True) as store:
        assert scaling(store.runs()) == []


class Page(HTMLParser):
    """The ids of a page's headings, and per table under the Scaling heading its header and rows as text."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.in_scaling = False
        self.tables: list[list[list[str]]] = []
        self.svgs = 0
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "h2":
            self.ids.append(found.get("id") or "")
            self.in_scaling = found.get("id") == "scaling"
        if not self.in_scaling:
            return
        if tag == "svg":
            self.svgs += 1
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:  # a median's interval goes on its own line
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.tables:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def parsed(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text())
    return page


@pytest.mark.slow
def test_the_report_gets_a_scaling_section_only_with_a_sweep(tmp_path: Path) -> None:
    store_of(tmp_path / "sweep", thread_sweep() + [
        sweep_run("pytorch", t, rep, batch_size=64, position=90 + rep) for rep, t in enumerate([2.0, 2.2], 1)])
    page = parsed(report.write(tmp_path / "sweep"))
    assert "scaling" in page.ids and page.ids.index("scaling") == page.ids.index("figures") + 1
    # threads at batch 128 and batch sizes at 2 threads: two figures, each with its chart and table
    assert page.svgs == 2 and len(page.tables) == 2
    threads, batches = page.tables
    assert threads[0] == ["framework", "threads", "steady epoch", "speed-up", "parallel efficiency"]
    assert ["pytorch (speed-up over 1 thread)", "4", "3.00 s [3.00-3.50, 75%]", "3.33x [2.57-3.67, 56.2%]",
            "83% [64-92, 56.2%]"] in threads
    assert batches[0] == ["framework", "batch size", "steady epoch", "samples/s"]
    # samples/s: the median of the runs' 1000 / 2.0 and 1000 / 2.2
    assert ["pytorch", "64 (recipe 128)", "2.10 s [2.00-2.20, 50%]", "477.3 [454.5-500, 50%]"] in batches
    markdown = report.write(tmp_path / "sweep", "md").read_text()
    assert "## Scaling" in markdown
    assert "| pytorch (speed-up over 1 thread) | 4 | 3.00 s [3.00-3.50, 75%] | 3.33x [2.57-3.67, 56.2%] |" in markdown
    study_store(tmp_path / "plain", repetitions=2)
    assert "scaling" not in parsed(report.write(tmp_path / "plain")).ids
    assert "## Scaling" not in report.write(tmp_path / "plain", "md").read_text()


def test_the_scaling_chart_draws_a_line_per_framework_and_the_linear_speed_up() -> None:
    palette = charts.colours(["jax", "pytorch"])
    svg = charts.scaling_lines({"jax": [(1, 1.0, None, None), (2, 1.8, 1.7, 1.9)], "pytorch": [(1, 1.0, None, None),
                                                                                               (2, 1.5, 1.4, 1.6)]},
                               palette, "threads", "threads", "speed-up over 1 thread", [(1, 1.0), (2, 2.0)])
    assert ">jax</text>" in svg and ">pytorch</text>" in svg and ">linear</text>" in svg
    assert ">speed-up over 1 thread</text>" in svg
