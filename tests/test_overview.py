"""The report's first screen: the overview matrix counted, its marks and colours read back from a real
headless Chromium, on a store built here with known answers (one page for the whole module)."""
import csv
import io
import os
import re
import shutil
import struct
from pathlib import Path
from urllib.parse import unquote

import pytest
from matplotlib.colors import to_rgb
from synthetic_store import QUICK_SPEED, jitter, quick_store, store_of, study_store, synthetic_run
from test_report import browse, render_status

from dlbench.harness import cli
from dlbench.harness.analysis.findings import Needed, findings_of_runs
from dlbench.harness.present import charts, html, markdown, overview, overview_html, report
from dlbench.harness.store import Store

# the first screen drawn from synthetic stores of up to nine frameworks, some in Chromium
pytestmark = pytest.mark.slow

# what the page's test script writes back: each overview cell's computed background, as the browser drew it
PROBE = """<script>document.addEventListener('DOMContentLoaded', function () {
  document.querySelectorAll('table.overview td.speed').forEach(function (td) {
    var style = getComputedStyle(td);
    td.setAttribute('data-computed', style.backgroundColor);
    td.setAttribute('data-computed-image', style.backgroundImage === 'none' ? 'none' : 'striped');
  });
});</script></body>"""


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """study_store (8 repetitions: jax shown fastest on both workloads, pytorch and tensorflow level, tensorflow
    shown less accurate on cnn-mnist) plus lstm-imdb as single runs, where nothing can be shown (tensorflow's
    median the lowest, then jax's, then pytorch's)."""
    folder = tmp_path_factory.mktemp("overview")
    study_store(folder)
    with Store(folder / "dlbench.sqlite") as store:
        for framework, steady in (("pytorch", 4.0), ("jax", 2.0), ("tensorflow", 1.0)):
            # tensorflow's certificate failed here too, so that caveat holds for every workload
            store.save_run(*synthetic_run(framework, "lstm-imdb", 1, steady, 0.8, position=100,
                                          certificate="failed" if framework == "tensorflow" else "passed"))
    return folder


@pytest.fixture(scope="module")
def loaded(results: Path) -> report.Report:
    return report.load(results / "dlbench.sqlite")


@pytest.fixture(scope="module")
def dom(results: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The page as Chromium built it, with the probe's computed colours; a screenshot of its first screen."""
    page = report.write(results)
    probed = page.with_name("probed.html")
    probed.write_text(page.read_text().replace("</body>", PROBE))
    profile = tmp_path_factory.mktemp("profile")
    done = browse(profile, probed.as_uri(), "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    shot = page.with_name("overview-synthetic.png")
    browse(profile, page.as_uri(), f"--screenshot={shot}", "--window-size=1280,1000")
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24]) == (1280, 1000)
    if os.environ.get("DLBENCH_SCREENS"):  # where a person wants to look at it
        shutil.copy(shot, Path(os.environ["DLBENCH_SCREENS"]) / shot.name)
    return done.stdout


def speed_cells(dom: str) -> list[dict[str, str]]:
    rows = re.findall(r'<tr data-framework="([\w-]+)"><th class="fw">.*?</tr>', dom)
    tds = re.findall(r'<td class="speed[^"]*"[^>]*>', dom)
    cells = [dict(re.findall(r'data-([\w-]+)="([^"]*)"', td)) for td in tds]
    assert len(cells) == 3 * len(rows) == 9  # 3 frameworks x 3 workloads
    return cells


def rgb(hex_colour: str) -> str:
    r, g, b = (round(c * 255) for c in to_rgb(hex_colour))
    return f"rgb({r}, {g}, {b})"


