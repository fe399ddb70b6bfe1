"""dlbench compare: two sets of runs, matched cell by cell, each cell's time as a ratio B/A with its CI, a
Mann-Whitney test (Holm over the cells of one comparison), the metric's change and a verdict.

The two sets are two results folders (or store files), or two framework versions inside one store.
Runs match when their configurations match except for MATCH_IGNORED: the same framework, workload,
dataset and its content hash, device, threads, model and recipe (epochs, batch size, optimiser...);
seed and repetition are what repeats, and the packages and Python are what a comparison of versions
changes. Comparing versions ignores the framework too, since each side names its own. The times that
hold the first epoch (FIRST_EPOCH_METRICS) match only runs that started from the same compile cache state
(cold or warm), so a warm first epoch is never compared with a cold one; the suite's compile_cache
setting itself is ignored, since it changes no steady epoch, and so is a stand-in dataset's own target
(config "target"), which changes no time compared: runs stored before the stand-ins had their own targets
match those after. Runs of different threads or batch sizes (a sweep's axes) match only when asked
(`--across threads`, `--across batch_size`): each side must then hold one value of the axis per cell.
"""
import dataclasses
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from packaging.version import InvalidVersion, Version

from dlbench.harness.analysis import stats
from dlbench.harness.analysis.history import MIN_RELEASES, History, histories
from dlbench.harness.analysis.load import AnalysisError, device_with_hardware, read_runs, store_path
from dlbench.harness.analysis.serving import training_runs
from dlbench.harness.analysis.stats import Estimate, PairTest
from dlbench.harness.analysis.summary import summarise
from dlbench.harness.environments import releases

MATCH_IGNORED = ("seed", "repetition", "env_packages", "python", "compile_cache", "target")
METRICS = ("steady_epoch_s", "train_time_s", "first_epoch_s", "eval_time_s", "wall_time_s")  # times: lower wins
LABEL_FIELDS = ("framework", "workload", "dataset", "device")
# hold the first epoch (wall time: the framework's import too), which a warm compile cache shortens
FIRST_EPOCH_METRICS = ("train_time_s", "first_epoch_s", "wall_time_s")
AXES = ("threads", "batch_size")  # what --across may match across


def axis_value(run: dict, axis: str) -> object:
    """The run's threads or batch size (config threads, recipe.batch_size)."""
    config = run.get("config") or {}
    return (config.get("recipe") or {}).get("batch_size") if axis == "batch_size" else config.get(axis)


@dataclass(frozen=True)
class CellComparison:
    label: str  # framework workload dataset device (and a key digest where two cells share these)
    a: Estimate  # the metric's median and CI over A's successful runs
    b: Estimate
    test: PairTest  # test.a is B, test.b is A: ratio B/A, verdict B's ("slower": B is slower)
    metric_name: str | None  # the workload's quality metric, e.g. accuracy
    metric_delta: float | None  # median metric of B minus that of A
    exceeds: float | None = None  # --fail-above as a fraction, when this cell breaks it

    @property
    def on_medians_alone(self) -> bool:
        """No test can decide (single runs, or too few repetitions): only the medians are compared."""
        return self.test.verdict in (stats.SINGLE, stats.TOO_FEW)


@dataclass(frozen=True)
class Comparison:
    metric: str
    a_name: str
    b_name: str
    cells: tuple[CellComparison, ...]
    only_a: tuple[str, ...]  # labels of cells with runs on one side only
    only_b: tuple[str, ...]


