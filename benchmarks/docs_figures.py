"""Rewrites every figure of README.md and docs/*.md that comes from a run, from one results store.

    python benchmarks/docs_figures.py --results dlbench-results [--make-run-time "17 min 8 s"]
                                      [--suite quick] [--data-dir DIR] [--nodes 16] [--repo .]

It lives in benchmarks/ beside the other scripts that measure what the docs quote (noise.py,
serve_figures.py): they are run by hand after a run, are not part of the `dlbench` command, and need the
harness importable (the harness venv, or PYTHONPATH=src).

A figure block is the text between `<!-- figures:NAME -->` and `<!-- /figures:NAME -->`; only those lines
are rewritten, so the prose around them stays the author's. Every number in a block comes from the store
(the one exception: `make run`'s whole time, which the store cannot hold; give it with --make-run-time),
and each block says which runs and machine it comes from. The blocks:

- make-run: the runs' span and each workload's summed wall time, with --make-run-time the whole `make run`.
- quick-metrics: each workload's final metric per framework; quick-epochs: its range over the frameworks
  after each epoch.
- forecasts: `dlbench estimate`'s totals for paper and paper-gpu on one node and on --nodes nodes, the
  same functions that command calls, for the machine the runs were made on.
- screenshot: the image line of docs/report-quick.png, the report's first screen taken with headless
  Chromium from <results>/report.html; left as it is (with a message) where Chromium or the report is missing.

Bad input (no store, no run of the suite, an unknown block name, a --make-run-time it cannot read) exits 2
with one `docs_figures: error: ...` line and writes nothing.
"""
import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from dlbench.harness import cli
from dlbench.harness.analysis import estimate
from dlbench.harness.plan import makespan, suite
from dlbench.harness.plan.workloads import metric_label
from dlbench.harness.store import FILENAME, Store

REPO = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- figures:([\w-]+) -->\n)(.*?)(<!-- /figures:\2 -->)", re.DOTALL)
SCREENSHOT = Path("docs") / "report-quick.png"
WINDOW = "1400,1000"  # the first screen a laptop shows
FORECAST_SUITES = ("paper", "paper-gpu")
UNITS = {"h": 3600, "min": 60, "s": 1}
PERCENT_METRICS = {"accuracy", "map", "token_accuracy"}  # fractions, shown as percentages


class FiguresError(ValueError):
    """Input the script cannot use: the message says what and what it accepts."""


def spoken(seconds: float) -> str:
    """17 min 8 s, 2 h 5 min, 38 days 18 h: as the docs write durations, to the unit that matters."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 48 * 3600:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} days {whole % 86400 // 3600} h"


def parse_duration(text: str) -> float:
    """'17 min 8 s', '1 h 2 min', '1028 s' -> seconds."""
    parts = re.findall(r"(\d+)\s*(h|min|s)\b", text)
    if not parts or re.sub(r"(\d+)\s*(h|min|s)\b", "", text).strip():
        raise FiguresError(f"--make-run-time {text!r}: expected a duration such as '17 min 8 s', '1 h 2 min' or "
                           "'1028 s'")
    return float(sum(int(number) * UNITS[unit] for number, unit in parts))


def moment(run: Mapping) -> datetime | None:
    when = estimate.moment(run.get("started_at"))
    return None if when is None else datetime.fromtimestamp(when, UTC)


def machine_of(runs: Iterable[Mapping]) -> dict:
    """The machine record most of the runs carry (a store of one `make run` holds one)."""
    records = [run["machine"] for run in runs if isinstance(run.get("machine"), dict)]
    if not records:
        return {}
    counts = Counter(repr(sorted(record.items())) for record in records)
    return next(record for record in records if repr(sorted(record.items())) == counts.most_common(1)[0][0])


def describe_machine(machine: Mapping) -> str:
    cores = machine.get("logical_cores")
    memory = machine.get("memory_mib")
    parts = [f"{cores} logical cores" if cores else "cores not recorded",
             f"{memory / 1024:.0f} GiB memory" if memory else "memory not recorded",
             ", ".join(machine.get("gpus") or []) or "no GPU"]
    return f"{machine.get('cpu_model') or 'an unrecorded CPU'} ({', '.join(parts)})"


def describe_version(runs: Iterable[Mapping]) -> str:
    versions = {(v.get("commit"), v.get("dirty")) for run in runs if isinstance(v := run.get("dlbench_version"), dict)}
    if len(versions) != 1 or None in next(iter(versions)):
        return "dlbench commit not recorded" if not versions else "several dlbench commits"
    commit, dirty = next(iter(versions))
    return f"dlbench commit {commit[:10]}{' with uncommitted changes' if dirty else ''}"


def provenance(runs: list[dict], suite_name: str) -> str:
    """Which runs and machine a block comes from, in one sentence."""
    starts = sorted(when for run in runs if (when := moment(run)) is not None)
    ends = sorted(when for run in runs if (when := run_end(run)) is not None)
    if starts and ends:
        last = f"{ends[-1]:%H:%M}" if ends[-1].date() == starts[0].date() else f"{ends[-1]:%Y-%m-%d %H:%M}"
        span = f"run {starts[0]:%Y-%m-%d %H:%M} to {last} UTC"
    else:
        span = "times not recorded"
    return (f"From the store of {len(runs)} runs of the `{suite_name}` suite ({span}; {describe_version(runs)}) "
            f"on {describe_machine(machine_of(runs))}.")


def run_end(run: Mapping) -> datetime | None:
    start = moment(run)
    if start is None or run.get("wall_time_s") is None:
        return None
    return datetime.fromtimestamp(start.timestamp() + run["wall_time_s"], UTC)


def workload_order(runs: Iterable[Mapping], suite_name: str) -> list[str]:
    """The suite's entry order where it is a built-in suite, then any other workload by name."""
    present = {run["workload"] for run in runs}
    try:
        listed = [entry.workload for entry in suite.load(suite_name).entries]
    except (suite.SuiteError, OSError):
        listed = []
    return [w for w in dict.fromkeys(listed) if w in present] + sorted(present - set(listed))


