"""Run order: repetitions outermost, each shuffled from the suite's seed, and each run's place recorded."""
import json
import random
import subprocess
import textwrap
from pathlib import Path

import pytest

from dlbench.harness.environments import disk, envs, sources
from dlbench.harness.measure import machine
from dlbench.harness.plan import suite
from dlbench.harness.run import cell_config, one_cell, record
from dlbench.harness.run.cell_config import Options, Prepared
from dlbench.harness.run.local import run_plan
from dlbench.harness.store import Store

SUITE = """
name: ordered
frameworks: [pytorch, fakefw]
repeat: 3
seed: {seed}
workloads:
  - {{workload: cnn-mnist, dataset: digits-28, epochs: 2}}
  - {{workload: lstm-imdb, dataset: pang-lee-polarity}}
"""


@pytest.fixture
def two_frameworks(monkeypatch):
    fake = envs.Recipe("fakefw", "3.11", ("numpy",), "fake_framework:Adapter", "numpy", "numpy")
    monkeypatch.setitem(envs.RECIPES, "fakefw", fake)


def load(tmp_path: Path, seed: int) -> suite.Suite:
    path = tmp_path / f"suite-{seed}.yaml"
    path.write_text(textwrap.dedent(SUITE.format(seed=seed)).lstrip("\n"))
    return suite.load(str(path))


def names(cells: list[suite.Cell]) -> list[tuple[int, str, str]]:
    return [(c.repetition, c.workload, c.framework) for c in cells]


def test_each_repetition_is_the_listed_order_shuffled_by_seed_and_repetition(tmp_path, two_frameworks):
    cells = suite.plan(load(tmp_path, 5))
    listed = [("cnn-mnist", "pytorch"), ("cnn-mnist", "fakefw"), ("lstm-imdb", "pytorch"), ("lstm-imdb", "fakefw")]
    expected = []
    for repetition in (1, 2, 3):
        order = list(listed)
        random.Random(f"5-{repetition}").shuffle(order)
        expected += [(repetition, *pair) for pair in order]
    assert names(cells) == expected
    # the rule is not the identity here, and repetitions differ from each other
    assert {tuple(expected[i:i + 4]) for i in (0, 4, 8)} != {tuple((r, *p) for p in listed) for r in (1, 2, 3)}
    assert len({tuple(pair[1:] for pair in expected[i:i + 4]) for i in (0, 4, 8)}) > 1


def test_the_same_seed_gives_the_same_order_and_another_seed_another(tmp_path, two_frameworks):
    assert names(suite.plan(load(tmp_path, 5))) == names(suite.plan(load(tmp_path, 5)))
    orders = {tuple(names(suite.plan(load(tmp_path, seed)))) for seed in range(6)}
    assert len(orders) > 1


def test_run_plan_records_position_machine_and_version(tmp_path, two_frameworks, monkeypatch):
    """The plan's run order reaches the store. Only the worker is replaced, by a run row of its cell."""
    cells = suite.plan(load(tmp_path, 5))
    monkeypatch.setattr(cell_config.envs, "require", lambda framework, device="cpu": None)
    monkeypatch.setattr(disk, "mark_used", lambda env: None)  # no environment to stamp

    env = envs.Environment("pytorch", tmp_path / "env")
    env.path.mkdir()
    env.info_file.write_text(json.dumps({"packages": {"numpy": "1.0"}, "python_version": "3.11"}))

    def resolve(cell: suite.Cell, data_dir: Path) -> Prepared:
        config = {"framework": cell.framework, "workload": cell.workload, "seed": cell.seed,
                  "repetition": cell.repetition}
        return Prepared(cell, None, None, env, config)

    def run_cell(prepared: Prepared, options: Options, on_event) -> record.Ran:
        cell = prepared.cell
        row = {"cell_hash": prepared.hash, "framework": cell.framework, "workload": cell.workload,
               "repetition": cell.repetition, "status": "ok", "config": prepared.config}
        return record.Ran(row)

    monkeypatch.setattr(cell_config, "resolve", resolve)
    monkeypatch.setattr(one_cell, "run_cell", run_cell)
    monkeypatch.setattr(record, "certificate_status", lambda prepared: "none")
    run_plan(cells, Options(tmp_path / "results", tmp_path / "data", peak_size=0), lambda *args: None)
    with Store(tmp_path / "results" / "dlbench.sqlite") as store:
        runs = store.runs()
    assert [(r["plan_position"], r["repetition"], r["workload"], r["framework"]) for r in runs] == [
        (position, *cell) for position, cell in enumerate(names(cells), 1)]
    machine = runs[0]["machine"]
    assert set(machine) == {"hostname", "cpu_model", "logical_cores", "memory_mib", "gpus", "os", "python"}
    assert machine["logical_cores"] >= 1 and machine["memory_mib"] > 0 and isinstance(machine["gpus"], list)
    assert set(runs[0]["dlbench_version"]) == {"version", "commit", "dirty"}
    assert all(r["machine"] == machine for r in runs)


