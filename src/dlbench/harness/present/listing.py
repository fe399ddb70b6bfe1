"""Stored runs as a text table, CSV or JSON: built from the store alone, never from a live run."""
import csv
import io
import json

from dlbench.harness.analysis import measures
from dlbench.harness.certification import machine_store
from dlbench.harness.environments import sources

# (run field, table heading); the table shows these, CSV and JSON carry every field
TABLE_COLUMNS = (
    ("framework", "framework"), ("framework_version", "version"), ("workload", "workload"),
    ("dataset", "dataset"), ("device", "device"), ("repetition", "rep"), ("status", "status"),
    ("train_time_s", "train s"), ("first_epoch_s", "epoch1 s"), ("steady_epoch_s", "steady s"),
    ("eval_time_s", "eval s"), ("metric_name", "metric"), ("metric_value", "value"),
    ("time_to_target_s", "to target s"), ("params", "params"), ("peak_rss_mb", "peak MiB"),
    ("mean_cpu_percent", "cpu %"), ("certificate", "certified"), ("compile_cache", "cache"), ("reason", "reason"),
)
# derived from the stored columns (dlbench.harness.analysis.measures): heading, text of a run; after "cpu %"
DERIVED_COLUMNS = (("GFLOP/s", measures.gflops_text), ("MFU", measures.mfu_text), ("cores", measures.cores_text),
                   ("energy/sample", measures.energy_text), ("detector epoch", measures.time_split_text))
LARGE_FIELDS = ("config", "packages", "stderr_tail")  # kept out of CSV rows; JSON has them


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 1 else f"{value:.2f}"
    return str(value)


def aligned(rows: list[list[str]]) -> str:
    """A text table: the first row is the heading, underlined."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def table(runs: list[dict]) -> str:
    """One row per run; "code" says whether the run's worker code is what dlbench runs now."""
    if not runs:
        return "no runs stored yet"
    keys = [key for key, _ in TABLE_COLUMNS]
    split, version_column = keys.index("mean_cpu_percent") + 1, keys.index("framework_version")
    rows = [[heading for _, heading in TABLE_COLUMNS[:split]] + [heading for heading, _ in DERIVED_COLUMNS]
            + [heading for _, heading in TABLE_COLUMNS[split:]] + ["code", "epochs (metric@train s)"]]
    value_column = keys.index("metric_value")
    for run in runs:
        cells = [_cell(run.get(key)) for key, _ in TABLE_COLUMNS]
        cells[value_column] = metric_text(run.get("metric_name"), run.get("metric_value"))
        rebuilt = (run.get("config") or {}).get("environment_from_run")
        if rebuilt:  # the environment was rebuilt from a stored run's packages (dlbench env create --from-run)
            cells[version_column] += f" (env of run {rebuilt['run_id']})"
        rows.append(cells[:split] + [text(run) for _, text in DERIVED_COLUMNS] + cells[split:]
                    + [sources.code_state(run["framework"], run.get("worker_source")), epochs_text(run)])
    return aligned(rows)


def certificates_table(certificates: list[dict]) -> str:
    """Each certificate's verdict and its worst tensor: deviation relative to the reference tensor's
    largest magnitude, and that over its tolerance."""
    if not certificates:
        return "no certificates stored yet (dlbench certify)"
    rows = [["framework", "version", "workload", "reference", "verdict", "worst tensor", "max abs", "max rel",
             "of tolerance", "code", "model and recipe", "created"]]
    for cert in certificates:
        worst = next(d for d in cert["deviations"] if d["tensor"] == cert["worst_tensor"])
        share = "-" if worst["max_rel"] is None else f"{worst['max_rel'] / worst['tolerance']:.2f}"
        if "error" in worst:  # judged against float64: its error next to the float32 reference's own
            share += f" (float64: {worst['error']:.1e} vs reference {worst['reference_error']:.1e})"
        rows.append([cert["framework"], _cell(cert["framework_version"]), cert["workload"],
                     f"{cert['reference']} {cert['reference_version']}", "pass" if cert["passed"] else "FAIL",
                     cert["worst_tensor"] + ("" if worst["max_abs"] is not None else f" ({worst.get('problem')})"),
                     _sci(worst["max_abs"]), _sci(worst["max_rel"]), share,
                     sources.code_state(cert["framework"], cert.get("worker_source"), cert.get("reference_source")),
                     machine_store.workload_state(cert), cert["created_at"]])
    return aligned(rows)


def peaks_table(peaks: list[dict]) -> str:
    """The float32 GEMM peaks measured (dlbench.worker.peak), each with how busy the rest of the machine was."""
    rows = [["peak id", "framework", "version", "threads", "device", "n", "GFLOP/s", "call", "others busy (cores)",
             "measured", "suite"]]
    for peak in peaks:
        rows.append([str(peak["id"]), peak["framework"], _cell(peak["framework_version"]), _cell(peak["threads"]),
                     _cell(peak["device"]), _cell(peak["matrix_size"]),
                     _cell(peak["gflops"]) if peak["gflops"] is not None else f"- ({peak['reason']})",
                     _cell(peak["method"]), _cell(peak.get("others_busy_cores")), _cell(peak["measured_at"]),
                     _cell(peak["suite"])])
    return aligned(rows)


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
    return json.dumps(runs, indent=1, default=str)


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
