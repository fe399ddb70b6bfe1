"""Stored runs as a text table, CSV or JSON: built from the store alone, never from a live run."""
import csv
import io
import json
import math
from typing import Any

from dlbench.harness.analysis import measures
from dlbench.harness.analysis.dataset_label import run_label
from dlbench.harness.certification import machine_store
from dlbench.harness.certification.terms import share_of_tolerance
from dlbench.harness.environments import sources
from dlbench.harness.plan import executions, modes, precisions
from dlbench.harness.plan.workloads import metric_label
from dlbench.harness.store import is_inference

# (run field, table heading); CSV and JSON carry every field
STORED_COLUMNS = (
    ("framework", "framework"), ("framework_version", "version"), ("workload", "workload"),
    ("dataset", "dataset"), ("device", "device"), ("repetition", "rep"), ("status", "status"),
    ("train_time_s", "train s"), ("first_step_s", "step1 s"), ("first_epoch_s", "epoch1 s"),
    ("steady_epoch_s", "steady s"),
    ("eval_time_s", "eval s"), ("metric_value", "final metric"), ("time_to_target_s", "to target s"),
    ("params", "params"), ("peak_rss_mb", "peak MiB"),
    ("mean_cpu_percent", "cpu %"), ("certificate", "certified"), ("compile_cache", "cache"), ("reason", "reason"),
)
# derived from the stored columns (dlbench.harness.analysis.measures): heading, text of a run; after "cpu %"
DERIVED_COLUMNS = (("GFLOP/s", measures.gflops_text), ("MFU", measures.mfu_text), ("cores", measures.cores_text),
                   ("energy/sample", measures.energy_text), ("detector epoch", measures.time_split_text))
LARGE_FIELDS = ("config", "packages", "stderr_tail")  # kept out of CSV rows; JSON has them
# The width the text tables fit by default: a terminal's, not the 1,000 columns every field would take.
# A cell that does not fit is clipped with "…"; --format csv|json keeps every character.
WIDTH = 120
# the columns of a run's row that are clipped to fit WIDTH
RUN_FREE_TEXT = ("reason", "epochs (metric@train s)", "energy/sample", "detector epoch", "MFU", "cores")
GIVEN_WAY_MIN = 10  # a clipped column keeps this much of its text (or its heading's width, if wider)
# What `dlbench results` shows unless --columns says otherwise: which run, how it ended, its time and metric
DEFAULT_COLUMNS = ("framework", "version", "workload", "dataset", "device", "rep", "status", "steady s", "final metric",
                   "certified", "reason")


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 1 else f"{value:.2f}"
    return str(value)


def aligned(rows: list[list[str]], width: int | None = WIDTH, give_way: tuple[str, ...] = ()) -> str:
    """A text table: the first row is the heading, underlined. With a width, the columns headed as in
    give_way (free text: reasons, paths, descriptions) are clipped with "…", the widest first, until the
    table fits it or they are down to their heading's width; the other columns keep every character."""
    natural = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    floors = [max(len(heading), GIVEN_WAY_MIN) if heading in give_way else size
              for heading, size in zip(rows[0], natural, strict=True)]
    widths = natural if width is None else fitted(natural, floors, width)
    lines = ["  ".join(_clipped(text, size).ljust(size) for text, size in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * size for size in widths))
    return "\n".join(lines)


def fitted(natural: list[int], floors: list[int], width: int) -> list[int]:
    """Column widths whose table (two spaces between columns) is at most width wide, taking characters
    from the column that has most above its floor. A table that would not fit even at its floors is left
    whole: clipping it would lose text and still not fit."""
    widths = list(natural)
    floors = [min(floor, size) for floor, size in zip(floors, natural, strict=True)]
    if sum(floors) + 2 * (len(floors) - 1) > width:
        return widths
    excess = sum(widths) + 2 * (len(widths) - 1) - width
    while excess > 0:
        spare = [size - floor for size, floor in zip(widths, floors, strict=True)]
        widest = max(range(len(widths)), key=spare.__getitem__)
        if spare[widest] == 0:
            break
        widths[widest] -= 1
        excess -= 1
    return widths


