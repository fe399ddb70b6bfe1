"""The overview matrices (present.overview) as HTML: the report's first screen.

A speed cell's background is its ratio's colour on the report's scale (charts.ratio_colour); a gap the
findings' test shows is drawn solid, one it does not show is striped with white, so colour says how much
slower and the stripes say "not shown". Each cell carries its numbers and verdict as data attributes, which
the browser test reads.
"""
from collections.abc import Mapping
from html import escape

from matplotlib.colors import to_hex

from dlbench.harness.present import charts
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
td.metric{color:#667;border-right:2px solid #c6ccd6}
td.metric.shown{color:#b3261e;font-weight:600}
td.metric.best.shown{color:#176b2c}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px}
.legend{display:flex;gap:4px;align-items:center;flex-wrap:wrap;font-size:12.5px;margin:6px 0}
.legend span.box{display:inline-block;padding:2px 7px;border:1px solid #dde1e8}
ul.lines{margin:6px 0;padding-left:20px;font-size:14px}
ul.lines li{margin:3px 0}
"""


NOTE = ("Rows: the fastest first (geometric mean of the ratios). Metric: the best median, and each other "
        "framework's distance to it (accuracy and mAP in points, hundredths); red where the test shows it behind, "
        "green where the best is shown ahead of all. Under a column's name: why its test ranks nobody. The findings "
        "below say each verdict in words.")


def speed_background(mark: Mark) -> str:
    """The cell's CSS background: its ratio's colour, striped with white where the test shows no gap."""
    colour = charts.ratio_colour(mark.value)
    if mark.shown:
        return f"background-color:{colour}"
    return (f"background-color:{colour};background-image:repeating-linear-gradient(135deg,transparent 0 6px,"
            f"rgba(255,255,255,.6) 6px 8px)")


def _speed_cell(mark: Mark | None, workload: str) -> str:
    if mark is None or mark.value is None:
        return f'<td class="speed" data-workload="{escape(workload)}" data-ratio="">-</td>'
    text = f"{mark.value:.2f}×"
    title = ("lowest median, " + ("shown faster than all others" if mark.shown else "not shown ahead of all")
             if mark.best else f"{text} the lowest median, " + ("gap shown" if mark.shown else "gap not shown"))
    return (f'<td class="speed" data-workload="{escape(workload)}" data-ratio="{mark.value:.4g}" '
            f'data-shown="{str(mark.shown).lower()}" '
            f'data-colour="{charts.ratio_colour(mark.value)}" style="{speed_background(mark)}" '
            f'title="{escape(title)}">{text}</td>')


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
    striped = speed_background(Mark(1.5, None, False, False))
    return (f'<div class="legend">time ÷ the lowest median: {boxes}'
            f'&nbsp; solid: the gap is shown by the test; <span class="box" style="{striped}">striped</span>: '
            f"not shown</div>")


def matrix_table(matrix: Matrix) -> Table:
    """The matrix as plain rows, for its CSV: per workload the ratio, whether its gap is shown, the metric
    and its distance to the best, then the framework's line."""
    header = ["framework"] + [f"{w} ({d or '?'}) {part}" for w, d, _ in matrix.groups
                              for part in ("time ratio", "time gap shown", "metric", "metric gap", "metric gap shown")]
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
    return [known(speed, speed and speed.value), "" if speed is None else str(speed.shown).lower(),
            known(metric, metric and metric.value), known(metric, metric and metric.gap),
            "" if metric is None else str(metric.shown).lower()]


def matrix_html(matrix: Matrix, palette: Mapping[str, tuple]) -> str:
    rows = "".join(_row(matrix, name, palette) for name in matrix.frameworks)
    csv_name, csv_href = csv_download(matrix_table(matrix))
    lines = "".join(f'<li data-framework="{escape(name.split(" ")[0])}"><b>{escape(name)}</b>: '
                    f"{escape(matrix.lines[name])}</li>" for name in matrix.frameworks)
    return (f'<section class="card" data-device="{escape(matrix.device)}"><h3>{escape(matrix.device)}: '
            f"steady epoch time relative to the lowest median, and the final metric's distance to the best "
            f'<a class="csv" download="{escape(csv_name)}" href="{escape(csv_href)}">CSV</a></h3>'
            f'{legend()}<div class="wide"><table class="overview" data-device="{escape(matrix.device)}">'
            f"{_header(matrix)}<tbody>{rows}</tbody></table></div>"
            f'<p class="note">{NOTE}</p><ul class="lines">{lines}</ul></section>')
