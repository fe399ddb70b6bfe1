"""The report's histories over releases as text, for the HTML and Markdown renderers and `dlbench compare --versions
LOW..HIGH` alike: per framework and workload one table, a release a row (analysis/history.py)."""
from collections.abc import Sequence

from dlbench.harness.analysis.findings import seconds, title
from dlbench.harness.analysis.history import ALPHA, MIN_RELEASES, History, Step
from dlbench.harness.analysis.measures import metric_format
from dlbench.harness.plan import modes
from dlbench.harness.present.tables import Table, with_ci

INTRO = (f"A framework's releases side by side, where it ran one workload in at least {MIN_RELEASES} of them (the same "
         "dataset, device, batch size, threads, execution and precision): steady epoch time, peak memory (the "
         "worker's resident set) and the final metric per release, medians with their 95% intervals. A step is a "
         "change from one release to the next that the test shows: the later release's runs over the earlier's "
         "(ratio of geometric means, Welch's t interval on the logs), Holm-corrected over every pair of consecutive "
         f"releases and both figures in the report, shown where the corrected p is below {ALPHA} and the interval "
         "excludes 1. Above 1: the later release is slower or holds more memory. The final metric is drawn beside "
         "them, untested.")


def heading(history: History) -> str:
    cell = history.first
    return (f"{modes.label(history.framework, cell.execution, cell.precision)} over "
            f"{len(history.cells)} releases: {title(cell.workload, cell.dataset_label or cell.dataset, cell.device)}")


def _megabytes(value: float) -> str:
    return f"{value:,.0f} MB"


def table(history: History) -> Table:
    header = ["release", "runs", "steady epoch", "peak memory", "final metric", "from the release before"]
    steps = {(step.after.framework_version, step.figure): step for step in history.steps}
    body = []
    for cell in history.cells:
        body.append([cell.framework_version or "?", str(cell.n_ok), with_ci(cell.steady_epoch_s, seconds),
                     with_ci(cell.peak_rss_mb, _megabytes), with_ci(cell.metric_value, metric_format(cell.metric_name)),
                     _change(steps.get((cell.framework_version, "steady_epoch_s")),
                             steps.get((cell.framework_version, "peak_rss_mb")))])
    shown = history.shown_steps()
    note = ("steps: " + "; ".join(step.sentence() for step in shown)) if shown else "no step shown between releases"
    if any(step.builds for step in history.steps):
        note += ("; where two releases' builds differ (the version's +label), a step may be the build's rather than "
                 "the release's")
    return Table(heading(history), header, body, note=note, row_keys=[
        {"framework": history.framework, "workload": history.first.workload, "device": history.first.device or "?"}
        for _ in body])


def _change(*steps: Step | None) -> str:
    """Each figure's ratio to the release before, marked where it is a step."""
    parts = []
    for step in steps:
        if step is None or step.ratio.median is None:
            continue
        name = "time" if step.figure == "steady_epoch_s" else "memory"
        untested = " untested" if step.p_adjusted is None else ""
        parts.append(f"{name} {step.ratio.median:.2f}x" + (" STEP" if step.shown else untested))
    return ", ".join(parts) or "-"


def tables(found: Sequence[History]) -> list[Table]:
    return [table(history) for history in found]


def chart_panels(history: History) -> list[tuple[str, list[tuple]]]:
    """(y label, per release (median, low, high)) for each figure drawn: the two tested for steps, and the final
    metric beside them."""
    return [("steady epoch (s)", [_triple(cell.steady_epoch_s) for cell in history.cells]),
            ("peak memory (MB)", [_triple(cell.peak_rss_mb) for cell in history.cells]),
            (f"final {history.first.metric_name or 'metric'}", [_triple(cell.metric_value) for cell in history.cells])]


def chart_steps(history: History) -> list[tuple[int, int, str]]:
    """(panel, index of the later release, ratio label) of each shown step."""
    index = {cell.framework_version: i for i, cell in enumerate(history.cells)}
    panel = {"steady_epoch_s": 0, "peak_rss_mb": 1}
    return [(panel[step.figure], index[step.after.framework_version], f"{step.ratio.median:.2f}x")
            for step in history.shown_steps()]


def _triple(value) -> tuple:
    return (value.median, value.low, value.high)


def render(found: Sequence[History]) -> str:
    """The histories as text tables, for `dlbench compare --versions LOW..HIGH`."""
    from dlbench.harness.present.listing import aligned

    blocks = []
    for one in tables(found):
        blocks.append(f"{one.title}\n{aligned([one.header, *one.rows], width=None)}\n{one.note}")
    return "\n\n".join(blocks)