def rendered(rows: list[list[str]], form: str, give_way: tuple[str, ...] = ()) -> str:
    """A listing's rows (the first is the heading) as a text table fitting WIDTH, or whole as CSV or JSON
    (one object per row, keyed by heading)."""
    if form == "table":
        return aligned(rows, give_way=give_way)
    if form == "json":
        return json.dumps(json_safe([dict(zip(rows[0], row, strict=True)) for row in rows[1:]]), indent=1,
                          allow_nan=False)
    if form != "csv":
        raise ValueError(f"unknown listing format {form!r}; known: table, csv, json")
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue().rstrip("\n")


def _clipped(text: str, size: int) -> str:
    return text if len(text) <= size else text[:size - 1] + "…"


def columns(run: dict) -> dict[str, str]:
    """Every column of a run's row, by heading, in the order `--columns all` shows them."""
    stored = {heading: _cell(run.get(key)) for key, heading in STORED_COLUMNS}
    # "NAME (first N)" for a suite entry's train_samples; the split's size is left out to keep the table narrow
    stored["dataset"] = run_label(run, of=False) if run.get("dataset") else stored["dataset"]
    if run["framework"] != "-":  # its execution and precision beside it where not the framework's defaults
        stored["framework"] += modes.suffix(run["framework"], executions.of_run(run), precisions.of_run(run))
    rebuilt = (run.get("config") or {}).get("environment_from_run")
    if rebuilt:  # the environment was rebuilt from a stored run's packages (dlbench env create --from-run)
        stored["version"] += f" (env of run {rebuilt['run_id']})"
    if run.get("metric_name") and run.get("metric_value") is not None:  # "accuracy 74.3%", "perplexity 412.3"
        name = run["metric_name"]
        stored["final metric"] = f"{metric_label(name)} {metric_text(name, run['metric_value'])}"
    headings = [heading for _, heading in STORED_COLUMNS]
    split = headings.index("cpu %") + 1
    shown = {heading: stored[heading] for heading in headings[:split]}
    shown.update({heading: text(run) for heading, text in DERIVED_COLUMNS})
    shown.update({heading: stored[heading] for heading in headings[split:]})
    shown["code"] = sources.code_state(run["framework"], run.get("worker_source"))
    shown["epochs (metric@train s)"] = epochs_text(run)
    return shown


def column_names() -> list[str]:
    """The headings --columns accepts, in their order."""
    return [*columns({"framework": "-"})]


def chosen_columns(text: str) -> list[str]:
    """--columns: "all", or headings separated by commas (e.g. "framework,workload,steady s")."""
    known = column_names()
    if text.strip() == "all":
        return known
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        raise ValueError(f"--columns {text!r}: unknown column {', '.join(map(repr, unknown)) or '(none given)'}; "
                         f"give 'all' or some of: {', '.join(known)}")
    return chosen


def _order(run: dict) -> tuple:
    """Rows by workload, device, framework and repetition, not by the order the runs happened to finish."""
    return (run["workload"], run.get("dataset") or "", run.get("device") or "", run["framework"],
            str(run.get("framework_version")), run.get("repetition") or 0, run.get("id") or 0)


def table(runs: list[dict], shown: list[str] | tuple[str, ...] = DEFAULT_COLUMNS, width: int | None = WIDTH) -> str:
    """One row per run, the chosen columns, clipped to width in their free text; "code" says whether the run's
    worker code is what dlbench runs now. Fitted to a width, a column the same in every row is said once
    above the table instead."""
    if not runs:
        return "no runs stored yet"
    rows = [[columns(run)[heading] for heading in shown] for run in sorted(runs, key=_order)]
    return _folded(rows, shown, width, RUN_FREE_TEXT)


def _folded(rows: list[list[str]], shown: list[str] | tuple[str, ...], width: int | None,
            give_way: tuple[str, ...]) -> str:
    """The rows under their headings, fitted to width: a column the same in every row said once above."""
    fold = width is not None and len(rows) > 1  # the wide form (no width) keeps every column
    same = [i for i in range(len(shown)) if fold and len({row[i] for row in rows}) == 1]
    said_once = ", ".join(f"{shown[i]} {rows[0][i]}" for i in same if rows[0][i] != "-")
    kept = [i for i in range(len(shown)) if i not in same]
    table_rows = [[shown[i] for i in kept]] + [[row[i] for i in kept] for row in rows]
    return (f"every run: {said_once}\n" if said_once else "") + aligned(table_rows, width, give_way=give_way)


