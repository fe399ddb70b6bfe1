"""How tables show a cell's or a stored run's dataset: its name, with what the cell changed of the workload's
recipe or data beside it (the first N samples, another batch size, the threads of a sweep)."""
from collections.abc import Mapping

from dlbench.harness.plan.workloads import known_workloads


def label(name: str, train_samples: int | None = None, n_train: int | None = None, batch_size: int | None = None,
          recipe_batch_size: int | None = None, threads: int | None = None) -> str:
    """How tables show a cell's dataset: its name, and where a suite entry trains on its first N training
    samples only, "NAME (first N of M)" (M, the prepared split's size, where known); a batch size other than
    the workload recipe's (a changed recipe: a suite entry's batch_size) adds ", batch B (recipe R)", and
    threads (given where a sweep's cells differ in them) ", T threads"."""
    shown = name
    if train_samples:
        shown += f" (first {train_samples:,}{f' of {n_train:,}' if n_train else ''})"
    if batch_size and recipe_batch_size and batch_size != recipe_batch_size:
        shown += f", batch {batch_size} (recipe {recipe_batch_size})"
    if threads:
        shown += f", {threads} thread{'s' if threads != 1 else ''}"
    return shown


def recipe_batch_size(workload: str | None) -> int | None:
    """The workload recipe's batch size, None for a workload this version does not know."""
    known = known_workloads().get(str(workload))
    return known.recipe["batch_size"] if known else None


def run_label(run: Mapping, of: bool = True, threads: bool = False) -> str:
    """A stored run's dataset as tables show it (label); of=False leaves out the split's size, for a table
    that must fit a terminal's width; threads=True adds the run's threads."""
    config = run.get("config") or {}
    return label(str(run.get("dataset") or ""), config.get("train_samples"),
                 config.get("dataset_n_train") if of else None, (config.get("recipe") or {}).get("batch_size"),
                 recipe_batch_size(run.get("workload")), config.get("threads") if threads else None)
