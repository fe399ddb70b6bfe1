import os
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from dlbench.harness.measure.monitor import Sample
from dlbench.harness.store import MIGRATIONS, SCHEMA_VERSION, Store, StoreError

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv" / "bin" / "python"
EPOCHS, SAMPLES = 50, 500


def make_run(cell_hash: str = "abc123", status: str = "ok") -> dict[str, object]:
    return {
        "cell_hash": cell_hash,
        "suite": "quick",
        "framework": "pytorch",
        "framework_version": "2.4.0",
        "workload": "mlp-digits",
        "status": status,
        "repetition": 1,
        "wall_time_s": 12.5,
        "params": 1234,
        "peak_rss_mb": 321.0,
        "packages": {"torch": "2.4.0", "numpy": "1.26.4"},
        "config": {"lr": 0.1, "batch_size": 32},
    }


def make_epoch(epoch: int) -> dict[str, object]:
    return {
        "epoch": epoch,
        "train_time_s": 1.0 + epoch,
        "eval_time_s": 0.1,
        "train_loss": 0.5 / (epoch + 1),
        "train_accuracy": 0.9,
        "metric_value": 0.8,
        "metrics": {"accuracy": 0.8, "loss": 0.4},
    }


@pytest.fixture
def store(tmp_path: Path):
    with Store(tmp_path / "results" / "dlbench.sqlite") as s:
        yield s


def test_round_trip_of_run_epochs_and_samples(store: Store) -> None:
    samples = [
        Sample(0.1, 95.0, 120.0, 3, 50.0, None, None),
        {"t_s": 0.2, "cpu_percent": 99.0, "rss_mb": 121.0, "threads": 4, "system_cpu_percent": 51.0},
    ]
    # Epochs given out of order come back ordered by epoch.
    run_id = store.save_run(make_run(), [make_epoch(1), make_epoch(0)], samples)

    [run] = store.runs()
    assert run["id"] == run_id
    assert {k: run[k] for k in make_run()} == make_run()
    assert run["dataset"] is None and run["metric_name"] is None
    # NULL unless read, or unless the run is a detector's
    no_energy = dict.fromkeys(("energy_cpu_j", "energy_dram_j", "energy_gpu_j", "host_time_s", "nms_time_s",
                               "framework_time_s"))
    assert run["epochs"] == [{**make_epoch(0), **no_energy}, {**make_epoch(1), **no_energy}]
    assert store.samples(run_id) == [
        {"t_s": 0.1, "cpu_percent": 95.0, "rss_mb": 120.0, "threads": 3, "system_cpu_percent": 50.0,
         "gpu_util_percent": None, "gpu_mem_mb": None},
        {"t_s": 0.2, "cpu_percent": 99.0, "rss_mb": 121.0, "threads": 4, "system_cpu_percent": 51.0,
         "gpu_util_percent": None, "gpu_mem_mb": None},
    ]  # fmt: skip
    assert store.samples(run_id + 1) == []


def test_json_columns_are_stored_with_sorted_keys(store: Store) -> None:
    store.save_run(make_run(), [], [])
    row = store._conn.execute("SELECT packages, config FROM runs").fetchone()
    assert row == ('{"numpy": "1.26.4", "torch": "2.4.0"}', '{"batch_size": 32, "lr": 0.1}')


def test_unknown_keys_are_rejected_by_name(store: Store) -> None:
    with pytest.raises(StoreError, match=r"unknown run key\(s\) 'colour'.*accepted: cell_hash, suite"):
        store.save_run({**make_run(), "colour": "red"}, [], [])
    with pytest.raises(StoreError, match=r"unknown epoch key\(s\) 'loss'.*accepted: epoch, train_time_s"):
        store.save_run(make_run(), [{"epoch": 0, "loss": 1.0}], [])
    assert store.runs() == []


