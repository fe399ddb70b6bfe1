"""dlbench's command line: thin wrappers over the modules that do the work."""
import argparse
import math
import os
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from dlbench.harness import data, file_names, folders
from dlbench.harness.analysis import compare
from dlbench.harness.analysis.estimate import EstimateError
from dlbench.harness.analysis.load import AnalysisError
from dlbench.harness.certification import first_use, machine_store, probes
from dlbench.harness.data import DatasetError
from dlbench.harness.environments import disk, envs, rebuild, releases
from dlbench.harness.environments.envs import EnvError
from dlbench.harness.plan import executions, modes, precisions, suite
from dlbench.harness.plan.initial_weights import WeightsError
from dlbench.harness.plan.suite import SuiteError
from dlbench.harness.plan.workloads import (
    USER_FILES,
    WORKLOADS,
    Workload,
    WorkloadError,
    get_workload,
    target_text,
)
from dlbench.harness.present import comparison, environments, listing, progress
from dlbench.harness.run import ExecutorError, cell_config, interrupt, local, results_folder
from dlbench.harness.run.cell_config import Options
from dlbench.harness.run.live_report import LiveReport
from dlbench.harness.store import FILENAME, MAX_INTEGER, Store, StoreError
from dlbench.shared import ir

DEFAULT_RESULTS = Path("dlbench-results")
USER_ERRORS = (SuiteError, WorkloadError, EnvError, DatasetError, StoreError, probes.CertifyError, AnalysisError,
               ExecutorError, WeightsError, EstimateError, folders.PathError, executions.ExecutionError,
               precisions.PrecisionError)
# 128 + SIGINT: what a shell reports for a command that Ctrl-C stopped
INTERRUPTED = 130
BROKEN_PIPE = 141  # 128 + SIGPIPE, the status a shell reports for a writer whose reader closed the pipe
# options and variables that name a folder or file dlbench reads or writes, checked before it does
PATH_OPTIONS = {"results": "--results", "baseline": "--baseline", "data_dir": "--data-dir",
                "node_data_dir": "--node-data-dir", "output": "--output"}
PATH_VARIABLES = ("DLBENCH_HOME", "DLBENCH_DATA", "DLBENCH_CERTIFICATES")


def data_dir(args: argparse.Namespace) -> Path:
    if getattr(args, "data_dir", None):
        return Path(args.data_dir)
    return Path(os.environ.get("DLBENCH_DATA") or envs.dlbench_home() / "data")


def cmd_run(args: argparse.Namespace) -> int:
    suite.load(args.suite, user_code=False)  # the suite checked, its workload files only located
    # absolute: workers run inside their run folders
    options = Options(Path(args.results).resolve(), data_dir(args).resolve(), args.force, args.timeout,
                      args.memory_limit_mb)
    check_results_folder(args.results, "dlbench run keeps its store and run folders there")
    results_folder.refuse_planted_links(options.results)
    # one run at a time per results folder: a second is refused here, before anything is prepared or built,
    # and before the suite's workload files (the user's code) run
    with results_folder.locked(options.results), interrupt.handled():
        try:
            chosen = suite.load(args.suite)
            cells = suite.plan(chosen, args.framework, args.workload, args.device, args.repeat, args.epochs,
                               args.compile_cache, args.allocator, args.gpu_memory, args.threads,
                               execution=args.execution, precision=args.precision)
            for line in suite.refusals(chosen, args.framework, args.workload, args.execution, args.precision,
                                       args.device):
                print(f"left out: {line}")
            cells = first_use.certified_versions(cells, options.results)
            if not cells:
                print("dlbench: every cell of the plan was left out; nothing ran", file=sys.stderr)
                return 1
            return run_and_show(chosen, cells, options, args)
        except interrupt.Interrupted as stop:
            print(f"dlbench: {stop}", file=sys.stderr)
            return stop.exit_status


def write_report(results: Path, live: str | None = None) -> Path:
    """The run's report (its live page with `live`, the banner), for run/live_report."""
    from dlbench.harness.present import report  # matplotlib and scipy load when the run writes its first page

    return report.write(results, live=live)


