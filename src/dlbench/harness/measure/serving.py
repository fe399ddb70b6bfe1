"""An inference run's figures, from the worker's three serve events (shared/protocol.py): its batch-1
latencies, their percentiles, the throughput of whole batches and the two first calls. One definition
for the run row (run/record.py) and everything that reads it back."""
from collections.abc import Sequence

import numpy as np

from dlbench.shared.protocol import SERVE_FIRST_CALL, SERVE_LATENCY, SERVE_THROUGHPUT, kind_of

PERCENTILES = (50, 90, 99)
# the run columns these figures fill (harness/store.py), in milliseconds where the name says so
LATENCY_COLUMNS = tuple(f"latency_p{q}_ms" for q in PERCENTILES)


def percentiles_ms(latencies_s: Sequence[float]) -> dict[str, float | None]:
    """latency_p50_ms, _p90_ms, _p99_ms of the durations (seconds), numpy's linear interpolation between the
    closest ranks (numpy.percentile's default); None each for no durations."""
    if not latencies_s:
        return dict.fromkeys(LATENCY_COLUMNS)
    values = np.percentile(np.asarray(latencies_s, dtype=np.float64), PERCENTILES, method="linear") * 1000.0
    return {column: float(value) for column, value in zip(LATENCY_COLUMNS, values, strict=True)}


def _event(events: Sequence[dict], kind: str) -> dict | None:
    return next((event for event in events if kind_of(event) == kind), None)


def latencies(events: Sequence[dict]) -> list[float]:
    """The timed batch-1 calls' durations in seconds, in call order; empty where the worker never got there."""
    event = _event(events, SERVE_LATENCY)
    return [float(value) for value in event["latencies_s"]] if event else []


def summary(events: Sequence[dict]) -> dict:
    """The run row's serving figures: the latency percentiles, throughput in samples per second, the first
    call on one sample and on the first batch of B, B itself, and the warm-up calls before the timed ones.
    A figure whose event never came (a run that failed on the way) is left out."""
    row: dict = {}
    first = _event(events, SERVE_FIRST_CALL)
    if first:
        row["first_call_s"] = first["first_call_s"]
    latency = _event(events, SERVE_LATENCY)
    if latency:
        row.update(percentiles_ms(latencies(events)), warmup_calls=latency["warmup_calls"],
                   latency_calls=len(latency["latencies_s"]))
    throughput = _event(events, SERVE_THROUGHPUT)
    if throughput:
        seconds = throughput["seconds"]
        row.update(serve_batch_size=throughput["batch_size"], throughput_samples=throughput["samples"],
                   throughput_s=seconds, first_batch_call_s=throughput["first_call_s"],
                   samples_per_s=throughput["samples"] / seconds if seconds > 0 else None)
    return row