def test_the_matrix_holds_one_cell_per_framework_and_workload_shown_fastest_first(dom: str) -> None:
    # jax shown fastest on 2 workloads; pytorch and tensorflow each shown slower on 2, so name order
    assert re.findall(r'<tr data-framework="([\w-]+)"><th class="fw">', dom) == ["jax", "pytorch", "tensorflow"]
    assert re.findall(r'<th colspan="2" data-workload="([\w-]+)">', dom) == ["cnn-mnist", "lstm-imdb", "lstm-ptb"]
    assert dom.count('<td class="metric') == 9
    cells = speed_cells(dom)
    ratios = [float(c["ratio"]) for c in cells]
    # jax's row, then pytorch's, then tensorflow's; columns cnn-mnist, lstm-imdb, lstm-ptb
    assert ratios[:3] == [1.0, 2.0, 1.0]
    assert ratios[3:6] == pytest.approx([1.667, 4.0, 1.663], abs=0.002)
    assert ratios[6:] == pytest.approx([1.681, 1.0, 1.680], abs=0.002)
    assert [c["n"] for c in cells] == ["8", "1", "7", "8", "1", "8", "7", "1", "8"]


def test_only_shown_gaps_are_coloured_and_the_rest_is_grey(dom: str) -> None:
    cells = speed_cells(dom)
    # single runs on lstm-imdb (the middle column): nothing shown, grey whatever the ratio (2x, 4x); the 8-run
    # workloads all shown, in the scale's colour
    assert [c["shown"] for c in cells] == ["true", "false", "true"] * 3
    for cell in cells:
        expected = charts.ratio_colour(float(cell["ratio"])) if cell["shown"] == "true" else overview_html.NEUTRAL
        assert cell["colour"] == expected and cell["computed"] == rgb(expected)  # what the browser painted
        assert cell["computed-image"] == "none"  # no stripes
    assert cells[1]["computed"] == cells[4]["computed"] == cells[7]["computed"] == rgb(overview_html.NEUTRAL)


def test_the_scale_runs_green_to_red_and_clips() -> None:
    assert charts.ratio_colour(1.0) == charts.ratio_colour(0.5)  # below 1 and beyond 4x the scale is clipped
    green, red = to_rgb(charts.ratio_colour(1.0)), to_rgb(charts.ratio_colour(4.0))
    assert green[1] > green[0] and red[0] > red[1]


def test_each_framework_gets_a_line_counted_from_the_findings_verdicts(loaded: report.Report, dom: str) -> None:
    [matrix] = overview.matrices(loaded.findings)
    assert matrix.lines == {
        "jax": "of 3 workloads: shown fastest on 2; never shown slower than the reference (pytorch) on the 2 tested; "
               "shown less accurate than the best on 1",
        "pytorch": "of 3 workloads: shown slower than the fastest on 2; the reference; shown less accurate than the "
                   "best on 1",
        "tensorflow": "of 3 workloads: fastest, not shown ahead, on 1; shown slower than the fastest on 2; "
                      "never shown slower than the reference (pytorch) on the 2 tested; shown the most accurate on 1; "
                      "shown less accurate than the best on 1"}
    assert matrix.unranked[("lstm-imdb", "pang-lee-polarity", "cpu")] == ("single runs", "all equal")
    # the matrix and the findings' sentences say the same
    mnist = next(f for f in loaded.findings if f.workload == "cnn-mnist")
    assert mnist.speed.startswith("jax is the fastest")
    assert "<li data-framework=\"jax\"><b>jax</b>: of 3 workloads: shown fastest on 2;" in dom


def test_the_metric_column_shows_the_best_and_each_gap_in_points(dom: str) -> None:
    metric = re.findall(r'<td class="metric([\w ]*)" data-workload="[\w-]+" data-gap="([^"]*)" data-shown="(\w+)">'
                        r'([^<]*)</td>', dom)
    mnist = metric[0::3]  # jax's, pytorch's, tensorflow's cnn-mnist accuracy
    assert [text for *_, text in mnist] == ["93.2", "-0.1", "-13.1"]
    assert [(classes, shown) for classes, _, shown, _ in mnist] == [(" best", "false"), ("", "false"),
                                                                    (" shown", "true")]
    # lstm-imdb: the same accuracy everywhere, so every framework holds the best value and none a gap
    assert [(classes, text) for classes, _, _, text in metric[1::3]] == [(" best", "80.0")] * 3


