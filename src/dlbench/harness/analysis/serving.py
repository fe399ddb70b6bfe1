"""Inference runs (mode inference, docs/measurement.md#inference-mode) grouped into cells, each with the
estimates of its serving figures over its successful runs: a median with its order-statistic interval over
repetitions (analysis/stats.py), one value per run, as summary.py does for training runs. The epoch-based
summaries (summary.py, findings.py) leave these runs out: they have no epochs."""
from collections.abc import Sequence
from dataclasses import dataclass

from dlbench.harness.analysis.stats import Estimate, estimate
from dlbench.harness.analysis.summary import key_value
from dlbench.harness.measure.serving import LATENCY_COLUMNS
from dlbench.harness.plan import modes
from dlbench.harness.store import is_inference

# the per-run figures a cell estimates (harness/store.py RUN_COLUMNS)
FIGURES = (*LATENCY_COLUMNS, "samples_per_s", "first_call_s", "first_batch_call_s", "peak_rss_mb",
           "peak_gpu_mem_mb")
KEYS = ("framework", "framework_version", "workload", "dataset", "device", "batch_size", "threads", "execution",
        "precision")


def training_runs(runs: Sequence[dict]) -> list[dict]:
    """The runs that trained: those every epoch-based summary, finding and table is about."""
    return [run for run in runs if not is_inference(run)]


def inference_runs(runs: Sequence[dict]) -> list[dict]:
    return [run for run in runs if is_inference(run)]


@dataclass(frozen=True)
class ServingCell:
    framework: str
    framework_version: str | None
    workload: str
    dataset: str | None
    device: str | None
    batch_size: int | None  # the throughput's batch (serve_batch_size), else the configuration's
    threads: int | None
    execution: str | None
    precision: str | None
    n_ok: int
    failures: tuple[tuple[str, str | None], ...]  # (status, reason) of each run that did not end ok
    figures: dict[str, Estimate]  # FIGURES -> the median over the ok runs with its interval
    run_ids: tuple[int, ...]  # the ok runs, whose latencies the distribution figure draws

    @property
    def label(self) -> str:
        """The framework with its version, and its execution and precision where not its defaults."""
        name = f"{self.framework} {self.framework_version}" if self.framework_version else self.framework
        return name + modes.suffix(self.framework, self.execution, self.precision)


def serving_cells(runs: Sequence[dict], seed: int = 0) -> list[ServingCell]:
    """The inference runs grouped by framework, version, workload, dataset, device, batch size and threads;
    sorted by device, workload, dataset, batch size, then framework."""
    cells: dict[tuple, list[dict]] = {}
    for run in inference_runs(runs):
        cells.setdefault(tuple(key_value(run, name) for name in KEYS), []).append(run)
    found = [_cell(key, group, seed) for key, group in cells.items()]
    return sorted(found, key=lambda c: tuple("" if v is None else str(v) for v in (
        c.device, c.workload, c.dataset, c.batch_size, c.threads, c.framework, c.framework_version)))


def _cell(key: tuple, runs: list[dict], seed: int) -> ServingCell:
    ok = [run for run in runs if run["status"] == "ok"]
    batch = next((run["serve_batch_size"] for run in ok if run.get("serve_batch_size")), None)
    values = dict(zip(KEYS, key, strict=True), batch_size=batch or key[KEYS.index("batch_size")])
    return ServingCell(**values, n_ok=len(ok),
                       failures=tuple((run["status"], run.get("reason")) for run in runs if run["status"] != "ok"),
                       figures={name: estimate([run.get(name) for run in ok], seed) for name in FIGURES},
                       run_ids=tuple(run["id"] for run in ok))