def make_run_block(runs: list[dict], suite_name: str, make_run_s: float | None) -> str:
    ok = sum(1 for run in runs if run.get("status") == "ok")
    starts = [when for run in runs if (when := moment(run)) is not None]
    ends = [when for run in runs if (when := run_end(run)) is not None]
    span = (ends and starts) and spoken((max(ends) - min(starts)).total_seconds())
    whole = (f"`make run`, timed around the command: **{spoken(make_run_s)}** in all. " if make_run_s is not None
             else "`make run`'s whole time was not recorded with these figures. ")
    lines = [provenance(runs, suite_name), "",
             f"{whole}Its {len(runs)} cells ({ok} ok) ran from the first one's start to the last one's end in "
             f"**{span or 'an unrecorded time'}**; each workload's cells, their wall times summed:", "",
             "| workload | cells | wall time |", "|---|---|---|"]
    totals: dict[str, list[float]] = {}
    for run in runs:
        totals.setdefault(run["workload"], []).append(run.get("wall_time_s") or 0.0)
    for workload, times in sorted(totals.items(), key=lambda item: -sum(item[1])):
        lines.append(f"| {workload} | {len(times)} | {sum(times):,.0f} s |")
    return "\n".join(lines) + "\n"


def metric_text(name: str | None, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1%}" if name in PERCENT_METRICS else f"{value:,.1f}"


def row_label(runs: list[dict]) -> str:
    """cnn-mnist on digits-28 (4 epochs; first 768 training samples), its metric where not accuracy."""
    first = runs[0]
    config = first.get("config") or {}
    epochs = (config.get("recipe") or {}).get("epochs")
    details = [f"{epochs} epochs" if epochs else None,
               f"first {config['train_samples']:,} training samples" if config.get("train_samples") else None]
    details_text = "; ".join(d for d in details if d)
    name = first.get("metric_name") or "metric"
    shown = "" if name == "accuracy" else f", {metric_label(name)}"
    return f"{first['workload']} on {first.get('dataset')}{f' ({details_text})' if details_text else ''}{shown}"


def by_workload(runs: list[dict], suite_name: str) -> list[tuple[str, list[dict]]]:
    return [(w, [run for run in runs if run["workload"] == w]) for w in workload_order(runs, suite_name)]


def quick_metrics_block(runs: list[dict], suite_name: str) -> str:
    """The metric after the last epoch, the median over each framework's ok runs (its repetitions), a workload a
    row, a framework a column ('-': no ok run)."""
    frameworks = sorted({run["framework"] for run in runs})
    lines = [provenance(runs, suite_name), "",
             "| workload on its dataset | " + " | ".join(frameworks) + " |", "|---" * (len(frameworks) + 1) + "|"]
    for _, own in by_workload(runs, suite_name):
        finals: dict[str, list[float]] = {}
        for run in own:
            if run.get("status") == "ok" and run.get("metric_value") is not None:
                finals.setdefault(run["framework"], []).append(run["metric_value"])
        values = {framework: statistics.median(found) for framework, found in finals.items()}
        name = own[0].get("metric_name")
        lines.append(f"| {row_label(own)} | " + " | ".join(metric_text(name, values.get(f)) for f in frameworks)
                     + " |")
    return "\n".join(lines) + "\n"


