"""Synthetic stores for the report and findings tests: runs as the runner stores them, with known answers."""
import random
from pathlib import Path

from dlbench.harness.analysis.dataset_label import recipe_batch_size
from dlbench.harness.certification.certified_model import workload_digest
from dlbench.harness.environments import sources
from dlbench.harness.plan.workloads import get_workload
from dlbench.harness.store import Store

VERSIONS = {"pytorch": "2.13.0", "jax": "0.6.2", "tensorflow": "2.20.0"}
METRICS = {"cnn-mnist": ("accuracy", 0.985), "lstm-ptb": ("perplexity", 200.0), "lstm-imdb": ("accuracy", 0.85),
           "frcnn-voc": ("map", 0.3), "transformer-lm": ("perplexity", 170.0), "vit-cifar10": ("accuracy", 0.75)}
MACHINE = {"hostname": "bench-1", "cpu_model": "Test CPU @ 2.0GHz", "logical_cores": 2, "memory_mib": 7936,
           "gpus": [], "os": "Linux-6.1-x86_64", "python": "3.11.2"}
DATASETS = {"cnn-mnist": "digits-28", "lstm-ptb": "lee-news-lm", "lstm-imdb": "pang-lee-polarity",
            "frcnn-voc": "photo-boxes", "transformer-lm": "lee-news-lm", "vit-cifar10": "photo-patches-10"}


def synthetic_run(framework: str, workload: str, repetition: int, steady: float, metric: float, *,
                  first: float | None = None, epochs: int = 4, done: int | None = None, status: str = "ok",
                  reason: str | None = None, device: str = "cpu", certificate: str = "passed",
                  n_samples: int = 40, position: int = 0, machine: bool = True) -> tuple[dict, list[dict], list[dict]]:
    """One run: `done` of `epochs` epochs (all by default), steady epochs of `steady` seconds, the metric
    moving towards `metric` and reaching it at the last planned epoch."""
    done = epochs if done is None else done
    first = steady * 1.5 if first is None else first
    metric_name, target = METRICS[workload]
    start = 2000.0 if metric_name == "perplexity" else 0.1
    rows = []
    for k in range(1, done + 1):
        value = start + (metric - start) * k / epochs
        rows.append({"epoch": k, "train_time_s": first if k == 1 else steady, "eval_time_s": 0.05,
                     "train_loss": 1.0 / k, "train_accuracy": None, "metric_value": value,
                     "metrics": {metric_name: value}})
    rng = random.Random(hash((framework, workload, repetition)) & 0xFFFF)
    samples = [{"t_s": i * 0.1, "cpu_percent": 150 + rng.random() * 40, "rss_mb": 300 + i * 0.5,
                "threads": 8, "system_cpu_percent": 180 + rng.random() * 10, "gpu_util_percent": None,
                "gpu_mem_mb": None} for i in range(n_samples)]
    train = sum(r["train_time_s"] for r in rows)
    higher = metric_name == "accuracy"
    reached = [k for k, r in enumerate(rows)
               if (r["metric_value"] >= target if higher else r["metric_value"] <= target)]
    to_target = sum(r["train_time_s"] for r in rows[:reached[0] + 1]) if reached else None
    run = {
        "cell_hash": f"{framework}-{workload}-{device}-{repetition}", "suite": "test", "framework": framework,
        "framework_version": VERSIONS.get(framework, "1.0"), "workload": workload, "dataset": DATASETS[workload],
        "device": device, "repetition": repetition, "status": status, "reason": reason,
        "started_at": f"2026-12-03T10:{position // 60:02d}:{position % 60:02d}+0000", "wall_time_s": train + 3,
        "harness_cpu_s": 0.01 * (train + 3), "monitor_cpu_s": 0.004 * (train + 3),
        "train_time_s": train if rows else None, "first_epoch_s": first if rows else None,
        "steady_epoch_s": steady if done > 1 else None, "metric_name": metric_name,
        "metric_value": rows[-1]["metric_value"] if rows else None, "target_value": target, "params": 1000,
        "time_to_target_s": to_target,
        "peak_rss_mb": 320.0, "mean_cpu_percent": 170.0, "threads": 2, "python": "3.11.2 /envs/python",
        "packages": {framework: VERSIONS.get(framework, "1.0"), "numpy": "2.1.0"},
        "config": {"threads": 2, "seed": repetition - 1, "repetition": repetition,
                   "recipe": {"epochs": epochs, "batch_size": recipe_batch_size(workload) or 128}},
        "certificate": "reference" if framework == "pytorch" else certificate,
        "plan_position": position, "machine": MACHINE if machine else None,
        "dlbench_version": {"version": "0.1.0", "commit": "0123456789abcdef", "dirty": False},
    }
    return run, rows, samples


def jitter(value: float, repetition: int, spread: float = 0.02) -> float:
    """A deterministic spread of about +-spread around value over the repetitions."""
    return value * (1 + spread * ((repetition * 7919) % 11 - 5) / 5)


