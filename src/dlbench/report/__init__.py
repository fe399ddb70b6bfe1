"""`dlbench report`: the stored runs as one self-contained HTML page (or Markdown), built from the store alone.

Imports the store and dlbench.analysis only, never the runner or the executors.
"""
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from dlbench.analysis.findings import Finding, findings
from dlbench.analysis.load import device_with_hardware
from dlbench.analysis.summary import CellSummary, summarise
from dlbench.report import manifest, tables
from dlbench.store import FILENAME, Store, StoreError

FORMATS = {"html": "report.html", "md": "report.md"}


@dataclass(frozen=True)
class Report:
    """Everything a renderer needs, read once from the store."""
    source: str
    created_at: str
    runs: list[dict]
    certificates: list[dict]
    samples: dict[int, list[dict]]
    summaries: list[CellSummary]
    findings: list[Finding]
    study_tables: list[tables.Table]
    certificate_grid: tables.Table
    manifest: list[tables.Table]
    dlbench_version: str


def load(store_path: Path) -> Report:
    with Store(store_path) as store:
        # runs from several CPU (or GPU) models are grouped apart: their device names the model
        runs, certificates = device_with_hardware(store.runs()), store.certificates()
        samples = {run["id"]: store.samples(run["id"]) for run in runs}
    summaries = summarise(runs)
    return Report(str(store_path), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), runs, certificates,
                  samples, summaries, findings(summaries), tables.study_tables(summaries),
                  tables.certificate_grid(certificates, runs), manifest.manifest(runs), manifest.dlbench_version())


def render(report: Report, fmt: str) -> str:
    if fmt == "md":
        from dlbench.report import markdown
        return markdown.render(report)
    from dlbench.report import html  # matplotlib is imported only for the page that draws charts
    return html.render(report)


def write(results: Path, fmt: str = "html", output: Path | None = None) -> Path:
    """Write the report of the store in `results`; returns the file written."""
    store_path = Path(results) / FILENAME
    if not store_path.exists():
        raise StoreError(f"no results at {store_path}; run a suite first (dlbench run) or pass --results DIR")
    report = load(store_path)
    if not report.runs:
        raise StoreError(f"{store_path} holds no runs yet; run a suite first (dlbench run)")
    path = Path(output) if output else Path(results) / FORMATS[fmt]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(report, fmt), encoding="utf-8")
    return path
