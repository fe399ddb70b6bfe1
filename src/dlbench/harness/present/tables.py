"""The study's tables as plain rows of text, for the HTML and the Markdown renderers alike.

One table per device and quantity: workloads down, frameworks across, as the study lays them out.
A framework whose runs all stopped early shows the metric at its last completed epoch and
"after k of N epochs", as the study's CIFAR-100 rows do.
"""
import csv
import io
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from urllib.parse import quote

from dlbench.harness import data
from dlbench.harness.analysis import measures
from dlbench.harness.analysis.dataset_label import run_label
from dlbench.harness.analysis.findings import (
    COMPILATION_FACTOR,
    Finding,
    FirstEpoch,
    Key,
    group,
    label,
    seconds,
    stand_in,
)
from dlbench.harness.analysis.measures import metric_format
from dlbench.harness.analysis.serving import ServingCell
from dlbench.harness.analysis.stats import CONFIDENCE, NOISE, Estimate, level_text
from dlbench.harness.analysis.summary import FIRST_EPOCH_FIGURES, CellSummary, speed_ratios
from dlbench.harness.certification import machine_store
from dlbench.harness.environments import sources
from dlbench.harness.measure.cores import BUSY_MACHINE
from dlbench.harness.plan.workloads import metric_label, target_text

INTERVAL = (f"order-statistic interval of the median, at least {CONFIDENCE:.0%} unless the cell prints the lower "
            "level its runs allow (2 to 5 runs: [min-max], 50 to 93.7%)")
CORES_MARK = " †"  # after a figure from a cell with a run flagged for the cores it used
CORES_LEGEND = ("†: a run of this cell used far fewer or more cores than its threads; the findings' caveats name "
                "it and say whether other processes were busy meanwhile or the framework did it by itself")
PEAK_MARK = " ‡"  # after an MFU whose GEMM peak was measured while other processes kept cores busy


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
    # per row, per column: a ratio to colour the cell by (charts.ratio_colour), None for no colour; empty: none
    shades: list[list[float | None]] = field(default_factory=list)


def shown_groups(groups: Mapping[Key, Sequence[CellSummary]]) -> list[tuple[str, str | None, Sequence[CellSummary]]]:
    """Each group's workload, its dataset as tables show it ("NAME (first N of M)" for a suite entry's
    train_samples) and its cells."""
    return [(key[0], cells[0].dataset_label or key[1], cells) for key, cells in groups.items()]


def csv_download(table: Table) -> tuple[str, str]:
    """A file name and a data: URI holding the table as CSV (its heading and rows, as the page shows them),
    for a download link that needs nothing from outside the page."""
    out = io.StringIO()
    csv.writer(out).writerows([table.header, *table.rows])
    name = re.sub(r"\W+", "-", table.title).strip("-").lower() + ".csv"
    return name, "data:text/csv;charset=utf-8," + quote(out.getvalue())


def with_ci(value: Estimate, fmt: Callable[[float], str]) -> str:
    """A median with its interval, the unit written once: 4.55 s [4.52-4.59]; with its level where that
    is below CONFIDENCE: 4.55 s [4.52-4.61, 75%]."""
    if value.median is None:
        return "-"
    if value.low is None or value.high is None:  # one run: the table's note says how many runs its cells hold
        return fmt(value.median)
    unit = next((u for u in (" s", "%", "x") if fmt(value.median).endswith(u)), "")
    low, high = (fmt(v).removesuffix(unit) for v in (value.low, value.high))
    level = f", {level_text(value.level)}" if value.level is not None and value.level < CONFIDENCE else ""
    return f"{fmt(value.median)} [{low}-{high}{level}]"


def cores_mark(cell: CellSummary) -> str:
    return CORES_MARK if any(run.cores_flag for run in cell.runs) else ""


def _legend(note: str, cells: Sequence[CellSummary]) -> str:
    """The note, with how many runs its cells hold, said once, and the cores marker's legend where a cell of
    the table carries it."""
    return note + runs_note(cells) + ("; " + CORES_LEGEND if any(cores_mark(c) for c in cells) else "")


