"""The report as Markdown: the same overview, findings and tables as the HTML page, for a paper or an issue.
Charts are left out (a note says where they are).

The overview is the HTML page's first screen from the same matrices (present.overview): Markdown has no
colours, so a text mark says whether the findings' test shows a gap where the HTML colours the cell or leaves it
grey."""
from html import escape

from dlbench.harness.present import history, modes, overview, overview_html, scaling
from dlbench.harness.present.contents import Report
from dlbench.harness.present.study_section import StudySection
from dlbench.harness.present.tables import Table


def _text(text: str) -> str:
    """Stored text as Markdown shows it: <, > and & as entities, so a reason like "<OOM>" is not read as HTML."""
    return escape(text, quote=False)


def _cell(text: str) -> str:
    # a pipe or a line break inside a cell would end it early
    return _text(text).replace("|", "\\|").replace("\n", " ")


def table_md(table: Table) -> str:
    if not table.rows:  # its note says why
        return f"### {_text(table.title)}\n\n_{table.note}_\n"
    lines = [f"### {_text(table.title)}", "", "| " + " | ".join(_cell(h) for h in table.header) + " |",
             "|" + "---|" * len(table.header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table.rows]
    if table.note:
        lines += ["", f"_{table.note}_"]
    return "\n".join(lines) + "\n"


def render(report: Report) -> str:
    runs = report.all_runs
    ok = sum(1 for r in runs if r["status"] == "ok")
    parts = ["# dlbench report", "",
             f"{len(runs)} runs ({ok} ok, {len(runs) - ok} failed or stopped) of "
             f"{len({r['framework'] for r in runs})} frameworks, from `{_text(report.source)}`, "
             f"built {report.created_at} "
             f"by dlbench {report.dlbench_version}. The figures are in the HTML report "
             f"(`dlbench report --format html`).", ""]
    parts += overview_md(report)
    parts += ["## Findings", ""]
    for finding in report.findings:
        parts += [f"### {_text(finding.title)}", "", f"- **Speed**: {_text(finding.speed)}",
                  f"- **Final metric**: {_text(finding.metric)}"]
        parts += [f"- _Caveat_: {_text(caveat)}" for caveat in finding.caveats]
        parts.append("")
    parts += ["## Tables", ""] + [table_md(t) for t in report.study_tables]
    parts += study_md(report.study)
    if report.scaling:  # only where the store holds a sweep; where the HTML page has it, after the study
        parts += ["## Scaling", "", _text(scaling.INTRO), ""] + [table_md(t) for t in scaling.tables(report.scaling)]
    if report.modes:  # only where the store holds an execution beside a framework's default
        parts += ["## Executions and precisions", "", _text(modes.INTRO), "", table_md(modes.table(report.modes))]
    if report.histories:  # only where a framework ran a workload in several releases
        parts += ["## Releases", "", _text(history.INTRO), ""] + [table_md(t) for t in history.tables(report.histories)]
    parts += ["## Certificates", "", table_md(report.certificate_grid)]
    parts += ["## Manifest", ""] + [table_md(t) for t in report.manifest]
    return "\n".join(parts)


def study_md(section: StudySection) -> list[str]:
    """The study's results beside the runs on its datasets, as the HTML page's section shows them."""
    parts = ["## The study side by side", "", _text(section.source), "", _text(section.method), ""]
    for block in section.blocks:
        parts += [table_md(block.table)] + [f"- {_text(line)}" for line in block.lines] + [""]
    if section.to_run:
        parts += [_text(section.to_run[0]), ""] + [f"- {_text(line)}" for line in section.to_run[1:]] + [""]
    parts += ["### Caveats of the study's figures", ""] + [f"- {_text(c)}" for c in section.caveats] + [""]
    return parts


SHOWN, NOT_SHOWN = "●", "○"  # the HTML's coloured and grey
LEGEND = (f"{SHOWN}: the findings' test shows the gap (on the fastest or the best metric: shown ahead of all "
          f"others); {NOT_SHOWN}: not shown. Time: the steady epoch time over the fastest's (geometric means), in "
          "brackets its 95 % interval (Welch's t on log times) and the framework's runs. Metric: the best median, "
          "and each other framework's distance to it (accuracy and mAP in points, hundredths). Rows: most often "
          "shown fastest first, then least often shown slower, then by name. After a column's name: why its test "
          "ranks nobody. The findings below say each verdict in words.")


def overview_md(report: Report) -> list[str]:
    """The HTML page's first screen: the caveats of every workload once, then per device the matrix, its
    legend and one line per framework, then the first-epoch table (folded on the page, which Markdown cannot
    do: after the matrices, so as not to push them down)."""
    parts = ["## Overview", ""]
    if report.caveats:
        parts += ["### Caveats for every workload", ""] + [f"- _Caveat_: {_text(c)}" for c in report.caveats] + [""]
    for matrix in overview.matrices(report.findings):
        parts += [f"### {_text(matrix.device)}: steady epoch time relative to the fastest, and the final "
                  "metric's distance to the best", "", matrix_md(matrix), "", f"_{LEGEND}_", ""]
        needed = [overview_html.needed_text(n) for key in matrix.groups if (n := matrix.needed.get(key))]
        parts += [f"- {_text(text)}" for text in needed] + ([""] if needed else [])
        parts += [f"- **{_text(name)}**: {_text(matrix.lines[name])}" for name in matrix.frameworks] + [""]
    if report.first_epochs:  # a caveat per framework and workload: one table, not a sentence each
        parts += [table_md(report.first_epochs), ""]
    for table in report.serving_tables:  # inference runs: latency, throughput, first call per framework
        parts += [table_md(table), ""]
    return parts


def _column(name: str, why: str | None) -> str:
    return f"{name} ({why})" if why else name


def matrix_header(matrix: overview.Matrix) -> list[str]:
    header = ["framework"]
    for key in matrix.groups:
        workload, dataset, _ = key
        speed_why, metric_why = matrix.unranked[key]
        metric = matrix.metric_names[key]
        unit = ", pt" if metric in overview.FRACTIONS else ""
        header += [_column(f"{workload} ({dataset or '?'}) time ×", speed_why),
                   _column(f"{workload} {overview.METRIC_NAMES.get(metric, metric)}{unit}", metric_why)]
    return header


def _speed(mark: overview.Mark | None) -> str:
    if mark is None or mark.value is None:
        return "-"
    return f"{mark.value:.2f}× ({overview_html.interval_text(mark)}) {SHOWN if mark.shown else NOT_SHOWN}"


def _metric(mark: overview.Mark | None, metric: str) -> str:
    if mark is None or mark.value is None or mark.gap is None:
        return "-"
    if mark.best:
        text = overview.metric_value_text(metric, mark.value)
    else:
        text = overview.metric_gap_text(metric, mark.gap)
    return f"{text} {SHOWN if mark.shown else NOT_SHOWN}"


def matrix_rows(matrix: overview.Matrix) -> list[list[str]]:
    """Per framework, fastest first: per workload its time ratio and its metric (the best's value, or the
    distance to it), each with its mark."""
    rows = []
    for name in matrix.frameworks:
        row = [name]
        for key in matrix.groups:
            row += [_speed(matrix.speed.get((name, key))),
                    _metric(matrix.metric.get((name, key)), matrix.metric_names[key])]
        rows.append(row)
    return rows


def matrix_md(matrix: overview.Matrix) -> str:
    lines = ["| " + " | ".join(_cell(h) for h in matrix_header(matrix)) + " |",
             "|" + "---|" * (1 + 2 * len(matrix.groups))]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in matrix_rows(matrix)]
    return "\n".join(lines)

