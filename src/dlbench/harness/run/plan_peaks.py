"""The float32 GEMM peak a cell's run is measured against: measured in the cell's framework environment
(dlbench.worker.gemm_peak, the framework's own product) at its threads and device, once per environment,
threads and device in a plan, and stored before the first of their cells runs."""
import shutil
import time
from collections.abc import Callable

from dlbench.harness import folders
from dlbench.harness.environments import envs
from dlbench.harness.environments.process import worker_environment
from dlbench.harness.measure import gemm_peak
from dlbench.harness.run import interrupt
from dlbench.harness.run.cell_config import Options, Prepared
from dlbench.harness.store import Store
from dlbench.shared.protocol import KIND, PEAK


def measure_peak(prepared: Prepared, options: Options, threads: int) -> dict:
    """The float32 GEMM peak of the cell's framework environment (dlbench.worker.gemm_peak) at the cell's threads and
    device, as a peaks row: gflops NULL with the reason when the measurement fails."""
    cell, env = prepared.cell, prepared.env
    size = options.peak_size or gemm_peak.PEAK_SIZE
    if cell.device == "gpu" and size == gemm_peak.PEAK_SIZE:
        size = gemm_peak.PEAK_SIZE_GPU
    row: dict = {"framework": cell.framework, "framework_version": env.version(),
                 "framework_env": env.packages_digest(), "threads": threads, "device": cell.device,
                 "suite": cell.suite, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "matrix_size": size,
                 "repeats": gemm_peak.PEAK_REPEATS, "gflops": None, "reason": None, "method": None}
    recipe = envs.get_recipe(cell.framework, cell.device)
    folder = folders.new_folder(options.results / "peaks",
                                       f"{time.strftime('%Y%m%d-%H%M%S')}-{cell.framework}-{threads}-{cell.device}")
    command = [str(env.python), "-m", "dlbench.worker.gemm_peak", recipe.adapter, "--device", cell.device,
               "--threads", str(threads), "--size", str(size), "--repeats", str(gemm_peak.PEAK_REPEATS)]
    try:
        row.update(gemm_peak.run(command, worker_environment(folder, threads, envs.worker_variables(recipe, env.path)),
                             folder))
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (run.interrupt): nothing was measured, nothing is kept
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return row


def peak_of(prepared: Prepared, options: Options, store: Store, measured: dict[tuple, tuple[int, float | None]],
            machine_row: dict, on_event: Callable[[dict], None]) -> tuple[int, float | None] | None:
    """(peak id, GFLOP/s) the cell's run is measured against: measured and stored once per framework
    environment, threads and device in this invocation, before the first of their cells that runs;
    None when peaks are off (options.peak_size 0). Ctrl-C or SIGTERM stops a measurement at once and
    keeps nothing of it; once stored, the peak is linked to the cell's run, interrupted or not."""
    if not options.peak_size:
        return None
    key = (prepared.cell.framework, prepared.env.packages_digest(), prepared.config["threads"], prepared.cell.device)
    if key not in measured:
        on_event({KIND: PEAK})
        with interrupt.allowed():  # a measurement stopped midway leaves nothing, so it may stop at once
            row = measure_peak(prepared, options, prepared.config["threads"])
        measured[key] = (store.save_peak(dict(row, machine=machine_row)), row["gflops"])
    return measured[key]