def runs_note(cells: Sequence[CellSummary]) -> str:
    """How many successful runs the cells hold, said once for a table rather than in every cell."""
    counts = sorted({c.n_ok for c in cells if c.n_ok})
    if not counts:
        return ""
    if counts == [1]:
        return "; one successful run per cell: one measurement, no interval"
    many = f"{counts[0]} to {counts[-1]}" if len(counts) > 1 else f"{counts[0]}"
    return f"; {many} successful runs per cell" + ("; a cell of one run shows no interval" if 1 in counts else "")


WARM_LABEL = " (warm compile cache)"  # after a figure that holds a first epoch from a warm compile cache


def warm_label(cell: CellSummary, figure: str) -> str:
    return WARM_LABEL if cell.warm and figure in FIRST_EPOCH_FIGURES else ""


def _cell(cell: CellSummary, figure: str, fmt: Callable[[float], str]) -> str:
    parts = [with_ci(getattr(cell, figure), fmt) + warm_label(cell, figure) + cores_mark(cell)] if cell.n_ok else []
    for run in cell.runs:
        if run.status == "ok":
            continue
        done, planned = run.epochs_completed, cell.epochs_planned or "?"
        stop = {"timeout": "time cap", "interrupted": "interrupted"}.get(run.status, "failed")
        if figure == "metric_value" and done and not cell.n_ok and run.metric_value is not None:
            parts.append(f"{fmt(run.metric_value)} after {done} of {planned} epochs ({stop})")
        else:
            parts.append(f"rep {run.repetition}: {stop}, {done} of {planned} epochs")
    return "; ".join(parts) or "-"


def study_tables(cells: Sequence[CellSummary], peaks: Sequence[Mapping] = ()) -> list[Table]:
    """Final metric and training time per framework x workload, one pair of tables per device; peaks:
    the store's GEMM peaks (Store.peaks), for the MFU's disclosure."""
    tables = []
    for device in sorted({c.device or "?" for c in cells}):
        mine = [c for c in cells if (c.device or "?") == device]
        groups = group(mine)
        columns = list(dict.fromkeys(label(c, g) for g in groups.values() for c in g))
        for heading, figure in (("Final metric", "metric_value"), ("Training time", "train_time_s")):
            rows = []
            for workload, dataset, group_cells in shown_groups(groups):
                metric = group_cells[0].metric_name or "metric"
                fmt = metric_format(metric) if figure == "metric_value" else seconds
                by_label = {label(c, group_cells): c for c in group_cells}
                named = f", {metric_label(metric)}" if figure == "metric_value" else ""
                rows.append([f"{workload} ({dataset or '?'}){named}",
                             *(_cell(by_label[name], figure, fmt) if name in by_label else "" for name in columns)])
            note = f"median over the successful repetitions [{INTERVAL}]"
            if figure == "train_time_s":
                note += "; training time excludes evaluation and includes the first epoch"
                if any(c.warm for c in mine):
                    note += ("; (warm compile cache): from runs whose first epoch found code compiled by earlier "
                             "runs, never pooled with cold ones")
            tables.append(Table(f"{heading}, {device}", ["workload (dataset)", *columns], rows,
                                ["", *(c.split(" ")[0] for c in columns)], _legend(note, mine),
                                [{"workload": workload} for workload, *_ in groups], {"device": device}))
        tables += [relative_speed(mine, columns, device, against) for against in ("fastest", "reference")]
        tables.append(time_to_target(mine, columns, device))
        if any(c.achieved_gflops.n for c in mine):
            tables.append(throughput(mine, columns, device, peaks))
    return tables


