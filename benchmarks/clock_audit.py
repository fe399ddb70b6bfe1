"""Clock audit: per framework and workload, what an epoch's clock holds beyond the training steps (the fixed
cost of an epoch) and what the training accuracy's bookkeeping costs (its share of an epoch), on the quick
suite's stand-in data and training samples (quick-large's for lstm-ptb, which left the quick suite); a
framework whose fixed cost is over --flag-percent of its quick-suite epoch is flagged. Rerun it whenever an
adapter's training loop changes (docs/fairness.md).

    python benchmarks/clock_audit.py [--frameworks pytorch keras-tensorflow ...] [--workloads cnn-mnist lstm-ptb]
                                     [--rounds 7] [--threads 2] [--worker-src SRC]

Run with the harness's Python (dlbench importable). For each pair the cell is resolved as `dlbench run`
resolves a quick-suite cell (cell_config.resolve: the workload's model and recipe, the stand-in prepared),
then this file runs inside the framework's environment (--inside, Python 3.8+, numpy and the framework
alone; the worker's variables) with the cell on stdin (the worker's cell file, shared/cell_file.CellFile, and
the cell's names), and prints one JSON line:

- the adapter as a cell builds it, two warm-up epochs (the first compiles), then --rounds rounds, each a
  quick-suite epoch (every batch of train_samples) and a one-step epoch (the first batch of the same
  order), their order alternating. A round gives the step s = (long - one) / (steps - 1) and the fixed cost
  one - s: what an epoch costs beyond its steps (set-up inside train_epoch, the read of its sums).
  Medians over the rounds; the spread is the range of the rounds' fixed costs.
- the bookkeeping: the adapter's count of right predictions (its first-maximum formulation, compared with
  the labels and summed on the device) alone, on one step's logits (random, the step's shape), compiled as
  the adapter's step compiles it, timed over 50 calls; its share is that time x steps / the epoch.

--worker-src runs the adapters of another source tree (a checkout's src, for a before-and-after table).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

WORKLOADS = ("cnn-mnist", "lstm-ptb")
BOOKKEEPING_CALLS = 50


# ---- inside a framework's environment (Python 3.8+, numpy, the framework; no harness imports) -----------

def train_epoch(adapter, split, order) -> None:
    adapter.train_epoch(split, order)


def keras_fit_epoch(adapter, split, order) -> None:
    """The Keras adapter's epoch as it was until issue 46: model.fit over the reordered arrays, then the sums
    read, on the same adapter's trainer, weights and optimiser."""
    import keras
    x, y = adapter._arrays_of(split)
    trainer = adapter._trainer(split.input_scale)
    with keras.device(adapter.device_name):
        trainer.fit(x[order], y[order], batch_size=adapter.recipe["batch_size"], shuffle=False, epochs=1, verbose=0)
    adapter._sums(trainer)


def timed_epoch(adapter, run_epoch, split, order) -> float:
    tic = time.perf_counter()
    run_epoch(adapter, split, order)
    adapter.synchronise()
    return time.perf_counter() - tic


