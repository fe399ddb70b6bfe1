"""The worker side must import under Python 3.8 with an old numpy (the legacy frameworks' world) and
draw exactly the weights and batch orders that the harness's numpy draws."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import guard
import numpy as np
import pytest
from sides import SHARED, WORKER

from dlbench.harness.environments import envs
from dlbench.harness.environments.process import PACKAGE_PARENT
from dlbench.harness.plan.workloads import WORKLOADS
from dlbench.shared.initializers import canonical_init
from dlbench.worker.base import epoch_order

WORKER_SIDE = [*WORKER, *SHARED]
OLD_NUMPY = "numpy==1.17.5"  # the 1.17 line is the oldest with Python 3.8 wheels; legacy envs pin < 1.24
SMALL_META = {"lstm-imdb": {"vocab_size": 300, "seq_len": 20}, "lstm-ptb": {"vocab_size": 300, "seq_len": 10}}

DRAW = """
import json, sys
import numpy as np
import dlbench.worker.train
from dlbench.worker.base import epoch_order
from dlbench.shared.initializers import canonical_init
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


@pytest.mark.framework
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


DETECTION = """
import sys
import numpy as np
from dlbench.shared.detection.boxes import shifted_anchors
from dlbench.shared.detection.nms import nms
from dlbench.shared.detection.pipeline import roi_align_plan
from dlbench.shared.detection.targets import roi_targets, rpn_targets
from dlbench.shared.detection.voc_eval import voc_map
gt = np.array([[100, 100, 300, 400], [400, 50, 700, 250], [30, 420, 90, 590]], np.float32)
rng = np.random.RandomState(11)
corners = rng.uniform(0, 500, (300, 2))
proposals = np.concatenate([corners, corners + rng.uniform(8, 300, (300, 2))], axis=1).astype(np.float32)
out = {"proposals": proposals}
for key, value in rpn_targets(shifted_anchors(38, 50), gt, 600, 800, np.random.RandomState(5)).items():
    out["rpn_" + key] = value
for key, value in roi_targets(proposals, gt, np.array([3, 14, 7]), np.random.RandomState(5)).items():
    out["roi_" + key] = value
out["nms"] = nms(proposals, rng.randint(0, 20, 300) / 20.0, 0.5)
roi = {"size": 7, "sampling_ratio": 2, "spatial_scale": 1 / 16.0}
out["plan_index"], out["plan_weights"] = roi_align_plan(proposals[:20], (38, 50), roi)
det = (proposals[:40], np.linspace(1, 0, 40), np.arange(40) % 20)
out["ap"] = voc_map([det], [(gt, np.array([3, 14, 7]), np.array([0, 0, 1], np.uint8))])["ap"]
np.savez(sys.argv[1], **out)
print(np.__version__, sys.version_info[:2])
"""


@pytest.mark.framework
def test_python_3_8_and_old_numpy_compute_identical_detection_targets(python38, tmp_path):
    """The detector's shared pieces sample the same anchors and RoIs from a seed in every numpy."""
    drawn = tmp_path / "detection.npz"
    done = subprocess.run([str(python38), "-c", DETECTION, str(drawn)], text=True, capture_output=True,
                          env={"PYTHONPATH": str(PACKAGE_PARENT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1.17.5 (3, 8)")
    old, new = np.load(drawn), tmp_path / "new.npz"
    done = subprocess.run([sys.executable, "-c", DETECTION, str(new)], text=True, capture_output=True,
                          env={"PYTHONPATH": str(PACKAGE_PARENT)})
    assert done.returncode == 0, done.stderr
    new = np.load(new)
    assert sorted(old.files) == sorted(new.files)
    assert (old["rpn_labels"] == 1).sum() > 0 and (old["roi_labels"] > 0).sum() > 0
    for key in old.files:
        if old[key].dtype.kind == "f":  # log and exp may differ in the last bit between numpy builds
            assert np.allclose(old[key], new[key], rtol=1e-6, atol=0, equal_nan=True), key
        else:
            assert np.array_equal(old[key], new[key]), key


IMPORT_WORKER = """
import importlib, sys
import numpy
import dlbench.worker.gemm_peak
import dlbench.worker.probe
import dlbench.worker.train
import dlbench.worker.cell
from dlbench.worker.base import sibling_module
name = dlbench.worker.cell.load_adapter_class(sys.argv[1]).name
for module in ("detector", "gemm"):  # loaded by name beside the adapter
    importlib.import_module(sibling_module(sys.argv[1], module))
print("%d.%d.%d" % sys.version_info[:3], numpy.__version__, name)
"""


@pytest.mark.framework
@pytest.mark.parametrize("framework", sorted(envs.RECIPES))
def test_worker_side_imports_under_each_environments_python_and_numpy(framework, tmp_path):
    env = envs.require(framework)  # make test builds it first
    recipe = envs.get_recipe(framework)
    variables = {"PYTHONPATH": str(PACKAGE_PARENT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                 "TMPDIR": str(tmp_path), **recipe.worker_env}
    done = guard.run([str(env.python), "-c", IMPORT_WORKER, recipe.adapter], 1200, env=variables)
    assert done.returncode == 0, done.stderr[-3000:]
    python, numpy_version, name = done.stdout.split()
    assert python == env.info()["python_version"]
    assert numpy_version == env.info()["packages"]["numpy"]
    assert framework.startswith(name)  # the keras-* environments share one adapter
