"""One cell, wherever it runs: its configuration and hash (resolve), its worker run through the process
executor (run_cell), its run row, its peak and its certificate status. The plan's loop over cells is an
executor's (dlbench.executors)."""
import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dlbench import cores, data, energy, envs, initial_weights, machine, peaks, sources
from dlbench.executors.process import Outcome, run_worker
from dlbench.models import ir
from dlbench.monitor import summarise
from dlbench.protocol import EPOCH, KIND, PEAK, READY, START, kind_of
from dlbench.store import Store
from dlbench.suite import Cell
from dlbench.workloads import Workload, get_workload

PACKAGE_PARENT = Path(__file__).resolve().parent.parent  # put on the worker's PYTHONPATH
REFERENCE = envs.REFERENCE


@dataclass(frozen=True)
class Options:
    results: Path
    data_dir: Path
    force: bool = False
    timeout_s: float | None = None  # overrides the suite's
    memory_limit_mb: float | None = None
    peak_size: int = peaks.PEAK_SIZE  # n of the n x n float32 GEMM whose FLOP/s is the peak; 0: no peak measured
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
    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.config, sort_keys=True).encode()).hexdigest()


def resolve(cell: Cell, data_dir: Path, cores: int | None = None) -> Prepared:
    """The cell's configuration; a cell without threads gets `cores` (the cores of the machine it will
    run on: a Ray node's), by default this machine's."""
    workload = get_workload(cell.workload)
    dataset = data.prepare(cell.dataset, data_dir)
    env = envs.require(cell.framework, cell.device)
    built = env.info()
    recipe = dict(workload.recipe, epochs=cell.epochs, batch_size=cell.batch_size)
    config = {
        "framework": cell.framework, "workload": cell.workload, "dataset": cell.dataset,
        "dataset_hash": dataset.hash, "device": cell.device, "threads": cell.threads or cores or os.cpu_count(),
        "seed": cell.seed, "repetition": cell.repetition, "model": workload.model(dataset.meta),
        "recipe": recipe, "env_packages": built["packages"], "python": built["python_version"],
        # the worker's own code: a fixed adapter runs its cells again (dlbench.sources)
        "worker_source": sources.framework_source(cell.framework),
    }
    if "from_run" in built:  # an environment rebuilt from a stored run's packages says so
        config["environment_from_run"] = built["from_run"]
    if cell.allocator != "default":  # only then, as for the compile cache: default cells keep their hashes
        config["allocator"] = cell.allocator
    if cell.gpu_memory != "default" and cell.device == "gpu":  # it changes nothing on the CPU
        config["gpu_memory"] = cell.gpu_memory
    if cell.weights:  # only then: the hashes of canonically initialised cells stay as they were
        sha256 = initial_weights.check(Path(cell.weights), config["model"], cell.workload)
        config["initial_weights"] = {"file": cell.weights, "sha256": sha256}
    if shares_compile_cache(cell):
        # only then: the hashes of cold cells, and of frameworks the setting does not touch, stay as they were
        config["compile_cache"] = "shared"
    return Prepared(cell, workload, dataset, env, config)


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


# allocator: retain. glibc's malloc serves blocks above a threshold from mmap and trims freed memory at
# the heap's top back to the system; both thresholds adapt as the process runs, so how often a training
# step faults its buffers in again (zeroed, page by page) depends on the process's history. Fixed this
# high, freed memory is kept and reused: keras-torch cnn-mnist's steady epoch went from 3.6-4.2 s to
# 2.9 s on a 2-core EPYC (docs/fairness.md, "Page faults").
RETAINING_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "1073741824", "MALLOC_TRIM_THRESHOLD_": "4294967295"}