def detector_time_split(runs: Sequence[Mapping]) -> list[Table]:
    """Per device, one row per detection cell (workload, dataset, framework, in that order): where a steady epoch's
    training time went (measures.time_split), the median over the cell's successful runs. No table when no
    run holds the split."""
    cells: dict[tuple, list[dict]] = {}
    for run in runs:
        split = measures.time_split(run) if run.get("status") == "ok" else {}
        if split:
            key = (run.get("device") or "?", run["workload"], run_label(run) if run.get("dataset") else None,
                   run["framework"], run.get("framework_version"))
            cells.setdefault(key, []).append(split)
    tables = []
    for device in sorted({key[0] for key in cells}):
        rows, row_keys = [], []
        for (cell_device, workload, dataset, framework, version), splits in sorted(
                cells.items(), key=lambda item: tuple(str(part) for part in item[0])):
            if cell_device != device:
                continue
            figures = {name: median(split[name] for split in splits) for name in splits[0]}
            rows.append([f"{workload} ({dataset or '?'})", f"{framework} {version or ''}".strip(),
                         *(f"{figures[name]:.3g}" for name in ("host", "NMS", "framework", "rest")),
                         f"{figures['framework share'] * 100:.0f}%", str(len(splits))])
            row_keys.append({"framework": framework, "workload": workload})
        tables.append(Table(f"Detector epoch time by where it went, {device}",
                            ["workload (dataset)", "framework", "host s", "NMS s", "framework s", "rest s",
                             "framework share", "runs"], rows, [],
                            "a steady training epoch: host, the shared numpy (flips, canvases, decoding, sampling, "
                            "targets, RoI Align plans); NMS, the framework's on the proposals; framework, its RPN pass "
                            "and training step; rest, the epoch's time less those (the loop); medians over the steady "
                            "epochs, then over the runs", row_keys, {"device": device}))
    return tables


def throughput(cells: Sequence[CellSummary], columns: list[str], device: str, peaks: Sequence[Mapping] = ()) -> Table:
    """Achieved GFLOP/s of the steady epochs and MFU against one denominator, the machine's peak (the best
    float32 GEMM any framework reached on this hardware at the run's threads), with each framework's own
    GEMM peak as a share of the machine's beside it; the gap between frameworks' peaks said in the note."""
    busy = {p["id"] for p in peaks if p.get("others_busy_cores") is not None and p["others_busy_cores"] >= BUSY_MACHINE}
    by_id = {p["id"]: p for p in peaks}
    best = measures.machine_peaks(peaks)
    rows = []
    for workload, dataset, group_cells in shown_groups(group(cells)):
        by_label = {label(c, group_cells): c for c in group_cells}
        row = [f"{workload} ({dataset or '?'})"]
        for name in columns:
            cell = by_label.get(name)
            if cell is None or not cell.achieved_gflops.n:
                row.append("" if cell is None else "-")
                continue
            machine = max((best.get(measures.peak_key(by_id[r.peak_id]), {}).get("gflops") or 0.0
                           for r in cell.runs if r.peak_id in by_id), default=0.0)
            row.append(_throughput_cell(cell, busy, machine or None))
        rows.append(row)
    denominators = sorted({p["gflops"] for p in best.values() if p.get("device") == device})
    note = ("training FLOPs of a steady epoch's samples (3x forward, plus a detector's second backbone and RPN "
            "pass, from the model IR) over its time; MFU: that over the machine's peak, the best float32 GEMM "
            "any framework reached on this hardware with the run's threads (dlbench.worker.gemm_peak in each "
            "framework's environment), one denominator for every framework; own GEMM: the framework's own "
            "peak as a share of the machine's")
    if denominators:
        note += f" (machine's peak here {', '.join(f'{d:.3g}' for d in denominators)} GFLOP/s)"
    note += "".join(f"; {gap}" for gap in measures.gemm_gap([p for p in peaks if p.get("device") == device]))
    note += f"; median [{INTERVAL}]"
    if any(PEAK_MARK in text for row in rows for text in row):
        note += (f"; ‡: a peak measured while other processes kept {BUSY_MACHINE:g} cores or more busy: it may be "
                 "low, and the own GEMM share against it low")
    return Table(f"Achieved FLOP/s and MFU, {device}", ["workload (dataset)", *columns], rows,
                 ["", *(c.split(" ")[0] for c in columns)], _legend(note, cells),
                 [{"workload": w} for w, *_ in group(cells)], {"device": device})


