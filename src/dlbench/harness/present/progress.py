"""What `dlbench run` shows while it runs: plain lines, or one live display on a terminal.

Both displays are callables with the signature `run_plan` calls its progress with:
`(kind, index, total, cell, payload)`, kind one of "skip", "start", "event" (payload: a worker event)
and "end" (payload: the run row). They run in the harness process and change only on the events the
worker emits between epochs, so they add nothing to a timed region: the live display does not even
refresh on a timer (no thread wakes up while a worker trains).
"""
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from dlbench.harness.analysis.dataset_label import label as dataset_label
from dlbench.harness.analysis.dataset_label import recipe_batch_size
from dlbench.harness.analysis.estimate import Estimate, EstimateError
from dlbench.harness.analysis.measures import metric_format
from dlbench.harness.measure import serving
from dlbench.harness.plan import modes
from dlbench.harness.plan.suite import Cell
from dlbench.harness.plan.workloads import metric_label
from dlbench.harness.store import StoreError
from dlbench.shared import protocol
from dlbench.shared.cell_file import INFERENCE
from dlbench.shared.protocol import ELAPSED, EPOCH, READY, kind_of

Clock = Callable[[], float]


def duration(seconds: float) -> str:
    """45 s, 4 min 05 s, 1 h 07 min: an estimate needs no more digits."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


Forecaster = Callable[[], Estimate]  # the plan's forecast from the store as it is now (analysis/estimate.py)


class ETA:
    """The time left in a plan, from the forecast `dlbench estimate` makes (analysis/estimate.py), read again from
    the store each time a cell ends, so the cells this run stores sharpen the forecast of the cells after them.

    - The current cell: once it has timed an epoch, its epochs left times its latest epoch's time (training
      plus evaluation), since the first epoch holds compilation and warm-up and the later ones are alike.
      Before its first epoch: its forecast (with its framework's GEMM peak, when it is the framework's first
      cell here) less the time it has run so far, at least 0.
    - Each cell after it: its forecast, and each framework not started yet its GEMM peak's seconds.
    - None (not known) while a cell left has no forecast: the store holds no run to go by (an empty store
      before the first cell ends, or an inference cell never served here); `unknown` counts those cells.
    It is computed at each event, so on a screen it stands still while an epoch runs.

    Cells that a resumed run will skip count as cells to run until they are reached. Until a cell of the
    plan has its own run in the store, its forecast is scaled from other runs by work or GFLOP/s, which
    `dlbench estimate` shows per cell.
    """

    def __init__(self, cells: Sequence[Cell], clock: Clock = time.monotonic,
                 forecast: Forecaster | None = None) -> None:
        self.cells = cells
        self.clock = clock
        self.forecaster = forecast
        self.estimate = self.read_forecast()
        self.position = 0  # 1-based index of the current or last cell reached
        self.current: Cell | None = None
        self.started = 0.0
        self.first_of_framework = False  # the current cell measures its framework's GEMM peak first
        self.started_frameworks: set[str] = set()
        self.epoch_times: list[float] = []  # the current cell's, training plus evaluation

    def read_forecast(self) -> Estimate | None:
        """The plan's forecast, None where there is no forecaster or the store has nothing to go by."""
        if self.forecaster is None:
            return None
        try:
            return self.forecaster()
        except (EstimateError, StoreError):  # no store yet, no completed run in it, or one the run will refuse
            return None

    def feed(self, kind: str, index: int, cell: Cell, payload: dict | None = None) -> None:
        self.position = index
        if kind == "start":
            self.current, self.started, self.epoch_times = cell, self.clock(), []
            self.first_of_framework = cell.framework not in self.started_frameworks
            self.started_frameworks.add(cell.framework)
        elif kind == "event" and kind_of(payload) == EPOCH:
            self.epoch_times.append(payload["train_time_s"] + payload["eval_time_s"])
        elif kind in ("end", "skip"):
            self.current = None
            if kind == "end":  # the run is stored by now: the forecast reads it
                self.estimate = self.read_forecast()

    def forecast(self, index: int) -> float | None:
        """The forecast seconds of the plan's cell at 0-based `index`, None where there is none."""
        return None if self.estimate is None else self.estimate.forecasts[index].seconds

    def setup(self, framework: str) -> float:
        return 0.0 if self.estimate is None else self.estimate.setup(framework)

    def current_left(self) -> float | None:
        cell = self.current
        if cell is None:
            return 0.0
        if self.epoch_times:
            return (cell.epochs - len(self.epoch_times)) * self.epoch_times[-1]
        seconds = self.forecast(self.position - 1)
        if seconds is None:
            return None
        peak = self.setup(cell.framework) if self.first_of_framework else 0.0
        return max(0.0, seconds + peak - (self.clock() - self.started))

    def unknown(self) -> int:
        """The cells left, the current one included, that have no forecast and whose time is not yet timed."""
        later = range(self.position, len(self.cells))
        return sum(self.forecast(i) is None for i in later) + (self.current_left() is None)

    def seconds_left(self) -> float | None:
        """Seconds until the plan's last cell ends, or None while a cell left has no forecast."""
        later = range(self.position, len(self.cells))
        current = self.current_left()
        seconds = [self.forecast(i) for i in later]
        if current is None or None in seconds:
            return None
        peaks = {self.cells[i].framework for i in later} - self.started_frameworks
        return current + sum(s or 0.0 for s in seconds) + sum(self.setup(framework) for framework in peaks)

    def describe(self) -> str:
        left = self.seconds_left()
        if left is not None:
            return f"about {duration(left)} left"
        missing = self.unknown()
        return f"time left unknown: no stored run to forecast {missing} cell{'s' * (missing > 1)}"


