"""dlbench's cell beside a short idiomatic program of the same workload, on the same data: the ratio of
their steady epoch times says whether an adapter is as fast as the framework's usual way of training.

    python benchmarks/idiomatic/compare.py --framework pytorch --workload cnn-mnist
    python benchmarks/idiomatic/compare.py --all [--epochs 3] [--threads 2] [--repeat 1]
    python benchmarks/idiomatic/compare.py --framework jax --workload transformer-lm --precision bfloat16

Run with the harness's Python (dlbench importable). For each pair it runs dlbench's cell as `dlbench run`
does (runner.resolve and runner.run_cell: the worker through the executor, in a throwaway results
folder), then the program in the same framework environment's Python with the worker's variables
(environments/process.py: worker_environment: threads, HOME and caches in its own run folder), on the same prepared
arrays for the same epochs and batch size, both in the same mode (--execution, --precision: the cell's
execution and precision, and the program's arguments of the same names). The contract a program follows is in
README.md here.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlbench.harness import data
from dlbench.harness.analysis import stats
from dlbench.harness.data.prepared import VOCAB_FILE, Built, load_prepared, write_prepared
from dlbench.harness.environments import envs
from dlbench.harness.environments.process import worker_environment
from dlbench.harness.plan import executions, modes, precisions
from dlbench.harness.plan.suite import ALLOCATORS, Cell
from dlbench.harness.plan.workloads import get_workload
from dlbench.harness.run.cell_config import Options, resolve
from dlbench.harness.run.one_cell import run_cell

HERE = Path(__file__).resolve().parent
WORKLOADS = ("cnn-mnist", "lstm-ptb", "transformer-lm")

# (framework, workload) -> the program in this folder that trains the workload the framework's usual way; a pair
# not here (transformer-lm in Keras, MXNet, Chainer and Theano) is listed as "no program yet"
PROGRAMS: dict[tuple[str, str], str] = {
    ("pytorch", "cnn-mnist"): "torch_cnn_mnist.py",
    ("pytorch", "lstm-ptb"): "torch_lstm_ptb.py",
    ("tensorflow", "cnn-mnist"): "tensorflow_cnn_mnist.py",
    ("tensorflow", "lstm-ptb"): "tensorflow_lstm_ptb.py",
    ("keras-tensorflow", "cnn-mnist"): "keras_cnn_mnist.py",
    ("keras-tensorflow", "lstm-ptb"): "keras_lstm_ptb.py",
    ("keras-jax", "cnn-mnist"): "keras_cnn_mnist.py",
    ("keras-jax", "lstm-ptb"): "keras_lstm_ptb.py",
    ("keras-torch", "cnn-mnist"): "keras_cnn_mnist.py",
    ("keras-torch", "lstm-ptb"): "keras_lstm_ptb.py",
    ("jax", "cnn-mnist"): "jax_cnn_mnist.py",
    ("jax", "lstm-ptb"): "jax_lstm_ptb.py",
    ("mxnet", "cnn-mnist"): "mxnet_cnn_mnist.py",
    ("mxnet", "lstm-ptb"): "mxnet_lstm_ptb.py",
    ("chainer", "cnn-mnist"): "chainer_cnn_mnist.py",
    ("chainer", "lstm-ptb"): "chainer_lstm_ptb.py",
    ("theano", "cnn-mnist"): "theano_cnn_mnist.py",
    ("theano", "lstm-ptb"): "theano_lstm_ptb.py",
    ("pytorch", "transformer-lm"): "torch_transformer_lm.py",
    ("jax", "transformer-lm"): "jax_transformer_lm.py",
    ("tensorflow", "transformer-lm"): "tensorflow_transformer_lm.py",
}

# A pair takes well under a minute on 2 cores: a steady cnn-mnist epoch of a few seconds on 6,000
# Fashion-MNIST images; lstm-ptb on the first 500 windows of 30 tokens of its quick stand-in (25 steps).
# transformer-lm on the first 320 of the same windows (10 steps of 32). The test splits are cut too: only
# dlbench's cell evaluates, untimed, but it costs wall time.
DEFAULTS: dict[str, dict] = {
    "cnn-mnist": {"dataset": "fashion-mnist", "train_limit": 6000, "test_limit": 1000},
    "lstm-ptb": {"dataset": "lee-news-lm", "train_limit": 500, "test_limit": 100},
    "transformer-lm": {"dataset": "lee-news-lm", "train_limit": 320, "test_limit": 100},
}
DEFAULT_EPOCHS = 3  # the first (warm-up, compilation) and two steady ones
TARGET = 0.95  # dlbench's speed should be at least this share of the idiomatic program's
PROGRAM_TIMEOUT_S = 900.0


class ProgramOutputError(ValueError):
    """A program's stdout broke the contract (README.md): one JSON object per epoch and nothing else."""


