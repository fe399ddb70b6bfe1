"""The Ray executor: a plan's cells spread over the nodes of a Ray cluster, one store on this machine.

Each cell is one Ray task, pinned to a node this process (the driver) chose and holding that node's CPUs
(all of them, or 1/cells_per_node of them), so that nothing else Ray schedules runs beside it while it is
measured. On the node the task makes sure of the framework's environment and the dataset, then runs the
cell as `--executor local` does (one_cell and launch: worker subprocess, monitor, timeout, memory
limit) and returns its record (run row, epochs, samples). Only the driver writes the store, one
transaction per run, so whatever dies, a run is in the store complete or not at all, and a rerun skips
the cells already complete.

Why the driver pins cells to nodes instead of leaving placement to Ray: by default a cell must have a
node to itself, and no single resource request means "a whole node" on nodes of different sizes; and a
cell's threads (by default the node's cores) are part of its configuration and hash, which must be known
before it starts.

Faults. A task Ray loses (its node or its worker process died: any RayError but the task's own
exception) stored nothing; it is dispatched again to a node still alive, at most `retries` more times. A
cell that fails on its own (crash, timeout, out of memory, a dataset or environment that differs from
the driver's) comes back as a failed run, stored with its reason and not retried.
"""
import ipaddress
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.harness import data
from dlbench.harness.data import DatasetError
from dlbench.harness.data import download as data_download
from dlbench.harness.environments import envs, sources
from dlbench.harness.measure import machine
from dlbench.harness.plan import initial_weights
from dlbench.harness.plan.suite import Cell
from dlbench.harness.plan.workloads import get_workload
from dlbench.harness.run import ExecutorError, cell_config, no_endings, one_cell, plan_peaks, readiness, record
from dlbench.harness.run.cell_config import Options, Prepared
from dlbench.harness.run.launch import Outcome
from dlbench.harness.run.live_report import LiveReport
from dlbench.harness.run.record import Ran
from dlbench.harness.store import FILENAME, Store

POLL_S = 2.0  # how often the driver looks at the cluster's nodes while it waits for cells


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # ray.init's: "auto", "HOST:PORT", "ray://HOST:PORT"; None starts a local Ray
    cells_per_node: int = 1  # cells measured at once on one node; above 1 they measure each other
    retries: int = 2  # dispatches again of a cell whose node died under it
    node_data_dir: Path | None = None  # a data folder every node sees; None: each node's own default


class ClusterError(ExecutorError):
    """The cluster cannot run the plan: it cannot be joined, or no node with a CPU is left alive."""


@dataclass
class Task:
    """One cell of the plan on its way through the cluster."""
    index: int  # 1-based place in the plan
    cell: Cell
    attempts: int = 0
    lost: list[str] = field(default_factory=list)  # why each earlier attempt was lost
    lost_on: set[str] = field(default_factory=set)  # the nodes it was lost on: not tried there again
    last_lost: "Dispatched | None" = None  # its latest attempt that was lost


@dataclass
class Dispatched:
    """A task's attempt running on a node."""
    task: Task
    node_id: str
    address: str
    prepared: Prepared
    peak_key: tuple | None  # set when this attempt measures the node's peak for the cell's environment
    shared: int = 1  # the most of the plan's cells that ran on its node at once, itself included


def node_data_dir(given: Path | None) -> Path:
    """The node's data folder: the shared one given, else what `dlbench run` would use on that node."""
    if given is not None:
        return given
    return Path(os.environ.get("DLBENCH_DATA") or envs.dlbench_home() / "data").resolve()