def units(cell: Cell) -> int:
    """What a cell's time is counted in: its epochs, or one for an inference cell, which has none."""
    return 1 if cell.mode == INFERENCE else cell.epochs


def cell_dataset(cell: Cell) -> str:
    """The cell's dataset as the run display shows it: "NAME (first N)", ", batch B (recipe R)" for a changed
    recipe's batch size (analysis.dataset_label.label)."""
    return dataset_label(cell.dataset, cell.train_samples, batch_size=cell.batch_size,
                         recipe_batch_size=recipe_batch_size(cell.workload))


def head(index: int, total: int, cell: Cell) -> str:
    name = modes.label(cell.framework, cell.execution, cell.precision)
    return f"[{index}/{total}] {name} {cell.workload} on {cell_dataset(cell)} ({cell.device}, rep {cell.repetition})"


def outcome(run: dict) -> str:
    """A finished cell in a few words: its status, and its metric and training time or why it failed."""
    if run["status"] != "ok":
        return f"{run['status']}: {run['reason']}"
    if run.get("mode") == INFERENCE:
        return (f"ok: latency p50 {_number(run.get('latency_p50_ms'))} ms, p99 {_number(run.get('latency_p99_ms'))} "
                f"ms; {_number(run.get('samples_per_s'))} samples/s")
    return (f"ok: {metric_label(run['metric_name'])} {metric_format(run['metric_name'])(run['metric_value'])}, "
            f"train {run['train_time_s']:.1f} s")


def _number(value: float | None) -> str:
    return "?" if value is None else f"{value:.3g}"


def plan_line(cell: Cell) -> str:
    """What a starting cell will do: its epochs, or an inference cell's calls and batches."""
    if cell.serve is None:
        return f"{cell.epochs} epochs"
    serve = cell.serve
    return (f"serving: {serve.warmup_calls} warm-up and {serve.latency_calls} timed calls of 1, then "
            f"{serve.throughput_samples} samples in batches of {serve.throughput_batch}")


def serve_event(event: dict) -> str | None:
    """A serve event in a few words, None for any other event."""
    kind = kind_of(event)
    if kind == protocol.SERVE_FIRST_CALL:
        return f"first call {event['first_call_s']:.3g} s"
    if kind == protocol.SERVE_LATENCY:
        p50 = serving.percentiles_ms(event["latencies_s"])["latency_p50_ms"]
        return f"{len(event['latencies_s'])} timed calls of 1: median {_number(p50)} ms"
    if kind == protocol.SERVE_THROUGHPUT:
        rate = event["samples"] / event["seconds"] if event["seconds"] > 0 else None
        return f"{event['samples']} samples in batches of {event['batch_size']}: {_number(rate)} samples/s"
    return None


MEASURING_PEAK = "measuring its environment's float32 GEMM peak (once per environment, threads and device)"


def ready(event: dict) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in event["versions"].items())
    return f"ready after {event[ELAPSED]:.1f} s ({versions}; {event['threads']} threads)"


def epoch(event: dict, cell: Cell) -> str:
    metrics = ", ".join(f"{metric_label(k)} {metric_format(k)(v)}" for k, v in event["metrics"].items())
    return (f"epoch {event['epoch']}/{cell.epochs}: {metrics}; train {event['train_time_s']:.2f} s, "
            f"eval {event['eval_time_s']:.2f} s")


SKIPPED = "already complete, skipped (--force reruns it)"