class ProgramRefused(RuntimeError):
    """The program refused its arguments (argparse's usage error, status 2): a mode it does not run."""


USAGE_ERROR = 2  # argparse's exit status for arguments it refuses (parser.error)


@dataclass(frozen=True)
class Side:
    """One side of a pair: its epochs' training times and mean training losses."""
    train_times: list[float]
    losses: list[float]

    @property
    def steady_epoch_s(self) -> float | None:
        return steady_epoch_s(self.train_times)

    @property
    def final_loss(self) -> float | None:
        return self.losses[-1] if self.losses else None


@dataclass(frozen=True)
class Row:
    framework: str
    workload: str
    dlbench: Side | None
    idiomatic: Side | None
    note: str = ""  # why a side is missing
    # each run's steady epoch time, a side's repetitions (empty where the row was built from one Side)
    dlbench_runs: tuple[float, ...] = ()
    idiomatic_runs: tuple[float, ...] = ()
    execution: str | None = None  # the mode both sides ran in; None: the framework's default execution
    precision: str | None = None  # None: float32

    @property
    def label(self) -> str:
        """The framework as tables name it in this mode: "pytorch", "pytorch (compiled, bfloat16)"."""
        return modes.label(self.framework, self.execution, self.precision)

    @property
    def speed(self) -> stats.Estimate | None:
        """dlbench's speed as a share of the program's: the ratio of the sides' geometric mean steady times
        (program over dlbench) with Welch's interval on the log times (stats.log_t_test, as the report's
        pairs), from two runs a side; from one run a side, the ratio of the two steady times alone."""
        if self.dlbench is None or self.idiomatic is None:
            return None
        if len(self.dlbench_runs) > 1 and len(self.idiomatic_runs) > 1:
            return stats.log_t_test(self.idiomatic_runs, self.dlbench_runs)[0]
        percent = speed_percent(self.dlbench.steady_epoch_s, self.idiomatic.steady_epoch_s)
        return None if percent is None else stats.Estimate(1, percent / 100, None, None)

    @property
    def speed_percent(self) -> float | None:
        speed = self.speed
        return None if speed is None or speed.median is None else 100.0 * speed.median

    @property
    def against_target(self) -> str:
        """Whether the interval shows dlbench at or above TARGET of the program's speed, below it, or neither."""
        speed = self.speed
        if speed is None or speed.low is None or speed.high is None:
            return "-"
        if speed.low >= TARGET:
            return f"at or above {TARGET:.0%}"
        if speed.high < TARGET:
            return f"below {TARGET:.0%}"
        return "not shown either way"


def steady_epoch_s(train_times: list[float]) -> float | None:
    """runner.timing_summary's definition: the median training time of the epochs after the first."""
    return statistics.median(train_times[1:]) if len(train_times) > 1 else None


def speed_percent(dlbench_s: float | None, idiomatic_s: float | None) -> float | None:
    """dlbench's speed as a percentage of the idiomatic program's: idiomatic time / dlbench time x 100
    (above 100: the adapter is faster)."""
    if not dlbench_s or not idiomatic_s:
        return None
    return 100.0 * idiomatic_s / dlbench_s


