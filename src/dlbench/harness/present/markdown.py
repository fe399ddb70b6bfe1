"""The report as Markdown: the same findings and tables as the HTML page, for a paper or an issue.
Charts are left out (a note says where they are)."""
from html import escape

from dlbench.harness.present.contents import Report
from dlbench.harness.present.study import StudySection
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
    runs = report.runs
    ok = sum(1 for r in runs if r["status"] == "ok")
    parts = ["# dlbench report", "",
             f"{len(runs)} runs ({ok} ok, {len(runs) - ok} failed or stopped) of "
             f"{len({r['framework'] for r in runs})} frameworks, from `{_text(report.source)}`, "
             f"built {report.created_at} "
             f"by dlbench {report.dlbench_version}. The figures are in the HTML report "
             f"(`dlbench report --format html`).", "", "## Findings", ""]
    if report.caveats:
        parts += ["### Caveats for every workload", ""] + [f"- _Caveat_: {_text(c)}" for c in report.caveats] + [""]
    for finding in report.findings:
        parts += [f"### {_text(finding.title)}", "", f"- **Speed**: {_text(finding.speed)}",
                  f"- **Final metric**: {_text(finding.metric)}"]
        parts += [f"- _Caveat_: {_text(caveat)}" for caveat in finding.caveats]
        parts.append("")
    parts += ["## Tables", ""] + [table_md(t) for t in report.study_tables]
    parts += study_md(report.study)
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
