"""What a finished run leaves: its run row (timings, resources, cores, FLOP/s, provenance), one row
per epoch and the resource samples, as one typed record; its certificate status and peak link; and
their save, in one transaction."""
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.harness.certification import machine_store
from dlbench.harness.certification.certified_model import workload_digest
from dlbench.harness.environments import envs, sources
from dlbench.harness.measure import cores, gemm_peak, machine, serving
from dlbench.harness.measure.monitor import Sample, summarise
from dlbench.harness.plan import modes
from dlbench.harness.run.cell_config import Prepared
from dlbench.harness.run.launch import Outcome
from dlbench.harness.store import Store, StoreError
from dlbench.shared import ir
from dlbench.shared.cell_file import INFERENCE
from dlbench.shared.protocol import ELAPSED, EPOCH, EPOCH_SPLIT, FIRST_STEP, READY, START, kind_of


@dataclass
class Ran:
    """One run of a cell as it travels from where it ran (this process, or a Ray node) to the store."""
    run: dict  # the runs table's row
    epochs: list[dict] = field(default_factory=list)  # one row per epoch
    samples: list[Sample] = field(default_factory=list)  # the worker tree's resources while it ran
    latencies: list[float] = field(default_factory=list)  # an inference run's timed calls, seconds


def epoch_rows(events: list[dict], metric: str, energies: dict | None = None) -> list[dict]:
    """One row per epoch event; `energies` (epoch -> energy_*_j of its training) fill the energy columns."""
    energies = energies or {}
    return [{"epoch": e["epoch"], "train_time_s": e["train_time_s"], "eval_time_s": e["eval_time_s"],
             "train_loss": e["train_loss"], "train_accuracy": e["train_accuracy"],
             "metric_value": e["metrics"].get(metric), "metrics": e["metrics"],
             **{key: e[key] for key in EPOCH_SPLIT if key in e}, **energies.get(e["epoch"], {})}
            for e in events if kind_of(e) == EPOCH]


def timing_summary(epochs: list[dict], target: dict) -> dict:
    """Training time excludes evaluation; the first epoch (compilation, warm-up) is kept apart. The time to
    target is the training time up to the first epoch whose metric reaches target["value"] (a stand-in's
    own target or the workload's: Prepared.target); none where the value is None (no meaningful target)."""
    if not epochs:
        return {}
    train_times = [e["train_time_s"] for e in epochs]
    summary = {
        "train_time_s": sum(train_times), "first_epoch_s": train_times[0],
        "steady_epoch_s": statistics.median(train_times[1:]) if len(train_times) > 1 else None,
        "eval_time_s": sum(e["eval_time_s"] for e in epochs), "metric_value": epochs[-1]["metric_value"],
    }
    if target["value"] is None:
        return summary
    elapsed = 0.0
    for epoch in epochs:
        elapsed += epoch["train_time_s"]
        value = epoch["metric_value"]
        if value is not None and (value >= target["value"] if target["higher_is_better"] else value <= target["value"]):
            summary["time_to_target_s"] = elapsed
            break
    return summary