def run_and_show(chosen: suite.Suite, cells: list[suite.Cell], options: Options, args: argparse.Namespace) -> int:
    """The plan's cells run and stored, then their table and the report; 1 when a cell failed or timed out
    or the report could not be written. Ctrl-C and SIGTERM raise interrupt.Interrupted, after the local
    executor stored the cell it was measuring (and the report of what the store holds was written)."""
    executor = args.executor or chosen.executor
    where = f" on the Ray cluster at {args.address or 'a new local Ray'}" if executor == "ray" else ""
    print(f"suite {chosen.name}: {len(cells)} cells{where}; results in {options.results}")
    # report.html rewritten after each cell (without charts), and written whole once at the end, however the
    # plan ends: stopped by a signal, by an error, or with failed cells
    live = LiveReport(options.results, len(cells), write_report, not args.no_live_report)
    live.start()  # a killed run's page and temporary files, corrected and removed
    try:
        with progress.display(cells, args.plain, run_forecast(cells, options)) as shown:
            if executor == "ray":
                counts, hashes = run_on_ray(cells, options, shown, args, live)
            else:
                counts, hashes = local.run_plan(cells, options, shown, live)
    except BaseException as stopped:
        try:
            live.finish(stopped=isinstance(stopped, KeyboardInterrupt))
        except KeyboardInterrupt:  # a second Ctrl-C while the charts are drawn: no report, the first stop's message
            pass
        raise
    with Store(options.results / FILENAME) as store:
        latest = {run["cell_hash"]: run for run in store.runs()}  # runs come oldest first
    print()
    print(listing.runs_tables([latest[h] for h in hashes if h in latest]))
    print()
    print(", ".join(f"{n} {k}" for k, n in counts.items() if n))
    print(f"results: {options.results / 'dlbench.sqlite'} (dlbench results --results {args.results})")
    reported = live.finish()
    repeat = repeat_hint(options.results, args.suite, [cell.workload for cell in cells])
    if repeat:
        print(repeat)
    uncertified = machine_store.missing(machine_store.pairs_of(cells))
    if uncertified:
        print(certify_hint(len(uncertified), machine_store.certify_command(args.suite, args.framework,
                                                                                   args.workload)))
    return 0 if counts["failed"] == counts["timeout"] == 0 and reported is not None else 1


def repeat_hint(results: Path, suite_name: str, workloads: Sequence[str]) -> str | None:
    """overview.repeat_line for the plan's workloads, from every training run the store holds of them (as the
    report's overview reads them)."""
    from dlbench.harness.analysis.findings import findings_of_runs
    from dlbench.harness.analysis.serving import training_runs
    from dlbench.harness.present import overview

    with Store(results / FILENAME, for_reading=True) as store:
        runs = [run for run in training_runs(store.runs()) if run["workload"] in workloads]
    return overview.repeat_line(findings_of_runs(runs), suite_name, workloads) if runs else None


def run_forecast(cells: list[suite.Cell], options: Options) -> progress.Forecaster:
    """The plan's forecast as `dlbench estimate` makes it, from the store the run writes to: the run's
    time left (present/progress.ETA) reads it before the first cell and after each cell."""
    from dlbench.harness.analysis import estimate
    from dlbench.harness.measure import machine

    here = machine.describe()

    def forecast() -> estimate.Estimate:
        estimate.dataset_meta.cache_clear()  # a dataset the run prepared since the last read has its sizes now
        return estimate.forecast_plan(cells, options.results, options.data_dir, here)
    return forecast


def check_results_folder(results: str, why: str) -> None:
    """Before environments, data or probes are made ready: a --results folder this user cannot write stops
    the command here, not after minutes of preparation."""
    folders.check_writable_folder(Path(results), f"--results {results}",
                                  f"give a folder this user can write (default ./{DEFAULT_RESULTS}): {why}")


def certify_hint(count: int, command: str) -> str:
    """What `run` says when framework x workload pairs it ran have no certificate of their environment and code."""
    return (f"certificates: {count} framework x workload pair{'s' if count > 1 else ''} of this plan "
            f"{'have' if count > 1 else 'has'} no equivalence certificate in {machine_store.store_path()}, "
            f"so the report says {'they' if count > 1 else 'it'} may not train the same model as the reference. "
            f"Certify the missing pairs with: {command}\n({machine_store.CERTIFY_TIMES}; the next report "
            f"reads the new certificates)")


def run_on_ray(cells: list, options: Options, shown, args: argparse.Namespace,
               live: LiveReport) -> tuple[dict[str, int], list[str]]:
    own = sorted({cell.workload for cell in cells if cell.workload in USER_FILES})
    if own:  # a node resolves its cell by the workload's name, and only this process has read the user's file
        raise SuiteError(f"workload {own[0]} ({USER_FILES[own[0]][0]}) is a user's file: user workloads run with "
                         "the local executor (--executor local), as a Ray node does not read the suite's files")
    try:
        from dlbench.harness.run import ray_cluster
    except ImportError as error:  # pragma: no cover - depends on what is installed
        raise SuiteError(f"--executor ray needs Ray in dlbench's environment (pip install 'dlbench[ray]'): "
                         f"{error}") from None
    node_data = Path(args.node_data_dir).resolve() if args.node_data_dir else None
    ray_options = ray_cluster.RayOptions(args.address, args.cells_per_node, args.retries, node_data)
    return ray_cluster.run_plan(cells, options, shown, ray_options, live)


def own_target(workload: str, dataset: str) -> str:
    """A stand-in's own target for a workload, as the cell's configuration carries it (cell_config.run_target):
    "cnn-mnist accuracy >= 0.5", or "cnn-mnist none"."""
    target = cell_config.run_target(get_workload(workload), dataset)
    return f"{workload} {'none' if target is None or target['value'] is None else target_text(target)}"


