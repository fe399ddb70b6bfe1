"""Serving figures of each framework's serving path, outside any suite: batch-1 latency and throughput.

    python benchmarks/serve_figures.py [--frameworks pytorch jax ...] [--workloads cnn-mnist lstm-imdb]
                                       [--threads 1] [--latency-calls 200] [--samples 256]

For each framework and workload, runs the worker as the harness starts an inference cell
(`python -m dlbench.worker.train CELL.json` in the framework's environment, with the worker's variables) on a
test split of the study's shapes filled with seeded random inputs (pixels, token ids: the time a model takes
does not depend on their values), canonical weights, the recipe's batch size for throughput. Prints the first
call, the latency percentiles (numpy's, in ms) and the throughput. dlbench must be importable (the harness
venv); the framework environments must exist.
"""
import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from dlbench.harness.environments import envs
from dlbench.harness.environments.process import worker_environment
from dlbench.harness.plan.workloads import get_workload
from dlbench.shared.cell_file import CELL_FILE, INFERENCE, CellFile
from dlbench.shared.ir import input_vocab
from dlbench.shared.protocol import KIND, META_FILE, SERVE_FIRST_CALL, SERVE_LATENCY, SERVE_THROUGHPUT, array_file

WARMUP_CALLS = 20


def test_split(workload_name: str, folder: Path, samples: int) -> dict:
    """A prepared folder of `samples` random test inputs of the study's shapes; the workload's model."""
    workload = get_workload(workload_name)
    model = workload.model()
    rng = np.random.RandomState(0)
    shape = [samples, *model["input_shape"]]
    if model["input_dtype"].startswith("float"):
        x, scale = rng.randint(0, 256, size=shape).astype(np.uint8), 255.0
    else:
        x, scale = rng.randint(1, input_vocab(model), size=shape).astype(np.int32), None
    for part in ("train", "test"):
        np.save(folder / array_file("x_" + part), x)
        np.save(folder / array_file("y_" + part), np.zeros(samples, np.int32))
    (folder / META_FILE).write_text(json.dumps({"task": workload.study_meta["task"], "input_scale": scale}))
    return {"model": model, "recipe": workload.recipe}


def serve(framework: str, workload_name: str, threads: int, latency_calls: int, samples: int, work: Path) -> dict:
    folder = work / f"{framework}-{workload_name}"
    folder.mkdir()
    built = test_split(workload_name, folder, samples)
    recipe = envs.get_recipe(framework)
    cell = CellFile(model=built["model"], recipe=built["recipe"], mode=INFERENCE, data_path=str(folder),
                    adapter=recipe.adapter, device="cpu", threads=threads, seed=0, epochs=1,
                    serve={"warmup_calls": WARMUP_CALLS, "latency_calls": latency_calls,
                           "throughput_batch": built["recipe"]["batch_size"], "throughput_samples": samples})
    cell.write(folder / CELL_FILE)
    python = str(envs.require(framework).python)
    done = subprocess.run([python, "-m", "dlbench.worker.train", str(folder / CELL_FILE)], capture_output=True,
                          text=True, cwd=folder, env=worker_environment(folder / "run", threads, recipe.worker_env))
    events = {event[KIND]: event for event in map(json.loads, done.stdout.splitlines())}
    if SERVE_THROUGHPUT not in events:
        raise RuntimeError(f"{framework} {workload_name}: {events.get('error') or done.stderr[-2000:]}")
    p50, p90, p99 = np.percentile(events[SERVE_LATENCY]["latencies_s"], [50, 90, 99]) * 1e3
    throughput = events[SERVE_THROUGHPUT]
    return {"framework": framework, "workload": workload_name, "threads": threads,
            "first_call_s": events[SERVE_FIRST_CALL]["first_call_s"], "p50_ms": p50, "p90_ms": p90, "p99_ms": p99,
            "batch": throughput["batch_size"], "samples_per_s": throughput["samples"] / throughput["seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frameworks", nargs="+", default=sorted(envs.RECIPES))
    parser.add_argument("--workloads", nargs="+", default=["cnn-mnist", "lstm-imdb"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--latency-calls", type=int, default=200)
    parser.add_argument("--samples", type=int, default=256, help="test samples, served in whole batches")
    args = parser.parse_args()
    print("framework         workload   threads  first call s  p50 ms  p90 ms  p99 ms  batch  samples/s", flush=True)
    with tempfile.TemporaryDirectory() as work:
        for framework in args.frameworks:
            for workload in args.workloads:
                row = serve(framework, workload, args.threads, args.latency_calls, args.samples, Path(work))
                print("{framework:<17} {workload:<10} {threads:>7} {first_call_s:>13.2f} {p50_ms:>7.2f} "
                      "{p90_ms:>7.2f} {p99_ms:>7.2f} {batch:>6} {samples_per_s:>10.0f}".format(**row), flush=True)


if __name__ == "__main__":
    main()