def test_the_epoch_times_stand_fastest_first(dom: str) -> None:
    """lstm-imdb's medians: tensorflow 1 s, jax 2 s, pytorch 4 s, not the alphabetical order."""
    dots = re.search(r'aria-label="epoch-times-1".*?</svg>', dom, flags=re.S).group(0)
    assert re.findall(r">(jax|pytorch|tensorflow)</text>", dots) == ["tensorflow", "jax", "pytorch"]


def test_the_first_screen_puts_caveats_above_the_matrix_and_folds_the_findings(dom: str) -> None:
    caveats, matrix, findings = (dom.index(s) for s in ("Caveats for every workload", '<table class="overview"',
                                                        'id="findings"'))
    assert caveats < matrix < findings
    assert len(re.findall(r'<details class="card" data-workload', dom)) == 3  # one per workload, closed
    assert not re.search(r"<details[^>]* open", dom)
    status = render_status(dom)
    assert status["errors"] == "0" and status["charts"] == status["expected"]
    assert re.search(r'<p id="render-status"[^>]* hidden', dom)  # the test counters are not page text


def test_the_matrix_downloads_as_csv(dom: str) -> None:
    href = re.search(r'<a class="csv" download="overview-cpu\.csv" href="data:text/csv;charset=utf-8,([^"]*)">', dom)
    rows = list(csv.reader(io.StringIO(unquote(href.group(1)))))
    assert rows[0][:9] == ["framework"] + [f"cnn-mnist (digits-28) {part}" for part in (
        "time ratio", "time ratio low", "time ratio high", "runs", "time gap shown", "metric", "metric gap",
        "metric gap shown")]
    assert [row[0] for row in rows[1:]] == ["jax", "pytorch", "tensorflow"]
    tensorflow = rows[3]  # cnn-mnist: shown 1.68x slower, 7 runs; lstm-imdb: one run, the lowest, not shown
    assert tensorflow[1] == "1.681" and float(tensorflow[2]) < 1.681 < float(tensorflow[3])
    assert tensorflow[4:6] == ["7", "true"] and tensorflow[9:14] == ["1", "", "", "1", "false"]
    assert rows[1][-1].startswith("of 3 workloads: shown fastest on 2")


def test_the_filters_hide_whole_rows_and_columns_of_the_matrix(results: Path, dom: str, tmp_path: Path) -> None:
    """#framework=jax&workload=lstm-imdb leaves jax's row and lstm-imdb's columns, the table still aligned."""
    page = results / "report.html"  # written by the dom fixture
    done = browse(tmp_path / "profile", page.as_uri() + "#framework=jax&workload=lstm-imdb", "--dump-dom")
    matrix = done.stdout[done.stdout.index('<table class="overview"'):]
    matrix = matrix[:matrix.index("</table>")]
    rows = re.findall(r'<tr data-framework="([\w-]+)"( hidden="")?>', matrix)
    assert rows == [("jax", ""), ("pytorch", ' hidden=""'), ("tensorflow", ' hidden=""')]
    cells = re.findall(r'<t([hd])[^>]* data-workload="([\w-]+)"[^>]*?( hidden="")?>', matrix)
    assert {(kind, workload) for kind, workload, hidden in cells if not hidden} == {("h", "lstm-imdb"),
                                                                                 ("d", "lstm-imdb")}
    assert sum(1 for _, workload, hidden in cells if workload == "lstm-imdb" and not hidden) == 3 + 2 * 3
    assert sum(1 for _, workload, hidden in cells if workload != "lstm-imdb" and hidden) == 2 * (3 + 2 * 3)