def cmd_list(args: argparse.Namespace) -> int:
    rows: list[list[str]] = []
    if args.what == "workloads":
        rows.append(["workload", "study dataset", "params", "train GFLOP/sample", "epochs", "batch", "optimizer",
                     "target", "model"])
        for w in WORKLOADS.values():
            model = w.model()
            rows.append([w.name, w.study_dataset, f"{ir.count_params(model):,}", f"{ir.train_flops(model) / 1e9:.3f}",
                         str(w.recipe["epochs"]), str(w.recipe["batch_size"]), w.recipe["optimizer"]["name"],
                         target_text(w.target),
                         w.description])
    elif args.what == "frameworks":
        rows.append(["framework", "default version", "other versions (name@version)", "CUDA build (--device gpu)",
                     "environment"])
        for name, recipe in envs.RECIPES.items():
            env = envs.environment(name)
            where = "present" if env.exists() else "missing"
            cuda = " ".join(recipe.cuda_packages) or f"none ({envs.create_command(name, 'gpu')} says why)"
            rows.append([name, f"{recipe.version_package} {recipe.default_version}", recipe.supported or "-", cuda,
                         where])
    elif args.what == "datasets":
        rows.append(["dataset", "task", "status", "own target", "source"])
        for name in data.dataset_names():
            info = data.describe(name)
            prepared = (data_dir(args) / "prepared" / name / "meta.json").exists()
            rows.append([name, info["task"], "prepared" if prepared else "not prepared",
                         "; ".join(own_target(workload, name) for workload in data.stand_in_targets(name)) or "-",
                         info["source"]])
    else:
        rows.append(["suite", "description"])
        rows += [[name, suite.load(name).description] for name in suite.builtin_suites()]
    if args.what == "workloads" and args.format == "table":  # the models' descriptions whole, below the table
        print(listing.aligned([row[:-1] for row in rows]) + "\n")
        print("\n".join(textwrap.fill(f"{row[0]}: {row[-1]}", listing.WIDTH, subsequent_indent="  ")
                        for row in rows[1:]))
        return 0
    free_text = ("other versions (name@version)", "CUDA build (--device gpu)", "own target", "source", "description")
    print(listing.rendered(rows, args.format, give_way=free_text))  # clipped to fit a terminal
    if args.what == "datasets" and args.format == "table":  # each stand-in's reasons for its targets, whole
        print("\n" + textwrap.fill("A stand-in's own target replaces the study's for the workload named (the "
                                   "study's, set for its own dataset, is out of reach of a quick run); none: no "
                                   "meaningful target. Why:", listing.WIDTH))
        print("\n".join(textwrap.fill(f"{name}, {workload}: {target.reason}", listing.WIDTH, subsequent_indent="  ")
                        for name in data.dataset_names() for workload, target in data.stand_in_targets(name).items()))
    if args.what == "frameworks" and args.format == "table":
        missing = [row[0] for row in rows[1:] if row[-1] == "missing"]
        print(f"environments in {envs.env_root()}"
              + (f"\ncreate the missing ones with:\n  dlbench env create {' '.join(missing)}" if missing else ""))
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    if args.action == "list":
        print(environments.table())
        return 0
    if args.action == "prune":
        return env_prune(args.older_than, args.dry_run)
    if args.from_run is not None:
        if args.action != "create" or args.names or args.all or args.dry_run:
            raise EnvError("--from-run RUN_ID goes with 'env create' alone (no names, no --all, no --dry-run)")
        print(rebuild.from_run(Path(args.results), args.from_run))
        return 0
    names = args.names
    if args.all:  # on a GPU, every framework that has a CUDA build; the others say why not
        names = [name for name in envs.RECIPES if args.device == "cpu" or envs.RECIPES[name].cuda_packages]
        for name in sorted(set(envs.RECIPES) - set(names)):
            print(f"{name}: skipped, no GPU environment: {envs.RECIPES[name].no_cuda}")
    if not names:
        raise EnvError(f"name the frameworks (name or name@version), or give --all; known: {', '.join(envs.RECIPES)}")
    for name in names:  # every name checked before anything is built or removed
        if args.action == "remove":
            envs.split_spec(name)  # a version no longer supported can still be removed
        else:
            envs.get_recipe(name, args.device)
    for name in names:
        if args.action == "create" and args.dry_run:
            print(f"{envs.folder_name(name, args.device)}: would install")
            print("".join(f"  {line}\n" for line in envs.resolve(name, args.device)), end="")
        elif args.action == "create":
            envs.create(name, args.device)
        else:
            folder = disk.remove_folder(name, args.device)
            print(f"{name}: {f'removed {folder}' if folder else 'no environment to remove'}")
    return 0


