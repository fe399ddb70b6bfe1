"""The local executor: a plan's cells one after another on this machine, each stored as it ends. Under
run.interrupt's handling, Ctrl-C or SIGTERM stops the plan: the cell being measured is stored as
interrupted, with its events, samples, run folder and peak, and Interrupted says what was kept."""
from collections.abc import Callable

from dlbench.harness.plan.suite import Cell
from dlbench.harness.run import cell_config, interrupt, no_endings, one_cell, plan_peaks, readiness, record
from dlbench.harness.run.cell_config import Options
from dlbench.harness.run.live_report import LiveReport
from dlbench.harness.store import FILENAME, Store


def run_plan(cells: list[Cell], options: Options, progress: Callable[..., None],
             live: LiveReport | None = None) -> tuple[dict[str, int], list[str]]:
    """Runs every cell not yet complete, in the order given; a failed cell is stored and the plan goes on.
    Each run records its 1-based position in `cells`, the machine and the dlbench version. `live`: the
    report rewritten after each stored cell, before the next one's peak and worker start.
    Returns the count of each ending and the plan's cell hashes, in order."""
    # before any data is prepared or any file written
    readiness.refuse_gpu_cells_without_a_gpu(cells)
    readiness.prepare(cells, print)
    resolved = [cell_config.resolve(cell, options.data_dir) for cell in cells]
    counts = no_endings()
    provenance = record.provenance()
    measured_peaks: dict[tuple, tuple[int, float | None]] = {}  # (framework, env, threads, device) -> peak id, gflops
    with Store(options.results / FILENAME) as store:
        completed = store.completed_hashes()
        for index, prepared in enumerate(resolved, 1):
            cell = prepared.cell
            if prepared.hash in completed and not options.force:
                counts["skipped"] += 1
                progress("skip", index, len(cells), cell)
                continue
            progress("start", index, len(cells), cell)

            def on_event(event: dict, index: int = index, cell: Cell = cell) -> None:
                progress("event", index, len(cells), cell, event)

            stored: record.Ran | None = None
            try:
                # from its peak to its stored run, a signal stops the worker and the run is stored as
                # interrupted: no run folder or peak is left that no run names
                with interrupt.held():
                    peak = plan_peaks.peak_of(prepared, options, store, measured_peaks, provenance["machine"], on_event)
                    ran = one_cell.run_cell(prepared, options, on_event)
                    run = record.finish_run(store, prepared, ran, peak,
                                            dict(provenance, plan_position=index, executor="local"))
                    stored = ran
                    counts[run["status"]] += 1
                    progress("end", index, len(cells), cell, run)
            except interrupt.Interrupted as stop:
                stop.detail = what_was_kept(index, len(cells), cell, stored)
                raise
            if live is not None:  # the worker has exited and the run is stored: nothing timed is running
                live.rewrite(sum(counts.values()))
    return counts, [prepared.hash for prepared in resolved]


def what_was_kept(index: int, total: int, cell: Cell, stored: record.Ran | None) -> str:
    """The cell a signal stopped the plan at, and what the store holds of it."""
    name = f"cell {index} of {total} ({cell.framework} {cell.workload} on {cell.dataset}, rep {cell.repetition})"
    later = f"; the plan's {total - index} later cells were not reached" if index < total else ""
    if stored is None:
        return f"{name} stopped before its run was stored: nothing of it is in the store{later}"
    run = stored.run
    if run["status"] != "interrupted":
        return f"{name} ended {run['status']} and was stored{later}"
    return (f"{name} stored as interrupted with the {len(stored.epochs)} epochs, events and resource samples "
            f"its worker had reported (run folder {run['run_dir']}){later}")