def parse_program_output(text: str, epochs: int) -> Side:
    """The epochs a program printed; raises ProgramOutputError naming the first line that breaks the
    contract: every non-blank line a JSON object {"epoch": n, "train_time_s": s, "loss": x}, epochs
    1..N in order."""
    times, losses = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            raise ProgramOutputError(f"stdout line {number} is not a JSON object: {line[:200]!r}")
        for key in ("epoch", "train_time_s", "loss"):
            value = record.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ProgramOutputError(f"stdout line {number}: {key!r} missing or not a finite number: "
                                         f"{line[:200]!r}")
        if record["epoch"] != len(times) + 1:
            raise ProgramOutputError(f"stdout line {number}: epoch {record['epoch']}, expected {len(times) + 1}")
        if record["train_time_s"] <= 0:
            raise ProgramOutputError(f"stdout line {number}: train_time_s must be > 0: {line[:200]!r}")
        times.append(float(record["train_time_s"]))
        losses.append(float(record["loss"]))
    if len(times) != epochs:
        raise ProgramOutputError(f"the program reported {len(times)} epochs, expected {epochs}")
    return Side(times, losses)


def program_path(framework: str, workload: str) -> Path | None:
    """The program's file, or None where the pair has no program (yet)."""
    name = PROGRAMS.get((framework, workload))
    path = HERE / name if name else None
    return path if path is not None and path.is_file() else None


# ---- data ---------------------------------------------------------------------------------------

def subset(source: data.PreparedDataset, data_dir: Path, train_limit: int | None,
           test_limit: int | None) -> data.PreparedDataset:
    """The dataset as dlbench prepares it, its splits cut to their first rows: written (same .npy layout,
    meta and hash recomputed) as data_dir/prepared/<name>, where runner.resolve finds it by name."""
    arrays = {}
    for part, limit in (("train", train_limit), ("test", test_limit)):
        for kind in ("x", "y"):
            array = np.load(source.path / f"{kind}_{part}.npy", mmap_mode="r")
            arrays[f"{kind}_{part}"] = np.ascontiguousarray(array[:limit] if limit else array)
    meta = {key: value for key, value in source.meta.items() if key not in ("hash", "vocab_sha256")}
    meta.update(n_train=len(arrays["x_train"]), n_test=len(arrays["x_test"]),
                description=f"The first {len(arrays['x_train'])} training and {len(arrays['x_test'])} test "
                            f"rows of {source.name} (hash {source.hash[:16]}). " + meta.get("description", ""))
    vocab_file = source.path / VOCAB_FILE
    vocab = json.loads(vocab_file.read_text()) if vocab_file.exists() else None
    final = data.prepared_dir(source.name, data_dir)
    write_prepared(Built(arrays, meta, vocab), final)
    return load_prepared(final)


def program_arguments(program: Path, dataset: Path, epochs: int, threads: int, seed: int, recipe: dict,
                      mode: list[str] | tuple[str, ...] = ()) -> list[str]:
    optimiser = recipe["optimizer"]
    return [str(program), "--data", str(dataset), "--epochs", str(epochs), "--threads", str(threads),
            "--seed", str(seed), "--batch-size", str(recipe["batch_size"]), "--learning-rate", repr(optimiser["lr"]),
            *mode]


def mode_arguments(framework: str, execution: str | None, precision: str | None) -> list[str]:
    """The program's `--execution E --precision P`, both named, for any mode but the framework's default (its
    default execution in float32), which gets none: every program runs its default without them, and a program
    written before modes (cnn-mnist, lstm-ptb) refuses the arguments it does not know."""
    if modes.is_default(framework, execution, precision):
        return []
    return ["--execution", execution or executions.default(framework), "--precision", precision or precisions.DEFAULT]


def mode_refusal(framework: str, workload: str, execution: str | None, precision: str | None) -> str | None:
    """Why dlbench's cell cannot run in this mode (executions.refusal, precisions.refusal through modes.as_run, as
    cell_config.resolve asks them), or None where it can."""
    try:
        modes.as_run(get_workload(workload), framework, execution, precision)
    except (executions.ExecutionError, precisions.PrecisionError) as error:
        return str(error)
    return None