def env_prune(older_than_days: float, dry_run: bool) -> int:
    chosen = disk.stale(older_than_days)
    for built in chosen:
        own = disk.disk_usage(built.folder)[1]
        if not dry_run:
            disk.delete(built)
        print(f"{built.folder.name}: {'would remove' if dry_run else 'removed'} ({environments.mib(own)} freed; "
              f"last run {environments.days_ago(built.last_used)})")
    if not chosen:
        print(f"no environment unused for {older_than_days:g} days")
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    path = Path(args.results) / FILENAME
    if not path.exists():
        raise StoreError(f"no results at {path}; run a suite first (dlbench run) or pass --results DIR")
    with Store(path, for_reading=True) as store:
        runs, certificates, peaks = store.runs(), store.certificates(), store.peaks()
    runs = machine_store.with_current_verdicts(runs)
    # the machine's certificates of these runs, after any the folder holds from a dlbench before the machine's store
    certificates += machine_store.certificates_of(runs)
    if args.format == "table":
        # every column is the wide form: nothing clipped
        width = None if args.columns == listing.column_names() else listing.WIDTH
        print(listing.runs_tables(runs, args.columns, width))
    else:
        print(listing.to_csv(runs) if args.format == "csv" else listing.to_json(runs))
    if args.format == "table" and peaks:
        print()
        print(listing.peaks_table(peaks))
    if args.format == "table" and certificates:
        print()
        print(listing.certificates_table(certificates))
    return 0


class NoPositionalStores(argparse.Action):
    """compare's old form, `dlbench compare A B` or `dlbench compare DIR --versions ...`, refused with a usage
    error that gives the new one (argparse alone would only call the folders unrecognized)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[object] | None, option_string: str | None = None) -> None:
        if values:
            given = values if isinstance(values, str) else " ".join(map(str, values))
            parser.error(f"results folders are no longer given as arguments ({given}): "
                         "use --results NEW --baseline OLD for two stores, or --results DIR --versions "
                         "FRAMEWORK@VERSION_A FRAMEWORK@VERSION_B for two versions in one")


def cmd_compare(args: argparse.Namespace) -> int:
    """Prints the comparison; 1 when a cell breaks --fail-above, else 0."""
    if args.versions and (len(args.versions) > 2 or (len(args.versions) == 1) != releases.is_range(args.versions[0])):
        raise AnalysisError(f"--versions {' '.join(args.versions)}: give two versions (FRAMEWORK@A FRAMEWORK@B) or "
                            "one range (FRAMEWORK@LOW..HIGH, e.g. pytorch@2.7..2.13)")
    if args.versions and len(args.versions) == 1:
        from dlbench.harness.present import history

        print(history.render(compare.version_history(args.results, args.versions[0])))
        return 0
    limit = None if args.fail_above is None else compare.parse_fail_above(args.fail_above)
    result = compare.compare(args.results, args.baseline, args.versions, args.metric, limit, args.across or ())
    print(comparison.render(result, limit))
    return 1 if compare.fails(result) else 0


def cmd_report(args: argparse.Namespace) -> int:
    from dlbench.harness.present import report  # matplotlib loads only for this command

    print(report.write(Path(args.results), args.format, Path(args.output) if args.output else None))
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    """Prints each cell's forecast wall time, the total and the makespan on --nodes nodes."""
    from dlbench.harness.analysis import estimate
    from dlbench.harness.measure import machine
    from dlbench.harness.present import estimate as shown

    chosen = suite.load(args.suite)
    cells = suite.plan(chosen, args.framework, args.workload, args.device, args.repeat, args.epochs,
                       threads=args.threads, execution=args.execution, precision=args.precision)
    forecast = estimate.forecast_plan(cells, Path(args.results), data_dir(args), machine.describe())
    print(f"forecast of {chosen.name}: {len(cells)} cells")
    print("\n".join(forecast.notes))
    print(shown.cell_table(forecast.forecasts))
    print(shown.summary(forecast, args.nodes))
    return 0


def cmd_certify(args: argparse.Namespace) -> int:
    if args.power:
        return cmd_certify_power(args)
    if args.show:
        certificates = []
        store = machine_store.existing_store()  # --show creates nothing
        if store is not None:
            with store:
                certificates = store.certificates()
        print(listing.certificates_table(certificates))
        print(f"store: {machine_store.store_path()}")
        return 0
    pairs = certify_pairs(args)
    for framework, workload in pairs:
        why = precisions.reference_refusal(workload)
        if why:
            print(f"{modes.label(framework, *modes.of_workload(workload))} {workload.name}: cannot be certified, for "
                  f"the reference ({envs.REFERENCE}) cannot run it in {precisions.of_recipe(workload.recipe)}: {why}",
                  flush=True)
    pairs = [(framework, workload) for framework, workload in pairs if not precisions.reference_refusal(workload)]
    results_dir = Path(args.results).resolve()

    def progress(cert: dict) -> None:
        verdict = "pass" if cert["passed"] else "FAIL"
        name = modes.label(cert["framework"], cert["execution"], cert["precision"])
        print(f"{name} {cert['workload']}: {verdict} (worst {cert['worst_tensor']}, "
              f"relative deviation {cert['worst_scaled_deviation']})", flush=True)

    with machine_store.open_store() as store:
        present = {} if args.again else {(framework, workload.name, modes.of_workload(workload)): (
            store.newest_certificate(*machine_store.key_now(framework, workload))) for framework, workload in pairs}
        todo = [(name, workload) for name, workload in pairs
                if present.get((name, workload.name, modes.of_workload(workload))) is None]
        certificates = [cert for cert in present.values() if cert is not None]
        for cert in certificates:
            verdict = "pass" if cert["passed"] else "FAIL"
            print(f"{modes.label(cert['framework'], cert.get('execution'), cert.get('precision'))} {cert['workload']}: "
                  "certified "
                  f"already ({verdict}, {cert['created_at']}); --again certifies it anew", flush=True)
        if todo:
            check_results_folder(args.results, "certify keeps its probes' files there")
        certificates += first_use.certify_now(todo, results_dir, store, progress)
    print()
    print(listing.certificates_table(certificates))
    print(f"store: {machine_store.store_path()}")
    return 0 if all(cert["passed"] for cert in certificates) else 1


