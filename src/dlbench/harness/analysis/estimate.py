"""`dlbench estimate`: each cell's wall time forecast from the runs a results store holds, before it runs.

A stored run's wall time splits into what each epoch costs (training and its evaluation: the median of the
epochs after the first) and what does not grow with epochs (`fixed`: the worker's start, the compilation
and warm-up the first epoch holds beyond a steady one, the harness around it). A cell of E epochs then
takes fixed + E x epoch. Where the store holds no run of the cell itself, its epoch is scaled from work
(training samples x FLOPs per sample, shared/ir.py) at a rate the store measured; the basis says which:

1. `N runs`: ok runs of the same framework (and version), workload, dataset, device, threads and batch size;
   the point is their median forecast, the interval runs from the fastest epoch of the fastest run to the
   slowest epoch of the slowest.
   A version of the framework without runs of its own (a sweep over releases) takes the runs of its other
   versions in the same cell instead: `N runs of VERSIONS`.
2. `scaled from DATASET`: runs of the same framework and workload on another dataset (or training subset,
   batch size, or threads): their epoch scaled by the ratio of work, their fixed cost kept.
3. `FW GFLOP/s`: the framework's achieved GFLOP/s in its other workloads (median; the interval from the
   slowest and the fastest), its runs' median fixed cost.
4. `all GFLOP/s`: every framework's, where the store has no run of this one on the device.
A device without a single stored run (a GPU suite forecast from a CPU store) goes through the same steps
with the CPU runs, marked `cpu:`: a forecast that holds only if the GPU is no slower than this CPU.

An inference cell (mode inference) has no epochs: its forecast is the wall time of the store's ok inference
runs of the same cell (framework, workload, dataset, device, threads, batch size and serving settings), their
median and [fastest-slowest]; without one it has none (basis "no inference run of this cell"), as nothing in a
training run says how long its serving path's calls take.
"""
import functools
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from statistics import median

from dlbench.harness import data
from dlbench.harness.analysis.dataset_label import run_label
from dlbench.harness.measure.machine import hardware
from dlbench.harness.plan import executions, precisions
from dlbench.harness.plan.suite import Cell
from dlbench.harness.plan.workloads import get_workload
from dlbench.harness.store import FILENAME, Store, is_inference
from dlbench.shared import ir
from dlbench.shared.cell_file import INFERENCE
from dlbench.shared.protocol import META_FILE

# Training and test samples of the study's datasets when they are not prepared here (from each dataset's
# description; PTB's windows of 30 every 5 tokens counted from Mikolov's 929,589 train and 82,430 test tokens).
STUDY_SIZES: dict[str, tuple[int, int]] = {
    "mnist": (60_000, 10_000), "fashion-mnist": (60_000, 10_000), "cifar10": (50_000, 10_000),
    "cifar100": (50_000, 10_000), "svhn": (531_131, 26_032), "imdb": (25_000, 25_000), "ptb": (185_912, 16_480),
    "manythings": (80_000, 20_000), "voc2012": (5_717, 5_823), "voc2012-300": (5_717, 5_823),
}


# what each basis of a forecast is, in words (see the module's docstring)
KINDS = {"runs": "the cell's own runs",
         "versions": "the same cell's runs in other versions of the framework",
         "scaled": "the framework's runs of the workload on another dataset, training subset, batch size or "
                   "threads, scaled by work",
         "rate": "the framework's achieved GFLOP/s in other workloads",
         "all rate": "every framework's achieved GFLOP/s", "none": "nothing to go by"}


class EstimateError(ValueError):
    """The store cannot forecast the plan: the message says why and what to run first."""


@dataclass(frozen=True)
class Timing:
    """One stored run's wall time, split into its epochs' cost and what does not grow with epochs."""
    fixed_s: float
    epoch_s: float  # median steady epoch: training plus its evaluation
    epoch_min_s: float
    epoch_max_s: float
    eval_share: float  # of epoch_s, the evaluation's part


