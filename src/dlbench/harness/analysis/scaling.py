"""Scaling over a sweep's axes (a suite entry's `threads` or `batch_size` lists): per framework, a line
over the axis's values of the cells that differ in that axis only (same framework and version, workload,
dataset, train_samples, device and the other axis's value, as summary.CELL_KEYS keys a cell).

Thread scaling. The speed-up at T threads is the base's steady epoch time over T's: the ratio of the
two cells' medians (one value per run), with stats.ratio's interval [low_base / high_T, high_base /
low_T] from the two sides' order-statistic intervals, each at the square root of 95 % where its runs
allow; its level, the product of the two sides', is printed where below 95 %. The base is 1 thread where
the line holds successful runs of it, else its smallest thread count, and every label names it ("speed-up
over 2 threads"). Parallel efficiency is the speed-up over T / base, its interval divided alike. At the
base both are exactly 1. One run on either side gives the ratio without an interval.

Batch-size scaling. A run's training throughput is its training samples per epoch (n_train) over its
steady epoch time, in samples per second; a cell's is the median over its successful runs with the
order-statistic interval of that median (stats.estimate). Runs stored without n_train are left out.
"""
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dlbench.harness.analysis.dataset_label import label as dataset_label
from dlbench.harness.analysis.dataset_label import recipe_batch_size
from dlbench.harness.analysis.stats import Estimate, estimate, ratio
from dlbench.harness.analysis.summary import CELL_KEYS, key_value
from dlbench.harness.plan import modes

THREADS, BATCH_SIZE = "threads", "batch_size"
AXES = (THREADS, BATCH_SIZE)


@dataclass(frozen=True)
class Point:
    """One cell of a line: the axis's value, its steady epoch time, and the line's figure there."""
    value: int  # threads or batch size
    steady_epoch_s: Estimate
    figure: Estimate  # thread scaling: the speed-up over the line's base; batch size: samples per second
    efficiency: Estimate | None = None  # thread scaling only: speed-up / (value / base)
    # a run of the cell kept far fewer or more cores busy than its threads (summary.RunBrief.cores_flag):
    # more threads than free cores, say, where a speed-up says more about the machine than the framework
    cores_flagged: bool = False


@dataclass(frozen=True)
class Line:
    label: str  # the framework, with its version where the figure holds several versions of it
    framework: str
    base: int | None  # thread scaling: the thread count its speed-ups are over; None for batch sizes
    points: tuple[Point, ...]  # by the axis's value


@dataclass(frozen=True)
class Figure:
    axis: str  # THREADS or BATCH_SIZE
    workload: str
    device: str | None
    setting: str  # the dataset as headings show it, with the other axis's value: "digits-28, 2 threads"
    recipe_batch_size: int | None  # the workload recipe's: any other batch size is a changed recipe
    lines: tuple[Line, ...]

    @property
    def title(self) -> str:
        return f"{self.workload} on {self.setting} ({self.device or '?'})"

    @property
    def bases(self) -> set[int | None]:
        return {line.base for line in self.lines}


def threads_text(count: int | None) -> str:
    """"1 thread", "2 threads"."""
    return f"{count} thread{'' if count == 1 else 's'}"


def base_text(base: int | None) -> str:
    """"speed-up over 2 threads": how every label names a thread line's base."""
    return f"speed-up over {threads_text(base)}"


def batch_text(batch_size: int, recipe: int | None) -> str:
    """"128 (recipe)", "64 (recipe 128)": a batch size other than the recipe's is a changed recipe."""
    if recipe is None:
        return str(batch_size)
    return f"{batch_size} (recipe)" if batch_size == recipe else f"{batch_size} (recipe {recipe})"


def scaling(runs: Sequence[Mapping], seed: int = 0) -> list[Figure]:
    """Every thread-scaling figure, then every batch-size one, of the runs (as Store.runs() gives them):
    one per workload x dataset x train_samples x device x the other axis's value where a framework's
    successful runs hold 2 values of the axis or more; empty for a store without a sweep."""
    cells: dict[tuple[Any, ...], list[Mapping]] = {}
    for run in runs:
        if run["status"] == "ok":
            cells.setdefault(tuple(key_value(run, name) for name in CELL_KEYS), []).append(run)
    return [figure for axis in AXES for figure in _figures(cells, axis, seed)]


