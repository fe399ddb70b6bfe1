"""The Ray executor on a Ray cluster of three nodes on this machine (Ray's cluster utilities for tests,
loopback addresses only): the same cells and metrics as the local executor, a node killed mid-cell, the
driver killed mid-plan, a node whose dataset differs. PyTorch only, the quick suite's cheapest cell
(cnn-mnist on digits-28), its repetitions as the plan's several cells.

Head 127.0.0.2 with no CPUs (so no cell runs beside the GCS), nodes 127.0.0.3 and 127.0.0.4 with 1 CPU
each: a cell there gets 1 thread, and the local executor's cells are given 1 thread too, so both
executors resolve the same cell hashes. The two nodes share this machine's two cores with the other
pytest worker: only correctness is tested here, never speed.
"""
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import guard
import numpy as np
import psutil
import pytest

from dlbench.harness import data
from dlbench.harness.cli import write_report
from dlbench.harness.data.prepared import Built, write_prepared
from dlbench.harness.environments import envs
from dlbench.harness.plan import suite
from dlbench.harness.run import local
from dlbench.harness.run.cell_config import Options
from dlbench.harness.run.live_report import LiveReport
from dlbench.harness.store import Store

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402  (after the skip: Ray is a dev extra)

NODE_CPUS = 1
WORKLOAD = "cnn-mnist"  # on its offline stand-in, digits-28: nothing to fetch
GUARD_S = 1200  # a hang guard on any wait on the cluster (a driver's rerun took over 240 s on a slow machine)


def quiet(*args) -> None:
    pass


def cells(epochs: int = 2, repeat: int | None = None) -> list[suite.Cell]:
    """Without threads: each gets the cores of the node that runs it; one run of each cell unless asked."""
    return suite.plan(suite.load("quick"), ["pytorch"], [WORKLOAD], None, repeat or 1, epochs, None)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    envs.require("pytorch")
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def cluster():
    made = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "node_ip_address": "127.0.0.2", "include_dashboard": False})
    for address in ("127.0.0.3", "127.0.0.4"):
        made.add_node(num_cpus=NODE_CPUS, node_ip_address=address)
    yield made
    made.shutdown()


def ray_plan(cluster, cells_, options: Options, live=None, **ray_options):
    from dlbench.harness.run import ray_cluster
    return ray_cluster.run_plan(cells_, options, quiet, ray_cluster.RayOptions(cluster.address, **ray_options),
                                live)


def stored(results: Path) -> list[dict]:
    with Store(results / "dlbench.sqlite") as store:
        return store.runs()


@pytest.mark.framework
def test_the_same_cells_and_metrics_as_the_local_executor_and_a_rerun_skips_them(cluster, data_dir, tmp_path):
    plan = cells(repeat=2)
    on_one_thread = [dataclasses.replace(cell, threads=NODE_CPUS) for cell in plan]  # as on a node
    local_counts, local_hashes = local.run_plan(on_one_thread, Options(tmp_path / "local", data_dir), quiet)
    counts, hashes = ray_plan(cluster, plan, Options(tmp_path / "ray", data_dir))
    assert counts == local_counts == {"ok": 2, "failed": 0, "timeout": 0, "interrupted": 0, "skipped": 0}
    assert hashes == local_hashes  # same configurations: threads, environment, data, code

    by_hash = {run["cell_hash"]: run for run in stored(tmp_path / "local")}
    on_ray = stored(tmp_path / "ray")
    for run in on_ray:
        twin = by_hash[run["cell_hash"]]
        # PyTorch on CPU with the same threads is deterministic: every epoch's figures bitwise equal
        assert [(e["train_loss"], e["metric_value"]) for e in run["epochs"]] == \
            [(e["train_loss"], e["metric_value"]) for e in twin["epochs"]]
        assert run["executor"] == "ray" and twin["executor"] == "local"
        assert run["attempt"] == 1 and run["cells_on_node"] == 1 and run["threads"] == NODE_CPUS
        assert run["node"]["address"] in ("127.0.0.3", "127.0.0.4") and run["machine"]["hostname"]
        assert run["peak_id"] is not None and run["mfu"] is not None
    # both nodes free at the start: the two cells ran side by side, one on each
    assert len({run["node"]["ray_node_id"] for run in on_ray}) == 2
    with Store(tmp_path / "ray" / "dlbench.sqlite") as store:
        assert len(store.peaks()) == 2  # one per node, both for PyTorch at 2 threads

    again, _ = ray_plan(cluster, plan, Options(tmp_path / "ray", data_dir))
    assert again["skipped"] == 2 and again["ok"] == 0 and len(stored(tmp_path / "ray")) == 2