# ---- one pair -----------------------------------------------------------------------------------

def run_dlbench(framework: str, workload: str, dataset: str, data_dir: Path, results: Path, epochs: int,
                threads: int, seed: int, allocator: str, execution: str | None = None,
                precision: str | None = None) -> Side:
    """dlbench's own cell, as `dlbench run` runs it, in the mode (None: the framework's default execution, float32;
    nothing is stored: the run row is read here)."""
    recipe = get_workload(workload).recipe
    cell = Cell(suite="idiomatic", framework=framework, workload=workload, dataset=dataset, device="cpu",
                repetition=1, seed=seed, epochs=epochs, batch_size=recipe["batch_size"], threads=threads,
                timeout_s=PROGRAM_TIMEOUT_S, allocator=allocator, execution=execution, precision=precision)
    ran = run_cell(resolve(cell, data_dir), Options(results, data_dir))
    run, epoch_rows = ran.run, ran.epochs
    if run["status"] != "ok":
        raise RuntimeError(f"dlbench's {framework} {workload} cell {run['status']}: {run['reason']}\n"
                           f"{run.get('stderr_tail') or ''}")
    return Side([e["train_time_s"] for e in epoch_rows], [e["train_loss"] for e in epoch_rows])


def run_program(framework: str, workload: str, program: Path, dataset: Path, results: Path, epochs: int,
                threads: int, seed: int, allocator: str, mode: list[str] | tuple[str, ...] = ()) -> Side:
    """The idiomatic program in the framework's environment, with the variables a worker gets, minus
    dlbench on PYTHONPATH: a program stands alone. `mode`: its mode arguments (mode_arguments); a program given
    some that refuses its arguments (argparse's usage error) raises ProgramRefused with its error line. Without
    them a refusal is a failure like any other: every program runs its default mode."""
    recipe = get_workload(workload).recipe
    env = envs.require(framework)
    run_dir = Path(tempfile.mkdtemp(prefix=f"idiomatic-{framework}-{workload}-", dir=results))
    variables = worker_environment(run_dir, threads, envs.get_recipe(framework).worker_env, allocator=allocator)
    variables.pop("PYTHONPATH", None)
    command = [str(env.python)] + program_arguments(program, dataset, epochs, threads, seed, recipe, mode)
    done = subprocess.run(command, env=variables, cwd=run_dir, capture_output=True, text=True,
                          timeout=PROGRAM_TIMEOUT_S, stdin=subprocess.DEVNULL)
    (run_dir / "stderr.log").write_text(done.stderr)
    if done.returncode == USAGE_ERROR and mode:
        lines = done.stderr.strip().splitlines()
        raise ProgramRefused(f"{program.name} refused {' '.join(mode)}: {lines[-1] if lines else 'no message'}")
    if done.returncode != 0:
        raise RuntimeError(f"{program.name} ({framework}) exited with status {done.returncode}:\n{done.stderr[-3000:]}")
    return parse_program_output(done.stdout, epochs)


def compare_pair(framework: str, workload: str, args: argparse.Namespace, scratch: Path,
                 say=print) -> Row:
    """The pair in args' mode: a row without sides where the pair has no program or dlbench refuses the mode (the
    note says why); ProgramRefused where the program refuses it."""
    program = program_path(framework, workload)
    if program is None:
        return Row(framework, workload, None, None, "no program yet")
    execution, precision = args.execution, args.precision
    refused = mode_refusal(framework, workload, execution, precision)
    if refused:
        return Row(framework, workload, None, None, f"refused: {refused}", execution=execution, precision=precision)
    name, data_dir, prepared = pair_data(workload, args, scratch)
    mode = mode_arguments(framework, execution, precision)
    sides: dict[str, list[Side]] = {"dlbench": [], "idiomatic": []}
    for repetition in range(args.repeat):
        for side in side_order(repetition, bool(mode)):
            say(f"  {framework} {workload}: {side} (repetition {repetition + 1}/{args.repeat}) ...")
            if side == "dlbench":
                latest = run_dlbench(framework, workload, name, data_dir, scratch, args.epochs, args.threads,
                                     args.seed, args.allocator, execution, precision)
            else:
                latest = run_program(framework, workload, program, prepared.path, scratch, args.epochs,
                                     args.threads, args.seed, args.allocator, mode)
            sides[side].append(latest)
            say(f"    steady {_number(latest.steady_epoch_s, '{:.3f}')} s (epochs "
                f"{', '.join(f'{t:.3f}' for t in latest.train_times)})")
    return Row(framework, workload, pooled(sides["dlbench"]), pooled(sides["idiomatic"]),
               dlbench_runs=runs_steady(sides["dlbench"]), idiomatic_runs=runs_steady(sides["idiomatic"]),
               execution=execution, precision=precision)


