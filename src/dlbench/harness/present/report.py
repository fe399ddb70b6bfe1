"""`dlbench report`: the stored runs as one self-contained HTML page (or Markdown), built from the store alone.

Imports the store and dlbench.harness.analysis only, never dlbench.harness.run. What it shows is read
once (contents.load); html and markdown render it.
"""
from pathlib import Path

from dlbench.harness import folders
from dlbench.harness.present.contents import Report, load
from dlbench.harness.store import FILENAME, StoreError

FORMATS = {"html": "report.html", "md": "report.md"}


def render(report: Report, fmt: str, live: str | None = None) -> str:
    """`live` (html only): the banner of a page rewritten while the run goes on, drawn without its charts."""
    if fmt == "md":
        from dlbench.harness.present import markdown
        return markdown.render(report)
    from dlbench.harness.present import html  # matplotlib is imported only for the page that draws charts
    return html.render(report, live)


def write(results: Path, fmt: str = "html", output: Path | None = None, live: str | None = None) -> Path:
    """Write the report of the store in `results`; returns the file written. Where it goes is checked before
    the report is rendered (seconds to minutes), and it is written whole or not at all (a temporary file
    beside it, renamed over it). `live`: as render's, the page `dlbench run` rewrites after each cell."""
    store_path = Path(results) / FILENAME
    if not store_path.exists():
        raise StoreError(f"no results at {store_path}; run a suite first (dlbench run) or pass --results DIR")
    report = load(store_path)
    if not report.all_runs:
        raise StoreError(f"{store_path} holds no runs yet; run a suite first (dlbench run)")
    path = Path(output) if output else Path(results) / FORMATS[fmt]
    if output:
        example = f", such as {path / FORMATS[fmt]}" if path.is_dir() else ""
        folders.check_output_file(path, f"--output {output}", f"give a file in a folder this user can write{example}")
    else:
        folders.check_output_file(path, f"the report {path}", "write it elsewhere with --output PATH")
    folders.write_text_atomically(path, render(report, fmt, live))
    return path
