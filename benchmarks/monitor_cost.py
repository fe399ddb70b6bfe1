"""What measuring costs: the harness's CPU while a worker trains, as a share of one core.

    python benchmarks/monitor_cost.py [--seconds 20] [--threads 2] [--interval 0.1]

Runs a stand-in worker through the harness's own executor (executor.run_worker: the monitor, the
event reader, the limits), exactly as a cell runs: the worker keeps THREADS threads busy for SECONDS
and reports an epoch event each second, like a training loop. Prints the sampling thread's CPU
seconds (what Monitor.cpu_s and a run's monitor_cpu_s record) and the whole harness process's (a
run's harness_cpu_s), each as a percentage of one core over the worker's wall time. CPU seconds, not
wall time, so a loaded machine changes the figures little. dlbench must be importable (the harness venv).

    python benchmarks/monitor_cost.py --serve [--pairs 5] [--calls 2000] [--interval 0.1]
    python benchmarks/monitor_cost.py --serve --cell RUN_DIR/cell.json --python ENV/bin/python

On a latency cell (mode inference) the question is also whether sampling the worker moves its timed calls:
each sample reads /proc for the worker's tree while a call of a millisecond or less runs. --serve runs an
inference worker --pairs times with the monitor sampling every --interval and as many times without it (the
monitor replaced by one whose interval outlasts the run: it takes no sample), alternating, and prints the
median over the runs of each side's latency p50 and p99 (ms, from the worker's serve_latency event,
measure/serving.py), and the sampling thread's CPU as a share of one core. The worker is a stand-in that
follows the inference protocol (shared/protocol.py: a numpy call of about a millisecond on one sample, CALLS
timed calls, a throughput span); with --cell, the real worker on an inference cell's cell.json from a run
folder (`dlbench run` writes it), run by that framework's interpreter (--python) with dlbench's src on
PYTHONPATH.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from unittest import mock

from dlbench.harness.measure import monitor, serving
from dlbench.harness.run import launch as executor

# Busy threads that release the GIL: numpy's own loops do, as a framework's kernels do.
WORKER = """
import json, sys, threading, time
import numpy as np
seconds, threads = float(sys.argv[1]), int(sys.argv[2])
def burn():
    a = np.ones(200_000)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        np.sqrt(a, out=a)
def emit(**event):
    print(json.dumps(event), flush=True)
emit(event="ready")
workers = [threading.Thread(target=burn) for _ in range(threads)]
for thread in workers:
    thread.start()
for epoch in range(1, int(seconds) + 1):
    time.sleep(1)
    emit(event="epoch", epoch=epoch)
for thread in workers:
    thread.join()
emit(event="done")
"""


# A stand-in inference worker: the protocol's events around a numpy call of about a millisecond per sample.
SERVE_WORKER = """
import json, sys, time
import numpy as np
calls = int(sys.argv[1])
w = np.random.RandomState(0).standard_normal((1024, 1024)).astype(np.float32) / 32
def serve(x):
    for _ in range(24):
        x = np.tanh(x @ w)
    return x
def emit(**event):
    print(json.dumps(event), flush=True)
emit(event="ready")
x = np.ones((1, 1024), dtype=np.float32)
tic = time.perf_counter(); serve(x); first = time.perf_counter() - tic
emit(event="serve_first_call", batch_size=1, first_call_s=first)
for _ in range(20):
    serve(x)
latencies = []
for _ in range(calls):
    tic = time.perf_counter(); serve(x); latencies.append(time.perf_counter() - tic)
emit(event="serve_latency", batch_size=1, warmup_calls=20, latencies_s=latencies)
batch = np.ones((32, 1024), dtype=np.float32)
tic = time.perf_counter(); serve(batch); first = time.perf_counter() - tic
tic = time.perf_counter()
for _ in range(32):
    serve(batch)