def cmd_certify_power(args: argparse.Namespace) -> int:
    """What each workload's certificate can see: exit 1 when a change passes for no known reason."""
    from dlbench.harness.certification import power

    # the workloads plain certify would certify (a suite's, -f, -w), each once: power runs the reference alone
    workloads = list({workload.name: workload for _, workload in certify_pairs(args)}.values())
    check_results_folder(args.results, "certify --power keeps its probes' files there")
    workdir = folders.new_folder(Path(args.results).resolve() / "certify", time.strftime("power-%Y%m%d-%H%M%S"))
    rows = [row for workload in workloads for row in power.power(workload, workdir)]
    print(listing.power_table(rows))
    unexplained = [row["value"] for row in rows if row["why"] == power.UNEXPLAINED]
    print(f"\n{sum(row['seen'] is True for row in rows)} of {len(rows)} changes seen; "
          f"{sum(row['seen'] is False for row in rows)} not, each with its reason"
          + (f"; UNEXPLAINED: {', '.join(unexplained)}" if unexplained else ""))
    return 1 if unexplained else 0


def certify_pairs(args: argparse.Namespace) -> list[tuple[str, Workload]]:
    """The (framework, workload) pairs `certify` is asked for: a suite's, narrowed by -f and -w; else -f (default:
    every framework but the reference) by -w (default: every workload)."""
    if args.suite is not None:
        chosen = suite.load(args.suite)
        cells = suite.plan(chosen, args.framework, args.workload, execution=args.execution, precision=args.precision)
        if chosen.device != "cpu":
            raise SuiteError(f"suite {chosen.name} runs on {chosen.device}: certification probes run in the CPU "
                             "environments, so no certificate would cover its runs")
        return machine_store.pairs_of(cells)
    for name in args.framework or ():
        envs.get_recipe(name)  # refused before anything runs
    frameworks = args.framework or [name for name in envs.RECIPES
                                    if not modes.is_reference(name, args.execution or None, args.precision)]
    workloads = [get_workload(name) for name in args.workload] if args.workload else list(WORKLOADS.values())
    return [(framework, modes.as_run(workload, framework, args.execution, args.precision)) for framework in frameworks
            for workload in workloads]


def cmd_data(args: argparse.Namespace) -> int:
    from dlbench.harness.data import download, manage

    folder = data_dir(args)
    if args.action == "list":
        rows = [["dataset", "task", "status", "size", "source", "licence"]]
        for name in data.dataset_names():
            info = data.describe(name)
            status, size = manage.status(name, folder)
            rows.append([name, info["task"], status, f"{size / 1e6:,.3f} MB", info["source"], info["licence"]])
        print(listing.rendered(rows, args.format, give_way=("source", "licence")))
        return 0
    if args.suite is not None:
        if args.action not in ("fetch", "verify"):
            raise DatasetError(f"--suite goes with data fetch or data verify, not data {args.action}")
        # the suite's datasets, in its order, after any named ones
        # the suite's workload files are not run: the entries name their datasets
        named = list(args.names) + [entry.dataset for entry in suite.load(args.suite, user_code=False).entries]
        args.names = list(dict.fromkeys(named))
    if not args.names or (args.action == "path" and len(args.names) != 1):
        raise DatasetError(f"data {args.action} needs {'one dataset' if args.action == 'path' else 'dataset names'}; "
                           f"known: {', '.join(data.dataset_names())}")
    offline = args.offline or download.offline_from_env()
    for name in args.names:
        if args.action == "path":
            print(manage.location(name, folder))
        elif args.action == "fetch":
            print("\n".join(manage.fetch(name, folder, offline)), flush=True)
        else:
            print("\n".join(manage.verify(name, folder)), flush=True)
    return 0