def study_store(path: Path, repetitions: int = 8) -> Path:
    """Three frameworks on two workloads, `repetitions` each: jax clearly fastest with a compiling first
    epoch, pytorch and tensorflow level; one failed tensorflow run, one jax run stopped after 2 of 4
    epochs; certificates stored for jax (pass, current code) and tensorflow (fail, older code)."""
    speeds = {"pytorch": 1.0, "jax": 0.6, "tensorflow": 1.01}
    accuracy = {"pytorch": 0.93, "jax": 0.931, "tensorflow": 0.80}
    perplexity = {"pytorch": 150.0, "jax": 151.0, "tensorflow": 149.0}
    position = 0
    with Store(path / "dlbench.sqlite") as store:
        for rep in range(1, repetitions + 1):
            for framework in speeds:
                for workload, metric in (("cnn-mnist", accuracy), ("lstm-ptb", perplexity)):
                    position += 1
                    kwargs: dict = {"position": position, "certificate": "failed" if framework == "tensorflow"
                                    else "passed"}
                    if framework == "jax":
                        kwargs["first"] = 8.0
                    if framework == "tensorflow" and workload == "cnn-mnist" and rep == 2:
                        kwargs.update(status="failed", reason="worker exited with status 1: <OOM> & friends",
                                      done=0)
                    if framework == "jax" and workload == "lstm-ptb" and rep == repetitions:
                        kwargs.update(status="timeout", reason="timed out after 600 s", done=2)
                    store.save_run(*synthetic_run(framework, workload, rep, jitter(speeds[framework], rep),
                                                  jitter(metric[framework], rep, 0.002), **kwargs))
        for framework, passed, worst in (("jax", 1, 3e-6), ("tensorflow", 0, 4e-2)):
            for workload in ("cnn-mnist", "lstm-ptb"):
                store.save_certificate({
                    "framework": framework, "framework_version": VERSIONS[framework], "framework_env": "abc",
                    "reference": "pytorch", "reference_version": VERSIONS["pytorch"], "workload": workload,
                    "passed": passed, "worst_tensor": "grad/dense_1/kernel", "worst_scaled_deviation": worst,
                    "created_at": "2026-12-03T09:00:00+0000",
                    # jax's from the code this dlbench runs; tensorflow's from an adapter since changed
                    "worker_source": sources.framework_source(framework) if framework == "jax" else "0ld",
                    "reference_source": sources.framework_source("pytorch"),
                    "workload_digest": workload_digest(get_workload(workload)),
                    "deviations": [{"tensor": "grad/dense_1/kernel", "kind": "gradient", "max_abs": worst,
                                    "max_rel": worst, "tolerance": 1e-3, "passed": bool(passed)}]})
    return path / "dlbench.sqlite"


# the quick suite's shape: nine frameworks, each ~QUICK_SPEED times pytorch's steady epoch, and its first
# epoch QUICK_FIRST times its steady one (compilation: most above the findings' threshold, as in a real run)
QUICK_SPEED = {"pytorch": 1.0, "jax": 0.7, "tensorflow": 1.3, "keras-jax": 1.1, "keras-tensorflow": 2.9,
               "keras-torch": 1.6, "mxnet": 0.9, "chainer": 8.0, "theano": 2.2}
QUICK_FIRST = {"pytorch": 1.3, "jax": 9.0, "tensorflow": 6.0, "keras-jax": 12.0, "keras-tensorflow": 7.0,
               "keras-torch": 4.0, "mxnet": 3.5, "chainer": 1.2, "theano": 40.0}


def quick_store(path: Path, repetitions: int = 3) -> Path:
    """The six workloads of METRICS x the nine frameworks of QUICK_SPEED, `repetitions` runs each (a few per
    cent apart), every pair certified but pytorch's (the reference)."""
    position = 0
    with Store(path / "dlbench.sqlite") as store:
        for rep in range(1, repetitions + 1):
            for workload, (_, target) in METRICS.items():
                for framework, speed in QUICK_SPEED.items():
                    position += 1
                    steady = jitter(speed * (1 + len(workload) / 10), rep, 0.03)
                    store.save_run(*synthetic_run(framework, workload, rep, steady, target,
                                                  first=steady * QUICK_FIRST[framework], position=position,
                                                  n_samples=8))
    return path / "dlbench.sqlite"


SWEEP_N_TRAIN = 1000  # a sweep run's training samples per epoch
# steady epoch times per framework and thread count (cnn-mnist, the recipe's batch 128); jax has no 1 thread
THREAD_TIMES = {("pytorch", 1): [9.0, 10.0, 11.0], ("pytorch", 2): [5.0, 5.5, 6.0], ("pytorch", 4): [3.0, 3.0, 3.5],
                ("jax", 2): [6.0, 6.0, 6.0], ("jax", 4): [4.0, 4.0, 4.0]}