def prepare_on_node(cell: Cell, config: dict, data_dir: Path) -> Prepared:
    """The cell as this node will run it: its environment (built here the first time) and its dataset
    (fetched and prepared here, or read from the shared folder), each checked against what the driver
    resolved, so that the stored configuration is what ran. Raises ValueError naming the difference."""
    env = envs.ensure(cell.framework, cell.device, log=lambda line: None)
    packages = env.info()["packages"]
    if packages != config["env_packages"]:
        differ = sorted(name for name in set(packages) | set(config["env_packages"])
                        if packages.get(name) != config["env_packages"].get(name))
        shown = ", ".join(f"{name} {packages.get(name)} here, {config['env_packages'].get(name)} on the driver"
                          for name in differ[:5])
        raise ValueError(f"the node's {cell.framework} environment ({env.path}) differs from the driver's: {shown}")
    here = sources.framework_source(cell.framework)
    if here != config["worker_source"]:
        raise ValueError(f"the node's dlbench worker code (digest {here[:12]}) differs from the driver's "
                         f"({config['worker_source'][:12]}): install the same dlbench on every node")
    if "initial_weights" in config:
        wanted = config["initial_weights"]
        if not Path(wanted["file"]).is_file() or initial_weights.digest(Path(wanted["file"])) != wanted["sha256"]:
            raise ValueError(f"the node lacks the weights file {wanted['file']} the driver checked "
                             f"(SHA-256 {wanted['sha256'][:16]}): put the same file at that path on every node")
    if not data_download.offline_from_env():  # the files the node lacks; data.prepare then reads them once
        for spec in data.files(cell.dataset):
            data_download.fetch(spec, data.raw_dir(cell.dataset, data_dir))
    dataset = data.prepare(cell.dataset, data_dir)
    if dataset.hash != config["dataset_hash"]:
        raise ValueError(f"the node's prepared {cell.dataset} at {dataset.path} has hash {dataset.hash[:16]}, "
                         f"the driver's {config['dataset_hash'][:16]}: the node's raw files differ")
    return Prepared(cell, get_workload(cell.workload), dataset, env, config)


def run_on_node(cell: Cell, config: dict, options: Options, node_data: Path | None, measure_peak: bool) -> dict:
    """The Ray task's body, on the node: {"machine", "ran" (run_cell's record.Ran), "peak"
    (a peaks row, when asked for), "failed" (why the cell could not start here)}. Never raises for the
    cell's own failures: they are results the driver stores."""
    result: dict = {"machine": machine.describe(), "ran": None, "peak": None, "failed": None}
    try:
        prepared = prepare_on_node(cell, config, node_data_dir(node_data))
    except (ValueError, DatasetError, envs.EnvError) as error:
        result["failed"] = f"on node {result['machine']['hostname']}: {error}"
        return result
    if measure_peak:
        result["peak"] = plan_peaks.measure_peak(prepared, options, config["threads"])
    result["ran"] = one_cell.run_cell(prepared, options)
    return result


def failed_run(prepared: Prepared, reason: str) -> Ran:
    """A run that never started its worker (the node could not prepare it): no run folder, no epochs."""
    return Ran(record.run_row(prepared, Outcome("failed", reason), [], None, time.strftime("%Y-%m-%dT%H:%M:%S%z")))


def alive_nodes(ray, device: str = "cpu") -> dict[str, dict]:
    """Node id -> the node's record (ray.nodes()), for the alive nodes with CPUs (and a GPU for gpu cells)."""
    return {node["NodeID"]: node for node in ray.nodes() if node.get("Alive") and node["Resources"].get("CPU", 0) >= 1
            and (device != "gpu" or node["Resources"].get("GPU", 0) >= 1)}


def node_cores(node: dict) -> int:
    """The node's CPUs as Ray counts them (its logical cores unless `ray start --num-cpus` said otherwise):
    a cell's threads when the suite gives none."""
    return int(node["Resources"]["CPU"])


def peak_key(node_id: str, prepared: Prepared) -> tuple:
    """A GEMM peak is measured once per node, framework environment, threads and device."""
    return (node_id, prepared.cell.framework, prepared.env.packages_digest(), prepared.config["threads"],
            prepared.cell.device)