def test_a_failing_insert_leaves_nothing_behind(store: Store) -> None:
    # The duplicate epoch fails after the run row was inserted: the whole run must roll back.
    with pytest.raises(StoreError, match="UNIQUE"):
        store.save_run(make_run(), [make_epoch(0), make_epoch(0)], [Sample(0.1, 1, 1, 1, 1, None, None)])
    with pytest.raises(StoreError, match="CHECK"):
        store.save_run(make_run(status="crashed"), [], [])
    assert store.runs() == []
    assert store._conn.execute("SELECT count(*) FROM samples").fetchone() == (0,)


def test_completed_hashes_count_only_ok_runs(store: Store) -> None:
    store.save_run(make_run("a", "ok"), [], [])
    store.save_run(make_run("b", "failed"), [], [])
    store.save_run(make_run("c", "timeout"), [], [])
    store.save_run(make_run("b", "failed"), [], [])
    store.save_run(make_run("d", "failed"), [], [])
    store.save_run(make_run("d", "ok"), [], [])
    assert store.completed_hashes() == {"a", "d"}


def test_reopening_keeps_runs_and_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "dlbench.sqlite"
    with Store(path) as store:
        store.save_run(make_run(), [make_epoch(0)], [])
    with Store(path) as store:
        assert [r["cell_hash"] for r in store.runs()] == ["abc123"]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (15,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


# The schema of version 1, as dlbench wrote it before plan_position, machine and dlbench_version.
V1_DDL = """
CREATE TABLE runs (id INTEGER PRIMARY KEY, cell_hash TEXT NOT NULL, suite TEXT, framework TEXT NOT NULL,
    framework_version TEXT, workload TEXT NOT NULL, dataset TEXT, dataset_hash TEXT, device TEXT,
    repetition INTEGER, status TEXT NOT NULL CHECK(status IN ('ok','failed','timeout')), reason TEXT,
    stderr_tail TEXT, started_at TEXT, wall_time_s REAL, startup_s REAL, train_time_s REAL, first_epoch_s REAL,
    steady_epoch_s REAL, eval_time_s REAL, metric_name TEXT, metric_value REAL, target_value REAL,
    time_to_target_s REAL, params INTEGER, flops_per_sample INTEGER, peak_rss_mb REAL, mean_rss_mb REAL,
    mean_cpu_percent REAL, peak_cpu_percent REAL, mean_system_cpu_percent REAL, peak_threads INTEGER,
    mean_gpu_util_percent REAL, peak_gpu_mem_mb REAL, threads INTEGER, python TEXT, packages TEXT, config TEXT,
    run_dir TEXT, certificate TEXT);
CREATE INDEX runs_cell_hash ON runs(cell_hash);
CREATE TABLE epochs (run_id INTEGER REFERENCES runs(id), epoch INTEGER, train_time_s REAL, eval_time_s REAL,
    train_loss REAL, train_accuracy REAL, metric_value REAL, metrics TEXT, PRIMARY KEY (run_id, epoch));
CREATE TABLE samples (run_id INTEGER REFERENCES runs(id), t_s REAL, cpu_percent REAL, rss_mb REAL,
    threads INTEGER, system_cpu_percent REAL, gpu_util_percent REAL, gpu_mem_mb REAL);
CREATE INDEX samples_run_id ON samples(run_id);
CREATE TABLE certificates (id INTEGER PRIMARY KEY, framework TEXT NOT NULL, framework_version TEXT,
    framework_env TEXT NOT NULL, reference TEXT NOT NULL, reference_version TEXT, workload TEXT NOT NULL,
    passed INTEGER NOT NULL, worst_tensor TEXT, worst_scaled_deviation REAL, created_at TEXT, deviations TEXT);
PRAGMA user_version=1;
"""


def old_store(path: Path, ddl: str, *inserts: str) -> Path:
    """A store as an older dlbench wrote it: its schema, then the rows the inserts add."""
    with sqlite3.connect(path) as conn:
        conn.executescript(ddl)
        for insert in inserts:
            conn.execute(insert)
    conn.close()
    return path


def schema_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        [version] = conn.execute("PRAGMA user_version").fetchone()
    conn.close()
    return version


def test_a_version_1_store_is_migrated_and_keeps_its_runs(tmp_path: Path) -> None:
    path = old_store(tmp_path / "dlbench.sqlite", V1_DDL,
                     "INSERT INTO runs (cell_hash, framework, workload, status, config) "
                     "VALUES ('old', 'pytorch', 'cnn-mnist', 'ok', '{\"seed\": 0}')",
                     "INSERT INTO epochs (run_id, epoch, train_time_s) VALUES (1, 1, 2.5)")
    with Store(path) as store:
        [old] = store.runs()
        assert (old["cell_hash"], old["config"], old["epochs"][0]["train_time_s"]) == ("old", {"seed": 0}, 2.5)
        assert (old["plan_position"], old["machine"], old["dlbench_version"]) == (None, None, None)
        new = {**make_run("new"), "plan_position": 3, "machine": {"hostname": "h", "gpus": []},
               "dlbench_version": {"version": "0.1.0", "commit": None, "dirty": None}}
        store.save_run(new, [], [])
        assert {k: store.runs()[1][k] for k in new} == new
    assert schema_version(path) == SCHEMA_VERSION
    with Store(path) as store:  # reopening a migrated store migrates nothing again
        assert [r["cell_hash"] for r in store.runs()] == ["old", "new"]


# Version 2: version 1's runs with plan_position, machine and dlbench_version, before compile_cache.
V2_DDL = V1_DDL.replace("certificate TEXT);", "certificate TEXT, plan_position INTEGER, machine TEXT, "
                        "dlbench_version TEXT);").replace("user_version=1", "user_version=2")


def test_a_version_2_store_gains_compile_cache_cold_for_its_theano_runs(tmp_path: Path) -> None:
    """Every measured run before version 3 compiled into its own empty folder: theano's old runs were
    cold; the frameworks that compile into no cache stay NULL, as their new runs are."""
    path = old_store(tmp_path / "dlbench.sqlite", V2_DDL,
                     *("INSERT INTO runs (cell_hash, framework, workload, status, plan_position) "
                       f"VALUES ('old-{framework}', '{framework}', 'cnn-mnist', 'ok', 1)"
                       for framework in ("theano", "pytorch")))
    with Store(path) as store:
        assert [(r["framework"], r["plan_position"], r["compile_cache"]) for r in store.runs()] == [
            ("theano", 1, "cold"), ("pytorch", 1, None)]
        store.save_run({**make_run("new"), "framework": "theano", "compile_cache": "warm"}, [], [])
        assert store.runs()[2]["compile_cache"] == "warm"
    assert schema_version(path) == SCHEMA_VERSION


# Version 3: version 2 with compile_cache, before harness_cpu_s.
V3_DDL = V2_DDL.replace("dlbench_version TEXT);", "dlbench_version TEXT, compile_cache TEXT);").replace(
    "user_version=2", "user_version=3")


def test_a_version_3_store_gains_an_empty_harness_cpu_column(tmp_path: Path) -> None:
    path = old_store(tmp_path / "dlbench.sqlite", V3_DDL,
                     "INSERT INTO runs (cell_hash, framework, workload, status, compile_cache) "
                     "VALUES ('old', 'theano', 'cnn-mnist', 'ok', 'warm')")
    with Store(path) as store:
        [old] = store.runs()
        assert (old["compile_cache"], old["harness_cpu_s"]) == ("warm", None)
        store.save_run({**make_run("new"), "harness_cpu_s": 0.25}, [], [])
        assert store.runs()[1]["harness_cpu_s"] == 0.25
    assert schema_version(path) == SCHEMA_VERSION


# Version 4: version 3 with harness_cpu_s, before monitor_cpu_s and the worker-source digests.
V4_DDL = V3_DDL.replace("compile_cache TEXT);", "compile_cache TEXT, harness_cpu_s REAL);").replace(
    "user_version=3", "user_version=4")


def test_a_version_4_store_keeps_its_certificates_but_they_certify_no_code(tmp_path: Path) -> None:
    path = old_store(tmp_path / "dlbench.sqlite", V4_DDL,
                     "INSERT INTO runs (cell_hash, framework, workload, status) "
                     "VALUES ('old', 'jax', 'cnn-mnist', 'ok')",
                     "INSERT INTO certificates (framework, framework_env, reference, workload, passed) "
                     "VALUES ('jax', 'env1', 'pytorch', 'cnn-mnist', 1)")
    with Store(path) as store:
        [old] = store.runs()
        assert (old["monitor_cpu_s"], old["worker_source"]) == (None, None)
        [certificate] = store.certificates()
        assert (certificate["passed"], certificate["worker_source"], certificate["reference_source"],
                certificate["workload_digest"]) == (1, None, None, None)
        # Which code and model it certified was not recorded, so it vouches for none: runs now read "none".
        assert store.certificate_status("jax", "env1", "cnn-mnist", "src1", "ref1", "wl1") == "none"
        recertified = {key: value for key, value in certificate.items() if key != "id"}
        store.save_certificate({**recertified, "worker_source": "src1", "reference_source": "ref1"})
        assert store.certificate_status("jax", "env1", "cnn-mnist", "src1", "ref1", "wl1") == "none"
        store.save_certificate({**recertified, "worker_source": "src1", "reference_source": "ref1",
                                "workload_digest": "wl1"})
        assert store.certificate_status("jax", "env1", "cnn-mnist", "src1", "ref1", "wl1") == "passed"
        assert store.certificate_status("jax", "env1", "cnn-mnist", "src2", "ref1", "wl1") == "none"
        assert store.certificate_status("jax", "env1", "cnn-mnist", "src1", "ref2", "wl1") == "none"
        # the same name with another model or recipe
        assert store.certificate_status("jax", "env1", "cnn-mnist", "src1", "ref1", "wl2") == "none"
    assert schema_version(path) == SCHEMA_VERSION


# Version 5: version 4 with monitor_cpu_s and the worker-source digests, before the MFU, cores and energy
# columns and the peaks table.
V5_DDL = V4_DDL.replace("harness_cpu_s REAL);", "harness_cpu_s REAL, monitor_cpu_s REAL, worker_source TEXT);").replace(
    "deviations TEXT);", "deviations TEXT, worker_source TEXT, reference_source TEXT);").replace(
    "user_version=4", "user_version=5")


def test_a_version_5_store_gains_empty_measure_columns_and_a_peaks_table(tmp_path: Path) -> None:
    path = old_store(tmp_path / "dlbench.sqlite", V5_DDL,
                     "INSERT INTO runs (cell_hash, framework, workload, status, harness_cpu_s) "
                     "VALUES ('old', 'pytorch', 'cnn-mnist', 'ok', 0.5)",
                     "INSERT INTO epochs (run_id, epoch, train_time_s) VALUES (1, 1, 2.5)")
    with Store(path) as store:
        [old] = store.runs()
        assert old["harness_cpu_s"] == 0.5
        for name in ("n_train", "achieved_gflops", "peak_id", "mfu", "cores_used", "cores_flag", "energy_source"):
            assert old[name] is None
        assert {k: old["epochs"][0][k] for k in ("energy_cpu_j", "energy_dram_j", "energy_gpu_j")} == dict.fromkeys(
            ("energy_cpu_j", "energy_dram_j", "energy_gpu_j"))
        assert store.peaks() == []
        peak_id = store.save_peak({"framework": "pytorch", "gflops": 60.0, "threads": 2, "device": "cpu"})
        store.save_run({**make_run("new"), "peak_id": peak_id, "mfu": 0.5}, [{**make_epoch(1), "energy_cpu_j": 3.0}],
                       [])
        new = store.runs()[1]
        assert (new["peak_id"], new["mfu"], new["epochs"][0]["energy_cpu_j"]) == (peak_id, 0.5, 3.0)
    assert schema_version(path) == SCHEMA_VERSION


def test_a_version_8_store_gains_empty_detector_time_columns(tmp_path: Path) -> None:
    path = tmp_path / "dlbench.sqlite"
    with Store(path) as store:
        store.save_run(make_run("old"), [make_epoch(1)], [])
    with sqlite3.connect(path) as conn:  # back to version 8's epochs table, which lacked the three columns
        for name in ("host_time_s", "nms_time_s", "framework_time_s"):
            conn.execute(f"ALTER TABLE epochs DROP COLUMN {name}")
        for table in ("runs", "certificates"):  # and version 10's digest
            conn.execute(f"ALTER TABLE {table} DROP COLUMN workload_digest")
        drop_serving(conn)
        conn.execute("PRAGMA user_version=8")
    conn.close()
    split = {"host_time_s": 0.25, "nms_time_s": 0.125, "framework_time_s": 1.5}
    with Store(path) as store:
        [old] = store.runs()
        assert {k: old["epochs"][0][k] for k in split} == dict.fromkeys(split)
        store.save_run(make_run("new"), [{**make_epoch(1), **split}], [])
        assert {k: store.runs()[1]["epochs"][0][k] for k in split} == split
    assert schema_version(path) == SCHEMA_VERSION == 15


def test_completed_hashes_leave_out_interrupted_runs(store: Store) -> None:
    store.save_run(make_run("a", "interrupted"), [make_epoch(1)], [])
    assert store.completed_hashes() == set()  # an interrupted cell runs again
    assert [(r["status"], len(r["epochs"])) for r in store.runs()] == [("interrupted", 1)]


def test_a_version_10_store_takes_interrupted_runs_and_keeps_its_own(tmp_path: Path) -> None:
    """Version 11 admits the status 'interrupted', which needs the runs table rebuilt: every run keeps its
    id, columns, epochs and samples, and the index of cell hashes comes back."""
    path = tmp_path / "dlbench.sqlite"
    with sqlite3.connect(path) as conn:  # version 5's tables, brought to version 10 as dlbench 10 would
        conn.executescript(V5_DDL)
        for version in range(6, 11):
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
        conn.execute("PRAGMA user_version=10")
        for cell_hash in ("old-1", "old-2"):
            conn.execute("INSERT INTO runs (cell_hash, framework, workload, status, workload_digest, peak_id) "
                         f"VALUES ('{cell_hash}', 'jax', 'cnn-mnist', 'failed', 'wl', 7)")
        conn.execute("DELETE FROM runs WHERE cell_hash = 'old-1'")  # ids need not start at 1
        conn.execute("INSERT INTO epochs (run_id, epoch, train_time_s) VALUES (2, 1, 2.5)")
        conn.execute("INSERT INTO samples (run_id, t_s, rss_mb) VALUES (2, 0.1, 50.0)")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):  # what version 10 refused
            conn.execute("INSERT INTO runs (cell_hash, framework, workload, status) "
                         "VALUES ('x', 'jax', 'cnn-mnist', 'interrupted')")
    conn.close()
    with Store(path) as store:
        [old] = store.runs()
        assert (old["id"], old["cell_hash"], old["status"], old["workload_digest"], old["peak_id"]) == (
            2, "old-2", "failed", "wl", 7)
        assert [e["train_time_s"] for e in old["epochs"]] == [2.5] and len(store.samples(2)) == 1
        new_id = store.save_run(make_run("new", "interrupted"), [make_epoch(1)], [])
        assert new_id == 3 and store.runs()[1]["status"] == "interrupted"
        assert store._conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert store._conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
        indexes = store._conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs'")
        assert [name for (name,) in indexes] == ["runs_cell_hash"]
        with pytest.raises(StoreError, match="CHECK"):
            store.save_run(make_run("bad", "paused"), [], [])
    assert schema_version(path) == SCHEMA_VERSION == 15


