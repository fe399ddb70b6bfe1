"""allocator: retain. The suite field reaches the cell's configuration (and so its hash) and the worker's
variables, and the variables really keep glibc's malloc from handing freed memory back to the system."""
import json
import sys
from types import SimpleNamespace

import guard
import pytest

from dlbench.harness.environments.process import RETAINING_MALLOC, worker_environment
from dlbench.harness.plan.suite import Cell
from dlbench.harness.run import cell_config

# Allocates a 64 MiB block, frees it, allocates one again; prints the minor page faults each took. glibc
# serves a block that large from mmap by default (its adaptive threshold stops at 32 MiB), so the second
# faults all its pages in again; retaining malloc reuses the first block's pages.
FAULTS = """
import ctypes, json, resource
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
size = 64 << 20
faults = []
for _ in range(2):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    libc.free(ctypes.c_void_p(block))
print(json.dumps(faults))
"""


def faults_of(variables: dict[str, str]) -> list[int]:
    done = guard.run([sys.executable, "-c", FAULTS], 300, env=variables, check=True)
    return json.loads(done.stdout)


def test_retain_sets_the_malloc_variables_and_default_clears_inherited_ones(monkeypatch, tmp_path):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1")  # the harness's own setting must not reach a worker
    default = worker_environment(tmp_path / "a", 1, {})
    assert not set(RETAINING_MALLOC) & set(default)
    retain = worker_environment(tmp_path / "b", 1, {}, allocator="retain")
    assert {name: retain[name] for name in RETAINING_MALLOC} == RETAINING_MALLOC


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_retaining_malloc_reuses_freed_pages(tmp_path):
    page_count = (64 << 20) // 4096
    first, second = faults_of(worker_environment(tmp_path / "a", 1, {}))
    assert first > page_count // 2 and second > page_count // 2  # default: faulted in again
    first, second = faults_of(worker_environment(tmp_path / "b", 1, {}, allocator="retain"))
    assert first > page_count // 2 and second < page_count // 20  # retain: the freed pages reused


def test_only_a_retaining_cell_adds_the_allocator_to_its_configuration(monkeypatch, tmp_path):
    """Default cells keep the hashes they had before the field existed; retaining ones get their own."""
    monkeypatch.setattr(cell_config.data, "prepare", lambda name, folder: SimpleNamespace(
        hash="d" * 64, meta={"input_shape": [28, 28, 1], "num_classes": 10}))
    monkeypatch.setattr(cell_config.envs, "require", lambda name, device="cpu": SimpleNamespace(
        info=lambda: {"packages": {"torch": "2.13.0"}, "python_version": "3.11.0"}))
    cell = Cell("s", "pytorch", "cnn-mnist", "digits-28", "cpu", 1, 0, 1, 32, 1, 60.0)
    default = cell_config.resolve(cell, tmp_path)
    retain = cell_config.resolve(Cell(**{**cell.__dict__, "allocator": "retain"}), tmp_path)
    assert "allocator" not in default.config and retain.config["allocator"] == "retain"
    assert default.hash != retain.hash