def run_row(prepared: Prepared, outcome: Outcome, epochs: list[dict], run_dir: Path | None, started_at: str,
            compile_cache: str | None = None, energy_source: str | None = None) -> dict:
    cell, config = prepared.cell, prepared.config
    start = next((e for e in outcome.events if kind_of(e) == START), {})
    ready = next((e for e in outcome.events if kind_of(e) == READY), {})
    versions = ready.get("versions", {})
    recipe = envs.get_recipe(cell.framework, cell.device)
    resources = summarise(outcome.samples)
    timing = timing_summary(epochs, prepared.target)
    if config.get("mode") == INFERENCE:  # no epochs: its serving figures instead (measure/serving.py)
        timing = dict(serving.summary(outcome.events), mode=INFERENCE)
    flops = ir.train_flops(config["model"])
    used = cores.used(outcome.samples, outcome.events, outcome.event_times)
    return {
        "cell_hash": prepared.hash, "suite": cell.suite, "framework": cell.framework,
        "framework_version": versions.get(recipe.version_package) or prepared.env.version(),
        "workload": cell.workload, "dataset": cell.dataset, "dataset_hash": config["dataset_hash"],
        "device": cell.device, "repetition": cell.repetition, "status": outcome.status, "reason": outcome.reason,
        "stderr_tail": outcome.stderr_tail if outcome.status != "ok" else None, "started_at": started_at,
        "wall_time_s": outcome.wall_time_s, "harness_cpu_s": outcome.harness_cpu_s,
        "monitor_cpu_s": outcome.monitor_cpu_s, "worker_source": config["worker_source"],
        "metric_name": prepared.workload.target["metric"],
        "target_value": prepared.target["value"], "params": ir.count_params(config["model"]),
        "flops_per_sample": flops, "threads": ready.get("threads"), "n_train": ready.get("n_train"),
        "execution": ready.get("execution"), "precision": ready.get("precision"),
        "first_step_s": next((e.get(FIRST_STEP) for e in outcome.events if kind_of(e) == EPOCH), None),
        "achieved_gflops": gemm_peak.achieved_gflops(flops, ready.get("n_train"), timing.get("steady_epoch_s")),
        "cores_used": used, "energy_source": energy_source,
        "cores_flag": cores.flag(used, config["threads"], cores.others(outcome.samples, outcome.events,
                                                                      outcome.event_times, os.cpu_count())),
        "startup_s": ready.get(ELAPSED),
        "python": f"{start.get('python', config['python'])} {start.get('executable', prepared.env.python)}",
        "packages": dict(config["env_packages"], **versions), "config": config,
        "run_dir": str(run_dir) if run_dir else None,
        "compile_cache": compile_cache, "workload_digest": workload_digest(prepared.workload), **timing, **resources,
    }


def certificate_status(prepared: Prepared) -> str:
    """The run's certificate in the machine's store (certification/machine_store.py) when it is stored."""
    recipe = prepared.workload.recipe
    if modes.is_reference(prepared.cell.framework, recipe.get("execution"), recipe.get("precision")):
        return "reference"
    # certificates are kept per framework name and exact environment: any label of a version finds its own
    return machine_store.status(machine_store.Key(
        envs.framework_name(prepared.cell.framework), prepared.env.packages_digest(), prepared.cell.workload,
        prepared.config["worker_source"], sources.framework_source(envs.REFERENCE),
        workload_digest(prepared.workload)))


def provenance() -> dict:
    """What every run of this process records beside its own figures: the machine and dlbench's version."""
    return {"machine": machine.describe(), "dlbench_version": machine.dlbench_version()}


def finish_run(store: Store, prepared: Prepared, ran: Ran, peak: tuple[int, float | None] | None,
               recorded: dict) -> dict:
    """Links the run to its peak (id, GFLOP/s), adds its certificate status and `recorded` (provenance,
    plan position, executor), and saves it with its epochs and samples in one transaction. Returns the
    run row. A value the store cannot hold raises StoreError naming the field, the cell and its kept run folder;
    nothing of the run is written."""
    run = ran.run
    if peak is not None:
        run.update(peak_id=peak[0], mfu=gemm_peak.mfu(run.get("achieved_gflops"), peak[1]))
    run["certificate"] = certificate_status(prepared)
    run.update(recorded)
    info = prepared.env.info()  # one read of dlbench-env.json for the whole row
    store.save_environment({"packages_digest": envs.digest_of(info["packages"]), "framework": prepared.cell.framework,
                            "device": prepared.env.device, "python_version": info["python_version"],
                            "packages": info["packages"], "hashes": info.get("hashes")})
    try:
        store.save_run(run, ran.epochs, ran.samples, ran.latencies)
    except StoreError as error:
        # a number the store cannot hold (store._row): the plan stops here, and the message says where the
        # cell's events and output are, so that the run is not lost without a word
        kept = f"; the run's folder {run['run_dir']} is kept" if run.get("run_dir") else ""
        raise StoreError(f"{error}: {prepared.cell.framework} {prepared.cell.workload} on "
                         f"{prepared.cell.dataset}, repetition {prepared.cell.repetition}{kept}") from None
    return run