def epoch_rounds(adapter, variants, split, seed: int, batch_size: int, rounds: int) -> dict:
    """Per variant (name -> a function training one epoch), medians over rounds of a full epoch and a one-step
    epoch, the variants and the two kinds interleaved in each round (their order turning): epoch, step, fixed."""
    from dlbench.worker.base import epoch_order
    steps = -(-len(split) // batch_size)
    for epoch in (1, 2):  # compilation and the first conversions, then a first steady epoch
        for run_epoch in variants.values():
            timed_epoch(adapter, run_epoch, split, epoch_order(seed, epoch, len(split)))
    runs = [(name, kind) for name in variants for kind in ("long", "one")]
    times = dict((run, []) for run in runs)
    for number in range(rounds):
        order = epoch_order(seed, 3 + number, len(split))
        shift = number % len(runs)
        for name, kind in runs[shift:] + runs[:shift]:
            part = order if kind == "long" else order[:batch_size]
            times[name, kind].append(timed_epoch(adapter, variants[name], split, part))
    result = {}
    for name in variants:
        longs, ones = times[name, "long"], times[name, "one"]  # (no zip(strict=) before Python 3.10)
        steps_s = [(longs[i] - ones[i]) / (steps - 1) for i in range(rounds)]
        fixed = [ones[i] - steps_s[i] for i in range(rounds)]
        result[name] = {"steps": steps, "epoch_s": statistics.median(times[name, "long"]),
                        "step_s": statistics.median(steps_s), "fixed_s": statistics.median(fixed),
                        "fixed_min_s": min(fixed), "fixed_max_s": max(fixed)}
    return result


def right_count(framework: str, module, keras_argmax: bool = False):
    """(function of logits and labels as the framework's tensors, converter from numpy, sync): the adapter's
    count of right predictions, compiled as its training step compiles it."""
    if framework == "pytorch":
        import torch
        return (lambda x, y: (x.max(-1).indices == y).sum()), torch.from_numpy, lambda out: out.item()
    if framework == "tensorflow":
        import tensorflow as tf
        count = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.equal(
            tf.argmax(x, axis=-1, output_type=y.dtype), y), tf.float64)))
        return count, tf.constant, lambda out: out.numpy()
    if framework == "jax":
        import jax
        import jax.numpy as jnp
        count = jax.jit(lambda x, y: jnp.sum(module.first_argmax(x) == y))
        return count, jnp.asarray, lambda out: out.block_until_ready()
    if framework.startswith("keras"):
        return keras_right_count(module, keras_argmax)
    if framework == "mxnet":
        from mxnet import nd

        def count(x, y):
            return nd.sum(nd.broadcast_equal(nd.argmax(x, axis=-1), y))
        return count, lambda a: nd.array(a, dtype=a.dtype), lambda out: out.wait_to_read()
    if framework == "chainer":
        return (lambda x, y: int(np.count_nonzero(x.argmax(axis=-1) == y))), (lambda a: a), (lambda out: out)
    if framework == "theano":
        import theano
        import theano.tensor as T
        x, y = T.matrix("x"), T.ivector("y")
        return theano.function([x, y], T.eq(T.argmax(x, axis=-1), y).sum()), (lambda a: a), (lambda out: out)
    raise ValueError(f"no bookkeeping measure for framework {framework!r}")


def keras_right_count(module, argmax: bool):
    """The Keras adapter's count: its first_maximum, or (argmax, or an adapter without it) ops.argmax."""
    from keras import ops
    first = getattr(module, "first_maximum", None)
    if argmax or first is None:
        def first(scores):
            return ops.argmax(scores, axis=-1)

    def count(x, y):
        return ops.sum(ops.cast(ops.equal(ops.cast(first(x), "int32"), y), "float32"))
    if module.BACKEND == "tensorflow":
        import tensorflow as tf
        return tf.function(count), ops.convert_to_tensor, lambda out: out.numpy()
    if module.BACKEND == "jax":
        import jax
        return jax.jit(count), ops.convert_to_tensor, lambda out: out.block_until_ready()
    return count, ops.convert_to_tensor, lambda out: out.item()


def bookkeeping_s(framework: str, module, split, logits_shape, rounds: int, keras_argmax: bool = False) -> float:
    """Median seconds of one call of the adapter's right-prediction count on a step's (random) logits."""
    count, convert, sync = right_count(framework, module, keras_argmax)
    rows = int(np.prod(logits_shape[:-1]))
    logits = convert(np.random.RandomState(0).standard_normal((rows, logits_shape[-1])).astype(np.float32))
    labels = np.asarray(split.y).reshape(-1)[:rows].astype(np.int32)
    labels = convert(labels.astype(np.float32) if framework == "mxnet" else labels)
    sync(count(logits, labels))  # compiles
    times = []
    for _ in range(rounds):
        tic = time.perf_counter()
        for _ in range(BOOKKEEPING_CALLS):
            out = count(logits, labels)
        sync(out)
        times.append((time.perf_counter() - tic) / BOOKKEEPING_CALLS)
    return statistics.median(times)


