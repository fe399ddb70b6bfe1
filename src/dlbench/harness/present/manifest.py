"""What the runs ran on and with: machine, environments, threads, settings, run order, dlbench's version.

Everything comes from the stored runs; a field an older store lacks reads "not recorded".
"""
import json
from collections.abc import Mapping, Sequence
from importlib import metadata

from dlbench.harness.analysis import measures
from dlbench.harness.present.tables import Table

NOT_RECORDED = "not recorded"
# dlbench.harness.measure.machine.describe()'s fields in reading order, with their headings
MACHINE_FIELDS = {"hostname": "host", "cpu_model": "CPU", "logical_cores": "logical cores",
                  "memory_mib": "memory (MiB)", "gpus": "GPUs", "os": "OS", "python": "Python of the harness"}


def _json(value: object) -> object:
    """The machine column may come back decoded or as its JSON text, depending on the store's version."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def machines(runs: Sequence[Mapping]) -> list[dict]:
    """The distinct machines the runs record, in order of first appearance."""
    seen: list[dict] = []
    for run in runs:
        machine = _json(run.get("machine"))
        if machine and machine not in seen:
            seen.append(machine if isinstance(machine, dict) else {"machine": machine})
    return seen


def machine_table(runs: Sequence[Mapping]) -> Table:
    found = machines(runs)
    if not found:
        return Table("Machine", ["field", "value"], [["machine", NOT_RECORDED]])
    recorded = [k for m in found for k in m]
    keys = list(dict.fromkeys([*(k for k in MACHINE_FIELDS if k in recorded), *recorded]))
    header = ["field", *(f"machine {i + 1}" for i in range(len(found)))] if len(found) > 1 else ["field", "value"]
    return Table("Machine", header, [[MACHINE_FIELDS.get(k, k), *(_text(m.get(k)) for m in found)] for k in keys])


def _text(value: object) -> str:
    if value is None:
        return NOT_RECORDED
    if isinstance(value, list | tuple):
        return "; ".join(_text(v) for v in value) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_text(v)}" for k, v in value.items())
    return str(value)


def environments_table(runs: Sequence[Mapping]) -> Table:
    """One row per framework environment: its Python and the package versions its runs recorded."""
    envs: dict[tuple, Mapping] = {}
    for run in runs:
        envs.setdefault((run["framework"], run.get("framework_version"), run.get("python")), run.get("packages") or {})
    rows = [[framework, version or "?", python or NOT_RECORDED,
             ", ".join(f"{k} {v}" for k, v in sorted(packages.items())) or NOT_RECORDED]
            for (framework, version, python), packages in envs.items()]
    return Table("Environments", ["framework", "version", "python", "packages"], rows,
                 row_keys=[{"framework": framework} for framework, _, _ in envs])


def settings_table(runs: Sequence[Mapping]) -> Table:
    """The suite's settings per workload as the runs' resolved configurations hold them."""
    settings: dict[tuple, set] = {}
    for run in runs:
        config = run.get("config") or {}
        recipe = config.get("recipe") or {}
        optimizer = recipe.get("optimizer") or {}
        key = (run.get("suite") or "?", run["workload"], run.get("dataset") or "?", run.get("device") or "?",
               str(recipe.get("epochs", "?")), str(recipe.get("batch_size", "?")),
               optimizer.get("name", "?") if isinstance(optimizer, dict) else str(optimizer),
               str(config.get("threads", "?")))
        settings.setdefault(key, set()).add(config.get("seed"))
    rows = [[*key, ", ".join(str(s) for s in sorted(seeds, key=str))] for key, seeds in settings.items()]
    return Table("Suite settings", ["suite", "workload", "dataset", "device", "epochs", "batch size", "optimizer",
                                    "threads asked", "seeds"], rows)


def run_order_table(runs: Sequence[Mapping]) -> Table:
    """Every run in the order it ran (plan position where recorded, else start time), with its threads."""
    ordered = sorted(runs, key=lambda r: (r.get("started_at") or "", r.get("plan_position") or 0, r["id"]))
    rows = [[str(r.get("plan_position") if r.get("plan_position") is not None else "-"), r.get("started_at") or "-",
             r["framework"], r["workload"], r.get("dataset") or "-", r.get("device") or "-",
             str(r.get("repetition")), str(r.get("threads") if r.get("threads") is not None else "-"),
             measures.cores_text(r), measures.gflops_text(r), measures.mfu_text(r), measures.energy_text(r),
             r["status"], measuring_cost(r), version_text(r.get("dlbench_version"))] for r in ordered]
    return Table("Run order", ["plan position", "started", "framework", "workload", "dataset", "device", "rep",
                               "threads used", "cores busy", "GFLOP/s", "MFU", "energy/sample", "status",
                               "harness CPU", "dlbench"], rows,
                 note="harness CPU: what measuring took from the machine while the worker ran, in % of one core "
                      "(the harness process: sampling, events, progress; in brackets, the monitor's sampling thread)",
                 row_keys=[{"framework": r["framework"], "workload": r["workload"], "device": r.get("device") or "?"}
                           for r in ordered])


def measuring_cost(run: Mapping) -> str:
    """The harness's CPU over the run's wall time, in % of one core, with the monitor's share."""
    harness, monitor, wall = run.get("harness_cpu_s"), run.get("monitor_cpu_s"), run.get("wall_time_s")
    if harness is None or not wall:
        return NOT_RECORDED
    text = f"{100 * harness / wall:.2f} %"
    return text + (f" (monitor {100 * monitor / wall:.2f} %)" if monitor is not None else "")


def version_text(recorded: object) -> str:
    """A run's dlbench_version ({version, commit, dirty}, dlbench.harness.measure.machine) as one short text."""
    recorded = _json(recorded)
    if not recorded:
        return NOT_RECORDED
    if not isinstance(recorded, dict):
        return str(recorded)
    text = str(recorded.get("version") or "unknown version")
    if recorded.get("commit"):
        text += f" ({str(recorded['commit'])[:10]}{', modified' if recorded.get('dirty') else ''})"
    return text


def dlbench_version() -> str:
    """The version of the dlbench building this report (the runs' own versions are in the run order)."""
    try:
        return metadata.version("dlbench")
    except metadata.PackageNotFoundError:
        return NOT_RECORDED


def manifest(runs: Sequence[Mapping]) -> list[Table]:
    return [machine_table(runs), environments_table(runs), settings_table(runs), run_order_table(runs)]