def quick_epochs_block(runs: list[dict], suite_name: str) -> str:
    """Per workload, the lowest and highest metric over the frameworks' ok runs after each epoch."""
    lines = [provenance(runs, suite_name), "", "| workload | metric after each epoch, lowest-highest over the "
             "frameworks |", "|---|---|"]
    for workload, own in by_workload(runs, suite_name):
        name = own[0].get("metric_name")
        per_epoch: dict[int, list[float]] = {}
        for run in own:
            if run.get("status") != "ok":
                continue
            for row in run.get("epochs") or []:
                if row.get("metric_value") is not None:
                    per_epoch.setdefault(row["epoch"], []).append(row["metric_value"])
        steps = [f"{epoch}: {metric_text(name, min(v))}" + ("" if min(v) == max(v) else f"-{metric_text(name, max(v))}")
                 for epoch, v in sorted(per_epoch.items())]
        lines.append(f"| {workload} ({metric_label(name)}) | {'; '.join(steps) or '-'} |")
    return "\n".join(lines) + "\n"


def forecast_rows(suite_name: str, results: Path, data_dir: Path, machine: Mapping,
                  nodes: int) -> tuple[str, str | None]:
    """One suite's totals as `dlbench estimate` computes them (present/estimate.py's summary), as a table row;
    and a line on the cells it cannot forecast (left out of the totals), None where there are none."""
    cells = suite.plan(suite.load(suite_name), cores=machine.get("logical_cores"))
    found = estimate.forecast_plan(cells, results, data_dir, machine)
    known = [f for f in found.forecasts if f.seconds is not None]
    missing = [f for f in found.forecasts if f.seconds is None]
    note = None if not missing else (f"{suite_name}: {len(missing)} of {len(cells)} cells not forecast, left out of "
                                     f"its totals ({'; '.join(sorted({f.basis for f in missing}))}).")
    keys = [f.cell.framework for f in known]

    def on(values: list[float], count: int) -> float:
        return makespan.list_schedule(values, count, keys, found.setup)

    points = [f.seconds or 0.0 for f in known]
    lows, highs = [f.low or 0.0 for f in known], [f.high or 0.0 for f in known]
    capped = [f for f in known if f.capped]
    uncapped = sum(f.uncapped_s or 0.0 for f in capped) + sum(f.seconds or 0.0 for f in known if not f.capped)
    device = cells[0].device if cells else "cpu"
    counts = f"{len(capped)} | {spoken(uncapped)} |"
    if not known:
        return f"| {suite_name} ({device}) | {len(cells)} | - | - | {counts}", note
    stand_in = " (from CPU runs: a bound only if the GPU is no slower)" if any(f.stand_in for f in known) else ""
    return (f"| {suite_name} ({device}) | {len(cells)} | {spoken(on(points, 1))} [{spoken(on(lows, 1))}-"
            f"{spoken(on(highs, 1))}]{stand_in} | {spoken(on(points, nodes))} (longest first "
            f"{spoken(makespan.longest_first(points, nodes, keys, found.setup))}; no schedule under "
            f"{spoken(makespan.lower_bound(points, nodes))}) | {counts}"), note


def forecasts_block(runs: list[dict], suite_name: str, results: Path, data_dir: Path, nodes: int) -> str:
    machine = machine_of(runs)
    lines = [provenance(runs, suite_name) + f" `dlbench estimate SUITE --results DIR --nodes {nodes}` for the "
             "machine those runs were made on:", "",
             f"| suite | cells | one node [interval] | {nodes} such nodes (Ray, plan order) | cells stopped at "
             "their timeout | all epochs without the timeout |", "|---|---|---|---|---|---|"]
    found = [forecast_rows(name, results, data_dir, machine, nodes) for name in FORECAST_SUITES]
    notes = [note for _, note in found if note]
    return "\n".join(lines + [row for row, _ in found] + ([""] + notes if notes else [])) + "\n"


def screenshot_block(runs: list[dict], suite_name: str) -> str:
    return (f"![The report's first screen after this make run. {provenance(runs, suite_name)}]"
            f"({SCREENSHOT.as_posix()})\n")