def cell_record(data: dict):
    """The cell file's record of `data` (shared/cell_file.CellFile). A --worker-src tree from before the record
    has no shared/cell_file.py and its worker helpers read the cell as a dict: then the dict, its fields also
    read as attributes."""
    try:
        from dlbench.shared.cell_file import CellFile
    except ImportError:
        class Cell(dict):
            __getattr__ = dict.get
        return Cell(data)
    return CellFile.from_dict(data, "the clock audit's cell")


def inside(audited: dict, rounds: int) -> list:
    """The audit's rows for one cell: the adapter's epochs, and for Keras also fit's (the adapter's feed
    before issue 46; the step is the same) interleaved with them, with the bookkeeping of each: the
    adapter's first maximum, and for the fit row ops.argmax (the Keras adapter's before issue 46)."""
    from dlbench.shared.ir import infer_shapes
    from dlbench.worker.cell import load_adapter_class, load_split, read_meta, starting_weights
    from dlbench.worker.train import first_samples
    cell, framework = cell_record(audited["cell"]), audited["framework"]
    meta = read_meta(cell)
    split = first_samples(load_split(cell.data_path, "train", meta.get("input_scale")), cell.train_samples)
    adapter_class = load_adapter_class(cell.adapter)
    adapter = adapter_class(cell.model, cell.recipe, meta["task"], cell.device, cell.threads, cell.seed)
    adapter.set_weights(starting_weights(cell))
    batch_size = cell.recipe["batch_size"]
    keras = framework.startswith("keras")
    variants = {"adapter": train_epoch}
    if keras:
        variants["fit"] = keras_fit_epoch  # its bookkeeping row times ops.argmax, the form before issue 46
    rows = epoch_rounds(adapter, variants, split, cell.seed, batch_size, rounds)
    logits_shape = (batch_size,) + tuple(infer_shapes(cell.model)[-1][2])  # the last layer's output
    module = sys.modules[adapter_class.__module__]
    result = []
    for name, row in rows.items():
        row["bookkeeping_s"] = bookkeeping_s(framework, module, split, logits_shape, rounds,
                                             keras_argmax=name != "adapter")
        row["bookkeeping_share"] = row["bookkeeping_s"] * row["steps"] / row["epoch_s"]
        result.append(dict(row, variant=name, framework=framework, workload=audited["workload"],
                           dataset=audited["dataset"], train_samples=len(split), batch_size=batch_size,
                           threads=cell.threads))
    return result


# ---- the harness side ---------------------------------------------------------------------------------

# the suites whose entries the audit times, the first holding a workload giving its entry (lstm-ptb moved from
# the quick suite to quick-large, with the stand-in and training samples it had)
SUITES = ("quick", "quick-large")


def quick_entries(workloads) -> list:
    from dlbench.harness.plan.suite import locate, parse
    entries: dict = {}
    for suite in reversed(SUITES):
        entries.update({entry.workload: entry for entry in parse(locate(suite)).entries})
    unknown = [name for name in workloads if name not in entries]
    if unknown:
        raise SystemExit(f"clock_audit: workload {', '.join(unknown)} is in none of the suites {', '.join(SUITES)}; "
                         f"known: {', '.join(sorted(entries))}")
    return [entries[name] for name in workloads]


def worker_cell(framework: str, entry, threads: int, data_dir) -> tuple:
    """What --inside is handed for the framework on a quick-suite entry (the worker's cell file, as
    shared/cell_file.CellFile writes it, and the cell's names), and the environment it runs in."""
    from dlbench.harness.environments import envs
    from dlbench.harness.plan.suite import Cell
    from dlbench.harness.plan.workloads import get_workload
    from dlbench.harness.run.cell_config import resolve
    from dlbench.shared.cell_file import CellFile
    recipe = get_workload(entry.workload).recipe
    cell = Cell(suite="clock-audit", framework=framework, workload=entry.workload, dataset=entry.dataset,
                device="cpu", repetition=1, seed=0, epochs=1, batch_size=recipe["batch_size"], threads=threads,
                timeout_s=900.0, train_samples=entry.train_samples)
    prepared = resolve(cell, data_dir)
    config = prepared.config
    record = CellFile(adapter=envs.get_recipe(framework).adapter, model=config["model"], recipe=config["recipe"],
                      data_path=str(prepared.dataset.path), seed=cell.seed, epochs=cell.epochs, device=cell.device,
                      threads=config["threads"], train_samples=entry.train_samples)
    return ({"cell": record.to_dict(), "framework": framework, "workload": entry.workload, "dataset": entry.dataset},
            prepared.env)


