"""One cell's run: the worker's cell file, its environment and the worker launched, its energy read per
epoch, and what it left as a typed record (record.Ran). The plan's loop over cells is an executor's
(local, ray_cluster); the configuration is cell_config's, the run row record's."""
import json
import time
from collections.abc import Callable

from dlbench.harness import folders
from dlbench.harness.environments import envs
from dlbench.harness.environments.process import worker_environment
from dlbench.harness.measure import energy, serving
from dlbench.harness.run.cell_config import Options, Prepared, compile_cache_state, shared_compile_cache
from dlbench.harness.run.launch import run_worker
from dlbench.harness.run.record import Ran, epoch_rows, run_row
from dlbench.shared.cell_file import CELL_FILE, CellFile


def run_cell(prepared: Prepared, options: Options, on_event: Callable[[dict], None] | None = None) -> Ran:
    """Runs one prepared cell; returns its run row, epoch rows and samples for the store."""
    cell, config = prepared.cell, prepared.config
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    # a folder of its own, even for a run of the same cell in the same second: no earlier run's files are overwritten
    run_dir = folders.new_folder(options.results / "runs",
                                        f"{time.strftime('%Y%m%d-%H%M%S')}-{prepared.hash[:12]}")
    recipe = envs.get_recipe(cell.framework, cell.device)
    worker_cell = CellFile(adapter=recipe.adapter, model=config["model"], recipe=config["recipe"],
                           data_path=str(prepared.dataset.path), seed=cell.seed, epochs=cell.epochs,
                           device=cell.device, threads=config["threads"], train_samples=config.get("train_samples"),
                           weights=config["initial_weights"]["file"] if "initial_weights" in config else None,
                           # an inference cell: the worker serves its model (worker/serve.py)
                           mode=config.get("mode"), serve=config.get("serve"))
    folders.write_text_atomically(run_dir / CELL_FILE, worker_cell.to_json())
    command = [str(prepared.env.python), "-m", "dlbench.worker.train", str(run_dir / CELL_FILE)]
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
    folders.write_text_atomically(run_dir / "events.jsonl", "".join(json.dumps(e) + "\n" for e in outcome.events))
    epochs = epoch_rows(outcome.events, prepared.workload.target["metric"], epoch_energy.epochs)
    row = run_row(prepared, outcome, epochs, run_dir, started_at, cache_state, meter.source)
    return Ran(row, epochs, outcome.samples, serving.latencies(outcome.events))
