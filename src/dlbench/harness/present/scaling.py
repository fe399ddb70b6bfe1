"""The report's scaling section as text, for the HTML and the Markdown renderers alike: per sweep figure
(analysis.scaling) its table, caption and axis labels. Charts are drawn by html.py from the same figures."""
from collections.abc import Sequence

from dlbench.harness.analysis.findings import seconds
from dlbench.harness.analysis.scaling import THREADS, Figure, Line, base_text, batch_text
from dlbench.harness.present.tables import CORES_LEGEND, CORES_MARK, Table, with_ci

SPEED_UP_METHOD = ("speed-up: the base's median steady epoch time over this thread count's (one value per run), "
                   "interval from the two medians' order-statistic intervals, each at the square root of 95% "
                   "(level their product, printed where below 95%); efficiency: speed-up / (threads / base); "
                   "the base is 1 thread where the store holds it, else the smallest count")
THROUGHPUT_METHOD = ("samples/s: a run's training samples per epoch over its steady epoch time, median over the "
                     "runs with its order-statistic interval (at least 95%, or [min-max] with 2 to 5 runs at "
                     "the level printed)")
INTRO = ("Cells of a sweep that differ in one axis only (same framework and version, workload, dataset, device "
         "and the other axis): speed-up and parallel efficiency over thread counts, training throughput over "
         "batch sizes. A batch size other than the workload recipe's is a changed recipe.")


def title(figure: Figure) -> str:
    kind = "Thread scaling" if figure.axis == THREADS else "Batch-size scaling"
    return f"{kind}: {figure.title}"


def line_label(line: Line, figure: Figure) -> str:
    """The line's framework; with its base where the figure's lines are over different bases."""
    return f"{line.label} ({base_text(line.base)})" if len(figure.bases) > 1 else line.label


def y_label(figure: Figure) -> str:
    if figure.axis != THREADS:
        return "training samples / s"
    return base_text(next(iter(figure.bases))) if len(figure.bases) == 1 else "speed-up over each line's base"


def x_label(figure: Figure) -> str:
    if figure.axis == THREADS:
        return "threads"
    return "batch size" + (f" (dotted: the recipe's, {figure.recipe_batch_size})" if figure.recipe_batch_size
                           else "")


def caption(figure: Figure) -> str:
    if figure.axis == THREADS:
        return (f"{title(figure)}: {y_label(figure)} per framework, whiskers: its interval; dashed: linear "
                "speed-up. " + SPEED_UP_METHOD)
    return f"{title(figure)}: training throughput per framework, whiskers: its interval. {THROUGHPUT_METHOD}"


def table(figure: Figure) -> Table:
    """One row per framework and value of the axis."""
    threads = figure.axis == THREADS
    header = ["framework", "threads" if threads else "batch size", "steady epoch"]
    header += ([y_label(figure) if len(figure.bases) == 1 else "speed-up", "parallel efficiency"] if threads
               else ["samples/s"])
    rows, row_keys = [], []
    for line in figure.lines:
        for point in line.points:
            value = str(point.value) if threads else batch_text(point.value, figure.recipe_batch_size)
            mark = CORES_MARK if point.cores_flagged else ""
            row = [line_label(line, figure), value, with_ci(point.steady_epoch_s, seconds) + mark]
            if threads:
                row += [with_ci(point.figure, lambda v: f"{v:.2f}x"),
                        "-" if point.efficiency is None else with_ci(point.efficiency, lambda v: f"{v:.0%}")]
            else:
                row += [with_ci(point.figure, lambda v: f"{v:.4g}")]
            rows.append(row)
            row_keys.append({"framework": line.framework})
    return Table(title(figure), header, rows, note=_note(figure), row_keys=row_keys,
                 keys={"workload": figure.workload, "device": figure.device or "?"})


def _note(figure: Figure) -> str:
    method = SPEED_UP_METHOD if figure.axis == THREADS else THROUGHPUT_METHOD
    counts = sorted({p.steady_epoch_s.n for line in figure.lines for p in line.points})
    runs = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    single = "; a value of one run has no interval" if 1 in counts else ""
    flagged = any(p.cores_flagged for line in figure.lines for p in line.points)
    return (f"{method}; {runs} successful run{'' if counts == [1] else 's'} per value{single}"
            + (f"; {CORES_LEGEND}" if flagged else ""))


def tables(figures: Sequence[Figure]) -> list[Table]:
    return [table(figure) for figure in figures]