emit(event="serve_throughput", batch_size=32, samples=1024, seconds=time.perf_counter() - tic, first_call_s=first)
emit(event="done")
"""


def measure(seconds: float, threads: int, interval_s: float) -> dict[str, float]:
    monitors: list[monitor.Monitor] = []

    def keep(pid: int, **kwargs: object) -> monitor.Monitor:
        made = monitor.Monitor(pid, interval_s=interval_s, **kwargs)  # type: ignore[arg-type]
        monitors.append(made)
        return made

    with tempfile.TemporaryDirectory() as folder, mock.patch.object(executor, "Monitor", keep):
        outcome = executor.run_worker([sys.executable, "-c", WORKER, str(seconds), str(threads)], {},
                                      Path(folder), timeout_s=seconds + 60)
    if outcome.status != "ok":
        raise SystemExit(f"the stand-in worker failed: {outcome.reason}\n{outcome.stderr_tail}")
    return {"wall_s": outcome.wall_time_s, "samples": len(outcome.samples), "monitor_cpu_s": monitors[0].cpu_s,
            "harness_cpu_s": outcome.harness_cpu_s or 0.0}


def serve_once(command: list[str], env: dict[str, str], interval_s: float, sampling: bool) -> dict[str, float]:
    """One inference worker's latency percentiles (ms) and the sampling thread's CPU share of a core; without
    `sampling`, a monitor whose interval outlasts the run takes no sample."""
    monitors: list[monitor.Monitor] = []

    def keep(pid: int, **kwargs: object) -> monitor.Monitor:
        made = monitor.Monitor(pid, interval_s=interval_s if sampling else 3600.0, **kwargs)  # type: ignore[arg-type]
        monitors.append(made)
        return made

    with tempfile.TemporaryDirectory() as folder, mock.patch.object(executor, "Monitor", keep):
        outcome = executor.run_worker(command, env, Path(folder), timeout_s=600)
    if outcome.status != "ok":
        raise SystemExit(f"the inference worker failed: {outcome.reason}\n{outcome.stderr_tail}")
    figures = serving.summary(outcome.events)
    if "latency_p50_ms" not in figures:
        raise SystemExit("the worker reported no serve_latency event: is it an inference cell?")
    return {"p50_ms": figures["latency_p50_ms"], "p99_ms": figures["latency_p99_ms"],
            "samples": len(outcome.samples), "monitor_percent_of_core": 100 * monitors[0].cpu_s / outcome.wall_time_s}


def measure_serving(pairs: int, calls: int, interval_s: float, cell: str | None, python: str | None) -> dict:
    """--serve: medians over `pairs` runs with and without sampling, alternating so drift touches both."""
    if cell:
        source = str(Path(__file__).resolve().parents[1] / "src")
        command = [python or sys.executable, "-m", "dlbench.worker.train", str(Path(cell).resolve())]
        env = dict(os.environ, PYTHONPATH=source)
    else:
        # one BLAS thread, as a cell of threads: 1 gets: the calls then time the work, not a thread pool's waits
        command = [sys.executable, "-c", SERVE_WORKER, str(calls)]
        env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    sides: dict[str, list[dict[str, float]]] = {"sampled": [], "unsampled": []}
    for _ in range(pairs):
        for name in sides:
            sides[name].append(serve_once(command, env, interval_s, name == "sampled"))
    return {name: {key: round(statistics.median(run[key] for run in runs), 4) for key in runs[0]}
            for name, runs in sides.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the worker trains")
    parser.add_argument("--threads", type=int, default=2, help="busy threads in the worker")
    parser.add_argument("--interval", type=float, default=monitor.DEFAULT_INTERVAL_S, help="sampling interval, s")
    parser.add_argument("--serve", action="store_true", help="a latency cell: timed calls with and without sampling")
    parser.add_argument("--pairs", type=int, default=5, help="--serve: runs with and without sampling, each")
    parser.add_argument("--calls", type=int, default=2000, help="--serve: the stand-in's timed calls")
    parser.add_argument("--cell", help="--serve: an inference cell.json for the real worker instead of the stand-in")
    parser.add_argument("--python", help="--serve --cell: the framework environment's interpreter")
    args = parser.parse_args(argv)
    if args.serve:
        print(json.dumps(measure_serving(args.pairs, args.calls, args.interval, args.cell, args.python)))
        return 0
    figures = measure(args.seconds, args.threads, args.interval)
    wall = figures["wall_s"]
    figures["monitor_percent_of_core"] = 100 * figures["monitor_cpu_s"] / wall
    figures["harness_percent_of_core"] = 100 * figures["harness_cpu_s"] / wall
    print(json.dumps({key: round(value, 4) for key, value in figures.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
