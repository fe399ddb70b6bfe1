"""The worker side must import under Python 3.8 with an old numpy (the legacy frameworks' world) and
draw exactly the weights and batch orders that the harness's numpy draws."""
import ast
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dlbench import envs
from dlbench.frameworks.base import epoch_order
from dlbench.models.init import canonical_init
from dlbench.runner import PACKAGE_PARENT
from dlbench.workloads import WORKLOADS

PACKAGE = PACKAGE_PARENT / "dlbench"
WORKER_SIDE = [PACKAGE / "worker.py", PACKAGE / "peak.py", *sorted((PACKAGE / "models").glob("*.py")),
               *sorted((PACKAGE / "frameworks").glob("*.py"))]
OLD_NUMPY = "numpy==1.17.5"  # the 1.17 line is the oldest with Python 3.8 wheels; legacy envs pin < 1.24
SMALL_META = {"lstm-imdb": {"vocab_size": 300, "seq_len": 20}, "lstm-ptb": {"vocab_size": 300, "seq_len": 10}}

DRAW = """
import json, sys
import numpy as np
import dlbench.worker
from dlbench.frameworks.base import epoch_order
from dlbench.models.init import canonical_init
models = json.load(sys.stdin)
out = {}
for name, model in models.items():
    for key, value in canonical_init(model, 7).items():
        out[name + ":" + key] = value
out["order"] = epoch_order(7, 3, 1000)
np.savez(sys.argv[1], **out)
print(np.__version__, sys.version_info[:2])
"""


@pytest.mark.parametrize("path", WORKER_SIDE, ids=lambda p: p.name)
def test_worker_side_parses_as_python_3_8(path):
    ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))


@pytest.fixture(scope="module")
def python38(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("py38") / "venv"
    uv = envs.uv_command()
    subprocess.run(uv + ["venv", "--quiet", "--python", envs.find_interpreter("3.8"), str(venv)], check=True)
    subprocess.run(uv + ["pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), OLD_NUMPY],
                   check=True)
    return venv / "bin" / "python"


def models() -> dict[str, dict]:
    return {name: w.model(dict(w.study_meta, **SMALL_META.get(name, {}))) for name, w in WORKLOADS.items()}


def test_python_3_8_and_old_numpy_draw_identical_weights_and_order(python38, tmp_path):
    drawn = tmp_path / "drawn.npz"
    done = subprocess.run([str(python38), "-c", DRAW, str(drawn)], input=json.dumps(models()), text=True,
                          capture_output=True, env={"PYTHONPATH": str(PACKAGE_PARENT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1.17.5 (3, 8)")
    old = np.load(drawn)
    assert np.array_equal(old["order"], epoch_order(7, 3, 1000))
    for name, model in models().items():
        for key, value in canonical_init(model, 7).items():
            # QR of the orthogonal init goes through each numpy's LAPACK: allow float32 rounding there
            assert np.allclose(old[name + ":" + key], value, rtol=0, atol=1e-6), (name, key)


IMPORT_WORKER = """
import sys
import numpy
import dlbench.probe
import dlbench.worker
print("%d.%d.%d" % sys.version_info[:3], numpy.__version__, dlbench.worker.load_adapter_class(sys.argv[1]).name)
"""


@pytest.mark.parametrize("framework", sorted(envs.RECIPES))
def test_worker_side_imports_under_each_environments_python_and_numpy(framework, tmp_path):
    env = envs.require(framework)  # make test builds it first
    recipe = envs.get_recipe(framework)
    variables = {"PYTHONPATH": str(PACKAGE_PARENT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                 "TMPDIR": str(tmp_path), **recipe.worker_env}
    done = subprocess.run([str(env.python), "-c", IMPORT_WORKER, recipe.adapter], capture_output=True, text=True,
                          env=variables, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    python, numpy_version, name = done.stdout.split()
    assert python == env.info()["python_version"]
    assert numpy_version == env.info()["packages"]["numpy"]
    assert framework.startswith(name)  # the keras-* environments share one adapter