def integer_from(minimum: int, maximum: int, why: str = "") -> Callable[[str], int]:
    """An option's type: an integer from minimum to maximum, else the range (and `why`, where the maximum comes
    from) in argparse's message. Every integer option is bounded: --epochs 10^400 made `estimate` overflow."""
    def integer(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # not an integer, or over Python's 4,300 digits
            value = None
        if value is None or not minimum <= value <= maximum:
            shown = text if len(text) <= file_names.SHOWN else file_names.shortened(text)  # 10^400: not all of it
            raise argparse.ArgumentTypeError(f"expected an integer from {minimum} to {maximum}{why}, got {shown}")
        return value
    return integer


def thread_count(text: str) -> int:
    """--threads: at most suite.max_threads(), as a suite's `threads`."""
    return integer_from(1, suite.max_threads(), f" ({suite.threads_bound()})")(text)


# how many times the Ray executor dispatches a cell again: a node that died more often than this is no hiccup
MAX_RETRIES = 100


def positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < math.inf:  # NaN compares false too: a NaN timeout never fired, a NaN memory limit never killed
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def table_columns(text: str) -> list[str]:
    try:
        return listing.chosen_columns(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


FORMATS = ("table", "csv", "json")
FORMAT_HELP = (f"table: fits {listing.WIDTH} columns, a long cell clipped with '…' (default); csv, json: every "
               "cell whole")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="dlbench", description=__doc__)
    commands = top.add_subparsers(dest="command", required=True)
    run_parser(commands)
    list_parser(commands)
    env_parser(commands)
    certify_parser(commands)
    data_parser(commands)
    results_parser(commands)
    compare_parser(commands)
    estimate_parser(commands)
    report_parser(commands)
    return top


def run_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser("run", help="run a suite of benchmark cells")
    run.add_argument("suite", nargs="?", default="quick", help="built-in suite name or suite file (default: quick)")
    run.add_argument("-f", "--framework", action="append", metavar="NAME[@VERSION]",
                     help="only these frameworks (repeatable); name@version runs another version's environment, "
                          "e.g. jax@0.6.2 (dlbench list frameworks names them)")
    run.add_argument("-w", "--workload", action="append", help="only these workloads of the suite (repeatable)")
    run.add_argument("--device", choices=suite.DEVICES,
                     help="run every cell on this device, overriding the suite (gpu needs the CUDA environments: "
                          "dlbench env create --all --device gpu)")
    run.add_argument("--repeat", type=integer_from(1, suite.MAX_CELLS), help="repetitions per cell")
    run.add_argument("--epochs", type=integer_from(1, suite.MAX_EPOCHS), help="epochs per cell, overriding the suite")
    run.add_argument("--results", default=str(DEFAULT_RESULTS), help="results folder (default: ./dlbench-results)")
    run.add_argument("--data-dir", help="data folder (default: $DLBENCH_DATA or ~/.cache/dlbench/data)")
    run.add_argument("--execution", choices=executions.EXECUTIONS,
                     help="run every cell in this execution, overriding the suite and its entries (a framework "
                          "that cannot is left out, saying why)")
    run.add_argument("--precision", choices=precisions.PRECISIONS,
                     help="train every cell in this precision, overriding the suite and its entries (a framework "
                          "that cannot is left out, saying why)")
    run.add_argument("--threads", type=thread_count,
                     help="threads per cell, overriding the suite and its entries (default: the entry's, else the "
                          "suite's, else the cores of the machine or Ray node that runs the cell)")
    run.add_argument("--timeout", type=positive_float, help="seconds per cell, overriding the suite")
    run.add_argument("--memory-limit-mb", type=positive_float,
                     help="kill a worker whose process tree exceeds this RSS")
    run.add_argument("--compile-cache", choices=suite.COMPILE_CACHES,
                     help="cold: every run compiles into its own empty folder; shared: the runs of the results "
                          "folder share one per framework, each recorded as warm or cold (default: the suite's)")
    run.add_argument("--allocator", choices=suite.ALLOCATORS,
                     help="default: glibc's malloc as it comes; retain: it keeps freed memory, so epochs stop "
                          "paying page faults that vary from run to run (default: the suite's)")
    run.add_argument("--gpu-memory", choices=suite.GPU_MEMORY,
                     help="default: each framework's own GPU memory policy; grow: TensorFlow and JAX allocate as they "
                          "go instead of taking most of the card at start (default: the suite's)")
    run.add_argument("--executor", choices=suite.EXECUTORS,
                     help="local: the cells one after another on this machine; ray: spread over a Ray cluster's "
                          "nodes (default: the suite's, else local)")
    ray = run.add_argument_group("Ray executor (with --executor ray)")
    ray.add_argument("--address", help="the cluster to join (auto, HOST:PORT, ray://HOST:PORT; "
                                       "default: start a Ray on this machine)")
    ray.add_argument("--cells-per-node", type=integer_from(1, suite.MAX_CELLS), default=1,
                     help="cells measured at once on one node (default 1: a node to itself; "
                          "more and they measure each other)")
    ray.add_argument("--retries", type=integer_from(0, MAX_RETRIES), default=2,
                     help="dispatches again of a cell whose node died under it (default 2)")
    ray.add_argument("--node-data-dir",
                     help="a data folder every node sees (default: each node's own)")
    run.add_argument("--force", action="store_true", help="rerun cells that are already complete")
    run.add_argument("--no-live-report", action="store_true",
                     help="do not rewrite <results>/report.html after each cell (a page without charts, under "
                          "a second on a 72-cell store, written between cells, outside every timed region); the "
                          "full report is written at the end all the same")
    run.add_argument("--plain", action="store_true",
                     help="print progress as plain lines even on a terminal (they always are in a pipe or a log)")
    run.set_defaults(func=cmd_run)


def list_parser(commands: argparse._SubParsersAction) -> None:
    lister = commands.add_parser("list", help="list workloads, frameworks, datasets or suites")
    lister.add_argument("what", choices=("workloads", "frameworks", "datasets", "suites"))
    lister.add_argument("--data-dir", help="data folder whose prepared datasets are listed (default: "
                         "$DLBENCH_DATA or ~/.cache/dlbench/data)")
    lister.add_argument("--format", choices=FORMATS, default="table", help=FORMAT_HELP)
    lister.set_defaults(func=cmd_list)


def env_parser(commands: argparse._SubParsersAction) -> None:
    env = commands.add_parser("env", help="create, list, remove or prune framework environments")
    env.add_argument("action", choices=("create", "list", "remove", "prune"))
    env.add_argument("names", nargs="*", metavar="NAME", help="a framework, or name@version for another version")
    env.add_argument("--all", action="store_true", help="every known framework at its default version")
    env.add_argument("--older-than", type=non_negative_float, default=30, metavar="DAYS",
                     help="prune: remove environments no run used for this many days (default 30)")
    env.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                     help="create, remove: the CPU build (default) or the CUDA build of the framework")
    env.add_argument("--dry-run", action="store_true",
                     help="create: resolve and list what would be installed, install nothing; "
                          "prune: list what would be removed, remove nothing")
    env.add_argument("--from-run", type=integer_from(1, MAX_INTEGER), metavar="RUN_ID",
                     help="create: rebuild the environment of a stored run with exactly its packages")
    env.add_argument("--results", default=str(DEFAULT_RESULTS), help="--from-run: results folder holding the run")
    env.set_defaults(func=cmd_env)


