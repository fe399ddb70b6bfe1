"""The overview matrices (present.overview) as HTML: the report's first screen.

A speed cell holds the ratio to the fastest, its interval and the framework's runs. Only a verdict is
coloured: a gap the findings' test shows gets its ratio's colour on the report's scale (charts.ratio_colour),
the fastest shown ahead of all others the scale's green, and everything the test does not show stays neutral
grey, whatever its ratio. Under the matrix, per workload, the same ratios and intervals on a logarithmic axis
(charts.ratio_intervals) and, where no gap is shown, how many runs would show a 10 % one and what they cost.
Each cell carries its numbers and verdict as data attributes, which the tests read.
"""
from collections.abc import Mapping
from html import escape

from matplotlib.colors import to_hex

from dlbench.harness.analysis.findings import Needed
from dlbench.harness.present import charts
from dlbench.harness.present.estimate import duration
from dlbench.harness.present.overview import (
    FRACTIONS,
    METRIC_NAMES,
    Column,
    Mark,
    Matrix,
    metric_gap_text,
    metric_value_text,
)
from dlbench.harness.present.tables import Table, csv_download

STYLE = """
table.overview td,table.overview th{text-align:center;padding:3px 4px;font-size:12px}
table.overview th.fw{text-align:left;white-space:nowrap}
table.overview .why{display:block;font-weight:400;color:#667;font-size:11px}
td.speed{font-weight:600;min-width:40px}
td.speed.unshown{background-color:#eef0f3;color:#556;font-weight:400}
td.speed .ci{display:block;font-weight:400;font-size:10.5px;white-space:nowrap;color:inherit}
.intervals{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0}
.intervals figure.chart{margin:0}
p.needed{font-size:13px;margin:4px 0}
td.metric{color:#667;border-right:2px solid #c6ccd6}
td.metric.shown{color:#b3261e;font-weight:600}
td.metric.best.shown{color:#176b2c}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px}
.legend{display:flex;gap:4px;align-items:center;flex-wrap:wrap;font-size:12.5px;margin:6px 0}
.legend span.box{display:inline-block;padding:2px 7px;border:1px solid #dde1e8}
ul.lines{margin:6px 0;padding-left:20px;font-size:14px}
ul.lines li{margin:3px 0}
"""


NEUTRAL = "#eef0f3"  # a speed cell whose gap the test does not show: no colour, whatever its ratio
NOTE = ("Time: each framework's steady epoch time over the fastest's (geometric means over runs), its 95 % "
        "interval from Welch's t on log times, and its runs. Rows: most often shown fastest first, then least "
        "often shown slower than the fastest, then by name: rows no test tells apart stand in name order. "
        "Metric: the best median, and each other "
        "framework's distance to it (accuracy and mAP in points, hundredths); red where the test shows it behind, "
        "green where the best is shown ahead of all. Under a column's name: why its test ranks nobody. The findings "
        "below say each verdict in words.")


def speed_colour(mark: Mark) -> str:
    """The cell's background: its ratio's colour where the test shows its gap (the fastest's: shown ahead of
    all), neutral where it does not."""
    return charts.ratio_colour(mark.value) if mark.shown else NEUTRAL


def interval_text(mark: Mark) -> str:
    """"1.55-1.82, 8 runs"; the runs alone without an interval (the fastest itself, single runs)."""
    runs = f"{mark.n} run{'s' if mark.n != 1 else ''}"
    return runs if mark.low is None or mark.high is None else f"{mark.low:.2f}–{mark.high:.2f}, {runs}"


def _speed_cell(mark: Mark | None, workload: str) -> str:
    if mark is None or mark.value is None:
        return f'<td class="speed" data-workload="{escape(workload)}" data-ratio="">-</td>'
    text = f"{mark.value:.2f}×"
    title = ("the fastest, " + ("shown faster than all others" if mark.shown else "not shown ahead of all")
             if mark.best else f"{text} the fastest's, " + ("gap shown" if mark.shown else "gap not shown"))
    bounds = "".join(f' data-{name}="{value:.4g}"' for name, value in (("low", mark.low), ("high", mark.high))
                     if value is not None)
    return (f'<td class="speed{"" if mark.shown else " unshown"}" data-workload="{escape(workload)}" '
            f'data-ratio="{mark.value:.4g}"{bounds} data-n="{mark.n}" data-shown="{str(mark.shown).lower()}" '
            f'data-colour="{speed_colour(mark)}" style="background-color:{speed_colour(mark)}'
            + (f';color:{text_colour(speed_colour(mark))}' if mark.shown else "") + '" '
            f'title="{escape(title)}">{text}<span class="ci">{escape(interval_text(mark))}</span></td>')