@pytest.mark.framework
def test_packed_nodes_record_how_many_cells_shared_them(cluster, data_dir, tmp_path):
    plan = cells(epochs=1, repeat=2)
    live = LiveReport(tmp_path, len(plan), write_report, say=pytest.fail)
    counts, _ = ray_plan(cluster, plan, Options(tmp_path, data_dir, peak_size=0), live, cells_per_node=2)
    assert counts["ok"] == 2
    # the first cell ended while the second was measured on this machine: the live report waited for the end
    assert live.rewrites == [] and not (tmp_path / "report.html").exists()
    runs = stored(tmp_path)
    assert len({run["node"]["ray_node_id"] for run in runs}) == 1  # both fit on the first node
    assert [run["cells_on_node"] for run in runs] == [2, 2] and {run["threads"] for run in runs} == {NODE_CPUS}


def test_the_live_report_counts_loopback_nodes_and_the_drivers_address_as_this_machine():
    from dlbench.harness.run.ray_cluster import on_this_machine
    assert on_this_machine("127.0.0.3", "10.0.0.1") and on_this_machine("10.0.0.1", "10.0.0.1")
    assert not on_this_machine("10.0.0.2", "10.0.0.1")
    assert on_this_machine("10.0.0.2", None)  # the driver's address unknown: rewrite only with no cell running


@pytest.mark.framework
def test_a_node_whose_dataset_differs_fails_the_cell_with_the_reason(cluster, data_dir, tmp_path):
    shared = tmp_path / "node-data"
    real = data.prepare("digits-28", data_dir)
    arrays = {name: np.load(real.path / f"{name}.npy") for name in ("x_train", "y_train", "x_test", "y_test")}
    arrays["x_train"] = arrays["x_train"].copy()
    arrays["x_train"][0, 0, 0, 0] ^= 1  # one pixel: a valid prepared folder with another hash
    meta = {k: v for k, v in real.meta.items() if k != "hash"}
    write_prepared(Built(arrays, meta), data.prepared_dir("digits-28", shared))

    counts, _ = ray_plan(cluster, cells(epochs=1),
                         Options(tmp_path / "results", data_dir, peak_size=0), node_data_dir=shared)
    assert counts["failed"] == 1
    [run] = stored(tmp_path / "results")
    assert run["status"] == "failed" and "digits-28" in run["reason"] and "hash" in run["reason"]
    assert real.hash[:16] in run["reason"] and "node" in run["reason"]


@pytest.mark.framework
def test_the_driver_killed_mid_plan_loses_nothing_and_a_rerun_completes_it(cluster, data_dir, tmp_path):
    command = [sys.executable, "-m", "dlbench", "run", "quick", "-f", "pytorch", "--epochs", "1", "--repeat", "4",
               "-w", WORKLOAD, "--executor", "ray", "--address", cluster.address,
               "--results", str(tmp_path), "--data-dir", str(data_dir), "--plain"]
    log = tmp_path.parent / f"{tmp_path.name}-driver.log"
    with log.open("w") as output:
        driver = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def a_run_is_stored() -> bool:
        if driver.poll() is not None:
            pytest.fail(f"the driver ended (exit {driver.returncode}) before the kill: {log.read_text()}")
        return (tmp_path / "dlbench.sqlite").exists() and any(run["status"] == "ok" for run in stored(tmp_path))

    try:
        guard.wait_until(a_run_is_stored, GUARD_S, "the driver's first stored run", progress=log.read_text)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    kept = stored(tmp_path)
    assert len(kept) < 4  # killed mid-plan

    rerun = guard.run(command, GUARD_S)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"{len(kept)} skipped" in rerun.stdout
    runs = stored(tmp_path)
    assert len(runs) == 4 and len({run["cell_hash"] for run in runs}) == 4  # no duplicates
    assert runs[:len(kept)] == kept  # the runs stored before the kill, unchanged