def certify_parser(commands: argparse._SubParsersAction) -> None:
    cert = commands.add_parser("certify", help=f"certify frameworks against the reference ({envs.REFERENCE})")
    cert.add_argument("--suite", metavar="SUITE|FILE",
                      help="the pairs of this suite's frameworks and workloads (narrowed by -f and -w); runs the "
                           "suite's workload files (Python) to read their models")
    cert.add_argument("-f", "--framework", action="append", help="only these frameworks (default: all others)")
    cert.add_argument("-w", "--workload", action="append", help="only these workloads (default: all)")
    cert.add_argument("--execution", choices=executions.EXECUTIONS,
                      help="certify this execution (default: each framework's own; with --suite, the suite's)")
    cert.add_argument("--precision", choices=precisions.PRECISIONS,
                      help="certify this precision against the reference in the same precision (default: float32; "
                           "with --suite, the suite's)")
    cert.add_argument("--again", action="store_true",
                      help="certify pairs anew that already hold a certificate of their environment and code")
    cert.add_argument("--results", default=str(DEFAULT_RESULTS),
                      help="results folder where the probes' files go (the certificates go to the machine's store)")
    cert.add_argument("--show", action="store_true",
                      help="show the machine's stored certificates and run nothing")
    cert.add_argument("--power", action="store_true",
                      help="change every value of each workload's model and recipe in the reference and show which "
                           "changes its certificate sees (certifies no framework); the workloads certify would "
                           "certify: --suite's, narrowed by -f and -w, else -w's (default: all built-in)")
    cert.set_defaults(func=cmd_certify)


def data_parser(commands: argparse._SubParsersAction) -> None:
    dat = commands.add_parser("data", help="list, fetch, verify or locate datasets")
    dat.add_argument("action", choices=("list", "fetch", "verify", "path"))
    dat.add_argument("names", nargs="*", metavar="NAME")
    dat.add_argument("--data-dir", help="data folder (default: $DLBENCH_DATA or ~/.cache/dlbench/data)")
    dat.add_argument("--suite", metavar="SUITE|FILE", help="also every dataset of this suite (fetch, verify)")
    dat.add_argument("--format", choices=FORMATS, default="table", help="data list: " + FORMAT_HELP)
    dat.add_argument("--offline", action="store_true",
                     help="never use the network (also DLBENCH_OFFLINE=1); say which files are missing and where")
    dat.set_defaults(func=cmd_data)


# argparse formats help with %: the column 'cpu %' doubled, or `dlbench results --help` raised a TypeError
KNOWN_COLUMNS = ", ".join(listing.column_names()).replace("%", "%%")


def results_parser(commands: argparse._SubParsersAction) -> None:
    res = commands.add_parser("results", help="show stored runs")
    res.add_argument("--results", default=str(DEFAULT_RESULTS), help="results folder holding the store "
                     "(default: ./dlbench-results)")
    res.add_argument("--format", choices=FORMATS, default="table",
                     help=f"table: {listing.WIDTH} columns wide, rows by workload and framework (default); csv, json: "
                          "every stored field")
    res.add_argument("--columns", type=table_columns, default=",".join(listing.DEFAULT_COLUMNS), metavar="NAMES",
                     help="the table's columns, separated by commas, or 'all' (default: %(default)s); "
                          f"known: {KNOWN_COLUMNS}")
    res.set_defaults(func=cmd_results)