@dataclass(frozen=True)
class Forecast:
    cell: Cell
    seconds: float | None  # None: nothing in the store to go by
    low: float | None
    high: float | None
    basis: str  # which runs it comes from, shown per cell (see the module's docstring)
    kind: str  # one of KINDS
    stand_in: str | None = None  # the device whose runs stood in for the cell's, which the store lacks
    capped: bool = False  # the cell would pass its timeout: the worker is killed there, the cell unfinished
    uncapped_s: float | None = None  # what it would take without its timeout

    @property
    def extrapolated(self) -> bool:
        """From other cells' runs, not the cell's own."""
        return self.kind != "runs" or self.stand_in is not None


@dataclass(frozen=True)
class Work:
    """What one epoch of a cell computes: its samples and FLOPs per training sample."""
    n_train: int
    n_test: int
    flops: int


def timing(run: Mapping) -> Timing | None:
    """The run's split, or None for a run without epochs or wall time."""
    epochs = [e for e in run.get("epochs") or [] if e.get("train_time_s") is not None]
    if not epochs or run.get("wall_time_s") is None:
        return None
    steady = epochs[1:] or epochs  # the first epoch holds compilation: it is part of the fixed cost
    costs = [e["train_time_s"] + (e.get("eval_time_s") or 0.0) for e in steady]
    epoch = median(costs)
    evals = median(e.get("eval_time_s") or 0.0 for e in steady)
    # fixed may come out below 0 where the first epoch ran faster than the steady ones: kept, so that a
    # forecast of the run's own epochs gives back its wall time
    return Timing(fixed_s=run["wall_time_s"] - len(epochs) * epoch, epoch_s=epoch,
                  epoch_min_s=min(costs), epoch_max_s=max(costs), eval_share=evals / epoch if epoch else 0.0)


def batch_size(run: Mapping) -> int | None:
    config = run.get("config") or {}
    return (config.get("recipe") or {}).get("batch_size")


def threads_asked(run: Mapping) -> int | None:
    """The threads the run's cell asked for (its configuration's), not those its worker reported using."""
    return (run.get("config") or {}).get("threads", run.get("threads"))


def same_cell(run: Mapping, cell: Cell, threads: int, any_version: bool = False) -> bool:
    """Whether the run is of this cell but for its epochs, repetition and seed: what sets an epoch's time; with
    any_version, of any version of the cell's framework (name@version names one)."""
    framework = run.get("framework") or ""
    if any_version and framework.partition("@")[0] == cell.framework.partition("@")[0]:
        framework = cell.framework
    return (framework, run.get("workload"), run.get("dataset"), run.get("device"), threads_asked(run),
            batch_size(run), train_samples(run)) == (cell.framework, cell.workload, cell.dataset, cell.device, threads,
                                                     cell.batch_size, cell.train_samples) and same_mode(run, cell)


def same_mode(run: Mapping, cell: Cell) -> bool:
    """Whether the run ran the framework in the cell's execution and precision (harness/plan/executions.py,
    precisions.py)."""
    return (executions.of_run(dict(run)) == (cell.execution or executions.default(cell.framework))
            and precisions.of_run(dict(run)) == (cell.precision or precisions.DEFAULT))


def train_samples(run: Mapping) -> int | None:
    """The suite entry's train_samples the run trained on (its first N training samples), None: all of them."""
    return (run.get("config") or {}).get("train_samples")


