"""The report `dlbench run` keeps in its results folder while it runs: <results>/report.html rewritten after
each cell is stored, and written once whole when the plan ends.

A rewrite happens between cells: the cell's worker has exited and its run is stored, the next cell's peak
and worker have not started, so no timed region of this machine is running (the Ray executor rewrites
only while no cell runs on the driver's own node). The rewritten page is the report without its charts
(drawing them is most of a full report's cost: html.render's `live`), with a banner saying how far the run
is and a refresh tag. Each write goes through a temporary file renamed over report.html
(folders.write_text_atomically): a reader sees the previous page or the new one, never a part.

A rewrite that fails (a store the analysis cannot read, a full disk) never stops the run: its cells are
stored already. The first failure is printed, later ones counted. What the rewrites cost is timed, printed
at the end and kept beside the store in live-report.json (COST_FILE), one entry per `dlbench run`.

The pages are drawn by the function the CLI gives (present/report.write), so that the executor, which runs
the cells, does not reach up into the report that reads their results.
"""
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from dlbench.harness import folders
from dlbench.harness.store import FILENAME

COST_FILE = "live-report.json"
REPORT_FILE = "report.html"  # report.write's default page in the results folder
LIVE_MARK = b'<meta http-equiv="refresh"'  # in a live page's head only (html.render)


def left_live(page: Path) -> bool:
    """Whether `page` is a live page (html.render's head, within its first kilobytes, holds the refresh tag)."""
    try:
        with open(page, "rb") as handle:
            return LIVE_MARK in handle.read(4096)
    except OSError:  # no page yet, or none readable: nothing left live to correct
        return False


# writes the report of the store in a results folder and returns its path; `live`: the banner of a page
# rewritten while the run goes on, drawn without charts; None: the full report
WriteReport = Callable[..., Path]


class LiveReport:
    """The report of one `dlbench run` of `total` cells into `results`, written by `write_report(results,
    live=BANNER)` between cells and `write_report(results)` at the end; `enabled` False: no rewrites between
    cells (`--no-live-report`), the full report at the end all the same. No rewrite follows the plan's last
    cell: the full report does."""

    def __init__(self, results: Path, total: int, write_report: WriteReport, enabled: bool = True,
                 say: Callable[[str], None] = print) -> None:
        self.results, self.total, self.enabled, self.say = Path(results), total, enabled, say
        self.write_report = write_report
        self.rewrites: list[float] = []  # seconds of each rewrite that succeeded
        self.failures = 0

    def start(self) -> None:
        """At the run's start, under its lock (no other run writes this folder): the temporary files that a
        killed run's rewrites left are removed, and a page that a killed run left live (its banner and refresh
        tag still say that a run rewrites it) is rewritten at once as this run's live page, with or without
        --no-live-report: the full report replaces it when this run ends."""
        try:
            folders.remove_stale_partials(self.results)
        except OSError as error:
            self.say(f"live report: a killed run's temporary files not removed from {self.results} ({error})")
        if left_live(self.results / REPORT_FILE) and self.total > 0:
            self.write_live(0)

    def rewrite(self, done: int) -> None:
        """Rewrites the live page after a cell was stored; `done`: the plan's cells ended or skipped so far."""
        if not self.enabled or done >= self.total:  # after the last cell, the full report comes at once
            return
        tic = time.perf_counter()
        if self.write_live(done):
            self.rewrites.append(time.perf_counter() - tic)

    def write_live(self, done: int) -> bool:
        """The live page after `done` cells; False where it failed (said the first time, counted after)."""
        banner = (f"Live: {done} of {self.total} cells done, rewritten at {time.strftime('%H:%M:%S %Z')}; "
                  "charts are drawn when the run ends.")
        try:
            self.write_report(self.results, live=banner)
        except Exception as error:  # noqa: BLE001 - whatever it is, the run goes on: its cells are stored
            self.failures += 1
            if self.failures == 1:
                self.say(f"live report: not rewritten after {done} of {self.total} cells ({type(error).__name__}: "
                         f"{error}); the run goes on, its cells are stored, and later failures are only counted")
            return False
        return True

    def finish(self, stopped: bool = False) -> Path | None:
        """The full report (charts, no banner, no refresh), once, when the plan ends however it ends; prints
        its path and what the report cost this run. None where the store holds no run or the write failed.
        `stopped`: the plan was stopped by Ctrl-C or SIGTERM, and the user is told a second one skips this."""
        if not (self.results / FILENAME).exists():
            return None
        if stopped:
            self.say("writing the report of the cells stored (Ctrl-C again skips it)")
        tic = time.perf_counter()
        try:
            path = self.write_report(self.results)
        except Exception as error:  # noqa: BLE001 - the run's own status stands; say why there is no report
            self.say(f"report: not written ({type(error).__name__}: {error}); "
                     f"`dlbench report --results {self.results}` writes it from the store")
            path = None
        full = time.perf_counter() - tic if path else None
        self.say(self.cost_line(full))
        self.keep_cost(full)
        if path:
            self.say(f"report: {path}")
        return path

    def cost_line(self, full: float | None) -> str:
        """One line: what the rewrites and the full report took, e.g. 'live report rewritten after 71 cells:
        median 0.30 s, 21.3 s in all; full report 17.0 s'."""
        if not self.enabled:
            rewrites = "report not rewritten between cells (--no-live-report)"
        elif self.rewrites:
            cells = plural(len(self.rewrites), "cell")
            rewrites = (f"live report rewritten after {cells}: median "
                        f"{statistics.median(self.rewrites):.2f} s, {sum(self.rewrites):.1f} s in all")
        elif self.failures:  # cells did end before the last: each rewrite after them failed
            rewrites = f"report not rewritten between cells ({plural(self.failures, 'rewrite')}, all failed)"
        else:
            rewrites = "report not rewritten between cells (no cell ended before the last)"
        if self.failures and self.rewrites:
            rewrites += f" ({plural(self.failures, 'rewrite')} failed)"
        return rewrites + (f"; full report {full:.1f} s" if full is not None else "")

    def keep_cost(self, full: float | None) -> None:
        """Appends this run's figures to <results>/live-report.json; a file that cannot be read or written is
        said, not raised, and one that is not a JSON list is left as it is (its earlier runs' figures are not
        overwritten)."""
        path = self.results / COST_FILE
        try:
            folders.refuse_link(path)  # what it points to would be read, and its content kept
        except folders.PathError as error:
            self.say(f"live report: its cost not kept ({error})")
            return
        try:
            kept = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
            unreadable = None if isinstance(kept, list) else f"it holds a JSON {type(kept).__name__}"
        except (OSError, ValueError) as error:
            unreadable = str(error)
        if unreadable:
            self.say(f"live report: its cost not kept: {path} is not a JSON list of runs ({unreadable}); "
                     "left as it is")
            return
        kept.append({"ended_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cells": self.total, "live": self.enabled,
                     "rewrites_s": [round(t, 3) for t in self.rewrites], "failures": self.failures,
                     "full_report_s": None if full is None else round(full, 3)})
        try:
            folders.write_text_atomically(path, json.dumps(kept, indent=1) + "\n")
        except folders.PathError as error:
            self.say(f"live report: its cost not kept ({error})")


def plural(count: int, noun: str) -> str:
    """'1 rewrite', '3 rewrites'."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
