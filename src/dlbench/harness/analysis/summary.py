"""Stored runs grouped into cells (framework, framework_version, workload, dataset, device), each with the
estimates of its figures over its successful runs, and speed ratios within each workload x dataset x device.

Statistics use the successful runs only (status ok), one value per run (see stats); failed, timed-out
and interrupted runs are kept as what they are: RunBrief rows with status, reason and the epochs they
completed.
The figures that hold the first epoch (FIRST_EPOCH_FIGURES) never pool a run that started from a warm
compile cache with cold ones: they come from the cell's cold runs when it has any, else from its warm
runs, and the summary says which (compile_cache).
"""
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlbench.harness.analysis.dataset_label import run_label
from dlbench.harness.analysis.stats import Estimate, estimate, ratio
from dlbench.harness.environments.envs import REFERENCE
from dlbench.harness.plan import executions, modes, precisions
from dlbench.harness.store import is_inference

FIGURES = ("steady_epoch_s", "train_time_s", "first_epoch_s", "metric_value", "peak_rss_mb", "mean_cpu_percent",
           "time_to_target_s",  # time_to_target_s: the runs that reached the target only
           "achieved_gflops", "mfu",  # of the steady epochs; mfu against the GEMM peak measured for the run
           "peak_gflops",  # that peak, achieved_gflops / mfu: each framework's own, MFU's denominator
           "wall_time_s")  # the whole run, worker start to exit: what another repetition of the cell costs
# train_samples: a suite entry's first N training samples (None: the whole split), from the run's configuration;
# runs on another N of the same dataset do other work per epoch, so they are another cell and group
# batch_size and threads (a sweep's axes, issue #31), from the configuration too: runs of another batch size or
# thread count are other measurements, never pooled nor compared with each other; execution (issue #43): runs of
# another execution are another cell of the same group, compared with the other frameworks' and executions', and so
# are runs of another precision
CELL_KEYS = ("framework", "framework_version", "workload", "dataset", "train_samples", "device", "batch_size",
             "threads", "execution", "precision")
GROUP_KEYS = ("workload", "dataset", "train_samples", "device", "batch_size", "threads")


def key_value(run: Mapping, name: str) -> Any:
    """The run's value of one of CELL_KEYS."""
    config = run.get("config") or {}
    if name == "batch_size":
        return (config.get("recipe") or {}).get("batch_size")
    if name in ("train_samples", "threads"):
        return config.get(name)
    if name == "execution":
        return executions.of_run(run)
    if name == "precision":
        return precisions.of_run(run)
    return run.get(name)


def group_of(run: Mapping) -> tuple[Any, ...]:
    """The run's workload x dataset x train_samples x device x batch_size x threads, as CellSummary.group keys
    it."""
    return tuple(key_value(run, name) for name in GROUP_KEYS)


TIME_FIGURES = ("steady_epoch_s", "train_time_s", "first_epoch_s")  # lower is better; speed_ratios' metrics
# the figures that include the first epoch, hence the compilation a warm compile cache leaves out
FIRST_EPOCH_FIGURES = ("first_epoch_s", "train_time_s", "time_to_target_s")
NO_ESTIMATE = Estimate(0, None, None, None)
WARM = "warm"  # a run's compile_cache when it started from a shared cache that already held compiled code


@dataclass(frozen=True)
class RunBrief:
    """One stored run of a cell, whatever its status."""
    id: int
    repetition: int | None
    plan_position: int | None
    status: str
    reason: str | None
    epochs_completed: int
    metric_value: float | None  # at the last completed epoch (a timed-out run's too)
    cores_flag: str | None = None  # "used 0.9 of 2 cores" (measure.cores) when far from the threads asked
    peak_id: int | None = None  # the peaks row its mfu is measured against


