"""Where a plan's cells run, and one cell's run. The executors: `local` runs a plan's cells one after
another on this machine; `ray_cluster` spreads them over a Ray cluster's nodes, only the driver writing
the store. Both make the environments ready first (`readiness`) and run each cell the same way:
`cell_config` resolves it, `plan_peaks` measures the peak it is measured against, `one_cell` runs it
through `launch` (the worker's variables and process), and `record` saves what it left."""


class ExecutorError(RuntimeError):
    """Where the cells should run cannot run them: a cluster that cannot be joined, or no node left alive."""


def no_endings() -> dict[str, int]:
    """The count of each way a cell of a plan can end, all zero: both executors report these."""
    return {"ok": 0, "failed": 0, "timeout": 0, "interrupted": 0, "skipped": 0}