def audit_pair(framework: str, entry, args) -> list:
    from pathlib import Path

    from dlbench.harness.environments import envs
    from dlbench.harness.environments.process import worker_environment
    cell, env = worker_cell(framework, entry, args.threads, args.data_dir)
    run_dir = Path(tempfile.mkdtemp(prefix=f"clock-audit-{framework}-{entry.workload}-"))
    variables = worker_environment(run_dir, args.threads, envs.worker_variables(envs.get_recipe(framework), env.path))
    if args.worker_src:
        variables["PYTHONPATH"] = str(Path(args.worker_src).resolve())
    done = subprocess.run([str(env.python), os.path.abspath(__file__), "--inside", "--rounds", str(args.rounds)],
                          input=json.dumps(cell), env=variables, cwd=run_dir, capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{framework} {entry.workload}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def table(rows: list[dict], flag_percent: float) -> str:
    header = ["framework", "variant", "workload", "steps", "epoch s", "step ms", "fixed ms (range)", "fixed % of epoch",
              "bookkeeping ms/step", "bookkeeping % of epoch", ""]
    lines = [header]
    for row in rows:
        fixed_percent = 100 * row["fixed_s"] / row["epoch_s"]
        lines.append([row["framework"], row["variant"], row["workload"], str(row["steps"]), f"{row['epoch_s']:.3f}",
                      f"{1e3 * row['step_s']:.2f}",
                      f"{1e3 * row['fixed_s']:.1f} ({1e3 * row['fixed_min_s']:.1f} to {1e3 * row['fixed_max_s']:.1f})",
                      f"{fixed_percent:.1f}", f"{1e3 * row['bookkeeping_s']:.3f}",
                      f"{100 * row['bookkeeping_share']:.1f}", "FLAG" if fixed_percent > flag_percent else ""])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frameworks", nargs="+", default=None, help="default: every framework")
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), help="quick-suite workloads")
    parser.add_argument("--rounds", type=int, default=7, help="epoch pairs (and bookkeeping timings) a cell")
    parser.add_argument("--threads", type=int, default=None, help="default: the machine's cores, as the quick suite's")
    parser.add_argument("--flag-percent", type=float, default=3.0,
                        help="flag a fixed cost above this share of the quick-suite epoch (default 3)")
    parser.add_argument("--worker-src", default=None, help="the worker code's source folder (default: dlbench's)")
    parser.add_argument("--data-dir", default=None, help="prepared data (default: dlbench's)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inside:
        for row in inside(json.load(sys.stdin), args.rounds):
            print(json.dumps(row))
        return 0
    from pathlib import Path

    from dlbench.harness.environments import envs
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    args.threads = args.threads or os.cpu_count() or 1
    args.data_dir = Path(args.data_dir or os.environ.get("DLBENCH_DATA") or envs.dlbench_home() / "data").resolve()
    rows, failed = [], 0
    for entry in quick_entries(args.workloads):
        for framework in args.frameworks or list(envs.RECIPES):
            try:
                for row in audit_pair(framework, entry, args):
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            except (RuntimeError, subprocess.TimeoutExpired, envs.EnvError) as error:
                failed += 1
                print(f"{framework} {entry.workload} failed: {error}", flush=True)
    print(f"\n{args.threads} threads, {args.rounds} rounds a cell, medians; FLAG: fixed cost over "
          f"{args.flag_percent:g} % of the epoch")
    print(table(rows, args.flag_percent))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