# gpu_memory: grow. TensorFlow (and Keras on it) and JAX (and Keras on it) take most of a GPU's memory
# when they start (JAX 75 %; the study found TF, Keras and Theano holding the whole card); these make
# them allocate as they go, as PyTorch's caching allocator and MXNet's pool do by default.
GROWING_GPU_MEMORY = {"TF_FORCE_GPU_ALLOW_GROWTH": "true", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def worker_environment(run_dir: Path, threads: int, extra: dict[str, str],
                       compile_cache: Path | None = None, allocator: str = "default",
                       gpu_memory: str = "default") -> dict[str, str]:
    """The worker's variables: every cache and temp file of the framework lands in the run's folder,
    except compiled code when a shared compile_cache folder is given (suite field compile_cache: shared);
    glibc's malloc as it comes, or retaining freed memory (suite field allocator: retain); each framework's
    own GPU memory policy, or growing allocations (suite field gpu_memory: grow)."""
    env = dict(os.environ)
    for name, sub in (("HOME", "home"), ("TMPDIR", "tmp"), ("XDG_CACHE_HOME", "cache"),
                      ("TORCH_HOME", "cache/torch"), ("KERAS_HOME", "cache/keras"), ("MPLCONFIGDIR", "cache/mpl")):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
        env[name] = str(run_dir / sub)
    env.update({
        "PYTHONPATH": str(PACKAGE_PARENT), "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
        "DLBENCH_THREADS": str(threads),  # for frameworks that take their thread count at import
    })
    env.pop("DLBENCH_COMPILE_CACHE", None)  # a measured run compiles cold unless its caller says otherwise
    for name in RETAINING_MALLOC:  # the suite decides the allocator, not the harness's own environment
        env.pop(name, None)
    if allocator == "retain":
        env.update(RETAINING_MALLOC)
    for name in GROWING_GPU_MEMORY:  # likewise the GPU memory policy
        env.pop(name, None)
    if gpu_memory == "grow":
        env.update(GROWING_GPU_MEMORY)
    if compile_cache is not None:
        compile_cache.mkdir(parents=True, exist_ok=True)
        env["DLBENCH_COMPILE_CACHE"] = str(compile_cache)
    env.update(extra)
    return env


def epoch_rows(events: list[dict], metric: str, energies: dict | None = None) -> list[dict]:
    """One row per epoch event; `energies` (epoch -> energy_*_j of its training) fill the energy columns."""
    energies = energies or {}
    return [{"epoch": e["epoch"], "train_time_s": e["train_time_s"], "eval_time_s": e["eval_time_s"],
             "train_loss": e["train_loss"], "train_accuracy": e["train_accuracy"],
             "metric_value": e["metrics"].get(metric), "metrics": e["metrics"], **energies.get(e["epoch"], {})}
            for e in events if kind_of(e) == EPOCH]


def timing_summary(epochs: list[dict], target: dict) -> dict:
    """Training time excludes evaluation; the first epoch (compilation, warm-up) is kept apart."""
    if not epochs:
        return {}
    train_times = [e["train_time_s"] for e in epochs]
    summary = {
        "train_time_s": sum(train_times), "first_epoch_s": train_times[0],
        "steady_epoch_s": statistics.median(train_times[1:]) if len(train_times) > 1 else None,
        "eval_time_s": sum(e["eval_time_s"] for e in epochs), "metric_value": epochs[-1]["metric_value"],
    }
    elapsed = 0.0
    for epoch in epochs:
        elapsed += epoch["train_time_s"]
        value = epoch["metric_value"]
        if value is not None and (value >= target["value"] if target["higher_is_better"] else value <= target["value"]):
            summary["time_to_target_s"] = elapsed
            break
    return summary


def run_row(prepared: Prepared, outcome: Outcome, epochs: list[dict], run_dir: Path, started_at: str,
            compile_cache: str | None = None, energy_source: str | None = None) -> dict:
    cell, config = prepared.cell, prepared.config
    start = next((e for e in outcome.events if kind_of(e) == START), {})
    ready = next((e for e in outcome.events if kind_of(e) == READY), {})
    versions = ready.get("versions", {})
    recipe = envs.get_recipe(cell.framework, cell.device)
    resources = summarise(outcome.samples)
    timing = timing_summary(epochs, prepared.workload.target)
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
        "target_value": prepared.workload.target["value"], "params": ir.count_params(config["model"]),
        "flops_per_sample": flops, "threads": ready.get("threads"), "n_train": ready.get("n_train"),
        "achieved_gflops": peaks.achieved_gflops(flops, ready.get("n_train"), timing.get("steady_epoch_s")),
        "cores_used": used, "energy_source": energy_source,
        "cores_flag": cores.flag(used, config["threads"], cores.others(outcome.samples, outcome.events,
                                                                      outcome.event_times, os.cpu_count())),
        "startup_s": ready.get("elapsed_s"),
        "python": f"{start.get('python', config['python'])} {start.get('executable', prepared.env.python)}",
        "packages": dict(config["env_packages"], **versions), "config": config, "run_dir": str(run_dir),
        "compile_cache": compile_cache, **timing, **resources,
    }


