"""cnn-mnist trained for one epoch with PyTorch on the real Fashion-MNIST of Debian's
dataset-fashion-mnist, through the MNIST code path, offline (CI installs the package)."""

import json
import os
import sys
from pathlib import Path

import guard
import pytest

from dlbench.harness.data.mnist import DEBIAN_FASHION
from dlbench.harness.environments import envs
from dlbench.harness.store import Store

pytestmark = pytest.mark.framework


@pytest.mark.skipif(not Path(DEBIAN_FASHION).is_dir(),
                    reason=f"needs Debian's dataset-fashion-mnist in {DEBIAN_FASHION} (.ci/run installs it)")
def test_one_epoch_on_real_fashion_mnist(tmp_path):
    envs.require("pytorch")
    suite = tmp_path / "fashion.yaml"
    # one thread, as in test_e2e: beside the other pytest worker, more threads fight for its core
    suite.write_text("name: fashion\nframeworks: [pytorch]\nthreads: 1\nworkloads:\n"
                     "  - {workload: cnn-mnist, dataset: fashion-mnist, epochs: 1}\n")
    done = guard.run(  # 150 s on the slowest machine seen
        [sys.executable, "-m", "dlbench", "run", str(suite), "--results", str(tmp_path / "results"),
         "--data-dir", str(tmp_path / "data")], 1200, env=dict(os.environ, DLBENCH_OFFLINE="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    with Store(tmp_path / "results" / "dlbench.sqlite") as store:
        (run,) = store.runs()
    meta = json.loads((tmp_path / "data" / "prepared" / "fashion-mnist" / "meta.json").read_text())
    assert (meta["n_train"], meta["n_test"]) == (60000, 10000)
    print(f"fashion-mnist, 1 epoch: accuracy {run['metric_value']:.4f}, train {run['train_time_s']:.1f} s")
    assert run["metric_value"] > 0.6  # chance is 0.1