def _throughput_cell(cell: CellSummary, busy: set[int], machine: float | None) -> str:
    """GFLOP/s and MFU of one cell against the machine's peak, and its framework's own GEMM peak as a share of
    the machine's; busy: the ids of peaks measured beside busy cores."""
    text = "GFLOP/s " + with_ci(cell.achieved_gflops, lambda v: f"{v:.3g}")
    if machine is None:
        return text + "; MFU - (no peak)" + cores_mark(cell)
    text += f"; MFU {with_ci(cell.achieved_gflops, lambda v: f'{v / machine * 100:.1f}%')} of {machine:.3g} GFLOP/s"
    if cell.peak_gflops.median is not None:
        text += f", own GEMM {cell.peak_gflops.median / machine:.0%}"
    if any(run.peak_id in busy for run in cell.runs):
        text += PEAK_MARK
    return text + cores_mark(cell)


def time_to_target(cells: Sequence[CellSummary], columns: list[str], device: str) -> Table:
    """Training time until a run's metric first reached its target: the median over the runs that reached
    it, and how many of the successful runs did. The target is the workload's, or the stand-in dataset's own
    where the runs carried one (its value and why, declared beside the dataset, in the note). Left out, and
    named in the note: a stand-in that declares no meaningful target (with its reason), and one measured
    against the study's target that no run reached: the study's target says nothing of a stand-in dataset,
    and a row of "not reached" says nothing either."""
    rows, kept, left_out, own_targets = [], [], [], []
    for (workload, dataset, *_), group_cells in group(cells).items():
        name = f"{workload} ({group_cells[0].dataset_label or dataset or '?'})"
        own = next((c.own_target for c in group_cells if c.own_target), None)
        declared = data.stand_in_target(dataset or "", workload)
        reason = declared.reason if declared else "its runs carried none"
        if own is not None and own.get("value") is None:
            left_out.append(f"{name}: no target, the stand-in declares none: {reason}")
            continue
        if own is None and stand_in(group_cells[0]) and not any(c.time_to_target_s.n for c in group_cells):
            left_out.append(f"{name}: stand-in data that no run brought to the target the study set for its own "
                            "dataset, so the study's target says nothing here")
            continue
        if own is not None:
            own_targets.append(f"{name}: {target_text(own)}, {reason}")
        kept.append(workload)
        by_label = {label(c, group_cells): c for c in group_cells}
        row = [name]
        for column in columns:
            cell = by_label.get(column)
            if cell is None or not cell.n_ok:
                row.append("" if cell is None else "-")
                continue
            reached, pooled = cell.time_to_target_s, cell.n_ok - cell.warm_runs_left_out
            if not reached.n:
                row.append(f"not reached (0 of {pooled} runs)")
            else:
                row.append(with_ci(reached, seconds) + warm_label(cell, "time_to_target_s") + cores_mark(cell)
                           + ("" if reached.n == pooled else f"; reached in {reached.n} of {pooled} runs"))
        rows.append(row)
    return Table(f"Time to target, {device}", ["workload (dataset)", *columns], rows,
                 ["", *(c.split(" ")[0] for c in columns)],
                 _legend("training time until the metric first reached the workload's target (dlbench list "
                         "workloads), or the stand-in dataset's own where it declares one (dlbench list datasets), "
                         f"median over the runs that reached it [{INTERVAL}]", cells)
                 + _own_targets_note(own_targets) + _left_out_note(left_out),
                 [{"workload": w} for w in kept], {"device": device})


def _own_targets_note(own_targets: Sequence[str]) -> str:
    if not own_targets:
        return ""
    return (". The stand-in's own target, not the study's (which was set for the study's dataset and is out of "
            "reach of a quick run on a stand-in): " + "; ".join(own_targets))


def _left_out_note(left_out: Sequence[str]) -> str:
    if not left_out:
        return ""
    return ". Left out: " + "; ".join(left_out)