def take_screenshot(report: Path, target: Path) -> str | None:
    """The report's first screen as a PNG at target; None when done, else why not."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return "chromium is not installed (apt-get install chromium)"
    if not report.is_file():
        return f"no report at {report} (`dlbench report --results DIR` writes it)"
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
             f"--user-data-dir={profile}", f"--window-size={WINDOW}", "--virtual-time-budget=10000",
             f"--screenshot={target}", report.resolve().as_uri()],
            capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0 or not target.is_file():
        return f"chromium exited with status {done.returncode}: {done.stderr.strip()[-300:]}"
    return None


def suite_runs(results: Path, suite_name: str) -> list[dict]:
    path = results / FILENAME if results.is_dir() else results
    if not path.is_file():
        raise FiguresError(f"no results store at {path}: pass --results DIR, the folder a `make run` wrote "
                           "(dlbench-results by default)")
    with Store(path, for_reading=True) as store:
        runs = [run for run in store.runs() if run.get("suite") == suite_name]
    if not runs:
        raise FiguresError(f"{path} holds no run of suite {suite_name!r}: pass the --suite its runs were made with")
    return runs


def rewrite(text: str, render: Callable[[str], str | None], known: Iterable[str], where: str) -> tuple[str, list[str]]:
    """The text with every block's inside rendered anew (left as it is where render gives None); the names
    rewritten. An unknown name is an error."""
    names = []

    def replace(match: re.Match) -> str:
        name = match.group(2)
        if name not in known:
            raise FiguresError(f"{where}: unknown figure block {name!r}; known: {', '.join(sorted(known))}")
        inside = render(name)
        if inside is None:
            return match.group(0)
        names.append(name)
        return match.group(1) + inside + match.group(4)

    return BLOCK.sub(replace, text), names


def doc_files(repo: Path) -> list[Path]:
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docs_figures", description=__doc__.split("\n")[0])
    parser.add_argument("--results", required=True, help="the results folder of one `make run` (or its store file)")
    parser.add_argument("--make-run-time", help="the whole `make run`'s wall time, e.g. '17 min 8 s'")
    parser.add_argument("--suite", default="quick", help="the suite whose runs the blocks describe (quick)")
    parser.add_argument("--data-dir", help="where the datasets are prepared (as `dlbench estimate --data-dir`)")
    parser.add_argument("--nodes", type=int, default=16, choices=range(2, 1025), metavar="2..1024",
                        help="the forecasts' cluster size (16)")
    parser.add_argument("--repo", default=str(REPO), help="the checkout whose README.md and docs/ to rewrite")
    args = parser.parse_args(argv)
    repo, results = Path(args.repo), Path(args.results)
    with tempfile.TemporaryDirectory() as folder:
        picture = Path(folder) / SCREENSHOT.name
        try:
            make_run_s = None if args.make_run_time is None else parse_duration(args.make_run_time)
            runs = suite_runs(results, args.suite)
            data_dir = cli.data_dir(args)
            renderers: dict[str, Callable[[], str]] = {
                "make-run": lambda: make_run_block(runs, args.suite, make_run_s),
                "quick-metrics": lambda: quick_metrics_block(runs, args.suite),
                "quick-epochs": lambda: quick_epochs_block(runs, args.suite),
                "forecasts": lambda: forecasts_block(runs, args.suite, results, data_dir, args.nodes),
                "screenshot": lambda: screenshot_block(runs, args.suite)}
            why_not = take_screenshot(results / "report.html", picture)
            if why_not is not None:  # the old picture stays, and so does the text that says which run it shows
                print(f"screenshot skipped: {why_not}; {SCREENSHOT} and its figure block left as they were")
            rendered: dict[str, str] = {}  # a block in two files is rendered once

            def render(name: str) -> str | None:
                if name == "screenshot" and why_not is not None:
                    return None
                if name not in rendered:
                    rendered[name] = renderers[name]()
                return rendered[name]

            # everything is rendered before anything is written: an error leaves every file as it was
            rewritten = {}
            for path in doc_files(repo):
                text = path.read_text(encoding="utf-8")
                new, names = rewrite(text, render, renderers, str(path.relative_to(repo)))
                if new != text:
                    rewritten[path] = (new, names)
        except (FiguresError, suite.SuiteError, estimate.EstimateError) as error:
            print(f"docs_figures: error: {error}", file=sys.stderr)
            return 2
        if why_not is None:
            shutil.copyfile(picture, repo / SCREENSHOT)
            print(f"{SCREENSHOT}: the first screen of {results / 'report.html'}")
    for path, (new, names) in rewritten.items():
        path.write_text(new, encoding="utf-8")
        print(f"{path.relative_to(repo)}: {', '.join(names)}")
    if not rewritten:
        print("every figure block is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
