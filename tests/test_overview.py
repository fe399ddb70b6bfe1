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
from synthetic_store import study_store, synthetic_run
from test_report import browse, render_status

from dlbench.harness.present import charts, markdown, overview, overview_html, report
from dlbench.harness.store import Store

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
    cells = [dict(re.findall(r'data-([\w-]+)="([^"]*)"', td)) for td in re.findall(r'<td class="speed"[^>]*>', dom)]
    assert len(cells) == 3 * len(rows) == 9  # 3 frameworks x 3 workloads
    return cells


def rgb(hex_colour: str) -> str:
    r, g, b = (round(c * 255) for c in to_rgb(hex_colour))
    return f"rgb({r}, {g}, {b})"


def test_the_matrix_holds_one_cell_per_framework_and_workload_fastest_first(dom: str) -> None:
    assert re.findall(r'<tr data-framework="([\w-]+)"><th class="fw">', dom) == ["jax", "tensorflow", "pytorch"]
    assert re.findall(r'<th colspan="2" data-workload="([\w-]+)">', dom) == ["cnn-mnist", "lstm-imdb", "lstm-ptb"]
    assert dom.count('<td class="metric') == 9
    cells = speed_cells(dom)
    ratios = [float(c["ratio"]) for c in cells]
    # jax's row, then tensorflow's, then pytorch's (geometric means 1.26, 1.41, 2.23); columns cnn-mnist,
    # lstm-imdb, lstm-ptb
    assert ratios[:3] == [1.0, 2.0, 1.0]
    assert ratios[3:6] == pytest.approx([1.680, 1.0, 1.680], abs=0.002)
    assert ratios[6:] == pytest.approx([1.667, 4.0, 1.663], abs=0.002)


def test_shown_gaps_are_solid_and_unshown_ones_striped_in_the_scales_colour(dom: str) -> None:
    cells = speed_cells(dom)
    # single runs on lstm-imdb (the middle column): nothing shown, striped; the 8-run workloads all shown
    assert [c["shown"] for c in cells] == ["true", "false", "true"] * 3
    assert [c["computed-image"] for c in cells] == ["none", "striped", "none"] * 3
    for cell in cells:
        assert cell["colour"] == charts.ratio_colour(float(cell["ratio"]))
        assert cell["computed"] == rgb(cell["colour"])  # what the browser painted
    assert len({cells[0]["computed"], cells[1]["computed"], cells[3]["computed"], cells[7]["computed"]}) == 4
    assert cells[0]["computed"] == cells[4]["computed"]  # 1x, solid or striped
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
        "tensorflow": "of 3 workloads: lowest median, not shown ahead, on 1; shown slower than the fastest on 2; "
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
    mnist = metric[0::3]  # jax's, tensorflow's, pytorch's cnn-mnist accuracy
    assert [text for *_, text in mnist] == ["93.2", "-13.1", "-0.1"]
    assert [(classes, shown) for classes, _, shown, _ in mnist] == [(" best", "false"), (" shown", "true"),
                                                                    ("", "false")]
    # lstm-imdb: the same accuracy everywhere, so every framework holds the best value and none a gap
    assert [(classes, text) for classes, _, _, text in metric[1::3]] == [(" best", "80.0")] * 3


def test_the_bars_stand_fastest_first(dom: str) -> None:
    """lstm-imdb's medians: tensorflow 1 s, jax 2 s, pytorch 4 s, not the alphabetical order."""
    bars = re.search(r'aria-label="bars-1".*?</svg>', dom, flags=re.S).group(0)
    assert re.findall(r">(jax|pytorch|tensorflow)</text>", bars) == ["tensorflow", "jax", "pytorch"]


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
    assert rows[0][:6] == ["framework", "cnn-mnist (digits-28) time ratio", "cnn-mnist (digits-28) time gap shown",
                           "cnn-mnist (digits-28) metric", "cnn-mnist (digits-28) metric gap",
                           "cnn-mnist (digits-28) metric gap shown"]
    assert [row[0] for row in rows[1:]] == ["jax", "tensorflow", "pytorch"]
    assert rows[2][1:3] == ["1.68", "true"] and rows[2][6:8] == ["1", "false"]  # tensorflow: cnn-mnist, lstm-imdb
    assert rows[1][-1].startswith("of 3 workloads: shown fastest on 2")


def test_the_filters_hide_whole_rows_and_columns_of_the_matrix(results: Path, dom: str, tmp_path: Path) -> None:
    """#framework=jax&workload=lstm-imdb leaves jax's row and lstm-imdb's columns, the table still aligned."""
    page = results / "report.html"  # written by the dom fixture
    done = browse(tmp_path / "profile", page.as_uri() + "#framework=jax&workload=lstm-imdb", "--dump-dom")
    matrix = done.stdout[done.stdout.index('<table class="overview"'):]
    matrix = matrix[:matrix.index("</table>")]
    rows = re.findall(r'<tr data-framework="([\w-]+)"( hidden="")?>', matrix)
    assert rows == [("jax", ""), ("tensorflow", ' hidden=""'), ("pytorch", ' hidden=""')]
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
    assert [row[0] for row in rows] == ["jax", "tensorflow", "pytorch"]
    # the HTML matrix from the same data: its ratios, shown flags and metric texts, cell for cell
    [drawn] = overview.matrices(loaded.findings)
    html = overview_html.matrix_html(drawn, charts.colours(drawn.frameworks))
    speed = re.findall(r'<td class="speed"[^>]* data-ratio="([^"]*)" data-shown="(\w+)"', html)
    metric = re.findall(r'<td class="metric[\w ]*" data-workload="[\w-]+" data-gap="[^"]*" data-shown="(\w+)">'
                        r'([^<]*)</td>', html)
    mark = {"true": markdown.SHOWN, "false": markdown.NOT_SHOWN}
    from_html = [[f"{float(ratio):.2f}× {mark[shown]}" for ratio, shown in speed[i:i + 3]] for i in (0, 3, 6)]
    assert [row[1::2] for row in rows] == from_html
    assert [row[2::2] for row in rows] == [[f"{text} {mark[shown]}" for shown, text in metric[i:i + 3]]
                                           for i in (0, 3, 6)]
    # the known answers: jax shown fastest on cnn-mnist and lstm-ptb, nothing shown on the single runs,
    # tensorflow shown 13.1 points behind on cnn-mnist
    assert rows[0][1] == "1.00× ●" and rows[0][3] == "2.00× ○"
    assert rows[1][1] == "1.68× ●" and rows[1][2] == "-13.1 ●"
    assert rows[0][2] == "93.2 ○"
    for name in drawn.frameworks:
        assert f"- **{name}**: {drawn.lines[name]}" in text
    assert f"{markdown.SHOWN}: the findings' test shows the gap" in text
