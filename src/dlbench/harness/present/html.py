"""The report as one HTML file: styles, script and SVG charts inline, nothing fetched, opened from disk.

Every value from the store passes through html.escape (the charts' text through matplotlib's SVG
writer, which escapes it). The inline script only filters, sorts, and records how many charts it
rendered and any script error into #render-status, which the browser test reads.
"""
import re
from collections.abc import Iterable, Mapping, Sequence
from html import escape

from dlbench.harness.analysis.dataset_label import run_label
from dlbench.harness.analysis.findings import COMPILATION_FACTOR, Finding, group, label
from dlbench.harness.analysis.scaling import THREADS
from dlbench.harness.analysis.scaling import Figure as ScalingFigure
from dlbench.harness.analysis.stats import Estimate
from dlbench.harness.analysis.summary import WARM, CellSummary, group_of
from dlbench.harness.plan import executions, precisions
from dlbench.harness.plan import modes as mode_labels
from dlbench.harness.plan.workloads import metric_label
from dlbench.harness.present import charts, history, modes, overview, overview_html, scaling, tables
from dlbench.harness.present.contents import Report
from dlbench.harness.present.study_section import StudySection
from dlbench.harness.present.tables import Table

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:0 24px 48px}
header{background:#1d2330;color:#fff;padding:20px 24px}
header h1{margin:0 auto;max-width:1180px;font-size:24px}
header p{margin:6px auto 0;max-width:1180px;color:#c9d1e0}
nav{position:sticky;top:0;background:#fff;border-bottom:1px solid #dde1e8;padding:8px 24px;z-index:2}
nav div{max-width:1180px;margin:0 auto;display:flex;gap:18px;align-items:center;flex-wrap:wrap}
nav a{color:#2456a6;text-decoration:none}
nav label{font-size:14px;color:#444}
h2{margin-top:36px;border-bottom:2px solid #1d2330;padding-bottom:4px}
.card{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:14px 18px;margin:14px 0}
.card h3{margin:0 0 8px;font-size:17px}
.finding{margin:6px 0;line-height:1.45}
.finding b{display:inline-block;min-width:84px;color:#555;font-weight:600}
.caveats{background:#fff8e6;border-left:4px solid #e0a400;margin:10px 0 0;padding:6px 12px 6px 28px;font-size:14px}
.caveats li{margin:3px 0}
table{border-collapse:collapse;background:#fff;font-size:13.5px;margin:8px 0}
th,td{border:1px solid #dde1e8;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#eef1f6}
.ci{color:#667;font-size:12px}
.wide{overflow-x:auto}
table.sortable th{cursor:pointer}
.note{color:#555;font-size:13px;margin:2px 0 12px}
figure.chart{background:#fff;border:1px solid #dde1e8;border-radius:8px;margin:10px 0;padding:8px;overflow-x:auto}
figure.chart svg{max-width:100%;height:auto}
figcaption{font-size:13px;color:#444;margin-bottom:4px}
details{margin:8px 0}
details.card summary h3,details.table summary h3{display:inline;margin:0}
.timelines{display:grid;grid-template-columns:1fr 1fr;gap:0 12px}
summary{cursor:pointer;color:#2456a6}
a.csv{font-size:12px;font-weight:400;margin-left:8px;color:#2456a6}
.pass{color:#176b2c}.fail{color:#b3261e;font-weight:600}
#js-errors{color:#b3261e;white-space:pre-wrap}
.live{margin:0;padding:8px 24px;background:#fff3c4;border-bottom:1px solid #e0a400;font-weight:600}
"""

SCRIPT = """
(function () {
  var errors = [];
  function record(text) {
    errors.push(text);
    var box = document.getElementById('js-errors');
    if (box) { box.textContent = errors.join('\\n'); box.hidden = false; }
    status();
  }
  window.onerror = function (message, source, line) { record(message + ' (line ' + line + ')'); };
  window.addEventListener('unhandledrejection', function (e) { record('unhandled rejection: ' + e.reason); });
  function status() {
    var el = document.getElementById('render-status');
    if (!el) { return; }
    var svgs = document.querySelectorAll('figure.chart > svg');
    var parsed = 0, shown = 0;
    svgs.forEach(function (svg) {
      if (svg instanceof SVGSVGElement && svg.querySelector('path')) { parsed += 1; }
      var box = svg.getBoundingClientRect();
      if (box.width > 0 && box.height > 0) { shown += 1; }
    });
    el.setAttribute('data-charts', String(parsed));
    el.setAttribute('data-charts-shown', String(shown));
    el.setAttribute('data-errors', String(errors.length));
    el.textContent = parsed + ' charts rendered, ' + errors.length + ' script errors';
  }
  function filter() {
    var chosen = {};
    document.querySelectorAll('nav select').forEach(function (s) { chosen[s.name] = s.value; });
    document.querySelectorAll('[data-device],[data-workload],[data-framework]').forEach(function (el) {
      var hide = Object.keys(chosen).some(function (key) {
        var values = el.getAttribute('data-' + key);
        return chosen[key] && values !== null && values.split(' ').indexOf(chosen[key]) < 0;
      });
      el.hidden = hide;
    });
  }
  function sortBy(table, column) {
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    var up = table.getAttribute('data-sorted') !== String(column);
    rows.sort(function (a, b) {
      var x = a.cells[column].textContent, y = b.cells[column].textContent;
      var nx = parseFloat(x), ny = parseFloat(y);
      var order = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return up ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    table.setAttribute('data-sorted', up ? String(column) : '');
  }
  document.addEventListener('DOMContentLoaded', function () {
    // #expand opens the folded timelines; #framework=jax&device=cpu preselects filters (a link can carry them)
    location.hash.slice(1).split('&').forEach(function (part) {
      var pair = part.split('=');
      var select = document.querySelector('nav select[name="' + pair[0] + '"]');
      if (part === 'expand') {
        document.querySelectorAll('details').forEach(function (d) { d.open = true; });
      } else if (select && pair.length === 2) {
        select.value = decodeURIComponent(pair[1]);
      }
    });
    document.querySelectorAll('nav select').forEach(function (s) { s.addEventListener('change', filter); });
    filter();
    document.querySelectorAll('table.sortable').forEach(function (table) {
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
        th.title = 'sort';
        th.addEventListener('click', function () { sortBy(table, i); });
      });
    });
    status();
  });
})();
"""


def run_groups(runs: Sequence[Mapping]) -> dict[tuple, list[Mapping]]:
    """Runs by workload x dataset (x train_samples) x device, keyed as CellSummary.group, in the summaries'
    order."""
    groups: dict[tuple, list[Mapping]] = {}
    for run in runs:
        groups.setdefault(group_of(run), []).append(run)
    return dict(sorted(groups.items(), key=lambda item: tuple("" if v is None else str(v) for v in item[0])))


def run_labels(runs: Sequence[Mapping]) -> dict[int, str]:
    """Run id -> framework name, with the version where these runs hold several versions of it, and the execution
    and precision where not the framework's defaults."""
    versions: dict[str, set] = {}
    for run in runs:
        versions.setdefault(run["framework"], set()).add(run.get("framework_version"))
    return {run["id"]: (run["framework"] if len(versions[run["framework"]]) == 1
                        else f"{run['framework']} {run.get('framework_version')}")
            + mode_labels.suffix(run["framework"], executions.of_run(run), precisions.of_run(run)) for run in runs}


def attrs(**values: str | None) -> str:
    """HTML attributes, escaped; data_x becomes data-x; None values are left out."""
    return "".join(f' {k.replace("_", "-")}="{escape(v)}"' for k, v in values.items() if v is not None)


FOLD_ROWS = 20  # a table of more rows is folded: the manifest's run order (one row per run) ran to 10,000 px


def table_html(table: Table, sortable: bool = False) -> str:
    """The table with its CSV download; cells with a shade (a ratio) coloured on the report's scale. A table
    without rows shows its title and note alone (the note says why it is empty); one of more than FOLD_ROWS
    rows is folded under its title and row count, so it does not push what follows down the page."""
    note = f'<p class="note">{escape(table.note)}</p>' if table.note else ""
    if not table.rows:
        return f"<div{_data(table.keys)}><h3>{escape(table.title)}</h3>{note}</div>"
    cls = ' class="sortable"' if sortable else ""
    columns = table.frameworks or [""] * len(table.header)
    head = "".join(f"<th{attrs(data_framework=f or None)}>{escape(h)}</th>"
                   for h, f in zip(table.header, columns, strict=True))
    body = []
    for i, row in enumerate(table.rows):
        keys = table.row_keys[i] if table.row_keys else {}
        shades = table.shades[i] if table.shades else [None] * len(row)
        cells = "".join(f"<td{attrs(data_framework=f or None, style=_shade(shade), **{'class': _verdict_class(c)})}>"
                        f"{_cell(c)}</td>" for c, f, shade in zip(row, columns, shades, strict=True))
        body.append(f"<tr{_data(keys)}>{cells}</tr>")
    grid = f'<div class="wide"><table{cls}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
    if len(table.rows) > FOLD_ROWS:
        return (f'<details class="table"{_data(table.keys)}><summary><h3>{escape(table.title)} '
                f"({len(table.rows)} rows) {csv_link(table)}</h3></summary>{grid}{note}</details>")
    return f"<div{_data(table.keys)}><h3>{escape(table.title)} {csv_link(table)}</h3>{grid}{note}</div>"


def _shade(ratio: float | None) -> str | None:
    return None if ratio is None else f"background-color:{charts.ratio_colour(ratio)}"


def csv_link(table: Table) -> str:
    """A link that downloads the table as CSV, the file inline in the page (a data: URI): nothing is fetched."""
    name, href = tables.csv_download(table)
    return f'<a class="csv"{attrs(download=name, href=href)}>CSV</a>'


def _data(keys: Mapping[str, str]) -> str:
    return attrs(**{f"data_{k}": v for k, v in keys.items()})


def _cell(text: str) -> str:
    """A table cell; a median's interval "[low-high]" goes on its own, quieter line."""
    median, bracket, rest = text.partition(" [")
    interval, closing, after = rest.partition("]")
    if not bracket or not closing:
        return escape(text)
    return f'{escape(median)}<br><span class="ci">[{escape(interval)}]</span>{escape(after)}'


def _verdict_class(text: str) -> str | None:
    return "fail" if text.startswith("FAIL") else "pass" if text.startswith("pass") else None


def finding_html(finding: Finding, frameworks: Iterable[str]) -> str:
    """One workload's finding, folded: its title shows, its sentences and caveats open on a click."""
    caveats = "".join(f"<li>{escape(c)}</li>" for c in finding.caveats)
    return (f'<details class="card"{_keys(finding.workload, finding.device, frameworks)}>'
            f"<summary><h3>{escape(finding.title)}</h3></summary>"
            f'<p class="finding"><b>Speed</b> {escape(finding.speed)}</p>'
            f'<p class="finding"><b>Final metric</b> {escape(finding.metric)}</p>'
            + (f'<ul class="caveats">{caveats}</ul>' if caveats else "") + "</details>")


def shared_caveats_html(caveats: list[str], first_epochs: Table | None = None) -> str:
    """The caveats that hold for every workload, once, above the findings, and the table of slow first
    epochs (a caveat per framework and workload), folded: its summary line says what it holds."""
    if not caveats and first_epochs is None:
        return ""
    items = "".join(f"<li>{escape(c)}</li>" for c in caveats)
    folded = ""
    if first_epochs is not None:
        marked = sum(1 for row in first_epochs.rows for cell in row[1:] if cell)
        summary = (f"First epochs: {marked} framework x workload pair{'s' if marked != 1 else ''} over "
                   f"{COMPILATION_FACTOR:g}x the steady epoch (compilation, warm-up) or from a warm compile cache")
        folded = f"<details><summary>{escape(summary)}</summary>{table_html(first_epochs)}</details>"
    return ('<section class="card"><h3>Caveats for every workload</h3>'
            + (f'<ul class="caveats">{items}</ul>' if items else "") + f"{folded}</section>")


def _keys(workload: str, device: str | None, frameworks: Iterable[str]) -> str:
    return attrs(data_workload=workload, data_device=device or "?", data_framework=" ".join(frameworks))


def figure(svg: str, caption: str, keys: str) -> str:
    return f'<figure class="chart"{keys}><figcaption>{escape(caption)}</figcaption>{svg}</figure>'


def group_figures(runs: Sequence[Mapping], cells: Sequence[CellSummary], samples: Mapping[int, list],
                  palette: Mapping, index: int) -> str:
    """A workload's figures: epoch times (from the group's summaries, whose intervals the tables
    show too), convergence, and one resource timeline per sampled run."""
    first = runs[0]
    names = run_labels(runs)
    frameworks = sorted(set(names.values()))
    keys = _keys(first["workload"], first.get("device"), {r["framework"] for r in runs})
    by_label = {label(cell, cells): cell for cell in cells}
    # fastest first: the dots read as a ranking of medians (the findings say which gaps are shown)
    rows = sorted(((name, _interval(by_label[name].steady_epoch_s), _interval(by_label[name].first_epoch_s))
                   for name in frameworks), key=lambda row: (row[1][0] is None, row[1][0] or 0.0, row[0]))
    # a warm run's curve against time is not drawn where its cell's cold runs give the times (summary.py)
    series = {name: [_curve(r) for r in runs if names[r["id"]] == name and r.get("epochs")
                     and not (r.get("compile_cache") == WARM and not by_label[name].warm)] for name in frameworks}
    series = {name: curves for name, curves in series.items() if curves}
    metric = first.get("metric_name")
    warm = [name for name in frameworks if by_label[name].warm]
    parts = [figure(charts.epoch_times(rows, palette, f"epoch-times-{index}", warm),
                    "Epoch time per framework, fastest steady epoch first: steady epochs (dots: median of each run's "
                    "later epochs, median over runs; "
                    "whiskers: the order-statistic interval of the median, at least 95%, or [min-max] with 2 to 5 "
                    "runs, 50 to 93.7%) and the first epoch apart"
                    + ("; warm compile cache: a first epoch without the compilation earlier runs did" if warm else ""),
                    keys)]
    if series:
        target = first.get("target_value")
        parts.append(figure(charts.convergence(series, palette, metric, f"convergence-{index}", target),
                            (f"{metric_label(metric)} against cumulative training time, one panel per framework "
                             "with the others in grey: " if len(series) >= charts.SMALL_MULTIPLES else
                             f"{metric_label(metric)} against epoch and against cumulative training time: ")
                            + "median over repetitions, band from the lowest to the highest"
                            + ("" if target is None else f"; dashed: the workload's target ({target:g})"), keys))
    limits = charts.timeline_limits([samples[r["id"]] for r in runs if samples.get(r["id"])])
    timelines = [figure(charts.timeline(samples[r["id"]], f"timeline-{r['id']}", limits),
                        f"{names[r['id']]}, repetition {r.get('repetition')} ({r['status']}): resource use over time",
                        attrs(data_framework=r["framework"]))
                 for r in runs if samples.get(r["id"])]
    if timelines:
        parts.append(f"<details><summary>Resource timelines of the {len(timelines)} runs on shared axes: CPU %, RSS"
                     f"{', GPU' if _has_gpu(runs, samples) else ''}</summary>"
                     f'<div class="timelines">{"".join(timelines)}</div></details>')
    shown = ", ".join(dict.fromkeys(run_label(r) for r in runs)) if first.get("dataset") else "?"
    title = f"{first['workload']} on {shown} ({first.get('device') or '?'})"
    return f"<section{keys}><h3>{escape(title)}</h3>{''.join(parts)}</section>"


def _interval(value: Estimate) -> tuple[float | None, float | None, float | None]:
    return value.median, value.low, value.high


def _curve(run: Mapping) -> list[tuple[float, float]]:
    elapsed, points = 0.0, []
    for epoch in run["epochs"]:
        elapsed += epoch.get("train_time_s") or 0.0
        points.append((elapsed, epoch.get("metric_value")))
    return points


def _has_gpu(runs: Sequence[Mapping], samples: Mapping[int, list]) -> bool:
    return any(s.get("gpu_util_percent") is not None for r in runs for s in samples.get(r["id"], ()))


def expected_charts(report: Report) -> int:
    """How many charts render() draws: one per overview column with a speed ratio (its intervals), two per
    workload group (one when no run has epochs), one per sampled run, one per scaling figure, one per
    inference group with latencies, one per history over releases."""
    groups = run_groups(report.runs).values()
    intervals = sum(len(overview_html.plotted(m)) for m in overview.matrices(report.findings))
    return (intervals + len(groups) + sum(1 for g in groups if any(r.get("epochs") for r in g))
            + sum(1 for r in report.runs if report.samples.get(r["id"])) + len(report.scaling)
            + sum(1 for series in latency_groups(report).values() if series) + len(report.histories))


def latency_groups(report: Report) -> dict[tuple, dict[str, list[float]]]:
    """(device, workload, dataset, batch size, threads) -> framework label -> the batch-1 latencies (ms) of its
    successful inference runs, pooled; a framework without any is left out."""
    groups: dict[tuple, dict[str, list[float]]] = {}
    for cell in report.serving:
        series = groups.setdefault((cell.device, cell.workload, cell.dataset, cell.batch_size, cell.threads), {})
        values = [seconds * 1000 for run_id in cell.run_ids for seconds in report.latencies.get(run_id, ())]
        if values:
            series[cell.label] = values
    return groups


def serving_html(report: Report, palette: Mapping, live: bool) -> str:
    """Per device, the inference cells' table and per workload the distribution of their batch-1 latencies."""
    groups = latency_groups(report)
    parts = []
    for table in report.serving_tables:
        device = table.keys["device"]
        parts.append(table_html(table))
        if live:
            parts.append('<p class="note">The latency figures are drawn when the run ends.</p>')
            continue
        for index, ((group_device, workload, dataset, batch, _), series) in enumerate(groups.items()):
            if group_device != device or not series:
                continue
            keys = _keys(workload, device, sorted({c.framework for c in report.serving if c.workload == workload}))
            caption = (f"{workload} on {dataset} ({device}): batch-1 latency per framework, every timed call of its "
                       "successful runs (empirical CDF: the share of calls at or below each latency; the count of "
                       f"calls in brackets); throughput batches of {batch}")
            parts.append(figure(charts.latency_ecdf(series, palette, f"latency-{index}"), caption, keys))
    return "".join(parts)


def _select(name: str, values: Iterable[str]) -> str:
    options = "".join(f"<option{attrs(value=v)}>{escape(v)}</option>" for v in sorted(set(values)))
    return f'<label>{escape(name)} <select{attrs(name=name)}><option value="">all</option>{options}</select></label>'


def _summary(report: Report) -> str:
    runs = report.all_runs
    ok = sum(1 for r in runs if r["status"] == "ok")
    reps = max(r.get("repetition") or 1 for r in runs)
    return (f"{len(runs)} runs ({ok} ok, {len(runs) - ok} failed or stopped) of "
            f"{len({r['framework'] for r in runs})} frameworks on {len(run_groups(runs))} workload settings, "
            f"{reps} repetition{'s' if reps > 1 else ''} at most. "
            f"Built {report.created_at} from {report.source} by dlbench {report.dlbench_version}.")


LIVE_REFRESH_S = 30  # how often an open tab of a live page reloads it


def render(report: Report, live: str | None = None) -> str:
    """The page. `live`: the banner of a page rewritten while `dlbench run` goes on (run/live_report.py):
    the same page without its charts (drawing them is most of a report's cost), that banner at its top and
    a refresh tag, so an open tab follows the run."""
    runs = report.runs
    groups = run_groups(runs)
    # labels as each group names them (with versions only where a group holds several)
    palette = charts.colours(sorted({name for g in groups.values() for name in run_labels(g).values()}
                                    | {cell.label for cell in report.serving}))
    findings = "".join(finding_html(f, {r["framework"] for r in groups[(f.workload, f.dataset, f.train_samples,
                                                                         f.device, f.batch_size, f.threads)]})
                       for f in report.findings)
    matrices = "".join(overview_html.matrix_html(m, palette, draw=live is None)
                       for m in overview.matrices(report.findings))
    cells = group(report.summaries)
    figures = ("".join(group_figures(runs_of_group, cells[key], report.samples, palette, i)
                       for i, (key, runs_of_group) in enumerate(groups.items())) if live is None
               else '<p class="note">The charts are drawn when the run ends.</p>')
    served = bool(report.serving_runs)  # a Serving section only where the store holds inference runs
    sections = ("overview", "findings", "tables", *(("serving",) if served else ()), "study", "figures",
                *(("scaling",) if report.scaling else ()), *(("executions",) if report.modes else ()),
                *(("releases",) if report.histories else ()), "certificates", "manifest")
    every = report.all_runs
    nav = ("".join(f'<a href="#{s}">{s.capitalize()}</a>' for s in sections)
           + _select("device", (r.get("device") or "?" for r in every))
           + _select("workload", (r["workload"] for r in every))
           + _select("framework", (r["framework"] for r in every)))
    serving = (f'<h2 id="serving">Serving</h2><p class="note">Inference runs: each framework\'s serving path '
               f"called on test samples, no training.</p>{serving_html(report, palette, live is not None)}"
               if served else "")
    banner = "" if live is None else (f'<p id="live" class="live">{escape(live)} This page reloads every '
                                      f'{LIVE_REFRESH_S} s.</p>')
    expected = expected_charts(report) if live is None else 0
    body = (
        banner
        + f"<header><h1>dlbench report</h1><p>{escape(_summary(report))}</p></header>"
        f"<nav><div>{nav}</div></nav><main>"
        f'<h2 id="overview">Overview</h2>{shared_caveats_html(report.caveats, report.first_epochs)}{matrices}'
        f'<h2 id="findings">Findings</h2><p class="note">Each workload\'s verdicts in words, with its own '
        f'caveats: click a title to open it.</p>{findings}'
        f'<h2 id="tables">Tables</h2>{"".join(table_html(t) for t in report.study_tables)}'
        f"{serving}"
        f'<h2 id="study">The study side by side</h2>{study_html(report.study)}'
        f'<h2 id="figures">Figures</h2>{figures}'
        + scaling_html(report.scaling, live is None) + executions_html(report) + releases_html(report, live is None) +
        f'<h2 id="certificates">Certificates</h2>{table_html(report.certificate_grid)}'
        f'<h2 id="manifest">Manifest</h2>{"".join(table_html(t, sortable=True) for t in report.manifest)}'
        f'<p class="note">Report built by dlbench {escape(report.dlbench_version)}.</p>'
        # the page's own counters are for its tests (they read the data attributes), not for its readers
        f'<p id="render-status" class="note" hidden{attrs(data_expected=str(expected))}>'
        f"charts not rendered: the page's script did not run</p><pre id=\"js-errors\" hidden></pre></main>"
    )
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            + ("" if live is None else f'<meta http-equiv="refresh" content="{LIVE_REFRESH_S}">')
            + f"<title>dlbench report</title><style>{STYLE}{overview_html.STYLE}</style>"
            f"<script>{SCRIPT}</script></head>"
            f"<body>{body}</body></html>\n")


def executions_html(report: Report) -> str:
    """The executions section (present/modes.py), only where the store holds a mode beside a default."""
    if not report.modes:
        return ""
    return (f'<h2 id="executions">Executions and precisions</h2><p class="note">{escape(modes.INTRO)}</p>'
            f"{table_html(modes.table(report.modes))}")


def releases_html(report: Report, draw: bool = True) -> str:
    """The releases section (present/history.py), only where a framework ran a workload in several releases: per
    history its chart (unless `draw` is off, as on a live page) and its table."""
    if not report.histories:
        return ""
    parts = [f'<h2 id="releases">Releases</h2><p class="note">{escape(history.INTRO)}</p>']
    palette = charts.colours(sorted({found.framework for found in report.histories}))
    for i, found in enumerate(report.histories):
        keys = _keys(found.first.workload, found.first.device, {found.framework})
        chart = figure(charts.release_history([cell.framework_version or "?" for cell in found.cells],
                                              history.chart_panels(found), history.chart_steps(found),
                                              palette[found.framework], f"releases-{i}"),
                       history.heading(found), keys) if draw else ""
        parts.append(f"<section{keys}>{chart}{table_html(history.table(found))}</section>")
    return "".join(parts)


def scaling_html(figures: Sequence[ScalingFigure], draw: bool = True) -> str:
    """The Scaling section, only where the store holds a sweep: per figure its chart (unless `draw` is off,
    as on a live page) and its table."""
    if not figures:
        return ""
    parts = [f'<h2 id="scaling">Scaling</h2><p class="note">{escape(scaling.INTRO)}</p>']
    for i, sweep in enumerate(figures):
        keys = _keys(sweep.workload, sweep.device, {line.framework for line in sweep.lines})
        chart = figure(scaling_chart(sweep, f"scaling-{i}"), scaling.caption(sweep), keys) if draw else ""
        parts.append(f"<section{keys}>{chart}{table_html(scaling.table(sweep))}</section>")
    return "".join(parts)


def scaling_chart(sweep: ScalingFigure, chart_id: str) -> str:
    """A sweep's figure drawn: speed-up with the linear one dashed (where every line shares its base), or
    throughput with the recipe's batch size dotted."""
    labels = {line.label: scaling.line_label(line, sweep) for line in sweep.lines}
    palette = charts.colours(list(labels.values()))
    lines = {labels[line.label]: [(p.value, p.figure.median, p.figure.low, p.figure.high) for p in line.points]
             for line in sweep.lines}
    x_label, y_label = scaling.x_label(sweep), scaling.y_label(sweep)
    if sweep.axis == THREADS:
        (base, *others) = sweep.bases
        values = sorted({p.value for line in sweep.lines for p in line.points})
        ideal = [(v, v / base) for v in values] if base and not others else []
        return charts.scaling_lines(lines, palette, chart_id, x_label, y_label, ideal)
    recipe = sweep.recipe_batch_size
    return charts.scaling_lines(lines, palette, chart_id, x_label, y_label, marked=recipe,
                                marked_label=f"recipe ({recipe})")


def study_html(section: StudySection) -> str:
    """The study's results beside the runs on its datasets: each comparison's table and lines, then what to
    run where none is comparable, the source and the caveats."""
    blocks = "".join(f"<section{_data(b.table.keys)}>{table_html(b.table)}{_items(b.lines)}</section>"
                     for b in section.blocks)
    to_run = (f'<section class="card"><h3>Runs to compare</h3><p>{_code(section.to_run[0])}</p>'
              f"{_items(section.to_run[1:])}</section>" if section.to_run else "")
    return (f'<p class="note">{escape(section.source)}</p><p class="note">{escape(section.method)}</p>'
            f'{blocks}{to_run}<section class="card"><h3>Caveats of the study\'s figures</h3>'
            f'<ul class="caveats">{"".join(f"<li>{escape(c)}</li>" for c in section.caveats)}</ul></section>')


def _items(lines: Sequence[str]) -> str:
    return f"<ul>{''.join(f'<li>{_code(line)}</li>' for line in lines)}</ul>" if lines else ""


def _code(text: str) -> str:
    """Escaped text whose `commands` become <code>, so a command reads as one."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text))