class PlainProgress:
    """One line per cell start, worker start-up, epoch and cell end, printed as they happen: for logs,
    CI and pipes (no escape codes, no carriage returns). Each end line adds the cells done and the ETA."""

    def __init__(self, cells: Sequence[Cell], clock: Clock = time.monotonic, file: TextIO | None = None,
                 forecast: Forecaster | None = None) -> None:
        self.eta = ETA(cells, clock, forecast)
        self.file = file

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def say(self, line: str) -> None:
        print(line, file=self.file or sys.stdout, flush=True)  # sys.stdout at call time: tests capture it

    def __call__(self, kind: str, index: int, total: int, cell: Cell, payload: dict | None = None) -> None:
        self.eta.feed(kind, index, cell, payload)
        if kind == "skip":
            self.say(f"{head(index, total, cell)}: {SKIPPED}")
        elif kind == "start":
            self.say(f"{head(index, total, cell)}: {plan_line(cell)}")
        elif kind == "end":
            left = "" if index == total else f", {self.eta.describe()}"
            self.say(f"    {outcome(payload)} ({index}/{total} done{left})")
        elif kind_of(payload) == protocol.PEAK:
            self.say(f"    {MEASURING_PEAK}")
        elif kind_of(payload) == READY:
            self.say(f"    {ready(payload)}")
        elif kind_of(payload) == EPOCH:
            self.say(f"    {epoch(payload, cell)}")
        elif serve_event(payload):
            self.say(f"    {serve_event(payload)}")


class LiveProgress:
    """One live area at the bottom of a terminal: a bar of the cells, the count of each ending, the
    ETA, the current cell, its epoch, latest metrics and epoch time. Each finished or skipped cell's
    line (a failure with its reason) is printed above it for good, so the scrollback holds the whole
    run; the area is removed when the plan ends. Use it as a context manager."""

    def __init__(self, cells: Sequence[Cell], clock: Clock = time.monotonic, console: Console | None = None,
                 forecast: Forecaster | None = None) -> None:
        self.eta = ETA(cells, clock, forecast)
        self.total = len(cells)
        self.counts = {"ok": 0, "failed": 0, "timeout": 0, "interrupted": 0, "skipped": 0}
        self.index = 0
        self.cell: Cell | None = None
        self.detail = ""  # the current cell's latest news: starting, ready, its last epoch
        # refreshed by hand on each event, never by a timer thread; removed at the end (transient)
        self.live = Live(self.render(), console=console or Console(), auto_refresh=False, transient=True)

    def __enter__(self) -> "LiveProgress":
        self.live.start(refresh=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.stop()

    def keep(self, line: Text) -> None:
        """Printed above the live area for good; the terminal wraps it, so a copied line stays whole."""
        self.live.console.print(line, soft_wrap=True)

    def __call__(self, kind: str, index: int, total: int, cell: Cell, payload: dict | None = None) -> None:
        self.eta.feed(kind, index, cell, payload)
        self.index = index
        if kind == "skip":
            self.counts["skipped"] += 1
            self.keep(Text(f"{head(index, total, cell)}: {SKIPPED}", style="dim"))
        elif kind == "start":
            self.cell, self.detail = cell, "starting its worker"
        elif kind == "end":
            self.counts[payload["status"]] += 1
            self.cell = None
            style = "green" if payload["status"] == "ok" else "bold red"
            self.keep(Text(f"{head(index, total, cell)}: ") + Text(outcome(payload), style=style))
        elif kind_of(payload) == protocol.PEAK:
            self.detail = MEASURING_PEAK
        elif kind_of(payload) == READY:
            self.detail = ready(payload)
        elif kind_of(payload) == EPOCH:
            self.detail = epoch(payload, cell)
        elif serve_event(payload):
            self.detail = serve_event(payload) or ""
        self.live.update(self.render(), refresh=True)

    def summary(self) -> str:
        ended = ", ".join(f"{n} {kind}" for kind, n in self.counts.items() if n or kind == "ok")
        return f"cell {self.index}/{self.total}: {ended}; {self.eta.describe()}"

    def render(self) -> RenderableType:
        done = sum(self.counts.values())
        top = Table.grid(padding=(0, 1))
        top.add_row(ProgressBar(total=max(self.total, 1), completed=done, width=30), Text(self.summary()))
        if self.cell is None:
            return top
        cell = self.cell
        current = Text(f"{modes.label(cell.framework, cell.execution, cell.precision)} {cell.workload} on "
                       f"{cell_dataset(cell)} "
                       f"({cell.device}, rep {cell.repetition})", style="bold")
        return Group(top, current, Text(f"  {self.detail}"))


def display(cells: Sequence[Cell], plain: bool, forecast: Forecaster | None = None) -> PlainProgress | LiveProgress:
    """The live display on an interactive terminal, plain lines elsewhere or when asked for; the time left
    from `forecast` (see ETA)."""
    interactive = sys.stdout.isatty() and os.environ.get("TERM") not in ("dumb", "unknown")
    if interactive and not plain:
        return LiveProgress(cells, forecast=forecast)
    return PlainProgress(cells, forecast=forecast)