def test_machine_reads_the_cpu_model_and_the_checkout_commit(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n")
    assert machine.cpu_model(cpuinfo) == "Intel(R) Xeon(R) CPU @ 2.20GHz"
    version = machine.dlbench_version()
    head = subprocess.run(["git", "-C", str(machine.PACKAGE_DIR), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # the tests run from a checkout
        assert version["commit"] == head.stdout.strip() and isinstance(version["dirty"], bool)


class _Dataset:
    hash, meta = "d" * 64, {"input_shape": [28, 28, 1], "num_classes": 10}


class _Env:
    def info(self) -> dict:
        return {"packages": {"numpy": "1.0"}, "python_version": "3.11"}


def test_the_config_names_a_shared_compile_cache_only_where_it_changes_the_run(monkeypatch, tmp_path):
    """Cold cells keep the configuration (and hash) they had before the setting existed, so their stored
    runs still count as complete; a shared cache enters it only for a framework that compiles into one."""
    monkeypatch.setattr(cell_config.data, "prepare", lambda name, folder: _Dataset())
    monkeypatch.setattr(cell_config.envs, "require", lambda framework, device="cpu": _Env())
    # the keys of every configuration stored before the setting; worker_source came later (schema 5)
    before = {"framework", "workload", "dataset", "dataset_hash", "device", "threads", "seed", "repetition", "model",
              "recipe", "env_packages", "python", "worker_source"}

    def prepared(framework: str, cache: str) -> Prepared:
        cell = suite.Cell("s", framework, "cnn-mnist", "digits-28", "cpu", 1, 0, 1, 32, 1, 60.0, cache)
        return cell_config.resolve(cell, tmp_path)

    for framework in ("theano", "pytorch"):
        # digits-28's own target (data.digits.TARGETS) came later still, for cells on stand-ins
        assert set(prepared(framework, "cold").config) == before | {"target"}
    assert prepared("pytorch", "shared").hash == prepared("pytorch", "cold").hash
    assert prepared("theano", "shared").config["compile_cache"] == "shared"
    assert prepared("theano", "shared").hash != prepared("theano", "cold").hash


def test_a_changed_adapter_changes_the_cell_hash_of_its_framework_only(monkeypatch, tmp_path):
    """A fixed adapter must run its cells again, not inherit the old runs as complete."""
    monkeypatch.setattr(cell_config.data, "prepare", lambda name, folder: _Dataset())
    monkeypatch.setattr(cell_config.envs, "require", lambda framework, device="cpu": _Env())

    def hashes() -> dict[str, str]:
        cells = {f: suite.Cell("s", f, "cnn-mnist", "digits-28", "cpu", 1, 0, 1, 32, 1, 60.0)
                 for f in ("jax", "pytorch")}
        return {f: cell_config.resolve(cell, tmp_path).hash for f, cell in cells.items()}

    before = hashes()
    assert cell_config.resolve(suite.Cell("s", "jax", "cnn-mnist", "digits-28", "cpu", 1, 0, 1, 32, 1, 60.0),
                          tmp_path).config["worker_source"] == sources.framework_source("jax")
    real = sources.framework_source
    monkeypatch.setattr(sources, "framework_source", lambda f: "fixed" if f == "jax" else real(f))
    after = hashes()
    assert after["jax"] != before["jax"] and after["pytorch"] == before["pytorch"]
