"""A cell resolved to what it runs: its workload, prepared dataset, framework environment and the
configuration whose hash identifies its runs in the store, with the compile-cache policy it asks for."""
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from dlbench.harness import data
from dlbench.harness.environments import envs, sources
from dlbench.harness.measure import energy, gemm_peak
from dlbench.harness.plan import initial_weights, modes
from dlbench.harness.plan.suite import Cell, SuiteError
from dlbench.harness.plan.workloads import USER_FILES, Workload, WorkloadError, get_workload
from dlbench.shared import ir
from dlbench.shared import schedule as schedules
from dlbench.shared.cell_file import INFERENCE


@dataclass(frozen=True)
class Options:
    results: Path
    data_dir: Path
    force: bool = False
    timeout_s: float | None = None  # overrides the suite's
    memory_limit_mb: float | None = None
    peak_size: int = gemm_peak.PEAK_SIZE  # n of the n x n float32 GEMM whose FLOP/s is the peak; 0: no peak measured
    powercap: Path = energy.POWERCAP


@dataclass(frozen=True)
class Prepared:
    """Everything a cell resolves to before it runs."""
    cell: Cell
    workload: Workload
    dataset: data.PreparedDataset
    env: envs.Environment
    config: dict

    @property
    def target(self) -> dict:
        """What the run's time to target is measured against: the stand-in's own target where its dataset
        declares one (config["target"], run_target), else the workload's."""
        return self.config.get("target") or self.workload.target

    @property
    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.config, sort_keys=True).encode()).hexdigest()


def run_target(workload: Workload, dataset: str) -> dict | None:
    """The target a stand-in dataset declares for the workload (data.stand_in_target), in the workload's
    metric and direction, for the cell's configuration: a declared value, so it enters the cell's hash
    (a changed target runs the cell again). None where the dataset declares none: the workload's target
    applies and the configuration, and its hash, stay as they were. value None: no meaningful target."""
    own = data.stand_in_target(dataset, workload.name)
    if own is None:
        return None
    return {"metric": workload.target["metric"], "value": own.value,
            "higher_is_better": workload.target["higher_is_better"], "set_by": dataset}


def resolve(cell: Cell, data_dir: Path, cores: int | None = None) -> Prepared:
    """The cell's configuration; a cell without threads gets `cores` (the cores of the machine it will
    run on: a Ray node's), by default this machine's. The workload's recipe holds the cell's execution and precision
    where they are not the framework's defaults (executions.as_run, precisions.as_run), so that its hash and its
    certificate tell them apart."""
    workload = modes.as_run(get_workload(cell.workload), cell.framework, cell.execution, cell.precision, cell.device)
    dataset = data.prepare(cell.dataset, data_dir)
    check_train_samples(cell, dataset)
    model = workload.model(dataset.meta)
    check_model_fits(cell, model)
    env = envs.require(cell.framework, cell.device)
    built = env.info()
    recipe = cell_recipe(workload, cell.epochs, cell.batch_size, cell.train_samples or dataset.meta.get("n_train"))
    config = {
        "framework": cell.framework, "workload": cell.workload, "dataset": cell.dataset,
        "dataset_hash": dataset.hash, "device": cell.device, "threads": cell.threads or cores or os.cpu_count(),
        "seed": cell.seed, "repetition": cell.repetition, "model": model,
        "recipe": recipe, "env_packages": built["packages"], "python": built["python_version"],
        # the worker's own code: a fixed adapter runs its cells again (dlbench.harness.environments.sources)
        "worker_source": sources.framework_source(cell.framework),
    }
    if cell.workload in USER_FILES:  # a user's workload: an edited file runs its cells again
        file, sha256 = USER_FILES[cell.workload]
        config["workload_file"] = {"file": file, "sha256": sha256}
    target = run_target(workload, cell.dataset)
    if target is not None:  # only then: cells on the study's datasets keep their hashes
        config["target"] = target
    if "from_run" in built:  # an environment rebuilt from a stored run's packages says so
        config["environment_from_run"] = built["from_run"]
    if cell.allocator != "default":  # only then, as for the compile cache: default cells keep their hashes
        config["allocator"] = cell.allocator
    if cell.gpu_memory != "default" and cell.device == "gpu":  # it changes nothing on the CPU
        config["gpu_memory"] = cell.gpu_memory
    if cell.weights:  # only then: the hashes of canonically initialised cells stay as they were
        sha256 = initial_weights.check(Path(cell.weights), config["model"], cell.workload)
        config["initial_weights"] = {"file": cell.weights, "sha256": sha256}
    if cell.train_samples:  # only then: the hashes of cells that train on the whole split stay as they were
        config["train_samples"] = cell.train_samples
        config["dataset_n_train"] = dataset.meta["n_train"]  # what the tables show it as the first N of
    if cell.mode == INFERENCE:  # only then: training cells keep their hashes
        config["mode"] = INFERENCE
        config["serve"] = serve_config(cell, dataset.meta["n_test"])
    if shares_compile_cache(cell):
        # only then: the hashes of cold cells, and of frameworks the setting does not touch, stay as they were
        config["compile_cache"] = "shared"
    return Prepared(cell, workload, dataset, env, config)


