"""SQLite results store, one file per results folder; each run is saved atomically with its children. The
machine's certificates live in a store of the same schema (dlbench.harness.certification.machine_store)."""

import dataclasses
import json
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from dlbench.harness import file_names, folders
from dlbench.shared import cell_file
from dlbench.shared.protocol import EPOCH_SPLIT

SCHEMA_VERSION = 15
FILENAME = "dlbench.sqlite"
SIDE_FILES = ("-wal", "-shm", "-journal")  # what SQLite writes beside the store
# SQLite's INTEGER is signed 64-bit: a larger Python int raised OverflowError inside the write (issue #40)
MIN_INTEGER, MAX_INTEGER = -(2**63), 2**63 - 1

# Column name -> SQL declaration; the single source for the DDL, inserts and key validation.
RUN_COLUMNS: dict[str, str] = {
    "cell_hash": "TEXT NOT NULL",
    "suite": "TEXT",
    "framework": "TEXT NOT NULL",
    "framework_version": "TEXT",
    "workload": "TEXT NOT NULL",
    "dataset": "TEXT",
    "dataset_hash": "TEXT",
    "device": "TEXT",
    "repetition": "INTEGER",
    # 'interrupted' since schema version 11: the run was stopped by Ctrl-C or SIGTERM to the harness, and
    # is stored with what its worker had reported (harness/run/interrupt.py)
    "status": "TEXT NOT NULL CHECK(status IN ('ok','failed','timeout','interrupted'))",
    "reason": "TEXT",
    "stderr_tail": "TEXT",
    "started_at": "TEXT",
    "wall_time_s": "REAL",
    "startup_s": "REAL",  # spawn to the worker's ready event: interpreter, data, framework import, build
    "train_time_s": "REAL",
    "first_epoch_s": "REAL",
    "steady_epoch_s": "REAL",
    "eval_time_s": "REAL",
    "metric_name": "TEXT",
    "metric_value": "REAL",
    "target_value": "REAL",
    "time_to_target_s": "REAL",
    "params": "INTEGER",
    "flops_per_sample": "INTEGER",
    "peak_rss_mb": "REAL",
    "mean_rss_mb": "REAL",
    "mean_cpu_percent": "REAL",
    "peak_cpu_percent": "REAL",
    "mean_system_cpu_percent": "REAL",
    "peak_threads": "INTEGER",
    "mean_gpu_util_percent": "REAL",
    "peak_gpu_mem_mb": "REAL",
    "threads": "INTEGER",
    "python": "TEXT",
    "packages": "TEXT",
    "config": "TEXT",
    "run_dir": "TEXT",
    # the framework's equivalence certificate for this workload when the run was stored:
    # reference (the reference framework itself), passed, failed, or none
    "certificate": "TEXT",
    # added in schema version 2 (NULL in runs stored before):
    "plan_position": "INTEGER",  # 1-based place in the run order of the plan that ran it
    "machine": "TEXT",  # hostname, cpu_model, logical_cores, memory_mib, gpus, os, python (measure.machine)
    "dlbench_version": "TEXT",  # version, commit, dirty (dlbench.harness.measure.machine.dlbench_version)
    # added in schema version 3: the compile cache the run started from, "cold" or "warm" (a shared cache
    # that already held compiled code); NULL for frameworks that compile into no cache, and for runs
    # stored before version 3 by any framework but theano (see MIGRATIONS)
    "compile_cache": "TEXT",
    # added in schema version 4: CPU seconds (user + system) of the harness process while the worker ran
    # (executor.run_worker); NULL for runs stored before
    "harness_cpu_s": "REAL",
    # added in schema version 5 (NULL in runs stored before): the CPU seconds of the monitor's sampling
    # thread alone, part of harness_cpu_s; and the digest of the dlbench code the worker ran
    # (dlbench.harness.environments.sources.worker_source), also part of the cell hash
    "monitor_cpu_s": "REAL",
    "worker_source": "TEXT",
    # added in schema version 6 (NULL in runs stored before): training samples per epoch (the worker's
    # ready event); achieved FLOP/s of the steady epochs and its share of the measured peak (peaks table)
    "n_train": "INTEGER",
    "achieved_gflops": "REAL",  # flops_per_sample * n_train / steady_epoch_s / 1e9
    "peak_id": "INTEGER",  # the peaks row the run's mfu is measured against
    "mfu": "REAL",  # achieved_gflops / that peak's gflops; NULL when the peak could not be measured
    # cores the worker's tree kept busy in its steady epochs' training (mean CPU % / 100,
    # dlbench.harness.measure.cores), and the flag when that is far from the threads it was given
    # ("used 0.9 of 2 cores"), else NULL
    "cores_used": "REAL",
    "cores_flag": "TEXT",
    # where the epochs' energy came from, or why there is none (dlbench.harness.measure.energy): "cpu: ...; gpu: ..."
    "energy_source": "TEXT",
    # added in schema version 7: the executor that ran the cell ("local" or "ray"; NULL before: local); on
    # Ray, the node (ray_node_id, address; the node's own machine is in the machine column), how many of
    # the plan's cells ran on that node at once including this one, and the attempt that completed it
    # (1 unless a node died under an earlier one)
    "executor": "TEXT",
    "node": "TEXT",
    "cells_on_node": "INTEGER",
    "attempt": "INTEGER",
    # added in schema version 10: the digest of the workload's model and recipe as certification sees them
    # (harness/certification/certified_model.py), part of the key of the certificate that vouches for the
    # run; NULL before
    "workload_digest": "TEXT",
    # added in schema version 12 (NULL in runs stored before, and in training runs): an inference run's
    # mode ('inference'; NULL: a training run) and its serving figures (harness/measure/serving.py,
    # docs/measurement.md); its timed calls' durations are in the latencies table
    "mode": "TEXT",
    "first_call_s": "REAL",  # the first call, on one sample: what a cold server's first request waits
    "warmup_calls": "INTEGER",  # untimed batch-1 calls before the timed ones
    "latency_calls": "INTEGER",  # timed batch-1 calls
    "latency_p50_ms": "REAL",  # percentiles of those calls' durations (numpy.percentile, linear)
    "latency_p90_ms": "REAL",
    "latency_p99_ms": "REAL",
    "serve_batch_size": "INTEGER",  # B of the throughput span
    "throughput_samples": "INTEGER",  # samples (a detector's images) in the span's whole batches
    "throughput_s": "REAL",  # the span's seconds
    "samples_per_s": "REAL",  # throughput_samples / throughput_s
    "first_batch_call_s": "REAL",  # the first call on a batch of B, before the span (it may compile)
    # added in schema version 13: the execution the worker's adapter ran (harness/plan/executions.py), from its
    # ready event; NULL before (each framework's default then) and where the worker failed before it was ready
    "execution": "TEXT",
    # added in schema version 14: the precision the worker's adapter trained in (harness/plan/precisions.py), from its
    # ready event; NULL before (float32 then) and where the worker failed before it was ready
    "precision": "TEXT",
    # added in schema version 15: seconds from the first epoch's start to its first step's end, inside first_epoch_s
    # (worker/base.BaseAdapter.step_done); NULL before, for inference runs and where the first epoch did not finish
    "first_step_s": "REAL",
}
INFERENCE = cell_file.INFERENCE  # a run's mode; NULL for a training run