def test_the_markdown_opens_with_the_same_matrix_and_verdicts_as_the_html(loaded: report.Report) -> None:
    """The Markdown's overview: the shared caveats once, the same rows, columns, values and shown-or-not
    marks as the HTML matrix drawn from the same overview data, and the same lines."""
    text = markdown.render(loaded)
    caveats, matrix, findings = (text.index(s) for s in ("### Caveats for every workload", "| framework |",
                                                         "## Findings"))
    assert text.index("## Overview") < caveats < matrix < findings
    assert text.count("held no passing equivalence certificate") == 1
    table = text[matrix:text.index("\n\n", matrix)].splitlines()
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in table]
    assert cells[0] == ["framework", "cnn-mnist (digits-28) time ×", "cnn-mnist acc., pt",
                        "lstm-imdb (pang-lee-polarity) time × (single runs)", "lstm-imdb acc., pt (all equal)",
                        "lstm-ptb (lee-news-lm) time ×", "lstm-ptb perplexity"]
    rows = cells[2:]
    assert [row[0] for row in rows] == ["jax", "pytorch", "tensorflow"]
    # the HTML matrix from the same data: its ratios, intervals, shown flags and metric texts, cell for cell
    [drawn] = overview.matrices(loaded.findings)
    html = overview_html.matrix_html(drawn, charts.colours(drawn.frameworks), draw=False)
    speed = re.findall(r'<td class="speed[^"]*"[^>]* data-ratio="([^"]*)"[^>]* data-shown="(\w+)"[^>]*>[^<]*'
                       r'<span class="ci">([^<]*)</span>', html)
    metric = re.findall(r'<td class="metric[\w ]*" data-workload="[\w-]+" data-gap="[^"]*" data-shown="(\w+)">'
                        r'([^<]*)</td>', html)
    mark = {"true": markdown.SHOWN, "false": markdown.NOT_SHOWN}
    from_html = [[f"{float(ratio):.2f}× ({ci}) {mark[shown]}" for ratio, shown, ci in speed[i:i + 3]]
                 for i in (0, 3, 6)]
    assert [row[1::2] for row in rows] == from_html
    assert [row[2::2] for row in rows] == [[f"{text} {mark[shown]}" for shown, text in metric[i:i + 3]]
                                           for i in (0, 3, 6)]
    # the known answers: jax shown fastest on cnn-mnist and lstm-ptb, nothing shown on the single runs,
    # tensorflow shown 13.1 points behind on cnn-mnist
    assert rows[0][1] == "1.00× (8 runs) ●" and rows[0][3] == "2.00× (1 run) ○"
    assert re.fullmatch(r"1\.68× \(1\.6\d–1\.\d\d, 7 runs\) ●", rows[2][1]) and rows[2][2] == "-13.1 ●"
    assert rows[0][2] == "93.2 ○"
    assert "- lstm-imdb: no speed gap shown. One run per framework measures no spread" in text
    for name in drawn.frameworks:
        assert f"- **{name}**: {drawn.lines[name]}" in text
    assert f"{markdown.SHOWN}: the findings' test shows the gap" in text


# The page as dlbench writes it, read without a browser: these run wherever the tests do.

def test_each_cell_states_its_interval_and_runs_from_the_findings_test(loaded: report.Report) -> None:
    [matrix] = overview.matrices(loaded.findings)
    page = overview_html.matrix_html(matrix, charts.colours(matrix.frameworks), draw=False)
    mnist = next(f for f in loaded.findings if f.workload == "cnn-mnist")
    [test] = [t for t in mnist.speed_standing.tests if {t.a, t.b} == {"jax", "pytorch"}]
    low, high = (test.ratio.low, test.ratio.high) if test.a == "pytorch" else (1 / test.ratio.high, 1 / test.ratio.low)
    cell = re.search(r'<td class="speed" data-workload="cnn-mnist" data-ratio="1.667"[^>]*>([^<]*)'
                     r'<span class="ci">([^<]*)</span>', page)
    assert cell.groups() == ("1.67×", f"{low:.2f}–{high:.2f}, 8 runs")
    # the single runs: no interval, grey
    assert re.search(r'<td class="speed unshown" data-workload="lstm-imdb" data-ratio="4" data-n="1" '
                     r'data-shown="false" data-colour="#eef0f3" style="background-color:#eef0f3"[^>]*>4.00×'
                     r'<span class="ci">1 run</span>', page)