@functools.cache
def dataset_meta(name: str, data_dir: Path) -> dict | None:
    """The prepared dataset's meta under data_dir, None where it is not prepared. Its meta file alone: the
    forecast needs sizes and shapes, and checking a prepared SVHN's or VOC's arrays takes minutes."""
    try:
        meta = json.loads((data.prepared_dir(name, data_dir) / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def work_of(workload: str, dataset: str, data_dir: Path, train_samples: int | None = None) -> Work | None:
    """The cell's work per epoch: from the prepared dataset, else from the study dataset's known shapes and
    sizes; None for a stand-in or variant not prepared here. A cell with train_samples trains on that many
    samples (at most the split's)."""
    chosen = get_workload(workload)
    meta = dataset_meta(dataset, data_dir)
    if meta is not None and meta.get("n_train"):
        return Work(min(meta["n_train"], train_samples or meta["n_train"]), meta.get("n_test") or 0,
                    ir.train_flops(chosen.model(meta)))
    if dataset == chosen.study_dataset and dataset in STUDY_SIZES:
        n_train, n_test = STUDY_SIZES[dataset]
        return Work(min(n_train, train_samples or n_train), n_test, ir.train_flops(chosen.model()))
    return None


def run_work(run: Mapping, data_dir: Path) -> Work | None:
    """The work of a stored run's epoch, from what it recorded (test samples from its dataset)."""
    if not run.get("n_train") or not run.get("flops_per_sample"):
        return None
    meta = dataset_meta(run.get("dataset") or "", data_dir)
    n_test = (meta or {}).get("n_test") or STUDY_SIZES.get(run.get("dataset") or "", (0, 0))[1]
    return Work(run["n_train"], n_test, run["flops_per_sample"])


def scaled_epoch(t: Timing, have: Work, want: Work) -> float:
    """The run's epoch scaled to another cell's work: training by training samples x FLOPs, evaluation by
    test samples x FLOPs (evaluation's forward pass is a fixed share of a training sample's FLOPs)."""
    train = t.epoch_s * (1 - t.eval_share) * (want.n_train * want.flops) / (have.n_train * have.flops)
    test = t.epoch_s * t.eval_share * ((want.n_test * want.flops) / (have.n_test * have.flops) if have.n_test
                                       else (want.n_train * want.flops) / (have.n_train * have.flops))
    return train + test


def epoch_at(gflops: float, work: Work) -> float:
    """An epoch's seconds at a rate: the training samples' FLOPs and the test samples' forward third."""
    return (work.n_train * work.flops + work.n_test * work.flops / 3) / (gflops * 1e9)


class Estimator:
    """Forecasts cells from one store's ok runs (this machine's hardware, see `usable_runs`)."""

    def __init__(self, runs: list[dict], data_dir: Path, cores: int | None = None) -> None:
        self.runs = [r for r in runs if r.get("status") == "ok" and timing(r) is not None]
        self.served = [r for r in runs if r.get("status") == "ok" and is_inference(r) and r.get("wall_time_s")]
        self.data_dir, self.cores = data_dir, cores or os.cpu_count() or 1

    def forecast(self, cell: Cell) -> Forecast:
        """The cell's forecast; no longer than its timeout, where the executor kills its worker."""
        found = self.served_forecast(cell) if cell.mode == INFERENCE else self.uncapped(cell)
        if found.seconds is None or found.high is None or found.high <= cell.timeout_s:
            return found
        return replace(found, seconds=min(found.seconds, cell.timeout_s), low=min(found.low or 0.0, cell.timeout_s),
                       high=cell.timeout_s, capped=found.seconds > cell.timeout_s, uncapped_s=found.seconds)

    def served_forecast(self, cell: Cell) -> Forecast:
        """An inference cell's forecast: its own stored runs' wall times, else none."""
        threads = cell.threads or self.cores
        serve = cell.serve.as_config() if cell.serve else {}
        n_test = (dataset_meta(cell.dataset, self.data_dir) or {}).get("n_test")
        own = [r["wall_time_s"] for r in self.served if (r.get("framework"), r.get("workload"), r.get("dataset"),
               r.get("device"), threads_asked(r), batch_size(r)) == (cell.framework, cell.workload, cell.dataset,
               cell.device, threads, cell.batch_size) and _same_serving(r, serve, n_test)]
        if not own:
            return Forecast(cell, None, None, None, "no inference run of this cell", "none")
        return Forecast(cell, median(own), min(own), max(own), f"{len(own)} run{'s' if len(own) > 1 else ''}", "runs")

    def uncapped(self, cell: Cell) -> Forecast:
        device_runs = [r for r in self.runs if r.get("device") == cell.device]
        if device_runs:
            return self.from_runs(cell, device_runs, "")
        stand_in = [r for r in self.runs if r.get("device") == "cpu"]
        # a device the store never ran on: the CPU runs stand in, and the basis says so
        found = self.from_runs(replace(cell, device="cpu"), stand_in, "cpu: ")
        return replace(found, cell=cell, stand_in="cpu")

    def from_runs(self, cell: Cell, runs: list[dict], prefix: str) -> Forecast:
        threads = cell.threads or self.cores
        own = [r for r in runs if same_cell(r, cell, threads)]
        if own:
            return self.matched(cell, own, prefix)
        versions = [r for r in runs if same_cell(r, cell, threads, any_version=True)]
        if versions:  # a version not run yet (a sweep over releases): the cell as its other versions ran it
            found = self.matched(cell, versions, prefix)
            named = ", ".join(sorted({str(r.get("framework_version")) for r in versions}))
            return replace(found, basis=f"{prefix}{len(versions)} runs of {named}", kind="versions")
        want = work_of(cell.workload, cell.dataset, self.data_dir, cell.train_samples)
        if want is None:
            return Forecast(cell, None, None, None, f"{cell.dataset} not prepared: FLOPs unknown", "none")
        kin = [r for r in runs if (r.get("framework"), r.get("workload")) == (cell.framework, cell.workload)
               and same_mode(r, cell)]
        pairs = [(r, w) for r in kin if (w := run_work(r, self.data_dir)) is not None]
        if pairs:
            return self.scaled(cell, pairs, want, prefix)
        rated = [r for r in runs if r.get("framework") == cell.framework and r.get("achieved_gflops")]
        if rated:
            return self.at_rate(cell, rated, want, f"{prefix}{cell.framework} GFLOP/s", "rate")
        rated = [r for r in runs if r.get("achieved_gflops")]
        if rated:
            return self.at_rate(cell, rated, want, f"{prefix}all GFLOP/s", "all rate")
        return Forecast(cell, None, None, None, f"{prefix}no run in the store to go by", "none")

    def matched(self, cell: Cell, runs: list[dict], prefix: str) -> Forecast:
        timings = [t for t in (timing(r) for r in runs) if t is not None]
        points = [t.fixed_s + cell.epochs * t.epoch_s for t in timings]
        return Forecast(cell, median(points), min(t.fixed_s + cell.epochs * t.epoch_min_s for t in timings),
                        max(t.fixed_s + cell.epochs * t.epoch_max_s for t in timings),
                        f"{prefix}{len(runs)} run{'s' if len(runs) > 1 else ''}", "runs")

    def scaled(self, cell: Cell, pairs: list[tuple[dict, Work]], want: Work, prefix: str) -> Forecast:
        points, lows, highs = [], [], []
        for run, have in pairs:
            t = timing(run)
            assert t is not None  # self.runs holds only runs with a timing
            epoch = scaled_epoch(t, have, want)
            spread = (t.epoch_min_s / t.epoch_s, t.epoch_max_s / t.epoch_s) if t.epoch_s else (1.0, 1.0)
            points.append(t.fixed_s + cell.epochs * epoch)
            lows.append(t.fixed_s + cell.epochs * epoch * spread[0])
            highs.append(t.fixed_s + cell.epochs * epoch * spread[1])
        datasets = ", ".join(sorted({run_label(run) for run, _ in pairs}))
        return Forecast(cell, median(points), min(lows), max(highs), f"{prefix}scaled from {datasets}", "scaled")

    def at_rate(self, cell: Cell, runs: list[dict], want: Work, basis: str, kind: str) -> Forecast:
        rates = [r["achieved_gflops"] for r in runs]
        fixed = median(t.fixed_s for t in (timing(r) for r in runs) if t is not None)
        return Forecast(cell, fixed + cell.epochs * epoch_at(median(rates), want),
                        fixed + cell.epochs * epoch_at(max(rates), want),
                        fixed + cell.epochs * epoch_at(min(rates), want), basis, kind)


def _same_serving(run: Mapping, serve: Mapping, n_test: int | None) -> bool:
    """The run served as the cell will: the same settings, the throughput samples capped by the test split as
    the cell's configuration caps them (cell_config.serve_config) where the dataset is prepared here."""
    wanted = dict(serve)
    if n_test and "throughput_samples" in wanted:
        wanted["throughput_samples"] = min(wanted["throughput_samples"], n_test)
    return (run.get("config") or {}).get("serve") == wanted


def usable_runs(runs: Iterable[dict], here: Mapping) -> tuple[list[dict], str | None]:
    """The runs made on this machine's hardware model (runs that recorded no machine count as this one's),
    and a note; where the store holds none of this hardware, all of its runs, and a note that says so."""
    runs = list(runs)
    cpu, gpus = here.get("cpu_model"), ", ".join(here.get("gpus") or []) or None
    mine = [r for r in runs if hardware(r) in (None, gpus if r.get("device") == "gpu" else cpu)]
    if mine or not runs:
        dropped = len(runs) - len(mine)
        return mine, f"{dropped} runs of other hardware left out" if dropped else None
    seen = sorted({str(hardware(r)) for r in runs})
    return runs, f"no run of this machine ({cpu}) in the store: forecast from {', '.join(seen)}"


# other processes' mean load, in cores, from which the notes warn that the runs were slowed by it
BUSY_CORES = 0.5


def others_busy(runs: Iterable[Mapping]) -> float | None:
    """The cores other processes kept busy while the runs ran, on average: the machine's busy cores less
    the worker's (harness/measure/monitor.py samples both); None where runs recorded neither."""
    loads = [run["mean_system_cpu_percent"] / 100 * run["machine"]["logical_cores"] - run["mean_cpu_percent"] / 100
             for run in runs if run.get("mean_system_cpu_percent") is not None and run.get("mean_cpu_percent")
             is not None and isinstance(run.get("machine"), dict) and run["machine"].get("logical_cores")]
    return sum(loads) / len(loads) if loads else None


def stored(results: Path) -> tuple[list[dict], list[dict]]:
    """The runs and GEMM peaks of a results folder's store (or a store file). No store is an error, not a
    forecast from FLOPs alone: without a run, nothing says how many FLOP/s this machine achieves."""
    path = results / FILENAME if results.is_dir() else results
    if not path.is_file():
        raise EstimateError(f"no results store at {path}: a forecast needs runs measured on this machine; run "
                            "`dlbench run quick` first (about 17 min on 2 cores), or pass --results DIR")
    with Store(path, for_reading=True) as store:
        return store.runs(), store.peaks()


def moment(text: str | None) -> float | None:
    try:
        return datetime.strptime(text or "", "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def peak_seconds(peaks: Iterable[Mapping], runs: Iterable[Mapping]) -> dict[str, float]:
    """Framework -> the seconds its GEMM peak takes before its first cell (harness/run/plan_peaks.py): from
    the peak's start (measured_at) to the start of the framework's first run after it, the median over
    the store's peaks; a framework without a peak of its own gets the median of all."""
    starts: dict[str, list[float]] = {}
    for run in runs:
        if (when := moment(run.get("started_at"))) is not None:
            starts.setdefault(run["framework"], []).append(when)
    found: dict[str, list[float]] = {}
    for peak in peaks:
        began = moment(peak.get("measured_at"))
        after = [when for when in starts.get(peak["framework"], []) if began is not None and when >= began]
        if began is not None and after:
            found.setdefault(peak["framework"], []).append(min(after) - began)
    every = [seconds for values in found.values() for seconds in values]
    default = median(every) if every else 0.0
    return {framework: median(found[framework]) if framework in found else default for framework in starts} | {
        "": default}


@dataclass(frozen=True)
class Estimate:
    forecasts: list[Forecast]  # in plan order
    notes: list[str]  # on the runs they come from
    peak_s: dict[str, float]  # framework -> its GEMM peak's seconds ("" for one the store has none of)

    def setup(self, framework: str) -> float:
        return self.peak_s.get(framework, self.peak_s.get("", 0.0))


def forecast_plan(cells: list[Cell], results: Path, data_dir: Path, here: Mapping) -> Estimate:
    """Each cell's forecast, in plan order, with notes on the runs they come from and the GEMM peaks' cost."""
    all_runs, peaks = stored(results)
    runs, note = usable_runs(all_runs, here)
    estimator = Estimator(runs, data_dir, here.get("logical_cores"))
    if not estimator.runs and not estimator.served:
        raise EstimateError(f"the store at {results} holds no completed run with epochs or inference run: nothing "
                            "to forecast from")
    served = f" and {len(estimator.served)} ok inference runs" if estimator.served else ""
    notes = [f"from {len(estimator.runs)} ok training runs{served} in {results}"] + ([note] if note else [])
    busy = others_busy(estimator.runs)
    if busy is not None and busy >= BUSY_CORES:
        notes.append(f"other processes kept {busy:.1f} cores busy during them, on average: an idle machine is faster")
    return Estimate([estimator.forecast(cell) for cell in cells], notes, peak_seconds(peaks, runs))
