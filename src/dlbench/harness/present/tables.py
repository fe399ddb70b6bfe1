"""The study's tables as plain rows of text, for the HTML and the Markdown renderers alike.

One table per device and quantity: workloads down, frameworks across, as the study lays them out.
A framework whose runs all stopped early shows the metric at its last completed epoch and
"after k of N epochs", as the study's CIFAR-100 rows do.
"""
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from dlbench.harness import machine_certificates
from dlbench.harness.analysis.findings import group, label, metric_format, seconds
from dlbench.harness.analysis.stats import Estimate
from dlbench.harness.analysis.summary import FIRST_EPOCH_FIGURES, CellSummary, speed_ratios
from dlbench.harness.environments import sources


@dataclass(frozen=True)
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    # per column: the framework it shows, so the page can filter columns by framework ("" for none)
    frameworks: list[str] = field(default_factory=list)
    note: str = ""
    # what the page's filters match: per row (framework, workload, device), and for the whole table
    row_keys: list[dict[str, str]] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)


def with_ci(value: Estimate, fmt: Callable[[float], str]) -> str:
    """A median with its interval, the unit written once: 4.55 s [4.52-4.59]."""
    if value.median is None:
        return "-"
    if value.low is None or value.high is None:
        return f"{fmt(value.median)} (1 run)" if value.n == 1 else fmt(value.median)
    unit = next((u for u in (" s", "%", "x") if fmt(value.median).endswith(u)), "")
    low, high = (fmt(v).removesuffix(unit) for v in (value.low, value.high))
    return f"{fmt(value.median)} [{low}-{high}]"


WARM_LABEL = " (warm compile cache)"  # after a figure that holds a first epoch from a warm compile cache


def warm_label(cell: CellSummary, figure: str) -> str:
    return WARM_LABEL if cell.warm and figure in FIRST_EPOCH_FIGURES else ""


def _cell(cell: CellSummary, figure: str, fmt: Callable[[float], str]) -> str:
    parts = [with_ci(getattr(cell, figure), fmt) + warm_label(cell, figure)] if cell.n_ok else []
    for run in cell.runs:
        if run.status == "ok":
            continue
        done, planned = run.epochs_completed, cell.epochs_planned or "?"
        stop = "time cap" if run.status == "timeout" else "failed"
        if figure == "metric_value" and done and not cell.n_ok and run.metric_value is not None:
            parts.append(f"{fmt(run.metric_value)} after {done} of {planned} epochs ({stop})")
        else:
            parts.append(f"rep {run.repetition}: {stop}, {done} of {planned} epochs")
    return "; ".join(parts) or "-"


def study_tables(cells: Sequence[CellSummary]) -> list[Table]:
    """Final metric and training time per framework x workload, one pair of tables per device."""
    tables = []
    for device in sorted({c.device or "?" for c in cells}):
        mine = [c for c in cells if (c.device or "?") == device]
        groups = group(mine)
        columns = list(dict.fromkeys(label(c, g) for g in groups.values() for c in g))
        for heading, figure in (("Final metric", "metric_value"), ("Training time", "train_time_s")):
            rows = []
            for (workload, dataset, _), group_cells in groups.items():
                metric = group_cells[0].metric_name or "metric"
                fmt = metric_format(metric) if figure == "metric_value" else seconds
                by_label = {label(c, group_cells): c for c in group_cells}
                rows.append([f"{workload} ({dataset or '?'})" + (f", {metric}" if figure == "metric_value" else ""),
                             *(_cell(by_label[name], figure, fmt) if name in by_label else "" for name in columns)])
            note = "median over the successful repetitions [bootstrap 95% CI of the median]"
            if figure == "train_time_s":
                note += "; training time excludes evaluation and includes the first epoch"
                if any(c.warm for c in mine):
                    note += ("; (warm compile cache): from runs whose first epoch found code compiled by earlier "
                             "runs, never pooled with cold ones")
            tables.append(Table(f"{heading}, {device}", ["workload (dataset)", *columns], rows,
                                ["", *(c.split(" ")[0] for c in columns)], note,
                                [{"workload": workload} for workload, _, _ in groups], {"device": device}))
        tables += [relative_speed(mine, columns, device, against) for against in ("fastest", "reference")]
        tables.append(time_to_target(mine, columns, device))
        if any(c.achieved_gflops.n for c in mine):
            tables.append(throughput(mine, columns, device))
    return tables


def throughput(cells: Sequence[CellSummary], columns: list[str], device: str) -> Table:
    """Achieved GFLOP/s of the steady epochs and MFU, its share of the float32 GEMM peak measured in the
    framework's own environment with the run's threads."""
    rows = []
    for (workload, dataset, _), group_cells in group(cells).items():
        by_label = {label(c, group_cells): c for c in group_cells}
        row = [f"{workload} ({dataset or '?'})"]
        for name in columns:
            cell = by_label.get(name)
            if cell is None or not cell.achieved_gflops.n:
                row.append("" if cell is None else "-")
                continue
            text = "GFLOP/s " + with_ci(cell.achieved_gflops, lambda v: f"{v:.3g}")
            text += "; MFU " + (with_ci(cell.mfu, lambda v: f"{v * 100:.1f}%") if cell.mfu.n else "- (no peak)")
            row.append(text)
        rows.append(row)
    return Table(f"Achieved FLOP/s and MFU, {device}", ["workload (dataset)", *columns], rows,
                 ["", *(c.split(" ")[0] for c in columns)],
                 "training FLOPs of a steady epoch's samples (3x forward, from the model IR) over its time; MFU: that "
                 "over the float32 GEMM peak measured in the framework's environment with the run's threads "
                 "(dlbench.worker.peak); median [bootstrap 95% CI]", [{"workload": w} for w, _, _ in group(cells)],
                 {"device": device})


