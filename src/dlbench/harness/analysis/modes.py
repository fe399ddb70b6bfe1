"""Modes compared (the suite axes `execution` and `precision`, harness/plan/executions.py and precisions.py): for each
framework that ran a workload in its default mode (its default execution, float32) and in another, the other's
speed-up over the default, what its compilation costs, after how many epochs that pays for itself, and what it does
to the final metric.

The speed-up is the default's steady epoch time over the other execution's: the ratio of geometric means of the
runs' times with Welch's t interval on their logs (stats.log_t_test, as the findings compare frameworks), shown when
the Holm-corrected p over every row of the report is below 0.05 and the interval excludes 1. Compilation's cost is
what a run's first epoch takes beyond its steady ones (first_epoch_s - steady_epoch_s, one value per run): the
first epoch holds every trace, compilation and first allocation; the steady ones reuse them. Beside it, each run's
time to its first finished step (first_step_s: the first compilation, before any later one a last, shorter batch
may cause) and its steady step (steady_epoch_s over the steps an epoch takes).
"""
import math
from collections.abc import Sequence
from dataclasses import dataclass

from dlbench.harness.analysis.stats import Estimate, estimate, holm, log_t_test
from dlbench.harness.analysis.summary import CellSummary
from dlbench.harness.plan import modes

ALPHA = 0.05


@dataclass(frozen=True)
class ModeRow:
    """One framework's mode other than its default, in one group of cells (workload, dataset, device, ...)."""
    cell: CellSummary  # the mode's
    default: CellSummary  # the framework's default mode's, same group and version
    speed_up: Estimate  # default's steady epoch over this one's (above 1: this is faster)
    p_value: float | None
    p_adjusted: float | None  # Holm over every row of the report
    first_epoch_excess_s: Estimate  # first epoch beyond the steady ones, this execution's runs
    default_excess_s: Estimate  # the default's
    steps_per_epoch: int | None
    first_step_s: Estimate  # time to the first finished step, this mode's runs
    default_first_step_s: Estimate  # the default's

    @property
    def steady_step_s(self) -> float | None:
        """The median steady epoch over the steps it takes."""
        steady = self.cell.steady_epoch_s.median
        return None if steady is None or not self.steps_per_epoch else steady / self.steps_per_epoch

    @property
    def shown(self) -> bool:
        """The corrected test rejects at ALPHA and the speed-up's interval lies beyond 1."""
        return self.p_adjusted is not None and self.p_adjusted < ALPHA and self.speed_up.excludes(1.0)

    @property
    def break_even_epochs(self) -> float | None:
        """After how many epochs this execution's extra first epoch is paid back by its faster steady ones
        (medians); 0 when it costs no more than the default's; None when it is not faster."""
        extra = _median_gap(self.first_epoch_excess_s, self.default_excess_s)
        saved = _median_gap(self.default.steady_epoch_s, self.cell.steady_epoch_s)
        if extra is None or saved is None or saved <= 0:
            return None
        return max(extra, 0.0) / saved


def _median_gap(a: Estimate, b: Estimate) -> float | None:
    return None if a.median is None or b.median is None else a.median - b.median


def _per_ok_run(cell: CellSummary, runs: Sequence[dict], fields: Sequence[str]) -> list[dict]:
    """The stored runs of the cell that succeeded and recorded every one of the fields."""
    ids = {run.id for run in cell.runs if run.status == "ok"}
    return [run for run in runs if run.get("id") in ids and all(run.get(field) is not None for field in fields)]


def first_epoch_excess(cell: CellSummary, runs: Sequence[dict]) -> Estimate:
    """Per successful run of the cell, first_epoch_s - steady_epoch_s: its compilation, traces and first
    allocations."""
    return estimate([run["first_epoch_s"] - run["steady_epoch_s"]
                     for run in _per_ok_run(cell, runs, ("first_epoch_s", "steady_epoch_s"))])


def first_step(cell: CellSummary, runs: Sequence[dict]) -> Estimate:
    """Per successful run of the cell that recorded it (schema 15 on), the time to its first finished step."""
    return estimate([run["first_step_s"] for run in _per_ok_run(cell, runs, ("first_step_s",))])


def rows(cells: Sequence[CellSummary], runs: Sequence[dict] = ()) -> list[ModeRow]:
    """Every mode beside its framework's default, group by group, Holm-corrected over all of them."""
    found = []
    for cell in cells:
        if cell.execution is None or modes.is_default(cell.framework, cell.execution, cell.precision):
            continue
        default = next((other for other in cells if (other.group, other.framework, other.framework_version)
                        == (cell.group, cell.framework, cell.framework_version)
                        and modes.is_default(cell.framework, other.execution, other.precision)), None)
        if default is None:
            continue
        steady = "steady_epoch_s"
        speed_up, p_value = log_t_test(default.samples.get(steady, ()), cell.samples.get(steady, ()))
        found.append((cell, default, speed_up, p_value))
    tested = [p for *_, p in found if p is not None]
    adjusted = iter(holm(tested)) if tested else iter(())
    return [ModeRow(cell, default, speed_up, p_value, None if p_value is None else next(adjusted),
                    first_epoch_excess(cell, runs), first_epoch_excess(default, runs), _steps_per_epoch(cell, runs),
                    first_step(cell, runs), first_step(default, runs))
            for cell, default, speed_up, p_value in found]


def _steps_per_epoch(cell: CellSummary, runs: Sequence[dict]) -> int | None:
    """Optimiser steps an epoch of the cell takes: its training samples over its batch size, the last batch short."""
    ids = {run.id for run in cell.runs}
    n_train = next((run.get("n_train") for run in runs if run.get("id") in ids and run.get("n_train")), None)
    return math.ceil(n_train / cell.batch_size) if n_train and cell.batch_size else None