def is_inference(run: Mapping) -> bool:
    """An inference run: no epochs, serving figures instead (analysis/serving.py summarises those)."""
    return run.get("mode") == INFERENCE


EPOCH_COLUMNS: dict[str, str] = {
    "epoch": "INTEGER",
    "train_time_s": "REAL",
    "eval_time_s": "REAL",
    "train_loss": "REAL",
    "train_accuracy": "REAL",
    "metric_value": "REAL",
    "metrics": "TEXT",
    # added in schema version 6: energy of the epoch's training (between the worker's epoch_start and
    # epoch_trained events), joules; NULL where not exposed (runs.energy_source says why)
    "energy_cpu_j": "REAL",  # RAPL package zones, summed: the whole socket(s), not the worker alone
    "energy_dram_j": "REAL",  # RAPL dram subzones, where present
    "energy_gpu_j": "REAL",  # NVML's total energy counter of the GPU the run computes on
    # added in schema version 9: a detector's training time by where it went (worker/detector.py), seconds;
    # their sum falls short of train_time_s by the loop itself. NULL for other workloads.
    "host_time_s": "REAL",  # the shared numpy: flips, canvases, decoding, sampling, targets, RoI Align plans
    "nms_time_s": "REAL",  # the framework's NMS on the proposals
    "framework_time_s": "REAL",  # the framework's network calls: the RPN pass and the training step
}
SAMPLE_COLUMNS: dict[str, str] = {
    "t_s": "REAL",
    "cpu_percent": "REAL",
    "rss_mb": "REAL",
    "threads": "INTEGER",
    "system_cpu_percent": "REAL",
    "gpu_util_percent": "REAL",
    "gpu_mem_mb": "REAL",
}
CERTIFICATE_COLUMNS: dict[str, str] = {
    "framework": "TEXT NOT NULL",
    "framework_version": "TEXT",
    "framework_env": "TEXT NOT NULL",  # digest of the environment's packages: what the certificate is for
    "reference": "TEXT NOT NULL",
    "reference_version": "TEXT",
    "workload": "TEXT NOT NULL",
    "passed": "INTEGER NOT NULL",
    "worst_tensor": "TEXT",
    "worst_scaled_deviation": "REAL",
    "created_at": "TEXT",
    "deviations": "TEXT",  # per tensor: kind, max_abs, max_rel, tolerance, passed
    # added in schema version 5: the digests of the dlbench code the framework's and the reference's
    # probes ran (dlbench.harness.environments.sources.worker_source); a certificate holds for that code
    # only. NULL before.
    "worker_source": "TEXT",
    "reference_source": "TEXT",
    # added in schema version 10: the digest of the workload's model and recipe as certified
    # (harness/certification/certified_model.py): a changed model or recipe of the same name is not covered.
    # NULL before.
    "workload_digest": "TEXT",
    # added in schema version 13: the execution certified (harness/plan/executions.py), also in the workload's
    # digest; NULL before (each framework's only execution then, its default)
    "execution": "TEXT",
    # added in schema version 14: the precision certified (harness/plan/precisions.py), also in the workload's digest;
    # NULL before (float32 then)
    "precision": "TEXT",
}
# added in schema version 6: the float32 GEMM peak measured in a framework's own environment (dlbench.worker.gemm_peak),
# once per (environment, threads, device) and suite invocation; runs link to it by peak_id
PEAK_COLUMNS: dict[str, str] = {
    "framework": "TEXT NOT NULL",
    "framework_version": "TEXT",
    "framework_env": "TEXT",  # digest of the environment's packages (envs.Environment.packages_digest)
    "threads": "INTEGER",
    "device": "TEXT",
    "machine": "TEXT",  # dlbench.harness.measure.machine.describe()
    "suite": "TEXT",
    "measured_at": "TEXT",
    "method": "TEXT",  # the call timed, e.g. torch.matmul
    "matrix_size": "INTEGER",  # n of the n x n by n x n float32 product
    "repeats": "INTEGER",
    "gflops": "REAL",  # best of the repeats: 2 n^3 / seconds / 1e9; NULL when it could not be measured
    "reason": "TEXT",  # why gflops is NULL
    # cores the rest of the machine kept busy meanwhile (its busy CPU time less the measurement's, over
    # the wall time): a peak measured beside other jobs is low
    "others_busy_cores": "REAL",
}
# One row per exact framework environment the store's runs used, keyed as runs and certificates know it
# (Environment.packages_digest of the run configuration's env_packages): what `env create --from-run`
# rebuilds, with the registry's hashes recorded when the environment was built.
ENVIRONMENT_COLUMNS: dict[str, str] = {
    "packages_digest": "TEXT PRIMARY KEY",
    "framework": "TEXT NOT NULL",  # as the cells name it: jax, jax@0.6.2
    "device": "TEXT",
    "python_version": "TEXT",
    "packages": "TEXT",  # JSON: name -> version, the environment's freeze
    "hashes": "TEXT",  # JSON: name -> ["sha256:..."]; NULL for an environment built before dlbench recorded them
}
# added in schema version 12: an inference run's timed batch-1 calls, one row per call in call order
LATENCY_CALL_COLUMNS: dict[str, str] = {
    "call": "INTEGER",  # 0-based
    "seconds": "REAL",
}
JSON_COLUMNS = frozenset({"packages", "config", "metrics", "deviations", "machine", "dlbench_version", "node",
                          "hashes"})