def time_to_target(cells: Sequence[CellSummary], columns: list[str], device: str) -> Table:
    """Training time until a run's metric first reached the workload's target: the median over the runs
    that reached it, and how many of the successful runs did."""
    rows = []
    for (workload, dataset, _), group_cells in group(cells).items():
        by_label = {label(c, group_cells): c for c in group_cells}
        row = [f"{workload} ({dataset or '?'})"]
        for name in columns:
            cell = by_label.get(name)
            if cell is None or not cell.n_ok:
                row.append("" if cell is None else "-")
                continue
            reached, pooled = cell.time_to_target_s, cell.n_ok - cell.warm_runs_left_out
            if not reached.n:
                row.append(f"not reached (0 of {pooled} runs)")
            else:
                row.append(with_ci(reached, seconds) + warm_label(cell, "time_to_target_s")
                           + ("" if reached.n == pooled else f"; reached in {reached.n} of {pooled} runs"))
        rows.append(row)
    return Table(f"Time to target, {device}", ["workload (dataset)", *columns], rows,
                 ["", *(c.split(" ")[0] for c in columns)],
                 "training time until the metric first reached the workload's target (dlbench list workloads), "
                 "median over the runs that reached it [bootstrap 95% CI]",
                 [{"workload": w} for w, _, _ in group(cells)], {"device": device})


def relative_speed(cells: Sequence[CellSummary], columns: list[str], device: str, against: str = "fastest") -> Table:
    """Each framework's steady epoch time over the fastest one's in its row, or over the reference's
    (`against`: "fastest" or "reference"; summary.speed_ratios)."""
    ratios = {r.cell.key: r for r in speed_ratios(list(cells))}
    rows = []
    for (workload, dataset, _), group_cells in group(cells).items():
        row = [f"{workload} ({dataset or '?'})"]
        by_label = {label(c, group_cells): c for c in group_cells}
        for name in columns:
            found = ratios.get(by_label[name].key) if name in by_label else None
            base = None if found is None else found.fastest if against == "fastest" else found.reference
            ratio = None if found is None else found.to_fastest if against == "fastest" else found.to_reference
            if found is None:
                row.append("" if name not in by_label else "-")
            elif found.cell is base:
                row.append(f"{against}, {seconds(found.cell.steady_epoch_s.median)}")
            else:
                row.append("-" if ratio is None else with_ci(ratio, lambda v: f"{v:.2f}x"))
        rows.append(row)
    title = "the fastest" if against == "fastest" else "the reference"
    return Table(f"Steady epoch time relative to {title}, {device}", ["workload (dataset)", *columns], rows,
                 ["", *(c.split(" ")[0] for c in columns)],
                 f"median steady epoch time over {title}'s median in the row [bootstrap 95% CI of the ratio]; "
                 "whether a gap is shown, the findings say", [{"workload": w} for w, _, _ in group(cells)],
                 {"device": device})


def certificate_grid(certificates: Sequence[Mapping], runs: Sequence[Mapping]) -> Table:
    """Framework x workload: the newest certificate's verdict and its worst deviation (relative to the
    reference tensor's scale); the reference framework's own cells say so."""
    newest: dict[tuple[str, str], Mapping] = {}
    for cert in certificates:  # oldest first: later ones replace earlier
        newest[(cert["framework"], cert["workload"])] = cert
    reference = {c["reference"] for c in certificates} | {r["framework"] for r in runs
                                                         if r.get("certificate") == "reference"}
    frameworks = list(dict.fromkeys([*(r["framework"] for r in runs), *(f for f, _ in newest)]))
    workloads = list(dict.fromkeys([*(r["workload"] for r in runs), *(w for _, w in newest)]))
    rows = []
    for framework in frameworks:
        row = [framework]
        for workload in workloads:
            cert = newest.get((framework, workload))
            if framework in reference:
                row.append("reference")
            elif cert is None:
                row.append("none")
            else:
                worst = cert.get("worst_scaled_deviation")
                code = sources.code_state(framework, cert.get("worker_source"), cert.get("reference_source"))
                model = machine_certificates.workload_state(cert)
                row.append(f"{'pass' if cert['passed'] else 'FAIL'}"
                           + (f" ({worst:.1e}, {cert.get('worst_tensor')})" if worst is not None else "")
                           + ("" if code == "current" else f", {code} code")
                           + ("" if model == "current" else f", {model} model and recipe"))
        rows.append(row)
    return Table("Framework x workload", ["framework", *workloads], rows, [],
                 "newest certificate per pair: verdict (worst deviation relative to the reference's scale, tensor); "
                 "'older code': certified with worker code that has changed since, 'unrecorded code': before "
                 "dlbench recorded it; likewise the workload's model and recipe",
                 [{"framework": f} for f in frameworks])