def test_each_workload_gets_its_interval_chart_and_the_count_of_charts_holds(loaded: report.Report) -> None:
    page = html.render(loaded)
    overview_part = page[page.index('id="overview"'):page.index('id="findings"')]
    assert re.findall(r'<figure class="chart" data-workload="([\w-]+)"><svg role="img" aria-label="intervals-cpu-\d"',
                      overview_part) == ["cnn-mnist", "lstm-imdb", "lstm-ptb"]
    assert page.count('<figure class="chart"') == html.expected_charts(loaded)
    # the live page draws none of them
    assert "intervals-cpu" not in html.render(loaded, live="running")


def test_a_workload_without_a_shown_gap_says_how_to_get_one(loaded: report.Report) -> None:
    [matrix] = overview.matrices(loaded.findings)
    page = overview_html.matrix_html(matrix, charts.colours(matrix.frameworks), draw=False)
    needed = re.findall(r'<p class="needed" data-workload="([\w-]+)">([^<]*)</p>', page)
    assert [workload for workload, _ in needed] == ["lstm-imdb"]  # the other two show their gaps
    assert needed[0][1].startswith("lstm-imdb: no speed gap shown. One run per framework measures no spread")
    assert "`dlbench estimate test -w lstm-imdb --repeat 3`" in needed[0][1]


def test_the_runs_a_ten_percent_gap_needs_and_their_cost_in_words() -> None:
    needed = Needed("cnn-mnist", "quick", 3, 0.12, 21, 40, 5 * 37 * 62.0)
    assert overview_html.needed_text(needed) == (
        "cnn-mnist: no speed gap shown with 3 runs; at its spread (12.0 % of the log steady epoch time, run to "
        "run), 40 runs a side would show a 10 % gap 4 times in 5 (Holm over its 21 pairs); the runs its frameworks "
        "lack take about 3h11m at their own runs' median wall times: `dlbench estimate quick -w cnn-mnist "
        "--repeat 40` forecasts them.")
    beyond = Needed("cnn-mnist", None, 5, 0.9, 3, None, None)
    assert overview_html.needed_text(beyond).endswith("even 1,000 runs a side would not show a 10 % gap.")


def test_rows_are_ordered_by_shown_verdicts_alone() -> None:
    """An unshown 1.01x and an unshown 1.9x stand in name order; a shown fastest comes first, then those shown
    slower than the fewest others."""
    def mark(value: float, shown: bool) -> overview.Mark:
        return overview.Mark(value, None, shown, value == 1.0)
    rows = {"zeta": ([mark(1.01, False)], 0), "alpha": ([mark(1.9, False)], 0), "omega": ([mark(1.0, True)], 0),
            "beta": ([mark(1.5, True)], 1), "gamma": ([mark(1.4, True)], 3)}
    assert sorted(rows, key=lambda name: overview.row_key(*rows[name], name)) == [
        "omega", "alpha", "zeta", "beta", "gamma"]


def test_rows_follow_the_pairwise_tests_on_a_store_of_nine_frameworks(tmp_path: Path) -> None:
    """quick_store's frameworks, three runs each, each speed a few per cent apart at most between runs: every
    pair is told apart, so the rows stand in the order of their speeds, the fastest first."""
    quick_store(tmp_path)
    [matrix] = overview.matrices(report.load(tmp_path / "dlbench.sqlite").findings)
    assert matrix.frameworks == sorted(QUICK_SPEED, key=QUICK_SPEED.__getitem__)


