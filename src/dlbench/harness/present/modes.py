"""The report's executions and precisions section as text, for the HTML and the Markdown renderers alike: one table
of every mode beside its framework's default (analysis/modes.py)."""
from collections.abc import Sequence

from dlbench.harness.analysis.findings import seconds, title
from dlbench.harness.analysis.measures import metric_format
from dlbench.harness.analysis.modes import ALPHA, ModeRow
from dlbench.harness.analysis.stats import level_text
from dlbench.harness.plan import executions, precisions
from dlbench.harness.present.tables import Table, with_ci

INTRO = ("A framework run in a mode other than its default, another execution (eager, graph or compiled: the "
         "suite's `execution`) or precision (bfloat16, mixed-bfloat16, mixed-float16: the suite's `precision`), "
         "beside its default (its default execution in float32) on the same workload, dataset, device, batch size "
         "and threads. Speed-up: the default's steady epoch time over this mode's (ratio of geometric means, "
         "Welch's t interval on the logs of the runs' times; shown when Holm's correction over the table leaves p "
         f"below {ALPHA} and the interval excludes 1). First-epoch excess: a run's first epoch beyond its steady "
         "ones, where compilation and tracing land (median over the runs). First step: the time from a run's start of "
         "training to its first finished step, its first compilation included; beside it the steady step, the "
         "steady epoch over its steps. Pays back: where the speed-up is shown, "
         "the epochs after which the mode's faster steady epochs have made up its larger first epoch (medians). A "
         "reduced precision's final metric beside float32's is what it costs in accuracy.")


def table(found: Sequence[ModeRow]) -> Table:
    header = ["workload", "framework", "mode", "steady epoch", "speed-up over default", "first-epoch excess",
              "default's excess", "first step (default's)", "steady step", "pays back after",
              "final metric (default: this)"]
    body, row_keys = [], []
    for row in found:
        cell = row.cell
        fmt = metric_format(cell.metric_name)
        body.append([
            title(cell.workload, cell.dataset_label or cell.dataset, cell.device),
            f"{cell.framework} {cell.framework_version}" if cell.framework_version else cell.framework,
            f"{cell.execution}, {cell.precision or precisions.DEFAULT} (default {executions.default(cell.framework)}, "
            f"{precisions.DEFAULT})",
            f"{with_ci(cell.steady_epoch_s, seconds)} ({with_ci(row.default.steady_epoch_s, seconds)})",
            _speed_up(row), with_ci(row.first_epoch_excess_s, seconds), with_ci(row.default_excess_s, seconds),
            f"{with_ci(row.first_step_s, seconds)} ({with_ci(row.default_first_step_s, seconds)})",
            "-" if row.steady_step_s is None else seconds(row.steady_step_s), _break_even(row),
            f"{with_ci(row.default.metric_value, fmt)}: {with_ci(cell.metric_value, fmt)}",
        ])
        row_keys.append({"framework": cell.framework, "workload": cell.workload, "device": cell.device or "?"})
    note = "steady epoch: this mode's (the default's in brackets after it); intervals at 95% unless a level is printed"
    if all(row.cell.device != "gpu" for row in found):
        note += ("; no run here used a GPU: these modes' CUDA paths (float16 with loss scaling, float32 with TF32 off) "
                 "are not measured in this report")
    return Table("Modes beside each framework's default", header, body, row_keys=row_keys, note=note)


def _speed_up(row: ModeRow) -> str:
    value = row.speed_up
    if value.median is None:
        return "-"
    text = f"{value.median:.2f}x"
    if value.low is not None and value.high is not None:
        level = f", {level_text(value.level)}" if value.level is not None and value.level < 0.95 else ""
        text += f" [{value.low:.2f}-{value.high:.2f}{level}]"
    if row.p_adjusted is None:
        return f"{text} (single runs: untested)"
    verdict = ("faster" if value.median > 1 else "slower") if row.shown else "not shown"
    return f"{text} {verdict} (p {row.p_adjusted:.2g})"


def _break_even(row: ModeRow) -> str:
    """From the medians, where the test shows the execution faster; else nothing is claimed."""
    if not row.shown or (row.speed_up.median or 0) <= 1:
        return "- (no speed-up shown)"
    epochs = row.break_even_epochs
    if epochs is None:
        return "-"
    if epochs == 0:
        return "at once (no larger first epoch)"
    steps = f", {epochs * row.steps_per_epoch:,.0f} steps" if row.steps_per_epoch else ""
    return f"{epochs:.2g} epochs{steps}"