def test_peaks_round_trip_with_a_failed_measurement(store: Store) -> None:
    measured = {"framework": "pytorch", "framework_version": "2.13.0", "framework_env": "abcd", "threads": 2,
                "device": "cpu", "machine": {"hostname": "h", "logical_cores": 2}, "suite": "quick",
                "measured_at": "2026-12-03T18:00:00+0000", "method": "torch.matmul", "matrix_size": 2048,
                "repeats": 5, "gflops": 63.2, "reason": None}
    failed = {**measured, "framework": "theano", "method": None, "gflops": None,
              "reason": "peak not measured: RuntimeError: boom"}
    ids = [store.save_peak(measured), store.save_peak(failed)]
    peaks = store.peaks()
    assert [p["id"] for p in peaks] == ids
    assert [{k: p[k] for k in measured} for p in peaks] == [measured, failed]
    with pytest.raises(StoreError, match="unknown peak key"):
        store.save_peak({"framework": "x", "tflops": 1.0})


def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dlbench.sqlite"
    Store(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError) as error:
        Store(path)
    assert str(path) in str(error.value)
    assert str(SCHEMA_VERSION + 1) in str(error.value) and str(SCHEMA_VERSION) in str(error.value)


def test_a_file_that_is_not_a_database_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "dlbench.sqlite"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(StoreError, match=str(path)):
        Store(path)