def test_a_run_without_a_shown_gap_ends_with_the_repetitions_that_would_show_one(tmp_path: Path) -> None:
    """The last lines of `dlbench run` (cli.repeat_hint): where no speed gap is shown, how many runs would
    show a 10 % one and the commands; the count is the findings' own (Finding.needed), as the overview's."""
    single = [synthetic_run(name, workload, 1, speed, 0.9, position=i)
              for i, (name, speed) in enumerate((("pytorch", 1.0), ("jax", 1.05))) for workload in ("cnn-mnist",
                                                                                                   "lstm-ptb")]
    store_of(tmp_path / "single", single)
    line = cli.repeat_hint(tmp_path / "single", "quick", ["cnn-mnist", "lstm-ptb", "lstm-imdb"])
    assert line == ("no speed gap shown on 2 workloads (cnn-mnist, lstm-ptb): one run per framework measures no "
                    "spread: 3 repetitions measure it; `dlbench estimate quick -w cnn-mnist -w lstm-ptb --repeat 3` "
                    "forecasts them, `dlbench run quick -w cnn-mnist -w lstm-ptb --repeat 3` runs them.")

    # two runs a side, 8 % apart run to run, 3 % between the frameworks: nothing shown, more runs needed
    noisy = [synthetic_run(name, "cnn-mnist", rep, speed * (1.08 if rep == 2 else 1.0), 0.9, position=10 * i + rep)
             for i, (name, speed) in enumerate((("pytorch", 1.0), ("jax", 1.03))) for rep in (1, 2)]
    runs = store_of(tmp_path / "noisy", noisy)
    [finding] = findings_of_runs(runs)
    assert finding.needed.runs > 2
    line = cli.repeat_hint(tmp_path / "noisy", "quick", ["cnn-mnist"])
    assert line.startswith(f"no speed gap shown on 1 workload (cnn-mnist): {finding.needed.runs} runs a side would "
                           "show a 10 % gap 4 times in 5")
    assert line.endswith(f"`dlbench run quick --repeat {finding.needed.runs}` runs them.")

    # a gap the test shows: nothing to say
    clear = [synthetic_run(name, "cnn-mnist", rep, jitter(speed, rep), 0.9, position=10 * i + rep)
             for i, (name, speed) in enumerate((("pytorch", 1.0), ("jax", 2.0))) for rep in (1, 2, 3)]
    store_of(tmp_path / "clear", clear)
    assert cli.repeat_hint(tmp_path / "clear", "quick", ["cnn-mnist"]) is None
    assert cli.repeat_hint(tmp_path / "clear", "quick", ["lstm-ptb"]) is None  # no run of the plan's workloads


def test_a_shown_cells_text_stays_legible_on_its_colour() -> None:
    """Near-black on the scale's light and middle colours, white on its dark ends; the contrast of the chosen
    text against the cell is the better of the two (WCAG ratio)."""
    def luminance(colour: str) -> float:
        return sum(w * (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4)
                   for w, c in zip((0.2126, 0.7152, 0.0722), to_rgb(colour), strict=True))

    def contrast(a: str, b: str) -> float:
        high, low = sorted((luminance(a), luminance(b)), reverse=True)
        return (high + 0.05) / (low + 0.05)
    assert overview_html.text_colour("#ffffff") == "#1a1a1a" and overview_html.text_colour("#000000") == "#ffffff"
    for ratio in (1.0, 1.1, 1.5, 2.0, 3.0, 4.0, 11.0):
        cell = charts.ratio_colour(ratio)
        chosen = overview_html.text_colour(cell)
        other = "#ffffff" if chosen == "#1a1a1a" else "#1a1a1a"
        assert contrast(chosen, cell) >= contrast(other, cell), (ratio, cell)