@dataclass(frozen=True)
class CellSummary:
    framework: str
    framework_version: str | None
    workload: str
    dataset: str | None
    device: str | None
    metric_name: str | None
    n_ok: int
    failures: tuple[tuple[str, str | None], ...]  # (status, reason) of each failed or timed-out run
    steady_epoch_s: Estimate
    train_time_s: Estimate
    first_epoch_s: Estimate
    metric_value: Estimate
    peak_rss_mb: Estimate
    mean_cpu_percent: Estimate
    time_to_target_s: Estimate  # n: the successful runs that reached the workload's target
    certificates: tuple[str, ...]  # the distinct certificate statuses of its runs, in run order
    epochs_completed: tuple[int, ...]  # of each run, in store order (any status)
    epochs_planned: int | None  # run["config"]["recipe"]["epochs"]
    runs: tuple[RunBrief, ...]
    # FIRST_EPOCH_FIGURES come from runs that started from this compile cache: "warm" (every successful run
    # found compiled code), "cold", or None (not recorded: a framework that compiles into no cache)
    compile_cache: str | None = None
    warm_runs_left_out: int = 0  # warm runs kept out of FIRST_EPOCH_FIGURES because cold ones are there
    achieved_gflops: Estimate = NO_ESTIMATE  # FLOP/s of the steady epochs (peaks.achieved_gflops), in GFLOP/s
    mfu: Estimate = NO_ESTIMATE  # achieved over the measured GEMM peak; runs without a peak left out
    peak_gflops: Estimate = NO_ESTIMATE  # the GEMM peaks its runs' mfu divides by, in GFLOP/s
    # figure -> the successful runs' values, one per run (None left out), for ratios and tests
    samples: dict[str, tuple[float, ...]] = field(compare=False, default_factory=dict)
    # the stand-in's own target its runs were measured against (their config["target"], cell_config.run_target);
    # None: the workload's
    own_target: dict | None = None
    # the dataset as tables show it: "NAME (first N of M)" for runs of a suite entry's train_samples
    dataset_label: str | None = field(compare=False, default=None)
    train_samples: int | None = None  # a suite entry's first N training samples; None: the whole split
    batch_size: int | None = None  # the runs' batch size (config recipe.batch_size); None: not recorded
    threads: int | None = None  # the runs' threads (config threads); None: not recorded
    wall_time_s: Estimate = NO_ESTIMATE  # of the successful runs
    suite: str | None = None  # the suite its first run came from (None: not recorded)
    execution: str | None = None  # the runs' execution (executions.of_run); None: a framework this version lacks
    precision: str | None = None  # the runs' precision (precisions.of_run); None: a framework this version lacks

    @property
    def warm(self) -> bool:
        """Its first epoch, training time and time to target leave out compilation done by earlier runs."""
        return self.compile_cache == WARM

    @property
    def key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in CELL_KEYS)

    @property
    def group(self) -> tuple[Any, ...]:
        """workload, dataset, train_samples, device, batch_size, threads: the cells whose speeds are compared
        with each other."""
        return tuple(getattr(self, name) for name in GROUP_KEYS)

    @property
    def label(self) -> str:
        """The framework with its version, and its execution and precision where not its defaults."""
        name = f"{self.framework} {self.framework_version}" if self.framework_version else self.framework
        return name + modes.suffix(self.framework, self.execution, self.precision)


@dataclass(frozen=True)
class SpeedRatio:
    """One cell's figure relative to the fastest cell and to the reference in its group."""
    cell: CellSummary
    metric: str
    fastest: CellSummary  # the lowest median of the metric in the group
    to_fastest: Estimate  # cell / fastest; exactly 1 (and its interval) for the fastest itself
    reference: CellSummary | None  # REFERENCE in the group, None when it is not there or has no value
    to_reference: Estimate | None


def _sort_key(values: Iterable[Any]) -> tuple[str, ...]:
    return tuple("" if v is None else str(v) for v in values)


def summarise(runs: list[dict], seed: int = 0) -> list[CellSummary]:
    """Runs as Store.runs() returns them (with "epochs"), grouped by cell; sorted by workload, dataset,
    device, framework, version. Inference runs are left out: every figure here is an epoch's or a
    training's (analysis/serving.py has theirs)."""
    cells: dict[tuple[Any, ...], list[dict]] = {}
    for run in runs:
        if is_inference(run):
            continue
        cells.setdefault(tuple(key_value(run, name) for name in CELL_KEYS), []).append(run)
    # a group's heading names its threads where the store holds the same work on other thread counts
    threads: dict[tuple[Any, ...], set[Any]] = {}
    for key in cells:
        threads.setdefault(key[2:7], set()).add(key[7])
    summaries = [_summary(key, group, seed, len(threads[key[2:7]]) > 1) for key, group in cells.items()]
    return sorted(summaries, key=lambda s: _sort_key((*s.group, s.framework, s.framework_version)))


def first_epoch_runs(ok: list[dict]) -> tuple[list[dict], str | None]:
    """The successful runs whose first epochs one figure may pool, and their compile cache state: the
    cold (or unrecorded) ones when there are any, else the warm ones."""
    cold = [run for run in ok if run.get("compile_cache") != WARM]
    chosen = cold or ok
    states = {run.get("compile_cache") for run in chosen} - {None}
    return chosen, (WARM if not cold and ok else "cold" if states else None)