def run_cell(prepared: Prepared, options: Options, on_event: Callable[[dict], None] | None = None) -> tuple:
    """Runs one prepared cell; returns (run row, epoch rows, samples) for the store."""
    cell, config = prepared.cell, prepared.config
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    run_dir = options.results / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{prepared.hash[:12]}"
    run_dir.mkdir(parents=True, exist_ok=True)
    recipe = envs.get_recipe(cell.framework, cell.device)
    worker_cell = {"adapter": recipe.adapter, "model": config["model"], "recipe": config["recipe"],
                   "data_path": str(prepared.dataset.path), "seed": cell.seed, "epochs": cell.epochs,
                   "device": cell.device, "threads": config["threads"]}
    if "initial_weights" in config:
        worker_cell["weights"] = config["initial_weights"]["file"]
    (run_dir / "cell.json").write_text(json.dumps(worker_cell, indent=1))
    command = [str(prepared.env.python), "-m", "dlbench.worker", str(run_dir / "cell.json")]
    shared = shared_compile_cache(options.results, cell)
    cache_state = compile_cache_state(cell, shared)  # before the worker adds to it
    variables = worker_environment(run_dir, config["threads"], envs.worker_variables(recipe, prepared.env.path), shared,
                                   config.get("allocator", "default"), config.get("gpu_memory", "default"))
    meter = energy.EnergyMeter(cell.device, options.powercap)
    epoch_energy = energy.EpochEnergy(meter)

    def events(event: dict) -> None:
        epoch_energy.on_event(event)  # first: the counters are read as close to the event as can be
        if on_event is not None:
            on_event(event)

    try:
        outcome = run_worker(command, variables, run_dir, options.timeout_s or cell.timeout_s,
                             options.memory_limit_mb, events)
    finally:
        meter.close()
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in outcome.events))
    epochs = epoch_rows(outcome.events, prepared.workload.target["metric"], epoch_energy.epochs)
    row = run_row(prepared, outcome, epochs, run_dir, started_at, cache_state, meter.source)
    return row, epochs, outcome.samples


def measure_peak(prepared: Prepared, options: Options, threads: int) -> dict:
    """The float32 GEMM peak of the cell's framework environment (dlbench.peak) at the cell's threads and
    device, as a peaks row: gflops NULL with the reason when the measurement fails."""
    cell, env = prepared.cell, prepared.env
    size = options.peak_size or peaks.PEAK_SIZE
    if cell.device == "gpu" and size == peaks.PEAK_SIZE:
        size = peaks.PEAK_SIZE_GPU
    row: dict = {"framework": cell.framework, "framework_version": env.version(),
                 "framework_env": env.packages_digest(), "threads": threads, "device": cell.device,
                 "suite": cell.suite, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "matrix_size": size,
                 "repeats": peaks.PEAK_REPEATS, "gflops": None, "reason": None, "method": None}
    recipe = envs.get_recipe(cell.framework, cell.device)
    folder = options.results / "peaks" / f"{time.strftime('%Y%m%d-%H%M%S')}-{cell.framework}-{threads}-{cell.device}"
    folder.mkdir(parents=True, exist_ok=True)
    command = [str(env.python), "-m", "dlbench.peak", recipe.adapter, "--device", cell.device,
               "--threads", str(threads), "--size", str(size), "--repeats", str(peaks.PEAK_REPEATS)]
    row.update(peaks.run(command, worker_environment(folder, threads, envs.worker_variables(recipe, env.path)), folder))
    return row


def peak_of(prepared: Prepared, options: Options, store: Store, measured: dict[tuple, tuple[int, float | None]],
            machine_row: dict, on_event: Callable[[dict], None]) -> tuple[int, float | None] | None:
    """(peak id, GFLOP/s) the cell's run is measured against: measured and stored once per framework
    environment, threads and device in this invocation, before the first of their cells that runs;
    None when peaks are off (options.peak_size 0)."""
    if not options.peak_size:
        return None
    key = (prepared.cell.framework, prepared.env.packages_digest(), prepared.config["threads"], prepared.cell.device)
    if key not in measured:
        on_event({KIND: PEAK})
        row = measure_peak(prepared, options, prepared.config["threads"])
        measured[key] = (store.save_peak(dict(row, machine=machine_row)), row["gflops"])
    return measured[key]


def certificate_status(store: Store, prepared: Prepared) -> str:
    if envs.is_reference(prepared.cell.framework):
        return "reference"
    # certificates are kept per framework name and exact environment: any label of a version finds its own
    name = envs.framework_name(prepared.cell.framework)
    return store.certificate_status(name, prepared.env.packages_digest(), prepared.cell.workload,
                                    prepared.config["worker_source"], sources.framework_source(REFERENCE))


def provenance() -> dict:
    """What every run of this process records beside its own figures: the machine and dlbench's version."""
    return {"machine": machine.describe(), "dlbench_version": machine.dlbench_version()}


def finish_run(store: Store, prepared: Prepared, ran: tuple, peak: tuple[int, float | None] | None,
               recorded: dict) -> dict:
    """Links the run of `ran` (run_cell's run row, epochs, samples) to its peak (id, GFLOP/s), adds its
    certificate status and `recorded` (provenance, plan position, executor), and saves it with its epochs
    and samples in one transaction. Returns the run row."""
    run, epochs, samples = ran
    if peak is not None:
        run.update(peak_id=peak[0], mfu=peaks.mfu(run.get("achieved_gflops"), peak[1]))
    run["certificate"] = certificate_status(store, prepared)
    run.update(recorded)
    info = prepared.env.info()  # one read of dlbench-env.json for the whole row
    store.save_environment({"packages_digest": envs.digest_of(info["packages"]), "framework": prepared.cell.framework,
                            "device": prepared.env.device, "python_version": info["python_version"],
                            "packages": info["packages"], "hashes": info.get("hashes")})
    store.save_run(run, epochs, samples)
    return run
