"""The digest of the dlbench code a framework's worker runs: the worker side's entry points (a cell's
training, the certificate probe, the GEMM peak), every module of the framework's own package
(dlbench.worker.frameworks.<name>: its adapter, its detector and its peak, which the worker side loads
by name), and every dlbench module they import, followed through their imports.

A run's cell hash and a certificate's key include it, so fixing an adapter makes its cells run again
and its old certificates stop counting, while the other frameworks' runs and verdicts still stand.
Harness-side code (the store, the report) is not in it: it changes no measurement.
"""
import ast
import hashlib
from functools import cache
from pathlib import Path

from dlbench.harness import PACKAGE_DIR
from dlbench.harness.environments import envs

PACKAGE = "dlbench"
ENTRY_POINTS = ("dlbench.worker.train", "dlbench.worker.probe", "dlbench.worker.gemm_peak")


def module_file(module: str, package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The source file of a dlbench module (a package's __init__.py), None for any other module."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    base = package_dir.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(source: str) -> set[str]:
    """Every module an `import` or `from ... import` names, at any depth of the file, with the
    names a `from` brings in as candidate submodules (`from dlbench.worker import base`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def closure(modules: list[str], package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """The source files of `modules` and of every dlbench module they import, directly or not."""
    files: set[Path] = set()
    pending = list(modules)
    while pending:
        path = module_file(pending.pop(), package_dir)
        if path is None or path in files:
            continue
        files.add(path)
        pending.extend(imported_modules(path.read_text(encoding="utf-8")))
    return sorted(files)


def worker_source(adapter: str, package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 over the relative paths and contents of the files a worker for `adapter`
    ("dlbench.worker.frameworks.pytorch.adapter:TorchAdapter") runs, in path order."""
    return _digest(adapter.partition(":")[0], package_dir)


def package_modules(adapter_module: str, package_dir: Path = PACKAGE_DIR) -> list[str]:
    """Every module of the package that holds `adapter_module`: the framework's adapter, detector and
    peak, whether or not anything imports them by name."""
    package = adapter_module.rpartition(".")[0]
    folder = package_dir.joinpath(*package.split(".")[1:])
    return [f"{package}.{path.stem}" for path in sorted(folder.glob("*.py")) if path.stem != "__init__"]


@cache
def _digest(adapter_module: str, package_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in closure([*ENTRY_POINTS, *package_modules(adapter_module, package_dir)], package_dir):
        digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()



def framework_source(framework: str) -> str:
    """The worker_source of a framework's adapter, as its recipe names it."""
    return worker_source(envs.RECIPES[envs.framework_name(framework)].adapter)  # every version: one adapter


def code_state(framework: str, digest: str | None, reference_digest: str | None = None) -> str:
    """"current" when a run or certificate came from the code this dlbench would run now for its
    framework (and, for a certificate, for the reference), "older" when not, "unrecorded" for those
    stored before dlbench recorded it (store schema 5), "unknown" for a framework without a recipe."""
    if digest is None:
        return "unrecorded"
    try:
        now = digest == framework_source(framework)
        if reference_digest is not None:
            now = now and reference_digest == framework_source(envs.REFERENCE)
    except envs.EnvError:
        return "unknown"
    return "current" if now else "older"
