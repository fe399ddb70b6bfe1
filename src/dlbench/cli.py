"""dlbench's command line: thin wrappers over the modules that do the work."""
import argparse
import os
import sys
from pathlib import Path

from dlbench import data, envs, results, suite
from dlbench.data import DatasetError
from dlbench.envs import EnvError
from dlbench.models import ir
from dlbench.runner import Options, run_plan
from dlbench.store import Store, StoreError
from dlbench.suite import SuiteError
from dlbench.workloads import WORKLOADS, WorkloadError

DEFAULT_RESULTS = Path("dlbench-results")
USER_ERRORS = (SuiteError, WorkloadError, EnvError, DatasetError, StoreError)


def data_dir(args: argparse.Namespace) -> Path:
    if getattr(args, "data_dir", None):
        return Path(args.data_dir)
    return Path(os.environ.get("DLBENCH_DATA") or envs.dlbench_home() / "data")


class Progress:
    """One line per cell and per epoch, printed as they happen."""

    def __call__(self, kind: str, index: int, total: int, cell: suite.Cell, payload: dict | None = None) -> None:
        head = (f"[{index}/{total}] {cell.framework} {cell.workload} on {cell.dataset} "
                f"({cell.device}, rep {cell.repetition})")
        if kind == "skip":
            print(f"{head}: already complete, skipped (--force reruns it)")
        elif kind == "start":
            print(f"{head}: {cell.epochs} epochs", flush=True)
        elif kind == "end":
            status = payload["status"]
            detail = payload["reason"] if status != "ok" else (
                f"{payload['metric_name']} {payload['metric_value']:.4f}, train {payload['train_time_s']:.1f} s")
            print(f"    {status}: {detail}", flush=True)
        elif payload.get("event") == "ready":
            versions = ", ".join(f"{k} {v}" for k, v in payload["versions"].items())
            print(f"    ready after {payload['elapsed_s']:.1f} s ({versions}; {payload['threads']} threads)",
                  flush=True)
        elif payload.get("event") == "epoch":
            metrics = ", ".join(f"{k} {v:.4f}" for k, v in payload["metrics"].items())
            print(f"    epoch {payload['epoch']}/{cell.epochs}: {metrics}; train {payload['train_time_s']:.2f} s, "
                  f"eval {payload['eval_time_s']:.2f} s", flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    chosen = suite.load(args.suite)
    cells = suite.plan(chosen, args.framework, args.workload, args.device, args.repeat, args.epochs)
    # absolute: workers run inside their run folders
    options = Options(Path(args.results).resolve(), data_dir(args).resolve(), args.force, args.timeout,
                      args.memory_limit_mb)
    print(f"suite {chosen.name}: {len(cells)} cells; results in {options.results}")
    counts, hashes = run_plan(cells, options, Progress())
    with Store(options.results / "dlbench.sqlite") as store:
        latest = {run["cell_hash"]: run for run in store.runs()}  # runs come oldest first
    print()
    print(results.table([latest[h] for h in hashes if h in latest]))
    print()
    print(", ".join(f"{n} {k}" for k, n in counts.items() if n))
    print(f"results: {options.results / 'dlbench.sqlite'} (dlbench results --results {args.results})")
    return 0 if counts["failed"] == counts["timeout"] == 0 else 1


def cmd_list(args: argparse.Namespace) -> int:
    rows: list[list[str]] = []
    if args.what == "workloads":
        rows.append(["workload", "study dataset", "params", "train GFLOP/sample", "epochs", "batch", "optimizer",
                     "target"])
        for w in WORKLOADS.values():
            model = w.model()
            target = f"{w.target['metric']} {'>=' if w.target['higher_is_better'] else '<='} {w.target['value']:g}"
            rows.append([w.name, w.study_dataset, f"{ir.count_params(model):,}", f"{ir.train_flops(model) / 1e9:.3f}",
                         str(w.recipe["epochs"]), str(w.recipe["batch_size"]), w.recipe["optimizer"]["name"], target])
    elif args.what == "frameworks":
        rows.append(["framework", "environment", "version"])
        for name, recipe in envs.RECIPES.items():
            env = envs.environment(name)
            if env.exists():
                rows.append([name, str(env.path), env.info()["packages"].get(recipe.version_package, "?")])
            else:
                rows.append([name, f"missing: dlbench env create {name}", "-"])
    elif args.what == "datasets":
        rows.append(["dataset", "task", "status", "source"])
        for name in data.dataset_names():
            info = data.describe(name)
            prepared = (data_dir(args) / "prepared" / name / "meta.json").exists()
            rows.append([name, info["task"], "prepared" if prepared else "not prepared", info["source"]])
    else:
        rows.append(["suite", "description"])
        rows += [[name, suite.load(name).description] for name in suite.builtin_suites()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)).rstrip())
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    names = list(envs.RECIPES) if args.all or (args.action == "list" and not args.names) else args.names
    if not names:
        raise EnvError(f"name the frameworks, or give --all; known: {', '.join(envs.RECIPES)}")
    for name in names:
        if args.action == "create":
            envs.create(name)
        elif args.action == "remove":
            print(f"{name}: {'removed' if envs.remove(name) else 'no environment to remove'}")
        else:
            env = envs.environment(name)
            print(f"{name}: {env.path if env.exists() else 'missing (dlbench env create ' + name + ')'}")
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    path = Path(args.results) / "dlbench.sqlite"
    if not path.exists():
        raise StoreError(f"no results at {path}; run a suite first (dlbench run) or pass --results DIR")
    with Store(path) as store:
        runs = store.runs()
    render = {"table": results.table, "csv": results.to_csv, "json": results.to_json}[args.format]
    print(render(runs))
    return 0


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="dlbench", description=__doc__)
    commands = top.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run a suite of benchmark cells")
    run.add_argument("suite", nargs="?", default="quick", help="built-in suite name or suite file (default: quick)")
    run.add_argument("-f", "--framework", action="append", help="only these frameworks (repeatable)")
    run.add_argument("-w", "--workload", action="append", help="only these workloads of the suite (repeatable)")
    run.add_argument("--device", choices=suite.DEVICES)
    run.add_argument("--repeat", type=positive_int, help="repetitions per cell")
    run.add_argument("--epochs", type=positive_int, help="epochs per cell, overriding the suite")
    run.add_argument("--results", default=str(DEFAULT_RESULTS), help="results folder (default: ./dlbench-results)")
    run.add_argument("--data-dir", help="data folder (default: $DLBENCH_DATA or ~/.cache/dlbench/data)")
    run.add_argument("--timeout", type=positive_float, help="seconds per cell, overriding the suite")
    run.add_argument("--memory-limit-mb", type=positive_float,
                     help="kill a worker whose process tree exceeds this RSS")
    run.add_argument("--force", action="store_true", help="rerun cells that are already complete")
    run.set_defaults(func=cmd_run)

    listing = commands.add_parser("list", help="list workloads, frameworks, datasets or suites")
    listing.add_argument("what", choices=("workloads", "frameworks", "datasets", "suites"))
    listing.add_argument("--data-dir")
    listing.set_defaults(func=cmd_list)

    env = commands.add_parser("env", help="create, list or remove framework environments")
    env.add_argument("action", choices=("create", "list", "remove"))
    env.add_argument("names", nargs="*", metavar="NAME")
    env.add_argument("--all", action="store_true", help="every known framework")
    env.set_defaults(func=cmd_env)

    res = commands.add_parser("results", help="show stored runs")
    res.add_argument("--results", default=str(DEFAULT_RESULTS))
    res.add_argument("--format", choices=("table", "csv", "json"), default="table")
    res.set_defaults(func=cmd_results)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except USER_ERRORS as error:
        print(f"dlbench: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