def relative_speed(cells: Sequence[CellSummary], columns: list[str], device: str, against: str = "fastest") -> Table:
    """Each framework's steady epoch time over the lowest median in its row, or over the reference's
    (`against`: "fastest" or "reference"; summary.speed_ratios). The lowest median is not called the
    fastest: whether any gap is shown (single runs, noise), the findings say."""
    if against not in ("fastest", "reference"):
        raise ValueError(f"relative_speed against {against!r}: expected 'fastest' or 'reference'")
    ratios = {r.cell.key: r for r in speed_ratios(list(cells))}
    rows, shades = [], []
    for workload, dataset, group_cells in shown_groups(group(cells)):
        row = [f"{workload} ({dataset or '?'})"]
        shade: list[float | None] = [None]
        by_label = {label(c, group_cells): c for c in group_cells}
        for name in columns:
            found = ratios.get(by_label[name].key) if name in by_label else None
            base = None if found is None else found.fastest if against == "fastest" else found.reference
            ratio = None if found is None else found.to_fastest if against == "fastest" else found.to_reference
            shade.append(None if ratio is None else ratio.median)
            if found is None:
                row.append("" if name not in by_label else "-")
            elif found.cell is base:
                word = "lowest median" if against == "fastest" else "reference"
                row.append(f"{word}, {seconds(found.cell.steady_epoch_s.median)}" + cores_mark(found.cell))
            else:
                row.append(("-" if ratio is None else with_ci(ratio, lambda v: f"{v:.2f}x")) + cores_mark(found.cell))
        rows.append(row)
        shades.append(shade)
    title = "the lowest median" if against == "fastest" else "the reference"
    note = (f"median steady epoch time over {title} in the row [interval of the ratio from the two sides' "
            f"order-statistic intervals, at least {CONFIDENCE:.0%} unless the cell prints its lower level]; a "
            "run's steady epoch time is the median of its epochs after the first (with 2 epochs, the second "
            "alone); whether a gap is shown, the findings say: only a gap whose interval lies beyond "
            f"{NOISE:.0%} either way (the noise threshold) and that Holm's correction leaves significant")
    return Table(f"Steady epoch time relative to {title}, {device}", ["workload (dataset)", *columns], rows,
                 ["", *(c.split(" ")[0] for c in columns)],
                 _legend(note + "; colour: the ratio on the overview's scale (1x green to 4x and beyond red; "
                         "below 1x as green as 1x)", cells),
                 [{"workload": w} for w, *_ in group(cells)], {"device": device}, shades)


WARM_CACHE = "warm cache"
FIRST_EPOCH_NOTE = (f"each framework's median first epoch over its median steady epoch, where over "
                    f"{COMPILATION_FACTOR:g}x (the first epoch's seconds in brackets): compilation or warm-up, which "
                    f"its training time and time to target include; empty: within {COMPILATION_FACTOR:g}x, or no value")
WARM_NOTE = (f"; {WARM_CACHE}: every run of the cell started from a warm compile cache, so compilation done by "
             "earlier runs is not in its first epoch, training time or time to target, which are therefore not "
             "comparable with cold ones (a slow one is warm-up, or compilation its cache did not hold)")


def first_epoch_table(found: Sequence[Finding]) -> Table | None:
    """The findings' slow and warm first epochs (Finding.first_epochs) as one table, framework x workload:
    a caveat that repeats per framework said once, not as a sentence per framework and workload. None
    where no finding has one."""
    columns = [f for f in found if f.first_epochs]
    if not columns:
        return None
    names = sorted({first.label for f in columns for first in f.first_epochs})
    devices = {f.device for f in columns}
    header = ["framework"] + [f"{f.workload} ({f.dataset_label or f.dataset or '?'}"
                              + (f", {f.device})" if len(devices) > 1 else ")") for f in columns]
    rows = []
    for name in names:
        cells = [next((first for first in f.first_epochs if first.label == name), None) for f in columns]
        rows.append([name] + ["" if first is None else _first_epoch_text(first) for first in cells])
    warm = any(first.warm for f in columns for first in f.first_epochs)
    return Table("First epochs", header, rows, note=FIRST_EPOCH_NOTE + (WARM_NOTE if warm else ""),
                 row_keys=[{"framework": name.split(" ")[0]} for name in names])