def compare_parser(commands: argparse._SubParsersAction) -> None:
    cmp = commands.add_parser("compare", help="compare two results stores, or two framework versions in one, "
                              "cell by cell")
    cmp.add_argument("--results", default=str(DEFAULT_RESULTS),
                     help="results folder or dlbench.sqlite file: the new runs (B), or the store holding both "
                          "--versions (default: ./dlbench-results)")
    against = cmp.add_mutually_exclusive_group(required=True)
    against.add_argument("--baseline", metavar="OLD",
                         help="results folder or dlbench.sqlite file of the runs compared against (A)")
    against.add_argument("--versions", nargs="+", metavar="FRAMEWORK@VERSION",
                         help="compare two framework versions inside the --results store, e.g. pytorch@2.8.0 "
                              "pytorch@2.13.0; or, given one range (pytorch@2.7..2.13), print the history of "
                              "every release of it the store holds, with the steps between releases")
    # results folders given as arguments were compare's old form: refused with the new one
    cmp.add_argument("positional", nargs="*", help=argparse.SUPPRESS, action=NoPositionalStores)
    cmp.add_argument("--metric", default="steady_epoch_s",
                     help=f"the time compared (default steady_epoch_s); one of: {', '.join(compare.METRICS)}")
    cmp.add_argument("--fail-above", metavar="PERCENT",
                     help="exit 1 when a cell of B is slower than A by more than this, e.g. 5%%")
    cmp.add_argument("--across", action="append", choices=compare.AXES,
                     help="match cells that differ in this axis of a sweep too (repeatable); without it, cells of "
                          "other threads or batch sizes never match")
    cmp.set_defaults(func=cmd_compare)


def estimate_parser(commands: argparse._SubParsersAction) -> None:
    est = commands.add_parser("estimate", help="forecast a suite's wall time from the runs a results store holds")
    est.add_argument("suite", help="built-in suite name or suite file (its workload files, Python, run to read "
                                   "their models)")
    est.add_argument("--nodes", type=integer_from(1, suite.MAX_CELLS), default=1,
                     help="identical nodes the cells are spread over, as the Ray executor does (default 1)")
    est.add_argument("--results", default=str(DEFAULT_RESULTS),
                     help="results folder whose runs the forecast comes from (default: ./dlbench-results)")
    est.add_argument("--data-dir", help="data folder (default: $DLBENCH_DATA or ~/.cache/dlbench/data)")
    est.add_argument("-f", "--framework", action="append", help="only these frameworks (repeatable)")
    est.add_argument("-w", "--workload", action="append", help="only these workloads of the suite (repeatable)")
    est.add_argument("--device", choices=suite.DEVICES)
    est.add_argument("--repeat", type=integer_from(1, suite.MAX_CELLS), help="repetitions per cell")
    est.add_argument("--epochs", type=integer_from(1, suite.MAX_EPOCHS), help="epochs per cell, overriding the suite")
    est.add_argument("--threads", type=thread_count, help="threads per cell, overriding the suite and its entries")
    est.add_argument("--execution", choices=executions.EXECUTIONS,
                     help="the execution of every cell, overriding the suite and its entries")
    est.add_argument("--precision", choices=precisions.PRECISIONS,
                     help="the precision of every cell, overriding the suite and its entries")
    est.set_defaults(func=cmd_estimate)


def report_parser(commands: argparse._SubParsersAction) -> None:
    rep = commands.add_parser("report", help="write the report of the stored runs: findings, tables, figures")
    rep.add_argument("--results", default=str(DEFAULT_RESULTS), help="results folder holding the store")
    rep.add_argument("--format", choices=("html", "md"), default="html",
                     help="html: one self-contained page (default); md: the overview, findings and tables "
                          "as Markdown")
    rep.add_argument("--output", help="file to write (default: <results>/report.html or report.md)")
    rep.set_defaults(func=cmd_report)


def refuse_unnameable_paths(args: argparse.Namespace) -> None:
    """Paths the file system cannot name (a name over 255 bytes, say), refused before anything is read or
    written under them: the operating system's "File name too long" came as a traceback, after a store
    was opened or a report built."""
    for attribute, option in PATH_OPTIONS.items():
        given = getattr(args, attribute, None)
        if given:
            file_names.check(Path(given), option)
    for variable in PATH_VARIABLES:
        if os.environ.get(variable):
            file_names.check(Path(os.environ[variable]), variable)


def expand_version_ranges(args: argparse.Namespace) -> None:
    """Each name@LOW..HIGH among -f's frameworks (and env's names) as the releases it names
    (environments/releases.py), before any command reads them."""
    for attribute in ("framework", "names"):
        if getattr(args, attribute, None):
            setattr(args, attribute, releases.expanded(getattr(args, attribute)))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        refuse_unnameable_paths(args)
        expand_version_ranges(args)
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe raises here, in the handler below, not at exit
        return status
    except USER_ERRORS as error:
        print(f"dlbench: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # One line, not a traceback. A worker does not outlive this process: it dies with it (launch.py's
        # PDEATHSIG), and the store keeps only whole runs (store.py's transactions).
        kept = "; the cells that ended are stored, and the same command resumes after them" if (
            args.command == "run") else ""
        print(f"dlbench: interrupted{kept}", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader of stdout went away (`dlbench results | head`): as a shell tool ends, without a traceback.
        # Python flushes stdout again at exit; pointing it at /dev/null keeps that from raising once more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
