"""What measuring costs: the harness's CPU while a worker trains, as a share of one core.

    python benchmarks/monitor_cost.py [--seconds 20] [--threads 2] [--interval 0.1]

Runs a stand-in worker through the harness's own executor (executor.run_worker: the monitor, the
event reader, the limits), exactly as a cell runs: the worker keeps THREADS threads busy for SECONDS
and reports an epoch event each second, like a training loop. Prints the sampling thread's CPU
seconds (what Monitor.cpu_s and a run's monitor_cpu_s record) and the whole harness process's (a
run's harness_cpu_s), each as a percentage of one core over the worker's wall time. CPU seconds, not
wall time, so a loaded machine changes the figures little. dlbench must be importable (the harness venv).
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path
from unittest import mock

from dlbench.harness.measure import monitor
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the worker trains")
    parser.add_argument("--threads", type=int, default=2, help="busy threads in the worker")
    parser.add_argument("--interval", type=float, default=monitor.DEFAULT_INTERVAL_S, help="sampling interval, s")
    args = parser.parse_args(argv)
    figures = measure(args.seconds, args.threads, args.interval)
    wall = figures["wall_s"]
    figures["monitor_percent_of_core"] = 100 * figures["monitor_cpu_s"] / wall
    figures["harness_percent_of_core"] = 100 * figures["harness_cpu_s"] / wall
    print(json.dumps({key: round(value, 4) for key, value in figures.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