def side_order(repetition: int, program_first: bool) -> tuple[str, str]:
    """Which side runs first in a repetition: they alternate, so neither always runs on a machine its twin just
    warmed. In a mode other than the default the program starts (program_first), so that a program that refuses
    the mode costs no dlbench run."""
    order = ("idiomatic", "dlbench") if program_first else ("dlbench", "idiomatic")
    return order if repetition % 2 == 0 else order[::-1]


def pair_data(workload: str, args: argparse.Namespace, scratch: Path) -> tuple[str, Path, data.PreparedDataset]:
    """The dataset's name, the data folder dlbench's cell reads it from, and the prepared dataset the program
    reads: the split cut to args' limits (the workload's defaults) in scratch, once per dataset and limits."""
    defaults = DEFAULTS[workload]
    name = args.dataset or defaults["dataset"]
    train_limit = args.train_limit if args.train_limit is not None else defaults["train_limit"]
    test_limit = args.test_limit if args.test_limit is not None else defaults["test_limit"]
    prepared = data.prepare(name, args.data_dir)
    data_dir = args.data_dir
    if train_limit or test_limit:
        data_dir = scratch / f"data-{name}-{train_limit}-{test_limit}"
        if not data.prepared_dir(name, data_dir).exists():
            subset(prepared, data_dir, train_limit, test_limit)
        prepared = data.prepare(name, data_dir)
    return name, data_dir, prepared


def runs_steady(sides: list[Side]) -> tuple[float, ...]:
    return tuple(s.steady_epoch_s for s in sides if s.steady_epoch_s is not None)


def pooled(sides: list[Side]) -> Side:
    """Repetitions as one side whose steady epoch time is the median of the runs' steady times (one value
    per run) and whose final loss is the first run's."""
    if len(sides) == 1:
        return sides[0]
    steady = statistics.median(s.steady_epoch_s for s in sides if s.steady_epoch_s is not None)
    return Side([sides[0].train_times[0], steady], [sides[0].final_loss])


# ---- the table ----------------------------------------------------------------------------------

