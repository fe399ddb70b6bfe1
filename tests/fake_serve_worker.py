"""A stand-in for the worker's inference path (worker/serve.py, which the worker half of issue #31 provides),
for the harness's end-to-end tests: it follows the inference protocol step by step with the fake framework's
serving() (tests/fake_framework.py), numpy alone.

fake_dlbench.make_environment(serving=True) makes the fakefw environment's interpreter run this file in front
of `-m dlbench.worker.train CELL.json`: a cell with mode "inference" is served here, any other is handed to the
real worker unchanged.
"""
import json
import os
import sys
import time
import traceback

from dlbench.shared.protocol import DONE, ERROR, META_FILE, READY, SERVE_FIRST_CALL, SERVE_LATENCY, SERVE_THROUGHPUT
from dlbench.worker.train import Events, load_adapter_class, load_split, starting_weights


def serve(cell: dict, events: Events) -> None:
    with open(os.path.join(cell["data_path"], META_FILE)) as handle:
        meta = json.load(handle)
    test = load_split(cell["data_path"], "test", meta.get("input_scale"))
    tic = time.perf_counter()
    adapter_class = load_adapter_class(cell["adapter"])
    import_s = time.perf_counter() - tic
    tic = time.perf_counter()
    adapter = adapter_class(cell["model"], cell["recipe"], meta["task"], cell["device"], cell["threads"], cell["seed"])
    adapter.set_weights(starting_weights(cell))
    events.emit(READY, import_s=import_s, build_s=time.perf_counter() - tic, versions=adapter.versions(),
                threads=adapter.threads_used(), n_train=0, n_test=len(test))
    settings, x = cell["serve"], test.x
    f = adapter.serving()
    tic = time.perf_counter()
    f(x[0:1])
    events.emit(SERVE_FIRST_CALL, batch_size=1, first_call_s=time.perf_counter() - tic)
    for i in range(settings["warmup_calls"]):
        f(x[i % len(x):i % len(x) + 1])
    latencies = []
    for i in range(settings["latency_calls"]):
        tic = time.perf_counter()
        f(x[i % len(x):i % len(x) + 1])
        latencies.append(time.perf_counter() - tic)
    events.emit(SERVE_LATENCY, batch_size=1, warmup_calls=settings["warmup_calls"], latencies_s=latencies)
    batch = settings["throughput_batch"]
    tic = time.perf_counter()
    f(x[0:batch])
    first_call_s = time.perf_counter() - tic
    samples = min(settings["throughput_samples"], len(x)) // batch * batch
    tic = time.perf_counter()
    for start in range(0, samples, batch):
        f(x[start:start + batch])
    events.emit(SERVE_THROUGHPUT, batch_size=batch, samples=samples, seconds=time.perf_counter() - tic,
                first_call_s=first_call_s)
    events.emit(DONE)


def main() -> int:
    cell = {}
    if sys.argv[1:3] == ["-m", "dlbench.worker.train"] and len(sys.argv) == 4:
        with open(sys.argv[3]) as handle:
            cell = json.load(handle)
    if cell.get("mode") != "inference":  # the real worker, as the interpreter would have run it
        os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
    events = Events()
    try:
        serve(cell, events)
    except Exception as error:
        traceback.print_exc()
        events.emit(ERROR, message=f"{type(error).__name__}: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