def text_colour(background: str) -> str:
    """White or near-black, whichever contrasts more with the #rrggbb background (WCAG's ratio of relative
    luminances), so that the ratio and its interval stay legible on the saturated ends of the scale."""
    def luminance(colour: str) -> float:
        channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    cell = luminance(background)
    on_white = (luminance("#ffffff") + 0.05) / (cell + 0.05)
    on_dark = (cell + 0.05) / (luminance("#1a1a1a") + 0.05)
    return "#ffffff" if on_white > on_dark else "#1a1a1a"


def _metric_cell(mark: Mark | None, metric: str, fmt_best: str, workload: str) -> str:
    if mark is None or mark.value is None:
        return f'<td class="metric" data-workload="{escape(workload)}">-</td>'
    classes = "metric" + (" best" if mark.best else "") + (" shown" if mark.shown else "")
    text = fmt_best if mark.best else metric_gap_text(metric, mark.gap)
    return (f'<td class="{classes}" data-workload="{escape(workload)}" data-gap="{mark.gap:.4g}" '
            f'data-shown="{str(mark.shown).lower()}">{escape(text)}</td>')


def _best_value(matrix: Matrix, key: Column) -> str:
    best = next((m.value for (_, k), m in matrix.metric.items() if k == key and m.best), None)
    if best is None:
        return "-"
    return metric_value_text(matrix.metric_names[key], best)


def _header(matrix: Matrix) -> str:
    top, bottom = ['<th rowspan="2" class="fw">framework</th>'], []
    for key in matrix.groups:
        workload, dataset, _ = key
        speed_why, metric_why = matrix.unranked[key]
        top.append(f'<th colspan="2" data-workload="{escape(workload)}">{escape(workload)}'
                   f'<span class="why">{escape(dataset or "?")}</span></th>')
        metric = matrix.metric_names[key]
        unit = "pt, " if metric in FRACTIONS else ""
        column = f' data-workload="{escape(workload)}"'  # the page's workload filter hides whole columns
        bottom.append(f'<th{column}>time ×{_why(speed_why)}</th><th{column}>{escape(METRIC_NAMES.get(metric, metric))}'
                      f'{_why(unit + metric_why if metric_why else unit.removesuffix(", "))}</th>')
    return f"<thead><tr>{''.join(top)}</tr><tr>{''.join(bottom)}</tr></thead>"


def _why(reason: str | None) -> str:
    return f'<span class="why">{escape(reason)}</span>' if reason else ""


def _row(matrix: Matrix, name: str, palette: Mapping[str, tuple]) -> str:
    swatch = f'<span class="swatch" style="background:{to_hex(palette[name])}"></span>'
    cells = "".join(_speed_cell(matrix.speed.get((name, key)), key[0])
                    + _metric_cell(matrix.metric.get((name, key)), matrix.metric_names[key], _best_value(matrix, key),
                                   key[0])
                    for key in matrix.groups)
    return f'<tr data-framework="{escape(name.split(" ")[0])}"><th class="fw">{swatch}{escape(name)}</th>{cells}</tr>'


def legend() -> str:
    steps = (1.0, 1.1, 1.5, 2.0, 3.0, charts.RATIO_SCALE[1])
    boxes = "".join(f'<span class="box" style="background-color:{charts.ratio_colour(r)}">'
                    f'{r:g}×{"+" if r == charts.RATIO_SCALE[1] else ""}</span>' for r in steps)
    return (f'<div class="legend">a gap the test shows, time ÷ the fastest\'s: {boxes}'
            f'&nbsp; <span class="box" style="background-color:{NEUTRAL}">grey</span>: not shown, whatever '
            f"its ratio</div>")


def matrix_table(matrix: Matrix) -> Table:
    """The matrix as plain rows, for its CSV: per workload the ratio, whether its gap is shown, the metric
    and its distance to the best, then the framework's line."""
    header = ["framework"] + [f"{w} ({d or '?'}) {part}" for w, d, _ in matrix.groups
                              for part in ("time ratio", "time ratio low", "time ratio high", "runs", "time gap shown",
                                           "metric", "metric gap", "metric gap shown")]
    rows = []
    for name in matrix.frameworks:
        row = [name]
        for key in matrix.groups:
            speed, metric = matrix.speed.get((name, key)), matrix.metric.get((name, key))
            row += _csv_marks(speed, metric)
        rows.append(row + [matrix.lines[name]])
    return Table(f"Overview, {matrix.device}", header + ["summary"], rows)


