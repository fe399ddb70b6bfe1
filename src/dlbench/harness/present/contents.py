"""What a report shows, read once from the store: the runs, certificates and samples, the analysis's
summaries and findings, and the tables built from them. Every renderer (html, markdown) reads this."""
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from dlbench.harness.analysis import measures
from dlbench.harness.analysis.findings import Finding, findings, shared_caveats
from dlbench.harness.analysis.history import History, histories
from dlbench.harness.analysis.load import device_with_hardware, held_out_sets
from dlbench.harness.analysis.modes import ModeRow
from dlbench.harness.analysis.modes import rows as mode_rows
from dlbench.harness.analysis.scaling import Figure, scaling
from dlbench.harness.analysis.serving import ServingCell, inference_runs, serving_cells, training_runs
from dlbench.harness.analysis.summary import CellSummary, summarise
from dlbench.harness.certification import machine_store
from dlbench.harness.environments.envs import dlbench_home
from dlbench.harness.present import manifest, tables
from dlbench.harness.present.study_section import StudySection, section
from dlbench.harness.store import Store


@dataclass(frozen=True)
class Report:
    """Everything a renderer needs, read once from the store."""
    source: str
    created_at: str
    runs: list[dict]  # the training runs, which every epoch-based section is about
    certificates: list[dict]
    samples: dict[int, list[dict]]
    summaries: list[CellSummary]
    caveats: list[str]  # those that hold for every workload group, said once at the top (shared_caveats)
    findings: list[Finding]  # each group's, without the shared caveats
    study_tables: list[tables.Table]
    certificate_grid: tables.Table
    manifest: list[tables.Table]
    dlbench_version: str
    study: StudySection  # the study's own results beside the runs on its datasets
    scaling: list[Figure] = field(default_factory=list)  # a sweep's thread and batch-size figures; none without
    # inference runs (mode inference): their cells' serving figures per device, and each run's timed calls'
    # latencies in seconds (the distribution figures)
    serving_runs: list[dict] = field(default_factory=list)
    serving: list[ServingCell] = field(default_factory=list)
    serving_tables: list[tables.Table] = field(default_factory=list)
    latencies: dict[int, list[float]] = field(default_factory=dict)
    # the findings' slow and warm first epochs, framework x workload (tables.first_epoch_table); None: none
    first_epochs: tables.Table | None = None
    # every framework's modes (executions, precisions) beside its default (analysis/modes.py); none where no run left
    # the default
    modes: list[ModeRow] = field(default_factory=list)
    # each framework's releases on one workload, where it ran in history.MIN_RELEASES of them or more
    histories: list[History] = field(default_factory=list)

    @property
    def all_runs(self) -> list[dict]:
        return self.runs + self.serving_runs


def load(store_path: Path) -> Report:
    with Store(store_path, for_reading=True) as store:
        # runs from several CPU (or GPU) models are grouped apart: their device names the model
        every = device_with_hardware(machine_store.with_current_verdicts(store.runs()))
        runs, served = training_runs(every), inference_runs(every)
        samples = {run["id"]: store.samples(run["id"]) for run in runs}
        latencies = {run["id"]: store.latencies(run["id"]) for run in served}
        peaks = store.peaks()
        # a results folder's own certificates, stored by a dlbench before the machine's store, come first:
        # the grid shows the newest per pair
        certificates = store.certificates() + machine_store.certificates_of(every)
    summaries = summarise(runs)
    serving = serving_cells(served)
    # the test sets' sizes (an accuracy's sampling error) come from the prepared datasets the runs used
    data_dir = Path(os.environ.get("DLBENCH_DATA") or dlbench_home() / "data")
    shared, found = shared_caveats(summaries, findings(summaries, held_out_sets=held_out_sets(runs, data_dir)))
    # the frameworks' GEMM libraries differ on this machine: a finding of its own, said at the top, since every
    # MFU divides by the best of them
    shared += [f"{gap}: the frameworks' matrix-multiply libraries differ; every MFU here is against the best"
               for gap in measures.gemm_gap(peaks)]
    return Report(str(store_path), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), runs, certificates,
                  samples, summaries, shared, found,
                  tables.study_tables(summaries, peaks) + tables.detector_time_split(runs),
                  tables.certificate_grid(certificates, every), manifest.manifest(every), manifest.dlbench_version(),
                  section(runs), scaling(runs), served, serving, tables.serving_tables(serving), latencies,
                  tables.first_epoch_table(found), mode_rows(summaries, runs), histories(summaries))