# the inference runs' table: which run, how it ended, its serving figures (harness/measure/serving.py;
# docs/measurement.md says what each one times); "batch", the throughput's batch size, in a column of its own so
# that a batch sweep's rows differ where the dataset's label is clipped to fit; the first call on a whole batch
# in CSV and JSON
SERVE_HEADINGS = ("framework", "version", "workload", "dataset", "batch", "device", "rep", "status",
                  "p50/p90/p99 ms", "samples/s", "1st call s", "peak MiB", "reason")


def _figure(value: float | None) -> str:
    """A serving figure: three significant digits (latencies span microseconds to seconds), whole numbers
    from 1,000 on."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def serving_row(run: dict) -> list[str]:
    shown = columns(run)
    shown["dataset"] = _cell(run.get("dataset"))  # its batch has a column of its own; it trains on no subset
    # a run that failed before its throughput was timed has the batch its configuration asked for
    shown["batch"] = _cell(run.get("serve_batch_size") or ((run.get("config") or {}).get("serve") or {})
                           .get("throughput_batch"))
    latency = "/".join(_figure(run.get(f"latency_p{q}_ms")) for q in (50, 90, 99))
    return [*(shown[h] for h in SERVE_HEADINGS[:8]), latency if latency != "-/-/-" else "-",
            _figure(run.get("samples_per_s")), _figure(run.get("first_call_s")), shown["peak MiB"], shown["reason"]]


def serving_table(runs: list[dict], width: int | None = WIDTH) -> str:
    """The inference runs, one row per run: the throughput's batch, latency percentiles, throughput, the first
    call, peak memory and, where a run has one, the reason it ended as it did; fitted to width as table() fits
    the training runs'."""
    rows = [serving_row(run) for run in sorted(runs, key=_order)]
    headings = list(SERVE_HEADINGS)
    if all(row[-1] == "-" for row in rows):  # no run has a reason to give: the columns that do say something fit
        headings.pop()
        rows = [row[:-1] for row in rows]
    return "Inference runs\n" + _folded(rows, headings, width, ("dataset", "reason"))


def runs_tables(runs: list[dict], shown: list[str] | tuple[str, ...] = DEFAULT_COLUMNS,
                width: int | None = WIDTH) -> str:
    """The training runs' table (table()) and the inference runs' (serving_table()), each where it has runs:
    an inference run has no epochs, and the training columns would all read '-'."""
    served = [run for run in runs if is_inference(run)]
    trained = [run for run in runs if not is_inference(run)]
    parts = [table(trained, shown, width)] if trained or not served else []
    if served:
        parts.append(serving_table(served, width))
    return "\n\n".join(parts)


def certificates_table(certificates: list[dict]) -> str:
    """Each certificate's verdict and its worst tensor: deviation relative to the reference tensor's
    largest magnitude, and that over its tolerance ("x tol"); the reference named once above."""
    if not certificates:
        return "no certificates stored yet (dlbench certify)"
    rows = [["framework", "version", "workload", "verdict", "worst tensor", "max rel", "x tol", "code",
             "model", "created"]]
    for cert in certificates:
        worst = next(d for d in cert["deviations"] if d["tensor"] == cert["worst_tensor"])
        share = "-" if worst["max_rel"] is None else f"{share_of_tolerance(worst):.2f}"
        if "error" in worst:  # judged against float64: its error next to the float32 reference's own
            share += f" (float64: {worst['error']:.1e} vs reference {worst['reference_error']:.1e})"
        rows.append([modes.label(cert["framework"], cert.get("execution"), cert.get("precision")),
                     _cell(cert["framework_version"]),
                     cert["workload"],
                     "pass" if cert["passed"] else "FAIL",
                     cert["worst_tensor"] + ("" if worst["max_abs"] is not None else f" ({worst.get('problem')})"),
                     _sci(worst["max_rel"]), share,
                     sources.code_state(cert["framework"], cert.get("worker_source"), cert.get("reference_source")),
                     machine_store.workload_state(cert), cert["created_at"][:10]])
    references = sorted({f"{cert['reference']} {cert['reference_version']}" for cert in certificates})
    return (f"certificates against the reference {', '.join(references)}:\n"
            + aligned(rows, give_way=("worst tensor", "x tol")))