def table(rows: list[Row]) -> str:
    header = ["framework", "workload", "runs a side", "dlbench steady s", "idiomatic steady s",
              "dlbench speed % of idiomatic", "95 % interval", f"against {TARGET:.0%}", "dlbench final loss",
              "idiomatic final loss"]
    lines = [header]
    for row in rows:
        if row.dlbench is None or row.idiomatic is None:
            lines.append([row.label, row.workload, "-", "-", "-", row.note or "-", "-", "-", "-", "-"])
            continue
        speed = row.speed
        interval = ("-" if speed is None or speed.low is None or speed.high is None
                    else f"{100 * speed.low:.1f}-{100 * speed.high:.1f} %")
        lines.append([row.label, row.workload, str(max(1, min(len(row.dlbench_runs), len(row.idiomatic_runs)))),
                      _number(row.dlbench.steady_epoch_s, "{:.3f}"), _number(row.idiomatic.steady_epoch_s, "{:.3f}"),
                      _number(row.speed_percent, "{:.1f} %"), interval, row.against_target,
                      _number(row.dlbench.final_loss, "{:.4f}"), _number(row.idiomatic.final_loss, "{:.4f}")])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def _number(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=list(envs.RECIPES))
    parser.add_argument("--workload", choices=WORKLOADS)
    parser.add_argument("--all", action="store_true", help="every framework x workload that has a program")
    parser.add_argument("--dataset", help="prepared dataset (default: fashion-mnist for cnn-mnist, "
                                          "lee-news-lm for lstm-ptb and transformer-lm)")
    parser.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS, help="at least 2: the first is not steady")
    parser.add_argument("--threads", type=int, default=None, help="default: the machine's cores, as dlbench's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-limit", type=int, default=None,
                        help="first K training rows (default 6000 for cnn-mnist, 500 for lstm-ptb, 320 for "
                             "transformer-lm; 0: all)")
    parser.add_argument("--test-limit", type=int, default=None,
                        help="first K test rows, evaluated by dlbench's cell only (default 1000 for cnn-mnist, "
                             "100 for lstm-ptb and transformer-lm)")
    parser.add_argument("--repeat", type=int, default=1, help="runs a side, alternating which runs first")
    parser.add_argument("--data-dir", type=Path, default=None, help="prepared data (default: dlbench's)")
    parser.add_argument("--allocator", choices=ALLOCATORS, default="default",
                        help="both sides' malloc, as dlbench run --allocator sets it (default: glibc's own)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the run folders here (default: removed)")
    parser.add_argument("--execution", choices=executions.EXECUTIONS, default=None,
                        help="both sides' execution (default: each framework's own default)")
    parser.add_argument("--precision", choices=precisions.PRECISIONS, default=None,
                        help=f"both sides' precision (default: {precisions.DEFAULT})")
    args = parser.parse_args(argv)
    if args.all == bool(args.framework or args.workload) or (not args.all and not (args.framework and args.workload)):
        parser.error("give --framework and --workload, or --all")
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the first epoch is not a steady one")
    args.threads = args.threads or os.cpu_count() or 1
    args.data_dir = (args.data_dir or Path(os.environ.get("DLBENCH_DATA") or envs.dlbench_home() / "data")).resolve()
    pairs = ([(f, w) for f in envs.RECIPES for w in WORKLOADS] if args.all else [(args.framework, args.workload)])
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="dlbench-idiomatic-", dir=args.keep)).resolve()
    rows, failed = [], 0
    try:
        for framework, workload in pairs:
            try:
                rows.append(compare_pair(framework, workload, args, scratch, lambda m: print(m, flush=True)))
                if rows[-1].speed_percent is not None:
                    print(f"  {rows[-1].label} {workload}: dlbench at {rows[-1].speed_percent:.1f} % of the "
                          f"idiomatic program's speed ({rows[-1].against_target})", flush=True)
                elif rows[-1].note.startswith("refused"):
                    print(f"  {rows[-1].label} {workload}: dlbench {rows[-1].note}", flush=True)
            except ProgramRefused as error:  # the mode is not the program's: an answer, not a failure
                print(f"  {framework} {workload}: {error}", flush=True)
                rows.append(Row(framework, workload, None, None, "program refuses the mode",
                                execution=args.execution, precision=args.precision))
            except (RuntimeError, ProgramOutputError, subprocess.TimeoutExpired, envs.EnvError) as error:
                failed += 1
                print(f"  {framework} {workload} failed: {error}", flush=True)
                rows.append(Row(framework, workload, None, None, "failed", execution=args.execution,
                                precision=args.precision))
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
    print()
    execution = args.execution or "each framework's default"
    print(f"threads {args.threads}, {args.epochs} epochs, allocator {args.allocator}, execution {execution}, "
          f"precision {args.precision or precisions.DEFAULT}, "
          f"steady = median of epochs 2..{args.epochs}"
          + (f"; from {args.repeat} runs a side the speed is the ratio of the geometric means with Welch's 95 % "
             "interval on the log times" if args.repeat > 1 else ""))
    print(table(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