def _summary(key: tuple[Any, ...], runs: list[dict], seed: int, show_threads: bool = False) -> CellSummary:
    ok = [dict(run, peak_gflops=_peak_gflops(run)) for run in runs if run["status"] == "ok"]
    pooled, cache = first_epoch_runs(ok)
    samples = {name: tuple(float(run[name]) for run in (pooled if name in FIRST_EPOCH_FIGURES else ok)
                           if run.get(name) is not None) for name in FIGURES}
    planned = {((run.get("config") or {}).get("recipe") or {}).get("epochs") for run in runs} - {None}
    return CellSummary(
        **dict(zip(CELL_KEYS, key, strict=True)),
        dataset_label=", ".join(dict.fromkeys(run_label(run, threads=show_threads) for run in runs))
        if key[3] else None,
        metric_name=next((run["metric_name"] for run in runs if run.get("metric_name")), None),
        n_ok=len(ok),
        failures=tuple((run["status"], run.get("reason")) for run in runs if run["status"] != "ok"),
        **{name: estimate(values, seed) for name, values in samples.items()},
        certificates=tuple(dict.fromkeys(run["certificate"] for run in runs if run.get("certificate"))),
        epochs_completed=tuple(len(run.get("epochs", ())) for run in runs),
        epochs_planned=max(planned) if planned else None,
        runs=tuple(_brief(run) for run in runs),
        compile_cache=cache, warm_runs_left_out=len(ok) - len(pooled),
        samples=samples,
        suite=next((run["suite"] for run in runs if run.get("suite")), None),
        own_target=next((run["config"]["target"] for run in runs if (run.get("config") or {}).get("target")), None),
    )


def _peak_gflops(run: dict) -> float | None:
    """The GEMM peak the run's mfu was measured against (mfu = achieved / peak)."""
    achieved, mfu = run.get("achieved_gflops"), run.get("mfu")
    return achieved / mfu if achieved is not None and mfu else None


def _brief(run: dict) -> RunBrief:
    return RunBrief(run["id"], run.get("repetition"), run.get("plan_position"), run["status"], run.get("reason"),
                    len(run.get("epochs", ())), run.get("metric_value"), run.get("cores_flag"), run.get("peak_id"))


def speed_ratios(summaries_or_runs: Sequence[CellSummary] | Sequence[dict], metric: str = "steady_epoch_s",
                 reference: str = REFERENCE, seed: int = 0) -> list[SpeedRatio]:
    """For every cell with a value of `metric` (a time: lower is faster), its ratio to the fastest cell
    of its workload x dataset x device group (lowest median) and to the reference framework there, each
    a median ratio with the interval of stats.ratio. A ratio above 1 is slower. When the
    reference appears in several versions in one group, the first in sort order (by version text) is it.
    Whether a gap is shown is a test's business: stats.pairwise over the group's samples."""
    if metric not in TIME_FIGURES:
        raise ValueError(f"speed ratios are for times; metric {metric!r} is not one of: {', '.join(TIME_FIGURES)}")
    summaries = [s for s in _as_summaries(summaries_or_runs, seed) if getattr(s, metric).median is not None]
    groups: dict[tuple[Any, ...], list[CellSummary]] = {}
    for summary in summaries:
        groups.setdefault(summary.group, []).append(summary)
    result = []
    for group in groups.values():
        fastest = min(group, key=lambda s: getattr(s, metric).median)
        ref = next((s for s in group if s.framework == reference and modes.is_default(reference, s.execution,
                                                                                       s.precision)), None)
        for cell in group:
            result.append(SpeedRatio(
                cell, metric, fastest, _ratio_to(cell, fastest, metric, seed), ref,
                None if ref is None else _ratio_to(cell, ref, metric, seed)))
    return result


def _ratio_to(cell: CellSummary, other: CellSummary, metric: str, seed: int) -> Estimate:
    if cell is other:  # a cell against itself is 1 by definition, not a bootstrap of two resamplings
        n = len(cell.samples[metric])
        return Estimate(n, 1.0, 1.0 if n > 1 else None, 1.0 if n > 1 else None)
    return ratio(cell.samples[metric], other.samples[metric], seed)


def _as_summaries(items: Sequence[CellSummary] | Sequence[dict], seed: int) -> list[CellSummary]:
    if all(isinstance(item, CellSummary) for item in items):
        return list(items)  # type: ignore[arg-type]
    return summarise(list(items), seed)  # type: ignore[arg-type]
