"""The digest of the code a framework's worker runs: what it covers, and what changes it."""
import shutil
from pathlib import Path

import pytest

from dlbench.harness.environments import envs, sources

PACKAGE = sources.PACKAGE_DIR


def names(paths: list[Path], root: Path = PACKAGE) -> set[str]:
    return {path.relative_to(root).as_posix() for path in paths}


def test_the_closure_follows_the_workers_imports_and_nothing_of_the_harness() -> None:
    adapter = "dlbench.worker.frameworks.pytorch.adapter"
    files = names(sources.closure([*sources.ENTRY_POINTS, *sources.package_modules(adapter)]))
    # not nms.py: PyTorch computes its NMS in torch, and no module it imports imports the reference
    detection = {f"shared/detection/{name}.py" for name in ("__init__", "boxes", "pipeline", "targets", "voc_eval")}
    pytorch = {f"worker/frameworks/pytorch/{name}.py"
               for name in ("adapter", "detector", "gemm", "layers", "losses", "optimizers")}
    # worker/serve.py through train.py: an inference cell's code is in the digest
    assert files == {"worker/train.py", "worker/serve.py", "worker/cell.py", "worker/probe.py", "worker/gemm_peak.py",
                     "worker/base.py", "worker/detector.py", *pytorch, "shared/initializers.py", "shared/ir.py",
                     "shared/protocol.py", "shared/cell_file.py", *detection, "shared/recipe.py",
                     "shared/__init__.py", "shared/schedule.py"}  # `from dlbench.shared import schedule`


def test_imports_are_read_at_any_depth_and_from_imports_name_their_submodules() -> None:
    source = "import os\nfrom dlbench.worker import base\ndef f():\n    from dlbench.shared.ir import x\n"
    assert sources.imported_modules(source) == {"os", "dlbench.worker", "dlbench.worker.base",
                                                "dlbench.shared.ir", "dlbench.shared.ir.x"}


def copy_of_the_package(folder: Path, edit: str | None = None) -> Path:
    """dlbench's sources copied to `folder`, with one file changed (a comment added) if `edit` names it.
    Digests are cached per folder: a changed file needs a folder of its own."""
    copy = folder / "dlbench"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    if edit:
        (copy / edit).write_text((copy / edit).read_text() + "\n# changed\n")
    return copy


def digests(package: Path) -> dict[str, str]:
    return {name: sources.worker_source(f"dlbench.worker.frameworks.{name}.adapter:Adapter", package)
            for name in ("pytorch", "jax")}


def test_an_adapters_change_changes_its_digest_only(tmp_path: Path) -> None:
    before = digests(copy_of_the_package(tmp_path / "a"))
    assert before == digests(copy_of_the_package(tmp_path / "b"))  # the same files, the same digest
    after = digests(copy_of_the_package(tmp_path / "c", "worker/frameworks/jax/adapter.py"))
    assert after["jax"] != before["jax"] and after["pytorch"] == before["pytorch"]
    detector = digests(copy_of_the_package(tmp_path / "d", "worker/frameworks/pytorch/detector.py"))
    assert detector["pytorch"] != before["pytorch"] and detector["jax"] == before["jax"]


def test_a_shared_worker_module_changes_every_digest(tmp_path: Path) -> None:
    before = digests(copy_of_the_package(tmp_path / "a"))
    after = digests(copy_of_the_package(tmp_path / "b", "worker/base.py"))
    assert all(after[name] != before[name] for name in before)


def test_harness_code_changes_no_digest(tmp_path: Path) -> None:
    before = digests(copy_of_the_package(tmp_path / "a"))
    assert digests(copy_of_the_package(tmp_path / "b", "harness/store.py")) == before


def test_code_state_of_runs_and_certificates(monkeypatch: pytest.MonkeyPatch) -> None:
    current, reference = sources.framework_source("jax"), sources.framework_source(envs.REFERENCE)
    assert sources.code_state("jax", current) == "current"
    assert sources.code_state("jax", "0ld") == "older"
    assert sources.code_state("jax", None) == "unrecorded"
    assert sources.code_state("no-such-framework", "abc") == "unknown"
    assert sources.code_state("jax", current, reference) == "current"
    assert sources.code_state("jax", current, "0ld") == "older"  # certified against an older reference
