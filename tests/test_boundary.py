"""The worker/harness boundary, read statically (no framework environment needed): a module that runs
inside a framework's environment imports only the standard library, numpy, its framework's own packages
and other worker-side or shared modules; a shared module (the model IR, canonical initialisation,
detection's maths) only the standard library, numpy and other shared modules. Imports inside functions
count too. Every adapter a recipe names, and the detector and peak modules the worker side loads beside it
by name (base.sibling_module), is a worker-side module. A planted violation shows the check can fail."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from sides import SHARED, WORKER

from dlbench.harness.environments import envs, sources

PACKAGE_DIR = sources.PACKAGE_DIR
BOUNDARY_FIXTURES = Path(__file__).parent / "boundary_fixtures"
ALWAYS = frozenset({"numpy", "__future__"}) | frozenset(sys.stdlib_module_names)


# Packages that a framework's own package installs with it, which its adapter imports by name.
COMPANIONS = {"jax": {"jaxlib"}}


def framework_packages(adapter_module: str) -> frozenset[str]:
    """What the recipes whose adapter lives in `adapter_module` install and import: the modules of their
    import check, the packages they pin, and those packages' companions."""
    names: set[str] = set()
    for recipe in envs.RECIPES.values():
        if recipe.adapter.partition(":")[0] == adapter_module:
            names.update(name.strip() for name in recipe.import_check.split(","))
            names.update(Requirement(spec).name.replace("-", "_") for spec in recipe.packages)
    return frozenset(names.union(*(COMPANIONS.get(name, set()) for name in names)))


def allowed_packages(path: Path) -> frozenset[str]:
    """The third-party packages a worker-side or shared module may import, besides numpy."""
    if path in SHARED:
        return frozenset()
    if path.parent.parent.name == "frameworks":  # worker/frameworks/<name>/*.py: that framework's own room
        return framework_packages(f"dlbench.worker.frameworks.{path.parent.name}.adapter")
    return frozenset()


def module_name(path: Path) -> str:
    """dlbench.a.b for src/dlbench/a/b.py; a file outside the package counts as a framework module."""
    if not path.is_relative_to(PACKAGE_DIR):
        return f"dlbench.worker.frameworks.planted.{path.stem}"
    parts = ["dlbench", *path.relative_to(PACKAGE_DIR).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, at any depth."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            found.append((node.lineno, ".".join(base + ([node.module] if node.module else []))))
    return found


def dlbench_module_file(name: str) -> Path | None:
    return sources.module_file(name, PACKAGE_DIR)


def violations(path: Path, may_import_worker_side: bool, packages: frozenset[str]) -> list[str]:
    """Each import of `path` that crosses the boundary, as 'file:line: module (why)'."""
    found = []
    for line, name in imported(path):
        top = name.partition(".")[0]
        where = f"{path.name}:{line}: {name}"
        if top == "dlbench":
            target = dlbench_module_file(name) or dlbench_module_file(name.rpartition(".")[0])
            if target in SHARED or (may_import_worker_side and target in WORKER):
                continue
            side = "worker-side" if target in WORKER else "harness"
            found.append(f"{where} (a {side} module{'' if target else ' that does not exist'})")
        elif top not in ALWAYS and top not in packages:
            own = ", ".join(sorted(packages - ALWAYS)) or "any framework"
            found.append(f"{where} (not the standard library, numpy or {own})")
    return found


@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.relative_to(PACKAGE_DIR).as_posix())
def test_a_shared_module_imports_only_the_standard_library_numpy_and_shared_modules(path):
    assert violations(path, may_import_worker_side=False, packages=frozenset()) == []


@pytest.mark.parametrize("path", WORKER, ids=lambda p: p.relative_to(PACKAGE_DIR).as_posix())
def test_a_worker_side_module_imports_only_its_framework_and_the_worker_side(path):
    assert violations(path, may_import_worker_side=True, packages=allowed_packages(path)) == []


@pytest.mark.parametrize("framework", sorted(envs.RECIPES))
def test_every_adapter_a_recipe_names_is_a_worker_side_class(framework):
    module, _, cls = envs.RECIPES[framework].adapter.partition(":")
    path = dlbench_module_file(module)
    assert path in WORKER and path.parent.parent.name == "frameworks", module
    classes = {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef)}
    assert cls in classes, f"{module} defines no class {cls}"
    for name in ("detector", "gemm"):  # loaded by name from the adapter's package (base.sibling_module)
        beside = dlbench_module_file(module.rpartition(".")[0] + "." + name)
        assert beside is None or beside in WORKER


def test_a_planted_violation_is_caught():
    """A made-up adapter that imports the store, a harness module, inside a function, and a package of
    another framework at the top."""
    planted = BOUNDARY_FIXTURES / "imports_the_harness.py"
    assert violations(planted, may_import_worker_side=True, packages=frozenset({"torch"})) == [
        "imports_the_harness.py:7: tensorflow (not the standard library, numpy or torch)",
        "imports_the_harness.py:15: dlbench.harness.analysis (a harness module)",
        "imports_the_harness.py:16: dlbench.harness.store (a harness module)",
    ]
    # the same file is fine by the rules of a module that may import both frameworks and reads no store
    assert violations(planted, True, frozenset({"torch", "tensorflow"}))[0].startswith("imports_the_harness.py:15")


def test_a_shared_module_may_not_import_the_worker_side():
    worker_importer = PACKAGE_DIR / "worker" / "probe.py"  # imports dlbench.worker.base and .detector
    found = violations(worker_importer, may_import_worker_side=False, packages=frozenset())
    assert found and all("(a worker-side module)" in row for row in found)
