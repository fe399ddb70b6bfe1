"""GPU smoke check: one short cnn-mnist cell per framework on a GPU, through the whole harness (worker,
monitor with NVML, peak, store), then what was stored: status, times, GPU utilisation and memory, the
NVML series, energy.

    PYTHONPATH=src python benchmarks/gpu_smoke.py --python /opt/venv/bin/python3 --out DIR \\
        -f pytorch -f jax -f keras-torch -f keras-jax

For a machine that cannot build dlbench's environments (no registry) but has one interpreter holding
CUDA builds of the frameworks: that interpreter is registered as each named framework's environment in a
scratch DLBENCH_HOME under DIR (the folder of the framework's GPU environment), its dlbench-env.json
holding that interpreter's real package list (so every run records what it ran with) and the CUDA
recipe's digest (so `dlbench run` takes it as built and builds nothing). The
frameworks' versions are therefore that interpreter's, not the recipes' pins: a check of the GPU code
paths, not of the recipes. A package that interpreter lacks (keras, say) must be installed into it: the
runner gives workers dlbench's own folder as their PYTHONPATH, so one added there does not reach them.
Exit status: dlbench run's.
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from dlbench.harness.environments import envs


def register(python: str, framework: str, home: Path) -> None:
    folder = home / "envs" / envs.folder_name(framework, "gpu")
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    # a script, not a link: a link to a venv's interpreter from elsewhere may lose that venv's packages
    launcher = folder / "bin" / "python"
    launcher.write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
    launcher.chmod(0o755)
    listing = ("import importlib.metadata as m, json; "
               "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))")
    packages = json.loads(subprocess.run([python, "-c", listing], capture_output=True, text=True, check=True).stdout)
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    info = {"framework": framework, "device": "gpu", "recipe": envs.get_recipe(framework, "gpu").digest(),
            "python_version": version,
            "packages": packages,
            "adopted_interpreter": python, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (folder / "dlbench-env.json").write_text(json.dumps(info, indent=1, sort_keys=True))


def stored(results: Path) -> None:
    if not (results / "dlbench.sqlite").is_file():
        print(f"no results stored in {results}")
        return
    with sqlite3.connect(results / "dlbench.sqlite") as db:
        db.row_factory = sqlite3.Row
        for run in db.execute("SELECT * FROM runs ORDER BY id"):
            samples = db.execute("SELECT COUNT(*), COUNT(gpu_util_percent), MAX(gpu_util_percent), "
                                 "MAX(gpu_mem_mb) FROM samples WHERE run_id = ?", (run["id"],)).fetchone()
            print(json.dumps({
                "framework": run["framework"], "version": run["framework_version"], "device": run["device"],
                "status": run["status"], "reason": run["reason"], "first_epoch_s": run["first_epoch_s"],
                "steady_epoch_s": run["steady_epoch_s"], "metric": [run["metric_name"], run["metric_value"]],
                "mean_gpu_util_percent": run["mean_gpu_util_percent"], "peak_gpu_mem_mb": run["peak_gpu_mem_mb"],
                "samples": samples[0], "samples_with_gpu": samples[1], "max_gpu_util": samples[2],
                "max_gpu_mem_mb": samples[3], "energy_source": run["energy_source"], "mfu": run["mfu"],
                "certificate": run["certificate"], "gpu_memory": json.loads(run["config"]).get("gpu_memory")}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="an interpreter holding the frameworks' CUDA builds")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("-f", "--framework", action="append", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--gpu-memory", default="default", help="dlbench run --gpu-memory: default or grow")
    parser.add_argument("-w", "--workload", action="append", help="quick-suite workloads (default: cnn-mnist)")
    parser.add_argument("--data-dir", help="dlbench run --data-dir: where the prepared datasets are")
    args = parser.parse_args()
    home = args.out / "home"
    for framework in args.framework:
        register(args.python, framework, home)
    variables = dict(os.environ, DLBENCH_HOME=str(home))
    command = [sys.executable, "-m", "dlbench", "run", "quick", "--device", "gpu",
               "--epochs", str(args.epochs), "--results", str(args.out / "results"), "--plain",
               "--gpu-memory", args.gpu_memory]
    command += [part for name in args.workload or ["cnn-mnist"] for part in ("-w", name)]
    command += [part for name in args.framework for part in ("-f", name)]
    command += ["--data-dir", args.data_dir] if args.data_dir else []
    done = subprocess.run(command, env=variables)
    stored(args.out / "results")
    subprocess.run([sys.executable, "-m", "dlbench", "env", "list"], env=variables)  # the GPU environments
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