def _columns_sql(columns: Mapping[str, str]) -> str:
    return ", ".join(f"{name} {decl}" for name, decl in columns.items())


LATENCIES_TABLE = (f"CREATE TABLE IF NOT EXISTS latencies (run_id INTEGER REFERENCES runs(id), "
                   f"{_columns_sql(LATENCY_CALL_COLUMNS)}, PRIMARY KEY (run_id, call))")
SCHEMA_12_RUN_COLUMNS = ("mode", "first_call_s", "warmup_calls", "latency_calls", "latency_p50_ms", "latency_p90_ms",
                         "latency_p99_ms", "serve_batch_size", "throughput_samples", "throughput_s", "samples_per_s",
                         "first_batch_call_s")

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY, {_columns_sql(RUN_COLUMNS)});
CREATE INDEX IF NOT EXISTS runs_cell_hash ON runs(cell_hash);
CREATE TABLE IF NOT EXISTS epochs (
    run_id INTEGER REFERENCES runs(id), {_columns_sql(EPOCH_COLUMNS)}, PRIMARY KEY (run_id, epoch)
);
CREATE TABLE IF NOT EXISTS samples (run_id INTEGER REFERENCES runs(id), {_columns_sql(SAMPLE_COLUMNS)});
CREATE INDEX IF NOT EXISTS samples_run_id ON samples(run_id);
CREATE TABLE IF NOT EXISTS certificates (id INTEGER PRIMARY KEY, {_columns_sql(CERTIFICATE_COLUMNS)});
CREATE TABLE IF NOT EXISTS peaks (id INTEGER PRIMARY KEY, {_columns_sql(PEAK_COLUMNS)});
CREATE TABLE IF NOT EXISTS environments ({_columns_sql(ENVIRONMENT_COLUMNS)});
{LATENCIES_TABLE};
"""


def _runs_rebuilt(last_column: str) -> tuple[str, ...]:
    """The runs table made again with RUN_COLUMNS' declarations up to last_column, every row and id kept:
    SQLite cannot change a column's CHECK in place. Runs only with foreign keys off (Store._open), as
    epochs and samples name the runs table, not the copy; the copy then takes its name."""
    names = list(RUN_COLUMNS)[:list(RUN_COLUMNS).index(last_column) + 1]
    columns = ", ".join(names)
    return (f"CREATE TABLE runs_rebuilt (id INTEGER PRIMARY KEY, {_columns_sql({n: RUN_COLUMNS[n] for n in names})})",
            f"INSERT INTO runs_rebuilt (id, {columns}) SELECT id, {columns} FROM runs",
            "DROP TABLE runs",
            "ALTER TABLE runs_rebuilt RENAME TO runs",
            "CREATE INDEX IF NOT EXISTS runs_cell_hash ON runs(cell_hash)")


# Schema version -> the statements that bring a store of the version before it there. A new store gets
# SCHEMA (the latest) at once; an older one runs each later step in order, in one transaction.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: tuple(f"ALTER TABLE runs ADD COLUMN {name} {RUN_COLUMNS[name]}"
             for name in ("plan_position", "machine", "dlbench_version")),
    3: (f"ALTER TABLE runs ADD COLUMN compile_cache {RUN_COLUMNS['compile_cache']}",
        # Before version 3 every measured run compiled into its own empty folder (process.worker_environment
        # removed DLBENCH_COMPILE_CACHE), and theano is the one framework that compiles into one: its old
        # runs were cold. Other frameworks' runs stay NULL, as new ones are.
        "UPDATE runs SET compile_cache = 'cold' WHERE framework = 'theano'"),
    4: (f"ALTER TABLE runs ADD COLUMN harness_cpu_s {RUN_COLUMNS['harness_cpu_s']}",),
    5: (*(f"ALTER TABLE runs ADD COLUMN {name} {RUN_COLUMNS[name]}" for name in ("monitor_cpu_s", "worker_source")),
        *(f"ALTER TABLE certificates ADD COLUMN {name} {CERTIFICATE_COLUMNS[name]}"
          for name in ("worker_source", "reference_source"))),
    6: (*(f"ALTER TABLE runs ADD COLUMN {name} {RUN_COLUMNS[name]}"
          for name in ("n_train", "achieved_gflops", "peak_id", "mfu", "cores_used", "cores_flag", "energy_source")),
        *(f"ALTER TABLE epochs ADD COLUMN {name} {EPOCH_COLUMNS[name]}"
          for name in ("energy_cpu_j", "energy_dram_j", "energy_gpu_j")),
        f"CREATE TABLE IF NOT EXISTS peaks (id INTEGER PRIMARY KEY, {_columns_sql(PEAK_COLUMNS)})"),
    7: tuple(f"ALTER TABLE runs ADD COLUMN {name} {RUN_COLUMNS[name]}"
             for name in ("executor", "node", "cells_on_node", "attempt")),
    8: (f"CREATE TABLE IF NOT EXISTS environments ({_columns_sql(ENVIRONMENT_COLUMNS)})",),
    9: tuple(f"ALTER TABLE epochs ADD COLUMN {name} {EPOCH_COLUMNS[name]}" for name in EPOCH_SPLIT),
    10: (f"ALTER TABLE runs ADD COLUMN workload_digest {RUN_COLUMNS['workload_digest']}",
         f"ALTER TABLE certificates ADD COLUMN workload_digest {CERTIFICATE_COLUMNS['workload_digest']}"),
    # status may be 'interrupted'; the columns are version 10's (a later version adds its own after)
    11: _runs_rebuilt("workload_digest"),
    12: (*(f"ALTER TABLE runs ADD COLUMN {name} {RUN_COLUMNS[name]}" for name in SCHEMA_12_RUN_COLUMNS),
         LATENCIES_TABLE),
    13: (f"ALTER TABLE runs ADD COLUMN execution {RUN_COLUMNS['execution']}",
         f"ALTER TABLE certificates ADD COLUMN execution {CERTIFICATE_COLUMNS['execution']}"),
    14: (f"ALTER TABLE runs ADD COLUMN precision {RUN_COLUMNS['precision']}",
         f"ALTER TABLE certificates ADD COLUMN precision {CERTIFICATE_COLUMNS['precision']}"),
    15: (f"ALTER TABLE runs ADD COLUMN first_step_s {RUN_COLUMNS['first_step_s']}",),
}


class StoreError(Exception):
    pass


class Store:
    """Results of all runs in one SQLite file (WAL, so reports can read while the executor writes)."""

    def __init__(self, path: Path, for_reading: bool = False) -> None:
        """Opens the store at `path`, created (with its folder) where missing and migrated to this schema.
        `for_reading`: a reader's open, which creates nothing, and opens a store it cannot write (a read-only
        folder, another user's store) read-only instead of failing."""
        self.path = Path(path)
        self._refuse_links()
        self.read_only = for_reading and not _writable(self.path)
        try:
            self._conn = self._connect(for_reading)
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot create the store ({exc.strerror}); its folder must be one this "
                             "user can create and write") from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot open results store: {exc}{self._why_not_writable()}") from exc
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise StoreError(f"{self.path}: cannot open results store: {exc}{self._why_not_writable()}") from exc
        except BaseException:
            self._conn.close()
            raise

    def _refuse_links(self) -> None:
        """SQLite opens the store and the files beside it (its -wal, -shm, -journal) through links, and writes
        them, readers too (the -shm): a link planted in a shared results folder is refused, naming it, before
        SQLite opens anything."""
        for name in (self.path.name, *(self.path.name + suffix for suffix in SIDE_FILES)):
            try:
                folders.refuse_link(self.path.with_name(name))
            except folders.PathError as error:
                raise StoreError(str(error)) from None

    def _connect(self, for_reading: bool) -> sqlite3.Connection:
        if for_reading and not self.path.is_file():
            raise StoreError(f"no results store at {self.path}")
        if self.read_only:
            return self._connect_read_only()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit mode: transactions are explicit, so their extent is exactly what save_run says.
        return sqlite3.connect(self.path, isolation_level=None, timeout=30.0)

    def _connect_read_only(self) -> sqlite3.Connection:
        """SQLite reads a WAL store through the -shm file beside it, which it cannot create in a read-only
        folder. Where a -shm is there, mode=ro reads through it; where none is and no -wal holds commits, the
        file alone is the whole store and is read as immutable (no writer can be using it: a writer keeps a
        -wal while connected). A -wal holding commits without a -shm cannot be read here."""
        uri = self.path.absolute().as_uri()
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None, timeout=30.0)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError:
            conn.close()
        wal = self.path.with_name(self.path.name + "-wal")
        if wal.is_file() and wal.stat().st_size > 0:
            raise StoreError(
                f"{self.path}: cannot read the store in a read-only folder: its write-ahead log {wal.name} holds "
                f"commits, which SQLite reads only by writing {self.path.name}-shm beside it; make "
                f"{self.path.parent} writable for this user, or copy the folder with its -wal file somewhere "
                "writable and read the copy")
        return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)

    def _why_not_writable(self) -> str:
        """Why SQLite failed, where the cause is a folder or file this user cannot write."""
        if self.read_only or _writable(self.path):
            return ""
        return (f" ({self.path.parent} or the store is read-only for this user: SQLite writes "
                f"{self.path.name}-wal and {self.path.name}-shm beside the store; make the folder writable)")

    def _open(self) -> None:
        version = self._check_version()
        if self.read_only:
            self._refuse_unmigrated(version)
            return
        self._conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode may lose the last commits on power loss, never consistency.
        self._conn.execute("PRAGMA synchronous=NORMAL")
        with _transaction(self._conn):
            # Checked again under the write lock: another process may have created or migrated it meanwhile.
            version = self._check_version()
            if version == 0:
                statements = [statement for statement in SCHEMA.split(";") if statement.strip()]
            else:
                statements = [s for target in range(version + 1, SCHEMA_VERSION + 1) for s in MIGRATIONS[target]]
            for statement in statements:
                self._conn.execute(statement)
            if version < SCHEMA_VERSION:
                self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        # only now: a migration that rebuilds a table drops the one that epochs and samples refer to
        # (foreign_keys cannot change inside a transaction)
        self._conn.execute("PRAGMA foreign_keys=ON")

    def _check_version(self) -> int:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {version} is newer than this dlbench supports "
                f"(version {SCHEMA_VERSION}); use a newer dlbench or another results folder"
            )
        return version

    def _refuse_unmigrated(self, version: int) -> None:
        """A store opened read-only cannot be migrated, and this dlbench reads only its own schema."""
        if version == 0:
            raise StoreError(f"{self.path}: holds no dlbench tables; give a results folder that dlbench run wrote")
        if version < SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {version}, which this dlbench reads once migrated to version "
                f"{SCHEMA_VERSION}; migrating writes the store, and {self.path.parent} is read-only for this user: "
                "make it writable, or copy the folder somewhere writable and read the copy")

    def save_run(
        self, run: Mapping[str, Any], epochs: Iterable[Mapping[str, Any]], samples: Iterable[Any],
        latencies: Iterable[float] = (),
    ) -> int:
        """Insert a run with its epochs, samples and (an inference run's) timed calls' latencies in seconds,
        in one transaction; returns the run id."""
        run_row = _row(run, RUN_COLUMNS, "run")
        epoch_rows = [_row(epoch, EPOCH_COLUMNS, "epoch") for epoch in epochs]
        sample_rows = [_row(_sample_dict(s), SAMPLE_COLUMNS, "sample") for s in samples]
        latency_rows = [{"call": call, "seconds": float(seconds)} for call, seconds in enumerate(latencies)]
        try:
            with _transaction(self._conn):
                cursor = self._conn.execute(_insert_sql("runs", list(run_row)), list(run_row.values()))
                run_id = cursor.lastrowid
                assert run_id is not None  # always set after a successful INSERT
                self._insert_children("epochs", EPOCH_COLUMNS, run_id, epoch_rows)
                self._insert_children("samples", SAMPLE_COLUMNS, run_id, sample_rows)
                self._insert_children("latencies", LATENCY_CALL_COLUMNS, run_id, latency_rows)
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"{self.path}: run not saved: {exc}") from exc
        return run_id

    def _insert_children(
        self, table: str, columns: Mapping[str, str], run_id: int, rows: list[dict[str, Any]]
    ) -> None:
        # Every row gets every column (missing ones NULL) so a single executemany fits all rows.
        names = list(columns)
        self._conn.executemany(
            _insert_sql(table, ["run_id", *names]), [[run_id, *(row.get(n) for n in names)] for row in rows]
        )

    def save_certificate(self, certificate: Mapping[str, Any]) -> int:
        row = _row(certificate, CERTIFICATE_COLUMNS, "certificate")
        with _transaction(self._conn):
            return self._conn.execute(_insert_sql("certificates", list(row)), list(row.values())).lastrowid

    def save_peak(self, peak: Mapping[str, Any]) -> int:
        row = _row(peak, PEAK_COLUMNS, "peak")
        with _transaction(self._conn):
            return self._conn.execute(_insert_sql("peaks", list(row)), list(row.values())).lastrowid

    def save_environment(self, environment: Mapping[str, Any]) -> None:
        """Records an environment once; hashes found later fill a row recorded without them."""
        row = _row(environment, ENVIRONMENT_COLUMNS, "environment")
        with _transaction(self._conn):
            self._conn.execute(_insert_sql("environments", list(row)) + " ON CONFLICT(packages_digest) DO UPDATE "
                               "SET hashes = excluded.hashes WHERE environments.hashes IS NULL", list(row.values()))

    def environment(self, packages_digest: str) -> dict[str, Any] | None:
        """The recorded environment of this packages digest, or None."""
        rows = self._select(f"SELECT {', '.join(ENVIRONMENT_COLUMNS)} FROM environments WHERE packages_digest = ?",
                            (packages_digest,))
        return rows[0] if rows else None

    def peaks(self) -> list[dict[str, Any]]:
        """All measured peaks, oldest first (gflops NULL with its reason where the measurement failed)."""
        return self._select(f"SELECT id, {', '.join(PEAK_COLUMNS)} FROM peaks ORDER BY id")

    def certificates(self) -> list[dict[str, Any]]:
        """All certificates, oldest first."""
        return self._select(f"SELECT id, {', '.join(CERTIFICATE_COLUMNS)} FROM certificates ORDER BY id")

    def newest_certificate(self, framework: str, framework_env: str, workload: str, worker_source: str,
                           reference_source: str, workload_digest: str) -> dict[str, Any] | None:
        """The newest certificate of this environment and this code (the framework's and the reference's
        worker sources) for this workload's model and recipe, or None."""
        rows = self._select(
            f"SELECT id, {', '.join(CERTIFICATE_COLUMNS)} FROM certificates WHERE framework = ? AND "
            "framework_env = ? AND workload = ? AND worker_source = ? AND reference_source = ? AND "
            "workload_digest = ? ORDER BY id DESC LIMIT 1",
            (framework, framework_env, workload, worker_source, reference_source, workload_digest))
        return rows[0] if rows else None

    def certificate_status(self, framework: str, framework_env: str, workload: str, worker_source: str,
                           reference_source: str, workload_digest: str) -> str:
        """passed or failed by newest_certificate of these, else none."""
        cert = self.newest_certificate(framework, framework_env, workload, worker_source, reference_source,
                                       workload_digest)
        return "none" if cert is None else ("passed" if cert["passed"] else "failed")

    def completed_hashes(self) -> set[str]:
        """Cell hashes having at least one successful run."""
        with self._reading():
            rows = self._conn.execute("SELECT DISTINCT cell_hash FROM runs WHERE status = 'ok'")
            return {cell_hash for (cell_hash,) in rows}

    def runs(self) -> list[dict[str, Any]]:
        """All runs by id, JSON columns decoded, each with its "epochs" ordered by epoch."""
        # One read transaction: a run committed by another process between the two queries
        # would otherwise show up without its epochs.
        with self._reading(), _transaction(self._conn, "DEFERRED"):
            runs = self._select(f"SELECT id, {', '.join(RUN_COLUMNS)} FROM runs ORDER BY id")
            epoch_rows = self._select(
                f"SELECT run_id, {', '.join(EPOCH_COLUMNS)} FROM epochs ORDER BY run_id, epoch"
            )
        epochs: dict[int, list[dict[str, Any]]] = {}
        for row in epoch_rows:
            epochs.setdefault(row.pop("run_id"), []).append(row)
        for run in runs:
            run["epochs"] = epochs.get(run["id"], [])
        return runs

    def samples(self, run_id: int) -> list[dict[str, Any]]:
        """A run's resource samples in the order they were taken."""
        sql = f"SELECT {', '.join(SAMPLE_COLUMNS)} FROM samples WHERE run_id = ? ORDER BY rowid"
        return self._select(sql, (run_id,))

    def latencies(self, run_id: int) -> list[float]:
        """An inference run's timed calls' durations in seconds, in call order; empty for any other run."""
        rows = self._select("SELECT seconds FROM latencies WHERE run_id = ? ORDER BY call", (run_id,))
        return [row["seconds"] for row in rows]

    def _select(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with self._reading():
            cursor = self._conn.execute(sql, params)
            names = [d[0] for d in cursor.description]
            rows = [dict(zip(names, values, strict=True)) for values in cursor]
        table = _table_of(sql)
        return [self._decoded(row, table) for row in rows]

    def _decoded(self, row: dict[str, Any], table: str) -> dict[str, Any]:
        """The row with its JSON columns decoded. A value that is not JSON is refused by its table, row and
        column rather than skipped: a report silently missing a run would misstate what was measured."""
        try:
            return _decode(row)
        except _BadJson as bad:
            raise StoreError(
                f"{self.path}: table {table}, row {_row_name(row)}: column {bad.column} holds invalid JSON "
                f"({bad.error}); the store is left as it is: repair that value (sqlite3 {self.path}) to read it"
            ) from None

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """SQLite's errors while reading, as StoreErrors naming the file; nothing is written to it."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorname", "") in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
                raise StoreError(f"{self.path}: the store is damaged ({exc}); it is left as it is. "
                                 f"`sqlite3 {self.path} .recover` may salvage its rows into a new store") from exc
            raise StoreError(f"{self.path}: cannot read the store: {exc}{self._why_not_writable()}") from exc

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@contextmanager
def _transaction(conn: sqlite3.Connection, mode: str = "IMMEDIATE") -> Iterator[None]:
    """BEGIN ... COMMIT, rolled back on any exception (a SIGKILL leaves it uncommitted).

    Writers use IMMEDIATE, which takes the write lock up front, so a concurrent writer waits out
    the busy timeout instead of failing when its read transaction would need upgrading.
    """
    conn.execute(f"BEGIN {mode}")
    try:
        yield
    except BaseException:
        # SQLite already rolls back by itself after some errors (e.g. disk full).
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _sample_dict(sample: Any) -> Mapping[str, Any]:
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        return dataclasses.asdict(sample)
    return sample


def _row(values: Mapping[str, Any], columns: Mapping[str, str], kind: str) -> dict[str, Any]:
    unknown = sorted(set(values) - set(columns))
    if unknown:
        raise StoreError(
            f"unknown {kind} key(s) {', '.join(map(repr, unknown))}; accepted: {', '.join(columns)}"
        )
    for key, value in values.items():
        # a last guard: the plan's bounds (suite.py, cli.py, cell_config.check_model_fits) keep such numbers out
        if isinstance(value, int) and key not in JSON_COLUMNS and not MIN_INTEGER <= value <= MAX_INTEGER:
            raise StoreError(f"{kind} not saved: field {key!r} holds {file_names.shortened(value)}, beyond the "
                             f"store's integers ({MIN_INTEGER} to {MAX_INTEGER}); nothing of it was written")
    return {
        k: json.dumps(v, sort_keys=True) if k in JSON_COLUMNS and v is not None else v
        for k, v in values.items()
    }


class _BadJson(Exception):
    """A JSON column's value that does not decode; Store._decoded names its table and row."""

    def __init__(self, column: str, error: ValueError | TypeError) -> None:
        super().__init__(column, error)
        self.column, self.error = column, error


def _decode(row: dict[str, Any]) -> dict[str, Any]:
    for key in JSON_COLUMNS.intersection(row):
        if row[key] is not None:
            try:
                row[key] = json.loads(row[key])
            except (ValueError, TypeError) as error:  # TypeError: a number or blob where JSON text belongs
                raise _BadJson(key, error) from None
    return row


def _table_of(sql: str) -> str:
    """The table a Store query reads (every one names a single table after FROM)."""
    found = re.search(r"\bFROM\s+(\w+)", sql)
    return found.group(1) if found else "?"


def _row_name(row: Mapping[str, Any]) -> str:
    """How a user finds the row again: its id, a run's epoch, an environment's digest."""
    if "id" in row:
        return f"id {row['id']}"
    if "epoch" in row and "run_id" in row:
        return f"run_id {row['run_id']}, epoch {row['epoch']}"
    if "packages_digest" in row:
        return f"packages_digest {row['packages_digest']}"
    return ", ".join(f"{key} {value}" for key, value in row.items() if key not in JSON_COLUMNS)


def _writable(path: Path) -> bool:
    """Whether this user can write the store and its folder (SQLite writes its -wal and -shm files there)."""
    folder_ok = os.access(path.parent, os.W_OK | os.X_OK)
    return folder_ok and (not path.exists() or os.access(path, os.R_OK | os.W_OK))


def _insert_sql(table: str, names: list[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
