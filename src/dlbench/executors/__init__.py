"""Where a plan's cells run. `process` runs one worker subprocess and measures it; `local` runs a plan's
cells one after another on this machine; `ray_cluster` spreads them over a Ray cluster's nodes, each
node running them through `process`, and only this process writing the store."""


class ExecutorError(RuntimeError):
    """Where the cells should run cannot run them: a cluster that cannot be joined, or no node left alive."""