def parse_fail_above(text: str) -> float:
    """"5%" or "5" (percent) -> 0.05."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*%?\s*", text)
    if not match:
        raise AnalysisError(f"--fail-above {text!r} is not a percentage; expected a number of percent >= 0, "
                            "e.g. 5% or 5")
    return float(match.group(1)) / 100


def parse_version(text: str) -> tuple[str, str]:
    """"pytorch@2.8.0" -> ("pytorch", "2.8.0")."""
    framework, at, version = text.partition("@")
    if not (framework and at and version):
        raise AnalysisError(f"--versions {text!r} is not FRAMEWORK@VERSION, e.g. pytorch@2.13.0")
    return framework, version


def match_key(run: dict, ignore_framework: bool = False, metric: str = "steady_epoch_s",
              across: Sequence[str] = ()) -> str:
    """The run's configuration minus MATCH_IGNORED (and the framework when asked, and the AXES in `across`),
    as canonical JSON; for FIRST_EPOCH_METRICS with the compile cache state the run started from, where it
    recorded one."""
    config = run.get("config") or {name: run.get(name) for name in LABEL_FIELDS}
    ignored = MATCH_IGNORED + (("framework",) if ignore_framework else ()) + (("threads",) if "threads" in across
                                                                               else ())
    key = {k: v for k, v in config.items() if k not in ignored}
    if "batch_size" in across and isinstance(key.get("recipe"), dict):
        key["recipe"] = {k: v for k, v in key["recipe"].items() if k != "batch_size"}
    key["device"] = run.get("device", key.get("device"))  # names the hardware where runs span several
    if metric in FIRST_EPOCH_METRICS and run.get("compile_cache") is not None:
        key["compile_cache"] = run["compile_cache"]
    return json.dumps(key, sort_keys=True)


def compare_runs(runs_a: list[dict], runs_b: list[dict], a_name: str = "A", b_name: str = "B",
                 metric: str = "steady_epoch_s", ignore_framework: bool = False, alpha: float = 0.05,
                 seed: int = 0, across: Sequence[str] = ()) -> Comparison:
    """Runs of A against runs of B, cell by cell; `across`: AXES whose values may differ between matched
    cells (each side holding one value per cell)."""
    if metric not in METRICS:
        raise AnalysisError(f"--metric {metric!r} is not one of: {', '.join(METRICS)}")
    for axis in across:
        if axis not in AXES:
            raise AnalysisError(f"--across {axis!r} is not one of: {', '.join(AXES)}")
    # training runs only: every metric compared is an epoch's or a training's (inference runs have none)
    runs_a, runs_b = training_runs(runs_a), training_runs(runs_b)
    labelled = device_with_hardware([*runs_a, *runs_b])
    runs_a, runs_b = labelled[:len(runs_a)], labelled[len(runs_a):]
    cells_a = _by_key(runs_a, ignore_framework, metric, across)
    cells_b = _by_key(runs_b, ignore_framework, metric, across)
    labels = _labels({**cells_a, **cells_b}, ignore_framework, metric)
    for name, cells in ((a_name, cells_a), (b_name, cells_b)):
        for key, runs in cells.items():
            for axis in across:
                values = sorted({str(axis_value(run, axis)) for run in runs})
                if len(values) > 1:
                    raise AnalysisError(f"--across {axis}: {name} holds runs of {labels[key]} on several values "
                                        f"of {axis} ({', '.join(values)}); compare one value of each side")
    for key in (k for k in cells_a if k in cells_b):
        changed = [f"{axis} {axis_value(cells_a[key][0], axis)} vs {axis_value(cells_b[key][0], axis)}"
                   for axis in across if axis_value(cells_a[key][0], axis) != axis_value(cells_b[key][0], axis)]
        if changed:
            labels[key] += f" ({', '.join(changed)})"
    matched = [key for key in cells_a if key in cells_b]
    tests = stats.pair_tests([(b_name, _values(cells_b[k], metric), a_name, _values(cells_a[k], metric))
                              for k in matched], alpha=alpha, seed=seed)
    cells = []
    for key, test in zip(matched, tests, strict=True):
        runs_of_a, runs_of_b = cells_a[key], cells_b[key]
        cells.append(CellComparison(
            labels[key], stats.estimate(_values(runs_of_a, metric), seed),
            stats.estimate(_values(runs_of_b, metric), seed), test,
            next((r["metric_name"] for r in runs_of_a + runs_of_b if r.get("metric_name")), None),
            _delta(_values(runs_of_a, "metric_value"), _values(runs_of_b, "metric_value"))))
    return Comparison(metric, a_name, b_name, tuple(cells),
                      tuple(labels[k] for k in cells_a if k not in cells_b),
                      tuple(labels[k] for k in cells_b if k not in cells_a))


def _by_key(runs: list[dict], ignore_framework: bool, metric: str,
            across: Sequence[str] = ()) -> dict[str, list[dict]]:
    cells: dict[str, list[dict]] = {}
    for run in runs:
        cells.setdefault(match_key(run, ignore_framework, metric, across), []).append(run)
    return cells


def _labels(cells: dict[str, list[dict]], ignore_framework: bool, metric: str) -> dict[str, str]:
    fields = LABEL_FIELDS[1:] if ignore_framework else LABEL_FIELDS
    labels = {key: " ".join(str(runs[0].get(f)) for f in fields) + _cache_label(runs[0], metric)
              for key, runs in cells.items()}
    shared = {label for label in labels.values() if list(labels.values()).count(label) > 1}
    # cells alike in these fields differ in recipe or model: a digest of the configuration tells them apart
    return {key: f"{label} #{hashlib.sha256(key.encode()).hexdigest()[:8]}" if label in shared else label
            for key, label in labels.items()}


def _cache_label(run: dict, metric: str) -> str:
    state = run.get("compile_cache")
    return f" ({state} compile cache)" if metric in FIRST_EPOCH_METRICS and state is not None else ""


def _values(runs: list[dict], field: str) -> list[float]:
    return [run[field] for run in runs if run["status"] == "ok" and run.get(field) is not None]


def _delta(a: list[float], b: list[float]) -> float | None:
    return float(np.median(b) - np.median(a)) if a and b else None


def with_guard(comparison: Comparison, fail_above: float) -> Comparison:
    """Marks the cells where B is slower than A by more than fail_above (a fraction): the ratio's median
    is above 1 + fail_above and the slowdown is shown, or, where no test can decide (single runs, too
    few repetitions), on the medians alone, so a guard still works with few runs."""
    cells = []
    for cell in comparison.cells:
        median = cell.test.ratio.median
        beyond = median is not None and median > 1 + fail_above
        decided = cell.test.verdict == stats.SLOWER or cell.on_medians_alone
        cells.append(dataclasses.replace(cell, exceeds=fail_above if beyond and decided else None))
    return dataclasses.replace(comparison, cells=tuple(cells))


def compare_stores(a: Path | str, b: Path | str, metric: str = "steady_epoch_s", seed: int = 0,
                   across: Sequence[str] = ()) -> Comparison:
    return compare_runs(read_runs(a), read_runs(b), str(store_path(a)), str(store_path(b)), metric, seed=seed,
                        across=across)


def compare_versions(path: Path | str, version_a: str, version_b: str, metric: str = "steady_epoch_s",
                     seed: int = 0, across: Sequence[str] = ()) -> Comparison:
    """Two framework versions, "FRAMEWORK@VERSION" each, inside one store."""
    runs = read_runs(path)
    sides = []
    for text in (version_a, version_b):
        framework, version = parse_version(text)
        # a run of another version than the recipe's default is labelled name@version (dlbench run -f jax@0.6.2)
        # a build's local label counts as its version: torch 2.8.0+cu128 is pytorch@2.8.0
        side = [r for r in runs if r["framework"].partition("@")[0] == framework
                and version in (r.get("framework_version"), (r.get("framework_version") or "").partition("+")[0])]
        if not side:
            present = sorted({f"{r['framework']}@{r.get('framework_version')}" for r in runs})
            raise AnalysisError(f"no runs of {text} in {store_path(path)}; there: {', '.join(present) or 'no runs'}")
        sides.append(side)
    return compare_runs(sides[0], sides[1], version_a, version_b, metric, ignore_framework=True, seed=seed,
                        across=across)


def version_history(path: Path | str, spec: str) -> list[History]:
    """The histories (analysis/history.py) of one framework's releases from LOW to HIGH (name@LOW..HIGH) that the
    store holds runs of."""
    framework, low, high = releases.bounds(spec)
    runs = []
    for run in training_runs(read_runs(path)):
        try:
            version = Version(run.get("framework_version") or "")
        except InvalidVersion:
            continue
        if run["framework"].partition("@")[0] == framework and releases.within(version, low, high):
            runs.append(run)
    present = sorted({run["framework_version"] for run in runs}, key=Version)
    if len(present) < MIN_RELEASES:
        raise AnalysisError(f"{store_path(path)} holds runs of {len(present)} release(s) of {framework} from {low} to "
                            f"{high} ({', '.join(present) or 'none'}); a history needs {MIN_RELEASES}")
    return histories(summarise(device_with_hardware(runs)))


def compare(results: str, baseline: str | None, versions: Sequence[str] | None, metric: str,
            fail_above: float | None = None, across: Sequence[str] = ()) -> Comparison:
    """The compare command's comparison: the runs in `results` (B) against those in `baseline` (A), or two
    versions inside `results`, guarded by `fail_above` (a fraction) when given."""
    if versions:
        comparison = compare_versions(results, versions[0], versions[1], metric, across=across)
    elif baseline is None:
        raise AnalysisError("compare needs --baseline OLD (the store compared against) or "
                            "--versions FRAMEWORK@VERSION FRAMEWORK@VERSION")
    else:
        comparison = compare_stores(baseline, results, metric, across=across)
    return comparison if fail_above is None else with_guard(comparison, fail_above)


def fails(comparison: Comparison) -> bool:
    """Whether a cell is slower than the comparison's --fail-above allows."""
    return any(cell.exceeds is not None for cell in comparison.cells)