def _csv_marks(speed: Mark | None, metric: Mark | None) -> list[str]:
    def known(mark: Mark | None, value: float | None) -> str:
        return "" if mark is None or value is None else f"{value:.4g}"
    return [known(speed, speed and speed.value), known(speed, speed and speed.low), known(speed, speed and speed.high),
            "" if speed is None else str(speed.n), "" if speed is None else str(speed.shown).lower(),
            known(metric, metric and metric.value), known(metric, metric and metric.gap),
            "" if metric is None else str(metric.shown).lower()]


def plotted(matrix: Matrix) -> list[Column]:
    """The columns that get an interval chart: those with a speed ratio."""
    return [key for key in matrix.groups if any(k == key and m.value is not None for (_, k), m in matrix.speed.items())]


def interval_chart(matrix: Matrix, key: Column, palette: Mapping[str, tuple], chart_id: str) -> str:
    """One column's ratios to the fastest with their intervals, in the matrix's row order."""
    rows = [(name, mark.value, mark.low, mark.high, mark.shown, mark.n) for name in matrix.frameworks
            if (mark := matrix.speed.get((name, key))) is not None and mark.value is not None]
    workload, dataset, _ = key
    svg = charts.ratio_intervals(rows, palette, f"{workload} ({dataset or '?'})", chart_id)
    return f'<figure class="chart" data-workload="{escape(workload)}">{svg}</figure>'


def needed_text(needed: Needed) -> str:
    """How to get an answer where the test shows no gap: the runs a 10 % gap needs and what they cost."""
    suite = needed.suite or "SUITE"
    where = f"{needed.workload}: no speed gap shown"
    if needed.sigma is None:
        return (f"{where}. One run per framework measures no spread, so no test; with 3 repetitions or more "
                f"this page says how many would show a 10 % gap (`dlbench estimate {suite} -w {needed.workload} "
                f"--repeat 3` forecasts them).")
    spread = f"at its spread ({needed.sigma * 100:.1f} % of the log steady epoch time, run to run)"
    if needed.runs is None:
        return f"{where}; {spread} even 1,000 runs a side would not show a 10 % gap."
    pairs = f"{needed.comparisons} pair{'s' if needed.comparisons != 1 else ''}"
    cost = ("" if needed.more_s is None else
            f"; the runs its frameworks lack take about {duration(needed.more_s)} at their own runs' median wall "
            "times")
    return (f"{where} with {needed.have} run{'s' if needed.have != 1 else ''}; {spread}, {needed.runs} runs a side "
            f"would show a 10 % gap 4 times in 5 (Holm over its {pairs}){cost}: `dlbench estimate {suite} -w "
            f"{needed.workload} --repeat {needed.runs}` forecasts them.")


def intervals_html(matrix: Matrix, palette: Mapping[str, tuple], draw: bool) -> str:
    """Per column, its interval chart (where `draw`) and, where no gap is shown, how to get one."""
    charts_html = "".join(interval_chart(matrix, key, palette, f"intervals-{matrix.device}-{index}")
                          for index, key in enumerate(plotted(matrix))) if draw else ""
    needed = "".join(f'<p class="needed" data-workload="{escape(key[0])}">{escape(needed_text(n))}</p>'
                     for key in matrix.groups if (n := matrix.needed.get(key)) is not None)
    return (f'<div class="intervals">{charts_html}</div>' if charts_html else "") + needed


def matrix_html(matrix: Matrix, palette: Mapping[str, tuple], draw: bool = True) -> str:
    """The device's card: the matrix, then (draw: with its interval charts) how to get the answers it lacks."""
    rows = "".join(_row(matrix, name, palette) for name in matrix.frameworks)
    csv_name, csv_href = csv_download(matrix_table(matrix))
    lines = "".join(f'<li data-framework="{escape(name.split(" ")[0])}"><b>{escape(name)}</b>: '
                    f"{escape(matrix.lines[name])}</li>" for name in matrix.frameworks)
    return (f'<section class="card" data-device="{escape(matrix.device)}"><h3>{escape(matrix.device)}: '
            f"steady epoch time relative to the fastest, and the final metric's distance to the best "
            f'<a class="csv" download="{escape(csv_name)}" href="{escape(csv_href)}">CSV</a></h3>'
            f'{legend()}<div class="wide"><table class="overview" data-device="{escape(matrix.device)}">'
            f"{_header(matrix)}<tbody>{rows}</tbody></table></div>{intervals_html(matrix, palette, draw)}"
            f'<p class="note">{NOTE}</p><ul class="lines">{lines}</ul></section>')