WRITER = f"""
import sys
from pathlib import Path
from dlbench.harness.store import Store
store = Store(Path(sys.argv[1]))
print("ready", flush=True)
run = {{"cell_hash": "h", "framework": "f", "workload": "w", "status": "ok", "config": {{"x": 1}}}}
epochs = [{{"epoch": e, "train_loss": 1.0, "metrics": {{"acc": 0.5}}}} for e in range({EPOCHS})]
samples = [{{"t_s": i / 10, "cpu_percent": 100.0, "rss_mb": 50.0, "threads": 2}} for i in range({SAMPLES})]
while True:
    store.save_run(run, epochs, samples)
"""


@pytest.mark.slow
def test_killed_writer_never_leaves_a_partial_run(tmp_path: Path) -> None:
    path = tmp_path / "dlbench.sqlite"
    rng = random.Random(1234)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    for _ in range(5):
        writer = subprocess.Popen(
            [str(PYTHON), "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env
        )
        assert writer.stdout is not None
        assert writer.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.05, 0.6))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        assert writer.returncode == -signal.SIGKILL

    with Store(path) as store:
        assert store._conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert store._conn.execute("PRAGMA foreign_key_check").fetchall() == []
        runs = store.runs()
        assert runs, "the writer never committed a run"
        for run in runs:
            assert [e["epoch"] for e in run["epochs"]] == list(range(EPOCHS))
            assert len(store.samples(run["id"])) == SAMPLES
        # No orphans either: every epoch and sample row belongs to one of the runs seen above.
        counts = store._conn.execute("SELECT (SELECT count(*) FROM epochs), (SELECT count(*) FROM samples)")
        assert counts.fetchone() == (EPOCHS * len(runs), SAMPLES * len(runs))