def raylet_of(pid: int, nodes: list) -> object | None:
    """The cluster node whose raylet is an ancestor of process `pid`."""
    raylets = {node.all_processes[ray._private.ray_constants.PROCESS_TYPE_RAYLET][0].process.pid: node
               for node in nodes}
    try:
        ancestors = psutil.Process(pid).parents()
    except psutil.Error:
        return None
    return next((raylets[p.pid] for p in ancestors if p.pid in raylets), None)


@pytest.mark.framework
def test_a_node_killed_mid_cell_is_retried_on_the_other_one(cluster, data_dir, tmp_path):
    """Last in this file: it leaves the cluster one node short."""
    killed: list = []

    def kill_the_node_running_the_worker() -> None:
        deadline = time.monotonic() + guard.bound(GUARD_S)
        while time.monotonic() < deadline and not killed:
            for process in psutil.process_iter(["cmdline"]):
                cmdline = process.info["cmdline"] or []
                if "dlbench.worker.train" in cmdline and any(str(tmp_path) in part for part in cmdline):
                    node = raylet_of(process.pid, list(cluster.worker_nodes))
                    if node is not None:
                        time.sleep(1.0)  # into the cell's training
                        node.kill_raylet()
                        killed.append(node.node_ip_address)
                        return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_the_node_running_the_worker, daemon=True)
    killer.start()
    counts, _ = ray_plan(cluster, cells(epochs=4), Options(tmp_path, data_dir, peak_size=0))
    killer.join(timeout=guard.bound(60))
    assert killed, "the worker was never seen on a node"
    assert counts["ok"] == 1
    [run] = stored(tmp_path)
    assert run["status"] == "ok" and run["attempt"] == 2 and len(run["epochs"]) == 4
    assert run["node"]["address"] != killed[0]


def adopt_as_gpu_environment(home: Path, framework: str) -> None:
    """The framework's CPU environment registered as its GPU one under `home`, so a gpu cell reaches a
    worker on a machine without CUDA (where the adapter then refuses it)."""
    cpu = envs.require(framework)
    folder = home / "envs" / envs.folder_name(framework, "gpu")
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").write_text(f'#!/bin/sh\nexec "{cpu.python}" "$@"\n')
    (folder / "bin" / "python").chmod(0o755)
    info = dict(cpu.info(), device="gpu", recipe=envs.get_recipe(framework, "gpu").digest())
    (folder / "dlbench-env.json").write_text(json.dumps(info))


@pytest.mark.framework
def test_a_gpu_cell_runs_only_on_a_node_with_a_gpu(cluster, data_dir, tmp_path, monkeypatch):
    from dlbench.harness.run.ray_cluster import ClusterError

    adopt_as_gpu_environment(tmp_path / "home", "pytorch")
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))  # before the GPU node starts: it inherits it
    plan = suite.plan(suite.load("quick"), ["pytorch"], ["cnn-mnist"], "gpu", 1, 1, None)
    with pytest.raises(ClusterError, match="no Ray node with a CPU and a GPU is alive; 1 cells not run"):
        ray_plan(cluster, plan, Options(tmp_path / "none", data_dir, peak_size=0))
    # a GPU in name only; add_node returns once the node is registered (wait_for_nodes would also wait
    # for the node an earlier test killed)
    gpu_node = cluster.add_node(num_cpus=NODE_CPUS, num_gpus=1, node_ip_address="127.0.0.5")
    try:
        counts, _ = ray_plan(cluster, plan, Options(tmp_path / "results", data_dir, peak_size=0))
    finally:
        cluster.remove_node(gpu_node)
    [run] = stored(tmp_path / "results")
    assert counts["failed"] == 1 and run["node"]["address"] == "127.0.0.5"
    # the worker started there and tried the GPU: the only failure a CPU build of torch can give
    assert "device gpu requested, but torch" in run["reason"] and "sees no CUDA device" in run["reason"]
