"""`dlbench` with one more framework, fakefw: tests/fake_framework.py (numpy alone) in an "environment"
whose interpreter is the harness's own. `python tests/fake_dlbench.py run SUITE ...` runs a real plan
through the real command line (lock, peak, worker, store, progress) at about a second a cell, where a
real framework takes several. make_environment builds its environment under a DLBENCH_HOME; each test
that runs it sets DLBENCH_HOME to a folder of its own."""
import json
import os
import sys
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"
sys.path.insert(0, str(SRC))

from dlbench.harness import cli  # noqa: E402
from dlbench.harness.environments import envs  # noqa: E402

# The worker finds the fake adapter on tests/ (worker_environment replaces PYTHONPATH with src alone).
RECIPE = envs.Recipe("fakefw", "3.11", ("numpy",), "fake_framework:Adapter", "numpy", "numpy",
                     worker_env={"PYTHONPATH": f"{SRC}{os.pathsep}{TESTS}"})
SUITE = """name: fakes
frameworks: [fakefw]
threads: 1
workloads:
  - {workload: cnn-mnist, dataset: digits-28, epochs: 2}
"""


def register() -> None:
    envs.RECIPES.setdefault("fakefw", RECIPE)


def make_environment(home: Path) -> Path:
    """The fakefw environment under `home` (a DLBENCH_HOME): dlbench-env.json as `env create` writes it,
    and bin/python, a script that runs this interpreter."""
    folder = home / "envs" / "fakefw"
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    python = folder / "bin" / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    info = {"recipe": RECIPE.digest(), "packages": {"numpy": np.__version__},
            "python_version": ".".join(map(str, sys.version_info[:3]))}
    (folder / "dlbench-env.json").write_text(json.dumps(info))
    return folder


def suite_file(folder: Path, monkeypatch, more: str = "", text: str = SUITE) -> Path:
    """`text` (SUITE by default, with `more` appended) written in `folder`, and fakefw's environment under a
    DLBENCH_HOME in `folder`, which `monkeypatch` (a test's) sets for the test."""
    home = folder / "home"
    make_environment(home)
    monkeypatch.setenv("DLBENCH_HOME", str(home))
    path = folder / "fakes.yaml"
    path.write_text(text + more)
    return path


if __name__ == "__main__":
    register()
    sys.exit(cli.main(sys.argv[1:]))
