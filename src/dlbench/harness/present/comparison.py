"""dlbench compare's output: the comparison of two sets of runs (dlbench.harness.analysis.compare) as an
aligned text table, in the manner of asv compare."""
from dlbench.harness.analysis import stats
from dlbench.harness.analysis.compare import Comparison
from dlbench.harness.analysis.stats import Estimate
from dlbench.harness.present.listing import aligned


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:g}%"


def _interval(estimate: Estimate) -> str:
    """[low, high] and the level the interval guarantees: [0.912, 1.043] 87.8%."""
    if estimate.low is None or estimate.level is None:
        return "-"
    return f"[{estimate.low:.3f}, {estimate.high:.3f}] {stats.level_text(estimate.level)}"


def render(comparison: Comparison, fail_above: float | None = None) -> str:
    """An aligned text table in the manner of asv compare: + where B is shown slower, - where faster."""
    metric = comparison.metric
    lines = [f"A: {comparison.a_name}", f"B: {comparison.b_name}",
             f"{metric} per cell: median of each side's runs, ratio B/A with its interval and the level that "
             f"interval guarantees (from the two sides' order-statistic intervals of the median), two-sided "
             f"Mann-Whitney p, Holm-adjusted over the {len(comparison.cells)} matched cells; a gap whose interval "
             f"reaches into 1 +- {stats.NOISE:.0%} is {stats.WITHIN_NOISE}", ""]
    if comparison.cells:
        rows = [["", f"A {metric}", f"B {metric}", "ratio B/A", "interval, level", "p (Holm)", "runs A/B", "metric B-A",
                 "verdict", "cell"]]
        for cell in comparison.cells:
            test = cell.test
            mark = {stats.SLOWER: "+", stats.FASTER: "-"}.get(test.verdict, "")
            delta = "-" if cell.metric_delta is None else _delta(cell.metric_delta, cell.metric_name)
            verdict = test.verdict
            if cell.exceeds is not None:
                verdict += f"; FAILS --fail-above {_percent(cell.exceeds)}"
            rows.append([mark, _number(cell.a.median), _number(cell.b.median), _number(test.ratio.median),
                         _interval(test.ratio), _number(test.p_adjusted), f"{cell.a.n}/{cell.b.n}", delta, verdict,
                         cell.label])
        lines.append(aligned(rows))
    else:
        lines.append("no cell has runs on both sides")
    if any(cell.on_medians_alone for cell in comparison.cells):
        lines.append(f"\n{stats.SINGLE} / {stats.TOO_FEW}: no test can show a difference with these runs; "
                     "--fail-above compares their medians (single values) alone")
    if any(cell.test.verdict == stats.NO_RUNS for cell in comparison.cells):
        lines.append(f"{stats.NO_RUNS}: one side's runs of the cell all failed or timed out")
    for side, labels in (("A", comparison.only_a), ("B", comparison.only_b)):
        if labels:
            lines.append(f"\nonly in {side}:\n" + "\n".join(f"  {label}" for label in labels))
    if fail_above is not None:
        failing = [cell for cell in comparison.cells if cell.exceeds is not None]
        lines.append(f"\n--fail-above {_percent(fail_above)}: " + (
            f"{len(failing)} cell(s) slower by more than that" if failing else "no cell slower by more than that"))
    return "\n".join(lines)


def _delta(delta: float, metric: str | None) -> str:
    """B's metric less A's: an accuracy in points, as the report gives its percentages (74.3%)."""
    if metric == "accuracy":
        return f"{delta * 100:+.1f} points accuracy"
    return f"{delta:+.4g} {metric or ''}".strip()