def _figures(cells: Mapping[tuple[Any, ...], list[Mapping]], axis: str, seed: int) -> list[Figure]:
    at, mode = CELL_KEYS.index(axis), (CELL_KEYS.index("execution"), CELL_KEYS.index("precision"))
    figures: dict[tuple[Any, ...], dict[tuple[Any, ...], dict[int, list[Mapping]]]] = {}
    for key, runs in cells.items():
        if key[at] is None:
            continue
        # a figure: the key less framework, version, execution and precision (a line) and the axis (a point)
        rest = tuple(v for i, v in enumerate(key) if i not in (0, 1, *mode, at))
        figures.setdefault(rest, {}).setdefault((*key[:2], *(key[i] for i in mode)), {})[key[at]] = runs
    found = []
    for _, lines in sorted(figures.items(), key=lambda item: _sort_key(item[0])):
        versions = Counter(name for name, _ in {key[:2] for key in lines})
        built = [line for framework, values in sorted(lines.items(), key=lambda item: _sort_key(item[0]))
                 if (line := _line(framework, values, axis, versions, seed)) is not None]
        if built:  # the figure's setting is every one of its runs': any run says it
            found.append(_figure(axis, next(run for values in lines.values() for runs in values.values()
                                            for run in runs), built))
    return found


def _sort_key(values: Iterable[Any]) -> tuple[str, ...]:
    return tuple("" if v is None else str(v) for v in values)


def _line(framework: tuple[Any, ...], by_value: Mapping[int, list[Mapping]], axis: str,
          versions: Mapping[str, int], seed: int) -> Line | None:
    """The framework's line, None where fewer than 2 of its values have a steady epoch time; versions:
    framework -> how many of its versions the figure holds."""
    times = {value: [float(r["steady_epoch_s"]) for r in runs if r.get("steady_epoch_s") is not None]
             for value, runs in by_value.items()}
    times = {value: samples for value, samples in sorted(times.items()) if samples}
    if len(times) < 2:
        return None
    name, version, execution, precision = framework
    shown = (f"{name} {version}" if versions[name] > 1 and version else name) + modes.suffix(name, execution,
                                                                                            precision)
    if axis == THREADS:
        base = 1 if 1 in times else min(times)
        points = tuple(_thread_point(value, base, times[value], times[base], seed) for value in times)
    else:
        points = tuple(Point(value, estimate(times[value], seed), estimate(_throughputs(by_value[value]), seed))
                       for value in times)
        base = None
    flagged = {value for value, runs in by_value.items() if any(r.get("cores_flag") for r in runs)}
    return Line(shown, name, base, tuple(replace(p, cores_flagged=p.value in flagged) for p in points))


def _thread_point(threads: int, base: int, times: list[float], base_times: list[float], seed: int) -> Point:
    if threads == base:  # 1 by definition, not a ratio of the base's runs to themselves
        n = len(times)
        speed_up = Estimate(n, 1.0, 1.0 if n > 1 else None, 1.0 if n > 1 else None)
    else:
        speed_up = ratio(base_times, times, seed)
    return Point(threads, estimate(times, seed), speed_up, _divided(speed_up, threads / base))


def _divided(value: Estimate, by: float) -> Estimate:
    def scaled(x: float | None) -> float | None:
        return None if x is None else x / by
    return Estimate(value.n, scaled(value.median), scaled(value.low), scaled(value.high), value.level)


def _throughputs(runs: Sequence[Mapping]) -> list[float]:
    """Each run's training samples per second of its steady epochs (n_train / steady_epoch_s)."""
    return [r["n_train"] / r["steady_epoch_s"] for r in runs if r.get("n_train") and r.get("steady_epoch_s")]


def _figure(axis: str, run: Mapping, lines: list[Line]) -> Figure:
    config = run.get("config") or {}
    batch = (config.get("recipe") or {}).get("batch_size")
    recipe = recipe_batch_size(run.get("workload"))
    name = str(run.get("dataset") or "?")
    if axis == THREADS:  # a batch size other than the recipe's is said as every heading says it
        setting = dataset_label(name, config.get("train_samples"), config.get("dataset_n_train"), batch, recipe)
    else:
        setting = dataset_label(name, config.get("train_samples"), config.get("dataset_n_train"),
                                threads=config.get("threads"))
    return Figure(axis, run["workload"], run.get("device"), setting, recipe, tuple(lines))
