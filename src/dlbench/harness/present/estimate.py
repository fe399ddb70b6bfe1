"""`dlbench estimate`'s output: one line per cell (within 120 columns), the total and the makespan on N nodes."""
from collections.abc import Sequence

from dlbench.harness.analysis.estimate import KINDS, Estimate, Forecast
from dlbench.harness.plan import makespan

WIDTH = 120
# (heading, width) of the cell table's columns; the basis takes the rest of the 120
COLUMNS = (("#", 3), ("framework", 16), ("workload", 18), ("dataset", 17), ("ep", 3), ("forecast", 9),
           ("interval", 14))


def duration(seconds: float | None) -> str:
    """12.3s, 4m05s, 2h07m, 3d04h: short enough for a column, precise enough for a forecast."""
    if seconds is None:
        return "?"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def _line(values: Sequence[str]) -> str:
    cells = []
    for (heading, width), value in zip(COLUMNS, values, strict=False):
        cells.append(value.rjust(width) if heading in ("#", "ep", "forecast") else value.ljust(width))
    basis_width = WIDTH - sum(width + 1 for _, width in COLUMNS)
    return " ".join(cells + [values[-1][:basis_width]]).rstrip()


def cell_table(forecasts: Sequence[Forecast]) -> str:
    lines = [_line([heading for heading, _ in COLUMNS] + ["basis"])]
    for index, f in enumerate(forecasts, 1):
        interval = "-" if f.low is None else f"{duration(f.low)}-{duration(f.high)}"
        if f.capped:  # its forecast is its timeout; the interval it would have had says nothing then
            interval = "TIMEOUT"
        lines.append(_line([str(index), f.cell.framework[:16], f.cell.workload, f.cell.dataset[:17],
                            str(f.cell.epochs), duration(f.seconds), interval, f.basis]))
    # entries that train on their dataset's first N training samples (a suite entry's train_samples)
    lines += [f"{workload} on {dataset} trains on its first {count:,} training samples" for workload, dataset, count
              in dict.fromkeys((f.cell.workload, f.cell.dataset, f.cell.train_samples) for f in forecasts
                               if f.cell.train_samples)]
    return "\n".join(lines)


def summary(estimate: Estimate, nodes: int) -> str:
    """The total, the makespan on `nodes` nodes in plan order (what the Ray executor does) and longest
    first, and which cells are extrapolated or not forecast at all."""
    forecasts = estimate.forecasts
    known = [f for f in forecasts if f.seconds is not None]
    keys = [f.cell.framework for f in known]

    def schedule(values: list[float], nodes: int) -> str:
        return duration(makespan.list_schedule(values, nodes, keys, estimate.setup))

    points = [f.seconds or 0.0 for f in known]
    lows, highs = [f.low or 0.0 for f in known], [f.high or 0.0 for f in known]
    peaks = sum(estimate.setup(framework) for framework in set(keys))
    lines = [f"on one node (the local executor): {schedule(points, 1)} [{schedule(lows, 1)}-{schedule(highs, 1)}]: "
             f"{len(known)} cells and {len(set(keys))} GEMM peaks ({duration(peaks)})"]
    if nodes > 1:
        lines.append(f"on {nodes} nodes, cells in plan order as the Ray executor dispatches them: "
                     f"{schedule(points, nodes)} [{schedule(lows, nodes)}-{schedule(highs, nodes)}]")
        lpt, bound = makespan.longest_first(points, nodes, keys, estimate.setup), makespan.lower_bound(points, nodes)
        lines.append(f"  longest cells first would take {duration(lpt)}; no schedule takes under {duration(bound)} "
                     f"(longest cell {duration(max(points, default=0.0))})")
    extrapolated = [f for f in known if f.extrapolated]
    if extrapolated:
        lines.append(f"extrapolated (no stored run of the cell itself): {len(extrapolated)} of {len(forecasts)} cells")
        for kind, text in KINDS.items():
            count = sum(1 for f in extrapolated if f.kind == kind)
            if count:
                lines.append(f"  {count} from {text}")
        stand_ins = sorted({f.stand_in for f in extrapolated if f.stand_in})
        for device in stand_ins:
            wanted = forecasts[0].cell.device
            lines.append(f"  the store holds no {wanted} run: {device} runs stand in ('{device}:'), "
                         f"a bound only if the {wanted} is no slower")
    capped = [f for f in known if f.capped]
    if capped:
        full = sum(f.uncapped_s or 0.0 for f in capped) + sum(f.seconds for f in known if not f.capped)
        lines.append(f"TIMEOUT: {len(capped)} cells would pass their timeout ({duration(capped[0].cell.timeout_s)} "
                     "for the first) and stop there unfinished, counted at it")
        lines.append(f"  all the cells' epochs, run to the end one after another, would take {duration(full)}")
    missing = [f for f in forecasts if f.seconds is None]
    if missing:
        lines.append(f"not forecast, left out of the totals: {len(missing)} cells "
                     f"({'; '.join(sorted({f.basis for f in missing}))})")
    return "\n".join(lines)