def test_an_environment_is_recorded_once_and_gains_its_hashes_later(store: Store) -> None:
    bare = {"packages_digest": "d1", "framework": "jax@0.6.2", "device": "cpu", "python_version": "3.11.7",
            "packages": {"jax": "0.6.2", "numpy": "2.4.6"}, "hashes": None}
    store.save_environment(bare)
    store.save_environment(dict(bare, framework="jax@0.6.2 again"))  # a second run in it changes nothing
    assert store.environment("d1") == bare
    hashed = dict(bare, hashes={"jax": ["sha256:" + "a" * 64]})
    store.save_environment(hashed)  # built before dlbench recorded hashes, recorded again with them
    assert store.environment("d1") == hashed
    store.save_environment(dict(bare, hashes={"jax": ["sha256:" + "b" * 64]}))  # recorded hashes are kept
    assert store.environment("d1") == hashed and store.environment("other") is None
    with pytest.raises(StoreError, match="unknown environment key"):
        store.save_environment(dict(bare, size=1))


def test_a_version_7_store_gains_the_environments_table(tmp_path: Path) -> None:
    path = tmp_path / "dlbench.sqlite"
    with Store(path) as store:
        store._conn.execute("DROP TABLE environments")
        for name in ("host_time_s", "nms_time_s", "framework_time_s"):  # version 9's
            store._conn.execute(f"ALTER TABLE epochs DROP COLUMN {name}")
        for table in ("runs", "certificates"):  # version 10's
            store._conn.execute(f"ALTER TABLE {table} DROP COLUMN workload_digest")
        drop_serving(store._conn)
        store._conn.execute("PRAGMA user_version=7")
    with Store(path) as store:
        store.save_environment({"packages_digest": "d", "framework": "pytorch"})
        assert store.environment("d")["framework"] == "pytorch"
        store.save_run({**make_run("new"), "workload_digest": "wl1"}, [], [])
        assert store.runs()[0]["workload_digest"] == "wl1"
    assert schema_version(path) == SCHEMA_VERSION == 15