def sweep_run(framework: str, steady: float, repetition: int, *, threads: int = 2, batch_size: int = 128,
              position: int = 0) -> tuple[dict, list[dict], list[dict]]:
    """A stored cnn-mnist run of one sweep cell: its threads and batch size in its configuration."""
    run, rows, samples = synthetic_run(framework, "cnn-mnist", repetition, steady, 0.95, position=position,
                                       n_samples=3)
    run["config"]["threads"] = run["threads"] = threads
    run["config"]["recipe"]["batch_size"] = batch_size
    run["cell_hash"] = f"{framework}-{threads}-{batch_size}-{repetition}"
    run["n_train"] = SWEEP_N_TRAIN
    return run, rows, samples


def store_of(folder: Path, runs: list[tuple[dict, list[dict], list[dict]]]) -> list[dict]:
    """A results folder holding these runs; returns them as the store reads them back."""
    folder.mkdir(parents=True, exist_ok=True)
    with Store(folder / "dlbench.sqlite") as store:
        for run in runs:
            store.save_run(*run)
        return store.runs()


def thread_sweep(times: dict[tuple[str, int], list[float]] = THREAD_TIMES) -> list:
    """One run per (framework, threads) and time listed, repetitions counted from 1."""
    return [sweep_run(framework, t, rep, threads=threads, position=10 * threads + rep)
            for (framework, threads), values in times.items() for rep, t in enumerate(values, 1)]


def serving_run(framework: str, workload: str, repetition: int, latencies: list[float], samples_per_s: float, *,
                status: str = "ok", reason: str | None = None, device: str = "cpu", first_call_s: float = 0.5,
                peak_rss_mb: float = 400.0, position: int = 0) -> tuple[dict, list[float]]:
    """One inference run as the runner stores it (run/record.py with measure/serving.py): its latencies
    (seconds, in call order) and the row's figures computed from them with numpy, as the runner does."""
    from dlbench.harness.measure.serving import percentiles_ms

    ok = status == "ok"
    batch = 1 if workload == "frcnn-voc" else (recipe_batch_size(workload) or 128)
    run = {
        "cell_hash": f"serve-{framework}-{workload}-{device}-{repetition}", "suite": "serve", "framework": framework,
        "framework_version": VERSIONS.get(framework, "1.0"), "workload": workload, "dataset": DATASETS[workload],
        "device": device, "repetition": repetition, "status": status, "reason": reason,
        "started_at": f"2026-12-04T10:{position // 60:02d}:{position % 60:02d}+0000", "wall_time_s": 9.0,
        "metric_name": METRICS[workload][0], "target_value": METRICS[workload][1], "params": 1000,
        "peak_rss_mb": peak_rss_mb, "threads": 2, "python": "3.11.2 /envs/python",
        "packages": {framework: VERSIONS.get(framework, "1.0"), "numpy": "2.1.0"},
        "config": {"threads": 2, "seed": repetition - 1, "repetition": repetition, "mode": "inference",
                   "recipe": {"epochs": 0, "batch_size": batch},
                   "serve": {"warmup_calls": 20, "latency_calls": len(latencies), "throughput_batch": batch,
                             "throughput_samples": 1024}},
        "certificate": "reference" if framework == "pytorch" else "passed", "plan_position": position,
        "machine": MACHINE, "dlbench_version": {"version": "0.1.0", "commit": "0123456789abcdef", "dirty": False},
        "mode": "inference",
    }
    if ok:
        run.update(percentiles_ms(latencies), first_call_s=first_call_s, warmup_calls=20,
                   latency_calls=len(latencies), serve_batch_size=batch, throughput_samples=1024,
                   throughput_s=1024 / samples_per_s, samples_per_s=samples_per_s, first_batch_call_s=first_call_s * 2)
    return run, latencies if ok else []


def serving_store(path: Path, repetitions: int = 3, with_training: bool = True) -> Path:
    """Inference runs of pytorch and jax on cnn-mnist and lstm-imdb, `repetitions` each, known latencies
    (jax's calls half of pytorch's) and throughput; one jax lstm-imdb run failed; with_training: beside
    study_store's training runs."""
    if with_training:
        study_store(path, repetitions=2)
    position = 1000
    with Store(path / "dlbench.sqlite") as store:
        for rep in range(1, repetitions + 1):
            for framework, scale in (("pytorch", 1.0), ("jax", 0.5)):
                for workload in ("cnn-mnist", "lstm-imdb"):
                    position += 1
                    latencies = [scale * (0.002 + 0.0001 * ((call * 7 + rep) % 10) + 0.00005 * rep)
                                 for call in range(50)]
                    kwargs: dict = {"position": position}
                    if framework == "jax" and workload == "lstm-imdb" and rep == 1:
                        kwargs.update(status="failed", reason="worker exited with status 1")
                    run, kept = serving_run(framework, workload, rep, latencies, 1000.0 / scale + rep, **kwargs)
                    store.save_run(run, [], [], kept)
    return path / "dlbench.sqlite"