class Driver:
    """Dispatches the plan's cells to nodes with a free slot, stores each result as it comes back."""

    def __init__(self, ray, cells: list[Cell], options: Options, ray_options: RayOptions,
                 progress: Callable[..., None], store: Store, live: LiveReport | None = None) -> None:
        self.ray, self.cells, self.options, self.ray_options = ray, cells, options, ray_options
        self.progress, self.store, self.live = progress, store, live
        self.own_address = driver_address(ray)  # rewrites of the live report wait while a cell runs here
        self.counts = no_endings()
        self.hashes: dict[int, str] = {}  # plan index -> the hash of the configuration it ran (or was skipped) with
        self.peaks: dict[tuple, tuple[int, float | None]] = {}  # (node, framework, env, threads, device) -> id, gflops
        self.running: dict = {}  # ObjectRef -> Dispatched
        self.configs: dict[tuple[int, int], Prepared] = {}  # (plan index, cores) -> the cell resolved for them
        self.remote = ray.remote(max_retries=0)(run_on_node)
        self.device = "gpu" if any(cell.device == "gpu" for cell in cells) else "cpu"  # a plan has one device
        self.dlbench_version = machine.dlbench_version()

    def on_node(self, node_id: str) -> list[Dispatched]:
        return [attempt for attempt in self.running.values() if attempt.node_id == node_id]

    def nothing_measured_here(self) -> bool:
        """No cell is being measured on this machine (on_this_machine)."""
        return not any(on_this_machine(attempt.address, self.own_address) for attempt in self.running.values())

    def resolved(self, task: Task, node: dict) -> Prepared:
        key = (task.index, node_cores(node))
        if key not in self.configs:
            self.configs[key] = cell_config.resolve(task.cell, self.options.data_dir, node_cores(node))
        return self.configs[key]

    def already_complete(self, task: Task, nodes: dict[str, dict], completed: set[str]) -> bool:
        """Complete at the threads of any alive node: a cell is not run again on a bigger node."""
        for node in nodes.values():
            prepared = self.resolved(task, node)
            if prepared.hash in completed:
                self.hashes[task.index] = prepared.hash
                return True
        return False

    def dispatch(self, task: Task, node_id: str, node: dict) -> None:
        prepared = self.resolved(task, node)
        self.hashes[task.index] = prepared.hash
        key = peak_key(node_id, prepared)
        measuring = {attempt.peak_key for attempt in self.running.values()}
        measure = bool(self.options.peak_size) and key not in self.peaks and key not in measuring
        cpus = node_cores(node) / self.ray_options.cells_per_node
        gpus = 1 if task.cell.device == "gpu" else 0  # a GPU cell holds one GPU: Ray sets CUDA_VISIBLE_DEVICES
        strategy = self.ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id, soft=False)
        ref = self.remote.options(num_cpus=cpus, num_gpus=gpus, scheduling_strategy=strategy).remote(
            task.cell, prepared.config, self.options, self.ray_options.node_data_dir, measure)
        task.attempts += 1
        self.running[ref] = Dispatched(task, node_id, node["NodeManagerAddress"], prepared, key if measure else None)
        together = self.on_node(node_id)
        for attempt in together:
            attempt.shared = max(attempt.shared, len(together))
        if task.attempts == 1:
            self.progress("start", task.index, len(self.cells), task.cell)

    def collect(self, ref, waiting: deque) -> None:
        attempt = self.running.pop(ref)
        task = attempt.task
        try:
            result = self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as error:  # a bug of ours on the node: stored, not retried
            result = {"machine": None, "ran": None, "peak": None, "failed": f"the Ray task raised: {error}"}
        except self.ray.exceptions.RayError as error:  # the node or its worker process died
            task.lost.append(f"attempt {task.attempts} on node {attempt.address}: {type(error).__name__}")
            task.lost_on.add(attempt.node_id)  # Ray may list a dead node as alive for some seconds
            task.last_lost = attempt
            if task.attempts <= self.ray_options.retries:
                waiting.appendleft(task)
            else:
                self.give_up(task)
            return
        self.store_result(attempt, result)

    def give_up(self, task: Task) -> None:
        """Stores a cell lost on its nodes as failed, with where and how each attempt was lost."""
        self.store_result(task.last_lost, {"machine": None, "ran": None, "peak": None,
                                    "failed": f"lost {task.attempts} times: {'; '.join(task.lost)}"})

    def store_result(self, attempt: Dispatched, result: dict) -> None:
        task, node_machine = attempt.task, result["machine"]
        if result["peak"] is not None and attempt.peak_key is not None:
            row = dict(result["peak"], machine=node_machine)
            self.peaks[attempt.peak_key] = (self.store.save_peak(row), row["gflops"])
        ran = result["ran"] or failed_run(attempt.prepared, result["failed"])
        recorded = {"machine": node_machine, "dlbench_version": self.dlbench_version, "plan_position": task.index,
                    "executor": "ray", "node": {"ray_node_id": attempt.node_id, "address": attempt.address},
                    "cells_on_node": attempt.shared, "attempt": task.attempts}
        peak = self.peaks.get(peak_key(attempt.node_id, attempt.prepared))
        run = record.finish_run(self.store, attempt.prepared, ran, peak, recorded)
        self.counts[run["status"]] += 1
        self.progress("end", task.index, len(self.cells), task.cell, run)
        # only while no cell is measured on this machine (its node may run cells too); cells on other
        # machines go on meanwhile: the rewrite takes nothing of theirs
        if self.live is not None and self.nothing_measured_here():
            self.live.rewrite(sum(self.counts.values()))

    def run(self) -> None:
        waiting = deque(Task(index, cell) for index, cell in enumerate(self.cells, 1))
        completed = set() if self.options.force else self.store.completed_hashes()
        while waiting or self.running:
            nodes = alive_nodes(self.ray, self.device)
            if not nodes and not self.running:
                raise ClusterError(f"no Ray node with a CPU{' and a GPU' if self.device == 'gpu' else ''} is alive; "
                                   f"{len(waiting)} cells not run")
            self.fill(waiting, nodes, completed)
            if not self.running:  # what is still waiting was lost on every node alive
                for task in list(waiting):
                    waiting.remove(task)
                    self.give_up(task)
            if self.running:
                ready, _ = self.ray.wait(list(self.running), num_returns=1, timeout=POLL_S)
                for ref in ready:
                    self.collect(ref, waiting)

    def fill(self, waiting: deque, nodes: dict[str, dict], completed: set[str]) -> None:
        """Hands waiting cells to nodes with a free slot, in plan order; skips the complete ones."""
        for node_id, node in nodes.items():
            while len(self.on_node(node_id)) < self.ray_options.cells_per_node:
                task = next((t for t in waiting if node_id not in t.lost_on), None)
                if task is None:
                    break
                waiting.remove(task)
                if task.attempts == 0 and self.already_complete(task, nodes, completed):
                    self.counts["skipped"] += 1
                    self.progress("skip", task.index, len(self.cells), task.cell)
                    continue
                self.dispatch(task, node_id, node)