def _first_epoch_text(first: FirstEpoch) -> str:
    ratio = "" if first.ratio is None else f"{first.ratio:.1f}x "
    when = "" if first.seconds is None else f"({seconds(first.seconds)})"
    return f"{ratio}{when}" + (f", {WARM_CACHE}" if first.warm else "")


def certificate_grid(certificates: Sequence[Mapping], runs: Sequence[Mapping]) -> Table:
    """Framework x workload: the newest certificate's verdict and its worst deviation (relative to the
    reference tensor's scale); the reference framework's own cells say so. The reference's row first,
    then the frameworks by name; workloads by name."""
    newest: dict[tuple[str, str], Mapping] = {}
    for cert in certificates:  # oldest first: later ones replace earlier
        newest[(cert["framework"], cert["workload"])] = cert
    reference = {c["reference"] for c in certificates} | {r["framework"] for r in runs
                                                         if r.get("certificate") == "reference"}
    # a stable order, whatever order the runs ran in: the reference first, then by name
    frameworks = sorted({*(r["framework"] for r in runs), *(f for f, _ in newest)},
                        key=lambda name: (name not in reference, name))
    workloads = sorted({*(r["workload"] for r in runs), *(w for _, w in newest)})
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
                model = machine_store.workload_state(cert)
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


SERVING_HEADER = ["workload", "dataset", "framework", "p50 ms", "p90 ms", "p99 ms", "samples/s", "batch",
                  "first call s", "first batch s", "peak MiB"]


def serving_tables(cells: Sequence[ServingCell]) -> list[Table]:
    """Per device, one row per inference cell (workload x framework): its batch-1 latency percentiles,
    throughput, first calls and peak memory, each the median over the cell's successful runs with its
    interval where it has several (INTERVAL)."""
    devices: dict[str, list[ServingCell]] = {}
    for cell in cells:
        devices.setdefault(cell.device or "?", []).append(cell)
    return [_serving_table(device, shown) for device, shown in devices.items()]


def _serving_table(device: str, cells: Sequence[ServingCell]) -> Table:
    rows, keys = [], []
    for cell in cells:
        figures = cell.figures
        failed = "; ".join(f"{status}: {reason}" for status, reason in cell.failures)
        # the throughput with its interval over repetitions; the others their median (each run's percentiles
        # already summarise its hundreds of calls)
        shown = [(with_ci(figures[name], fmt) if name == "samples_per_s" else _median_text(figures[name], fmt))
                 if cell.n_ok else (failed or "-") for name, fmt in (
            ("latency_p50_ms", _ms), ("latency_p90_ms", _ms), ("latency_p99_ms", _ms),
            ("samples_per_s", _rate), ("first_call_s", _s), ("first_batch_call_s", _s), ("peak_rss_mb", _mib))]
        shown.insert(4, str(cell.batch_size or "-"))
        rows.append([cell.workload, cell.dataset or "?", cell.label, *shown])
        keys.append({"framework": cell.framework, "workload": cell.workload, "device": device})
    counts = sorted({cell.n_ok for cell in cells})
    runs = ("one successful run per cell: no interval" if counts == [1] else
            f"{counts[0]} to {counts[-1]} successful runs per cell" if len(counts) > 1 else
            f"{counts[0]} successful runs per cell")
    note = ("Batch-1 latency: one timed call on one test sample, after the warm-up calls; its percentiles over "
            "the run's timed calls. samples/s: the test split's first samples in whole batches of the batch "
            "size, timed as one span. First call: the first call on one sample (compilation, warm-up); first "
            "batch: the first call on a whole batch. Peak MiB: the worker's peak resident memory. Each figure the "
            f"median over repetitions; samples/s with its [{INTERVAL}]; {runs}.")
    return Table(f"Serving ({device})", SERVING_HEADER, rows, note=note, row_keys=keys, keys={"device": device})


def _median_text(value: Estimate, fmt: Callable[[float], str]) -> str:
    return "-" if value.median is None else fmt(value.median)


def _ms(value: float) -> str:
    return f"{value:.3g}"


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _s(value: float) -> str:
    return f"{value:.3g} s"


def _mib(value: float) -> str:
    return f"{value:,.0f}"
