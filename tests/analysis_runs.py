"""Synthetic stored runs for the analysis tests: what Store.save_run receives from the runner, reduced to
the fields analysis reads, with timings drawn around a chosen median."""
from pathlib import Path

import numpy as np

from dlbench.harness.analysis.dataset_label import recipe_batch_size
from dlbench.harness.store import Store

MODEL = {"layers": [{"type": "dense", "units": 10}]}


def run_dict(framework: str, workload: str, steady_s: float, repetition: int, *, version: str = "1.0",
             status: str = "ok", reason: str | None = None, metric: float = 0.9, epochs: int = 3,
             planned: int = 3, dataset: str = "digits-28", device: str = "cpu") -> dict:
    config = {"framework": framework, "workload": workload, "dataset": dataset, "device": device, "threads": 2,
              "seed": repetition - 1, "repetition": repetition, "model": MODEL,
              "recipe": {"epochs": planned, "batch_size": recipe_batch_size(workload) or 32},
              "env_packages": {framework: version}, "python": "3.11.7"}
    ok = status == "ok"
    return {
        "cell_hash": f"{framework}-{workload}-{dataset}-{device}-{planned}-{repetition}", "framework": framework,
        "framework_version": version, "workload": workload, "dataset": dataset, "device": device,
        "repetition": repetition, "status": status, "reason": reason, "metric_name": "accuracy",
        "metric_value": metric, "steady_epoch_s": steady_s if ok else None,
        "first_epoch_s": 2 * steady_s, "train_time_s": 2 * steady_s + (epochs - 1) * steady_s if ok else None,
        "peak_rss_mb": 500.0, "mean_cpu_percent": 180.0, "certificate": "reference" if framework == "pytorch"
        else "passed", "config": config,
    }


def epochs(count: int, steady_s: float) -> list[dict]:
    return [{"epoch": e, "train_time_s": steady_s * (2 if e == 1 else 1), "metric_value": 0.9}
            for e in range(1, count + 1)]


def noisy(median: float, n: int, cv: float, seed: int) -> list[float]:
    """n lognormal draws whose median is `median` and coefficient of variation about cv."""
    sigma = np.sqrt(np.log1p(cv ** 2))
    return [float(v) for v in median * np.exp(np.random.default_rng(seed).normal(0, sigma, n))]


def build_store(folder: Path, runs: list[dict]) -> Path:
    """A results folder whose store holds these runs (each with its epochs); returns the folder."""
    with Store(folder / "dlbench.sqlite") as store:
        for run in runs:
            count = run.pop("_epochs", run["config"]["recipe"]["epochs"])
            store.save_run(run, epochs(count, run["steady_epoch_s"] or 1.0), [])
    return folder


def history_runs(steady: dict[str, float], peak: dict[str, float] | None = None, reps: int = 5) -> list[dict]:
    """cnn-mnist runs of pytorch, `reps` per version, steady epochs about the given medians (1 % noise)."""
    runs = []
    for i, (version, median) in enumerate(steady.items()):
        for repetition, value in enumerate(noisy(median, reps, 0.01, seed=i), 1):
            # the default version's runs are labelled by the name alone, as `dlbench run` labels them
            name = "pytorch" if version.startswith("2.13.0") else f"pytorch@{version}"
            run = run_dict(name, "cnn-mnist", value, repetition, version=version)
            run["cell_hash"] += version
            run["peak_rss_mb"] = (peak or {}).get(version, 500.0) * (1 + 0.001 * repetition)
            runs.append(run)
    return runs