def driver_address(ray) -> str | None:
    """This machine's IP address as Ray names nodes by it; None where Ray does not say."""
    try:
        return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - then every node counts as this machine (on_this_machine)
        return None


def on_this_machine(address: str, own: str | None) -> bool:
    """Whether a node at `address` (its NodeManagerAddress) runs on the driver's machine: the driver's own
    address, or a loopback one (several Ray nodes started on one machine, as the tests do). Where the
    driver's address is unknown, every node counts as this machine."""
    try:
        loopback = ipaddress.ip_address(address).is_loopback
    except ValueError:
        loopback = False
    return own is None or address == own or loopback


def run_plan(cells: list[Cell], options: Options, progress: Callable[..., None],
             ray_options: RayOptions, live: LiveReport | None = None) -> tuple[dict[str, int], list[str]]:
    """As local.run_plan, on the cluster at ray_options.address; cells may end out of order. `live`: the
    report rewritten after a cell is stored, where no cell is being measured on this machine then."""
    import ray  # only here: the local executor needs no Ray installed

    # the driver's environments define the package sets every node must match; the driver needs no GPU
    # of its own (nodes with one take the GPU cells)
    readiness.prepare(cells, print)
    prepared = {name: data.prepare(name, options.data_dir)  # a dataset the driver cannot prepare fails the plan
                for name in sorted({cell.dataset for cell in cells})}  # before any cell
    for cell in cells:  # and so does an entry that asks for more training samples than its dataset holds
        cell_config.check_train_samples(cell, prepared[cell.dataset])
    local = {"include_dashboard": False} if ray_options.address is None else {}  # a Ray of our own: no dashboard
    try:
        ray.init(address=ray_options.address, logging_level="WARNING", log_to_driver=False, **local)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise ClusterError(f"cannot join the Ray cluster at {ray_options.address}: {error}") from None
    try:
        with Store(options.results / FILENAME) as store:
            driver = Driver(ray, cells, options, ray_options, progress, store, live)
            driver.run()
    finally:
        ray.shutdown()
    return driver.counts, [driver.hashes[index] for index in sorted(driver.hashes)]
