"""An adapter is a table (issue #42): each framework package declares, in its layers.py, one LayerEntry per
IR layer kind (`LAYERS`) and the kinds it refuses with the reason (`REFUSED`); together they are exactly the
IR's kinds, and an entry has weights exactly when its kind does. Read from the source, so that it runs
without any framework installed; each framework's adapter check then builds every entry in its own
environment (test_adapters.py)."""
import ast
from pathlib import Path

import pytest

from dlbench.shared import ir

FRAMEWORKS_DIR = Path(__file__).resolve().parents[1] / "src" / "dlbench" / "worker" / "frameworks"
PACKAGES = sorted(path.name for path in FRAMEWORKS_DIR.iterdir() if (path / "__init__.py").exists())
# the files every framework package has, one concern each, as Keras 3's backends do
PACKAGE_FILES = {"__init__.py", "adapter.py", "layers.py", "optimizers.py", "losses.py", "detector.py", "gemm.py"}


def module_dict(package: str, name: str) -> dict:
    """The dict literal assigned to `name` at the top of the package's layers.py: key -> value's AST."""
    tree = ast.parse((FRAMEWORKS_DIR / package / "layers.py").read_text())
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(target, ast.Name) and target.id == name for target in targets):
            assert isinstance(node.value, ast.Dict), f"{package}/layers.py: {name} must be a dict literal"
            keys = [ast.literal_eval(key) for key in node.value.keys]
            assert len(keys) == len(set(keys)), f"{package}/layers.py: {name} repeats a kind"
            return dict(zip(keys, node.value.values, strict=True))
    raise AssertionError(f"{package}/layers.py assigns no {name}")


def weights_argument(package: str, kind: str, entry: ast.AST) -> ast.AST:
    assert isinstance(entry, ast.Call) and getattr(entry.func, "id", None) == "LayerEntry", \
        f"{package}: LAYERS[{kind!r}] must be a LayerEntry(build, weights)"
    keywords = {keyword.arg: keyword.value for keyword in entry.keywords}
    return entry.args[1] if len(entry.args) > 1 else keywords["weights"]


def test_the_packages_are_the_recipes_frameworks():
    assert PACKAGES == ["chainer", "jax", "keras3", "mxnet", "pytorch", "tensorflow", "theano"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_has_the_same_files(package):
    files = {path.name for path in (FRAMEWORKS_DIR / package).glob("*.py")}
    assert files == PACKAGE_FILES


@pytest.mark.parametrize("package", PACKAGES)
def test_the_table_and_the_refusals_are_the_irs_kinds(package):
    built, refused = module_dict(package, "LAYERS"), module_dict(package, "REFUSED")
    assert not set(built) & set(refused), f"{package}: built and refused at once"
    assert set(built) | set(refused) == set(ir.LAYER_SETTINGS)
    for kind, reason in refused.items():
        assert isinstance(reason, ast.Constant) and isinstance(reason.value, str) and reason.value.strip(), \
            f"{package}: REFUSED[{kind!r}] must state its reason"


@pytest.mark.parametrize("package", PACKAGES)
def test_an_entry_has_weights_exactly_when_its_kind_does(package):
    for kind, entry in module_dict(package, "LAYERS").items():
        weights = weights_argument(package, kind, entry)
        is_none = isinstance(weights, ast.Constant) and weights.value is None
        assert is_none == (kind in ir.WEIGHTLESS), f"{package}: LAYERS[{kind!r}].weights"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_but_the_table_dispatches_on_a_layer_kind(package):
    """A kind compared by name outside layers.py is a layer kind spread over two places again."""
    kinds = set(ir.LAYER_SETTINGS)
    for path in sorted((FRAMEWORKS_DIR / package).glob("*.py")):
        if path.name in ("layers.py", "detector.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                named = {getattr(part, "value", None) for part in [node.left, *node.comparators]}
                named |= {getattr(item, "value", None) for part in node.comparators
                          for item in getattr(part, "elts", [])}
                assert not named & kinds, f"{package}/{path.name}:{node.lineno} compares a layer kind"