def stored_runs(path: Path, count: int) -> bytes:
    """A closed store of `count` runs of 3 epochs and 200 samples each (several pages per table); its bytes."""
    with Store(path) as store:
        for index in range(count):
            samples = [{"t_s": i / 10, "cpu_percent": 100.0, "rss_mb": 50.0, "threads": 2} for i in range(200)]
            store.save_run(make_run(f"h{index}"), [make_epoch(e) for e in range(3)], samples)
    return path.read_bytes()


@pytest.mark.parametrize("for_reading", [True, False])
def test_a_store_damaged_mid_file_is_refused_by_name_and_left_unchanged(tmp_path: Path, for_reading: bool) -> None:
    path = tmp_path / "dlbench.sqlite"
    damaged = bytearray(stored_runs(path, 20))
    page = 4096  # page 1 (the schema, the version) stays whole, so the store opens; the runs table's pages do not
    damaged[page:page + len(damaged) // 3] = bytes((i * 37) % 251 for i in range(len(damaged) // 3))
    path.write_bytes(bytes(damaged))
    with Store(path, for_reading=for_reading) as store, pytest.raises(StoreError) as error:
        store.runs()
    assert str(error.value).startswith(f"{path}: the store is damaged (database disk image is malformed)")
    assert f"sqlite3 {path} .recover" in str(error.value)
    assert path.read_bytes() == bytes(damaged)


@pytest.mark.parametrize(("table", "column", "where", "named"), [
    ("runs", "config", "id = 2", "table runs, row id 2: column config"),
    ("epochs", "metrics", "run_id = 1 AND epoch = 2", "table epochs, row run_id 1, epoch 2: column metrics"),
])
def test_invalid_json_in_a_column_is_refused_by_table_row_and_column(tmp_path: Path, table: str, column: str,
                                                                     where: str, named: str) -> None:
    path = tmp_path / "dlbench.sqlite"
    stored_runs(path, 3)
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE {table} SET {column} = '{{\"lr\": 0.1,' WHERE {where}")
    conn.close()
    before = path.read_bytes()
    with Store(path, for_reading=True) as store, pytest.raises(StoreError) as error:
        store.runs()
    assert str(error.value).startswith(f"{path}: {named} holds invalid JSON (")
    assert path.read_bytes() == before


def test_a_reader_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no results store at"):
        Store(tmp_path / "missing" / "dlbench.sqlite", for_reading=True)
    assert list(tmp_path.iterdir()) == []


def test_a_store_that_cannot_be_created_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("in the way\n")
    with pytest.raises(StoreError, match=f"{tmp_path / 'afile'}/dlbench.sqlite: cannot create the store"):
        Store(tmp_path / "afile" / "dlbench.sqlite")
    assert (tmp_path / "afile").read_text() == "in the way\n"


SERVED = {"mode": "inference", "first_call_s": 0.5, "warmup_calls": 20, "latency_calls": 3, "latency_p50_ms": 2.0,
          "latency_p90_ms": 2.8, "latency_p99_ms": 2.98, "serve_batch_size": 32, "throughput_samples": 320,
          "throughput_s": 0.5, "samples_per_s": 640.0, "first_batch_call_s": 0.25}


def drop_serving(conn: sqlite3.Connection) -> None:
    """Back to version 11's tables: no serving columns in runs, no latencies table (nor version 13's columns)."""
    drop_executions(conn)
    for name in SERVED:
        conn.execute(f"ALTER TABLE runs DROP COLUMN {name}")
    conn.execute("DROP TABLE latencies")


def drop_executions(conn: sqlite3.Connection) -> None:
    """Back to version 12's tables: no execution in runs and certificates (nor version 14's precision)."""
    drop_precisions(conn)
    for table in ("runs", "certificates"):
        conn.execute(f"ALTER TABLE {table} DROP COLUMN execution")


def drop_precisions(conn: sqlite3.Connection) -> None:
    """Back to version 13's tables: no precision in runs and certificates (nor version 15's first step)."""
    drop_first_step(conn)
    for table in ("runs", "certificates"):
        conn.execute(f"ALTER TABLE {table} DROP COLUMN precision")


def drop_first_step(conn: sqlite3.Connection) -> None:
    """Back to version 14's tables: no first_step_s in runs."""
    conn.execute("ALTER TABLE runs DROP COLUMN first_step_s")


@pytest.mark.parametrize("version, drop, field, value", [
    (14, drop_first_step, "first_step_s", 0.75), (13, drop_precisions, "precision", "bfloat16"),
    (12, drop_executions, "execution", "compiled")])
def test_an_older_store_gains_the_later_columns_empty(tmp_path: Path, version, drop, field, value) -> None:
    """A store of `version`: its runs keep NULL in the column a later version added, and new runs fill it."""
    path = tmp_path / "dlbench.sqlite"
    with Store(path) as store:
        store.save_run(make_run("old"), [make_epoch(1)], [])
    with sqlite3.connect(path) as conn:
        drop(conn)
        conn.execute(f"PRAGMA user_version={version}")
    conn.close()
    with Store(path) as store:
        [old] = store.runs()
        assert old[field] is None and old["cell_hash"] == "old"
        store.save_run({**make_run("new"), field: value}, [], [])
        assert store.runs()[1][field] == value
    assert schema_version(path) == SCHEMA_VERSION == 15


def test_an_inference_run_keeps_its_serving_figures_and_latencies(store: Store) -> None:
    trained = store.save_run(make_run("t"), [make_epoch(1)], [])
    served = store.save_run({**make_run("s"), **SERVED}, [], [], [0.002, 0.003, 0.001])
    runs = {run["id"]: run for run in store.runs()}
    assert {key: runs[served][key] for key in SERVED} == SERVED and runs[served]["epochs"] == []
    assert store.latencies(served) == [0.002, 0.003, 0.001]  # in call order, not sorted
    assert store.latencies(trained) == [] and runs[trained]["mode"] is None


def test_a_version_11_store_gains_empty_serving_columns_and_a_latencies_table(tmp_path: Path) -> None:
    path = tmp_path / "dlbench.sqlite"
    with Store(path) as store:
        store.save_run(make_run("old"), [make_epoch(1)], [{"t_s": 0.1, "rss_mb": 50.0}])
    with sqlite3.connect(path) as conn:
        drop_serving(conn)
        conn.execute("PRAGMA user_version=11")
    conn.close()
    with Store(path) as store:
        [old] = store.runs()
        assert (old["cell_hash"], len(old["epochs"]), len(store.samples(old["id"]))) == ("old", 1, 1)
        assert {key: old[key] for key in SERVED} == dict.fromkeys(SERVED)
        assert store.latencies(old["id"]) == []
        new = store.save_run({**make_run("new"), **SERVED}, [], [], [0.25, 0.5])
        assert store.latencies(new) == [0.25, 0.5]
    assert schema_version(path) == SCHEMA_VERSION == 15
    with Store(path) as store:  # reopening migrates nothing again
        assert [run["cell_hash"] for run in store.runs()] == ["old", "new"]