def check_model_fits(cell: Cell, model: dict) -> None:
    """Refuses a model whose float32 parameters alone (4 bytes each) exceed this machine's memory, before any
    cell runs: a model of 10^19 parameters trained, then its count overflowed the store and lost the run."""
    params = ir.count_params(model)
    memory = psutil.virtual_memory().total
    if params * 4 > memory:
        where = f" (file {USER_FILES[cell.workload][0]})" if cell.workload in USER_FILES else ""
        raise WorkloadError(f"workload {cell.workload}{where} on {cell.dataset}: its model holds {params:,} "
                            f"parameters, {params * 4:,} bytes as float32; this machine's memory is {memory:,} "
                            "bytes, and a model's parameters must fit it")


def cell_recipe(workload: Workload, epochs: int, batch_size: int, train_count: int | None) -> dict:
    """The workload's recipe at the cell's epochs and batch size, its schedule's total_steps "auto" resolved
    to the updates the cell makes (epochs x batches of its training samples, the last batch maybe short), so
    that the worker sees a number and the cell's hash holds it; a bad schedule is refused naming the workload.
    An inference cell (0 epochs) has no schedule."""
    recipe = dict(workload.recipe, epochs=epochs, batch_size=batch_size)
    if "schedule" not in recipe:
        return recipe
    if epochs == 0:  # an inference cell: it makes no update, so no learning rate of its is ever read
        del recipe["schedule"]
        return recipe
    updates = None if train_count is None else epochs * math.ceil(train_count / batch_size)
    if recipe["schedule"].get("total_steps") == schedules.AUTO_TOTAL and updates is None:
        raise WorkloadError(f"workload {workload.name}: recipe: schedule total_steps 'auto' needs the training "
                            "samples, which the dataset's meta does not give (n_train)")
    try:
        recipe["schedule"] = schedules.resolved(recipe["schedule"], updates)
    except schedules.ScheduleError as error:
        raise WorkloadError(f"workload {workload.name}: recipe: {error}") from None
    return recipe


def serve_config(cell: Cell, n_test: int) -> dict[str, int]:
    """An inference cell's serving settings as its worker gets them: its throughput samples at most the test
    split's (the worker times the first floor(samples / batch) whole batches of them)."""
    if cell.serve is None:
        raise SuiteError(f"inference cell {cell.framework} {cell.workload} on {cell.dataset} has no serving settings")
    serve = cell.serve.as_config()
    serve["throughput_samples"] = min(serve["throughput_samples"], n_test)
    if serve["throughput_batch"] > serve["throughput_samples"]:  # not one whole batch to time: refused here,
        # before any cell runs, rather than by the worker
        raise SuiteError(f"suite {cell.suite}: inference cell {cell.workload} on {cell.dataset}: batch size "
                         f"{serve['throughput_batch']} is more than the {serve['throughput_samples']} samples its "
                         f"throughput serves (throughput_samples {cell.serve.throughput_samples:,}, test split "
                         f"{n_test:,}); give the entry a batch_size of at most {serve['throughput_samples']}")
    return serve


def check_train_samples(cell: Cell, dataset: data.PreparedDataset) -> None:
    """Refuses a cell whose suite entry asks for more training samples than the prepared split holds."""
    if cell.train_samples is None:
        return
    n_train = dataset.meta["n_train"]
    if cell.train_samples > n_train:
        raise SuiteError(f"{cell.train_samples_at or cell.suite}: field 'train_samples': entry {cell.workload} on "
                         f"{cell.dataset}: expected a positive integer no larger than {cell.dataset}'s "
                         f"{n_train:,} training samples, got {cell.train_samples:,}")


def shares_compile_cache(cell: Cell) -> bool:
    """The cell asks for a shared compile cache and its framework compiles into one."""
    return cell.compile_cache == "shared" and envs.get_recipe(cell.framework).uses_compile_cache


def shared_compile_cache(results: Path, cell: Cell) -> Path | None:
    """The compile folder the runs of this results folder share for the cell's framework, or None when
    the cell compiles cold in its own run folder. One folder per framework environment: its compiled
    code is only valid for that framework's compiler, flags and Python."""
    return results / "compile-cache" / cell.framework if shares_compile_cache(cell) else None


def compile_cache_state(cell: Cell, shared: Path | None) -> str | None:
    """What the run starts from, recorded on it: "warm" when the shared folder already holds a file
    (compiled before: the first epoch then leaves out some compilation), else "cold"; None for
    frameworks that compile into no cache, where the setting changes nothing."""
    if not envs.get_recipe(cell.framework).uses_compile_cache:
        return None
    if shared is None:
        return "cold"  # its own folder under the new run folder's HOME, empty when the worker starts
    # any file at all, found by a walk that stops at the first one: cheap however big the cache grows
    return "warm" if any(files for _, _, files in os.walk(shared)) else "cold"