def peaks_table(peaks: list[dict]) -> str:
    """The float32 GEMM peaks measured (dlbench.worker.gemm_peak), each with how busy the rest of the machine was."""
    rows = [["peak", "framework", "version", "threads", "device", "n", "GFLOP/s", "call", "busy cores", "measured",
             "suite"]]
    for peak in peaks:
        rows.append([str(peak["id"]), peak["framework"], _cell(peak["framework_version"]), _cell(peak["threads"]),
                     _cell(peak["device"]), _cell(peak["matrix_size"]),
                     _cell(peak["gflops"]) if peak["gflops"] is not None else f"- ({peak['reason']})",
                     _cell(peak["method"]), _cell(peak.get("others_busy_cores")),
                     _cell(peak["measured_at"])[:16].replace("T", " "), _cell(peak["suite"])])
    return aligned(rows, give_way=("call", "suite"))


def _sci(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def epochs_text(run: dict) -> str:
    """Per-epoch metric and training time, compact: "1:81.2%@2.10s 2:...". """
    return " ".join(f"{e['epoch']}:{metric_text(run.get('metric_name'), e['metric_value'])}@{e['train_time_s']:.2f}s"
                    for e in run.get("epochs", []))


def metric_text(metric: str | None, value: float | None) -> str:
    """A metric's value as the report shows it (an accuracy as 74.3%); CSV and JSON keep the stored number."""
    return "-" if value is None else measures.metric_format(metric)(value)


def to_csv(runs: list[dict]) -> str:
    fields = [key for key in runs[0] if key not in LARGE_FIELDS and key != "epochs"] if runs else []
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(fields + ["epochs"])
    for run in runs:
        writer.writerow([_csv_value(run.get(key)) for key in fields] + [json.dumps(run.get("epochs", []))])
    return out.getvalue()


def _csv_value(value):
    """Mappings (machine, dlbench_version) as JSON, not Python's repr."""
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else value


def to_json(runs: list[dict]) -> str:
    """The runs as JSON, which has no NaN or inf (JavaScript's JSON.parse refuses Python's bare NaN): each such
    number is null, and the key that held it has a '<key>_reason' beside it saying what it was."""
    return json.dumps(json_safe(runs), indent=1, default=str, allow_nan=False)


def json_safe(value: Any) -> Any:
    """`value` with every NaN or inf float as None, and '<key>_reason' beside each key whose value held one."""
    if isinstance(value, dict):
        safe = {}
        for key, item in value.items():
            safe[key] = json_safe(item)
            reason = _not_finite(item)
            if reason:
                safe[f"{key}_reason"] = reason
        return safe
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return None if _is_not_finite(value) else value


def _is_not_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _not_finite(value: Any) -> str | None:
    """Why a value is written as null (or holds one), or None where it is not."""
    if _is_not_finite(value):
        return f"was {value}, which JSON cannot hold: written as null"
    if isinstance(value, list | tuple) and any(_is_not_finite(item) for item in value):
        return "held NaN or inf, which JSON cannot hold: written as null"
    return None


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return str(value)


def power_table(rows: list[dict]) -> str:
    """What each certificate can see (power.power): one line per value of a workload."""
    lines = [["workload", "value", "was", "changed to", "seen", "by (worst tensor)", "x tolerance", "why not seen"]]
    for row in rows:
        seen = {True: "yes", False: "NO", None: "n/a"}[row["seen"]]
        share = "-" if row["share"] is None else ("inf" if row["share"] == float("inf") else f"{row['share']:.3g}")
        lines.append([row["workload"], row["value"], _value(row["was"]), _value(row["changed to"]), seen,
                      row["by"] if row["seen"] is not False else "-", share, row["why"] or ""])
    return aligned(lines)
