"""How many cores a run kept busy while it trained, against the threads it was given.

The monitor's samples (every 0.2 s, CPU % summed over the worker's tree: 100 = one core) are kept
where the middle of the interval a sample covers falls inside the training of a steady epoch (epochs
after the first; the only epoch when there is one), bounded by the worker's epoch_start and
epoch_trained events as the harness received them (older workers: the epoch event less its evaluation
and training times). Start-up, import, the first epoch's compilation and evaluation are left out: they
run on fewer threads in every framework (Theano's whole-run mean on cnn-mnist was 1.0 core of 2, its
steady training 1.9).

A run is flagged when its steady training used fewer than FEWER x threads cores or more than MORE x
threads; fewer than MIN_SAMPLES samples in its training (epochs shorter than about a second of training in all) are
too few to tell, and the run gets neither a figure nor a flag.
"""
from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import Any

from dlbench.harness.measure.monitor import DEFAULT_INTERVAL_S
from dlbench.shared.cell_file import INFERENCE
from dlbench.shared.protocol import EPOCH, EPOCH_START, EPOCH_TRAINED, kind_of

# On the 2-core AMD EPYC, 63 + 27 runs of the quick suite at 2 threads used 1.02 to 1.97 cores in their
# steady training; every one above 1.17 but Keras-TensorFlow's lstm-imdb (1.02-1.03: its one inter-op
# thread keeps that LSTM on one core, which the flag then says). A worker spinning one thread uses 0.99.
FEWER = 0.55
MORE = 1.5
MIN_SAMPLES = 5


def _field(sample: Any, name: str) -> Any:
    return sample[name] if isinstance(sample, Mapping) else getattr(sample, name)


def training_windows(events: Sequence[Mapping], times: Sequence[float]) -> list[tuple[float, float]]:
    """(start, end) of each steady epoch's training on the samples' clock."""
    stamped = list(zip(events, times, strict=False))  # events drained after a kill have no time
    starts = {e.get("epoch"): t for e, t in stamped if kind_of(e) == EPOCH_START}
    ends = {e.get("epoch"): t for e, t in stamped if kind_of(e) == EPOCH_TRAINED}
    windows = {n: (starts[n], ends[n]) for n in starts if n in ends}
    if not windows:  # a worker without the boundary events: from each epoch event's times
        windows = {e["epoch"]: (t - e["eval_time_s"] - e["train_time_s"], t - e["eval_time_s"])
                   for e, t in stamped if kind_of(e) == EPOCH and "train_time_s" in e}
    steady = [windows[n] for n in sorted(windows) if n != 1]
    return steady or list(windows.values())


def training_samples(samples: Sequence[Any], events: Sequence[Mapping], times: Sequence[float]) -> list[Any]:
    """The samples whose interval's middle falls inside a steady epoch's training."""
    windows = training_windows(events, times)
    chosen, previous = [], 0.0
    for sample in samples:
        t = _field(sample, "t_s")
        middle, previous = (previous + t) / 2, t
        if any(start <= middle <= end for start, end in windows):
            chosen.append(sample)
    return chosen


def used(samples: Sequence[Any], events: Sequence[Mapping], times: Sequence[float]) -> float | None:
    """Mean cores busy during the steady epochs' training, None when fewer than MIN_SAMPLES fall there."""
    chosen = training_samples(samples, events, times)
    return fmean(_field(s, "cpu_percent") for s in chosen) / 100 if len(chosen) >= MIN_SAMPLES else None


def others(samples: Sequence[Any], events: Sequence[Mapping], times: Sequence[float],
           logical_cores: int | None) -> float | None:
    """Mean cores the rest of the machine kept busy meanwhile: the system's CPU % over all its cores
    less the worker's tree."""
    chosen = training_samples(samples, events, times)
    if len(chosen) < MIN_SAMPLES or not logical_cores:
        return None
    busy = [_field(s, "system_cpu_percent") / 100 * logical_cores - _field(s, "cpu_percent") / 100 for s in chosen]
    return max(0.0, fmean(busy))


BUSY_MACHINE = 0.5  # cores kept busy by other processes, above which a flag names them
SHARED_MACHINE = "while other processes kept"  # how a flag says so, which the report counts
# how a flag says the rest of the machine was idle: the framework itself left the cores idle (or used more)
IDLE_MACHINE = "while other processes were idle"


def flag(cores: float | None, threads: int | None, busy: float | None = None) -> str | None:
    """"used 0.9 of 2 cores" when far from the threads asked, else None; then what the rest of the machine
    did meanwhile, where it was measured: "while other processes kept 1.2 cores busy" (a shared machine: the
    run may have got no more) or "while other processes were idle (0.03 cores)" (the framework's own doing)."""
    if cores is None or not threads:
        return None
    if FEWER * threads <= cores <= MORE * threads:
        return None
    text = f"used {cores:.1f} of {threads} cores"
    if busy is None:
        return text
    if busy >= BUSY_MACHINE:
        return f"{text} {SHARED_MACHINE} {busy:.1f} cores busy"
    return f"{text} {IDLE_MACHINE} ({busy:.2f} cores)"


def missing_reason(run: Mapping) -> str | None:
    """Why a stored run has no cores figure, None where it has one or nothing says why (stored before
    the cores were measured)."""
    if run.get("cores_used") is not None:
        return None
    if run.get("mode") == INFERENCE:
        return "an inference run has no training to measure"
    epochs = [e for e in run.get("epochs") or [] if e.get("train_time_s") is not None]
    if not epochs:
        return None if run.get("status") == "ok" else f"the run ended {run.get('status')} before it timed an epoch"
    training = sum(e["train_time_s"] for e in epochs[1:] or epochs)
    needed = MIN_SAMPLES * DEFAULT_INTERVAL_S
    if training < needed:
        return (f"steady training of {training:.2f} s, under the {needed:.1f} s ({MIN_SAMPLES} samples) the "
                "sampler needs")
    return None
