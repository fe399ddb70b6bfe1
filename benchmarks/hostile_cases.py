"""Issue #40's cases, each run against two dlbench source trees, and the closing note's table.

    PYTHONPATH=src .venv/bin/python benchmarks/hostile_cases.py --old /tmp/old-9f85e1a/src --new src

Each case sets up its inputs in a fresh temporary folder (suite, workload file, .npz, planted links, a victim
file, a held lock...), runs the command as a user would (`python -m dlbench ...`, or the tests' fake
framework launcher tests/fake_dlbench.py beside that src where a cell must run without a framework
environment) with PYTHONPATH that src, DLBENCH_HOME and DLBENCH_DATA inside the folder, cwd the folder, under
a time cap that kills the process group. It records the exit status, the first stderr line (and the first
`dlbench: error` line), the wall time, the peak RSS of that process tree (os.wait4's rusage of the one child)
and what was lost or created. Prints a Markdown table; `--json FILE` keeps the raw results.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

DEFAULT_CAP_S = 120.0
LINE_CUT = 160
REAL_ENVS = Path.home() / ".cache" / "dlbench" / "envs"

# A user workload file: one conv, one dense, as tests/test_user_workload.py's MODEL. {top} is code run at
# import, {layers} the model's layers, {body} code run at the start of each model() call.
WORKLOAD = '''import sys
from dlbench import ir, user
{top}

def model(meta):
{body}    return ir.model(meta["input_shape"], "float32", [{layers}])


WORKLOAD = user.Workload(name="mine", description="one conv, one dense", model=model,
                         optimizer={{"name": "sgd", "lr": 0.1, "momentum": 0.0, "nesterov": False,
                                    "weight_decay": 0.0}},
                         loss="softmax_cross_entropy", batch_size=8, epochs=2, metric="accuracy", target=0.5)
'''
LAYERS = 'ir.conv2d(4, kernel=3, padding="same"), ir.relu(), ir.flatten(), ir.dense(meta["num_classes"])'


@dataclass
class Measurement:
    command: str = ""
    exit: str = ""
    first_stderr: str = ""
    error_line: str = ""  # the first `dlbench...error:` line, or the exception ending a traceback
    seconds: float = 0.0
    peak_mib: float = 0.0
    stdout_head: str = ""


@dataclass
class Result:
    case: str
    tree: str
    measured: Measurement = field(default_factory=Measurement)
    effect: str = ""


class Sandbox:
    """One case on one tree: a fresh folder, the environment a user's shell would have, and the command."""

    def __init__(self, root: Path, src: Path, cap_s: float, old_src: Path) -> None:
        self.root = root
        self.src = src
        self.tests = src.parent / "tests"
        self.old_src = old_src
        self.cap_s = cap_s
        self.home = root / "home"
        self.data = root / "data"
        self.home.mkdir()
        self.data.mkdir()
        self.marker = root / "marker.txt"
        self.measured = Measurement()
        self.stdout = self.stderr = ""  # the last command's whole output

    def env(self, python_path: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DLBENCH_", "PYTHONPATH"))}
        env.update(PYTHONPATH=python_path or str(self.src), DLBENCH_HOME=str(self.home), DLBENCH_DATA=str(self.data))
        return env

    def fake_framework(self) -> None:
        """The tests' fakefw environment under this sandbox's DLBENCH_HOME, built by that tree's own helper
        (its recipe digest is the tree's)."""
        code = f"import fake_dlbench, pathlib; fake_dlbench.make_environment(pathlib.Path({str(self.home)!r}))"
        subprocess.run([sys.executable, "-c", code], env=self.env(f"{self.src}{os.pathsep}{self.tests}"),
                       cwd=self.root, check=True, capture_output=True)

    def real_environments(self) -> None:
        """The machine's framework environments seen from this sandbox's DLBENCH_HOME."""
        (self.home / "envs").symlink_to(REAL_ENVS)

    def synthetic_store(self, code: str) -> Path:
        """A results folder R whose store `code` writes with the old tree's tests/synthetic_store.py (as `s`,
        the folder as `results`): the old tree's store format, which both trees read."""
        results = self.root / "R"
        results.mkdir()
        prelude = f"import math, pathlib, synthetic_store as s\nresults = pathlib.Path({str(results)!r})\n"
        old_tests = self.old_src.parent / "tests"
        subprocess.run([sys.executable, "-c", prelude + code], env=self.env(f"{self.old_src}{os.pathsep}{old_tests}"),
                       cwd=self.root, check=True, capture_output=True)
        return results

    def workload(self, top: str = "", layers: str = LAYERS, body: str = "", name: str = "mine.py") -> Path:
        """A workload file whose import and every model() call append to the marker file."""
        mark = f"open({str(self.marker)!r}, 'a').write('imported\\n')\n"
        call = f"    open({str(self.marker)!r}, 'a').write('model\\n')\n"
        path = self.root / name
        path.write_text(WORKLOAD.format(top=mark + top, layers=layers, body=call + body))
        return path

    def npz(self, arrays: dict[str, np.ndarray] | None = None, name: str = "data.npz") -> Path:
        path = self.root / name
        np.savez(path, **(images() if arrays is None else arrays))
        return path

    def suite(self, entry: str = "", head: str = "threads: 1\n", frameworks: str = "[fakefw]",
              dataset: str = "data.npz") -> Path:
        """A suite of one entry: mine.py on `dataset` (classification), `entry` appended to the entry."""
        path = self.root / "suite.yaml"
        path.write_text(f"name: mine\nframeworks: {frameworks}\n{head}workloads:\n"
                        f"  - workload: mine.py\n    dataset: {{path: {dataset}, task: classification}}\n{entry}")
        return path

    def dlbench(self, *args: str, fake: bool = False) -> Measurement:
        """Runs dlbench (the fake launcher when `fake`), measured; kept as this sandbox's measurement."""
        launcher = [str(self.tests / "fake_dlbench.py")] if fake else ["-m", "dlbench"]
        argv = [sys.executable, *launcher, *args]
        self.measured = measure(argv, self.env(), self.root, self.cap_s)
        self.measured.command = " ".join(["dlbench" if not fake else "fake_dlbench", *args])
        self.stdout = (self.root / ".stdout").read_text(errors="replace")
        self.stderr = (self.root / ".stderr").read_text(errors="replace")
        return self.measured

    def marker_lines(self) -> list[str]:
        return self.marker.read_text().split() if self.marker.exists() else []

    def user_code_ran(self) -> str:
        lines = self.marker_lines()
        return (f"user code ran ({lines.count('imported')} imports, {lines.count('model')} model() calls)"
                if lines else "user code did not run")

    def new_files(self, folder: Path, before: set[str]) -> str:
        names = sorted(set(os.listdir(folder)) - before) if folder.is_dir() else []
        return f"new in results: {', '.join(names[:6]) + (' ...' if len(names) > 6 else '') or 'nothing'}"


def measure(argv: list[str], env: dict[str, str], cwd: Path, cap_s: float) -> Measurement:
    """Runs argv in its own process group; kills the group at cap_s. Peak memory is the child's rusage
    (os.wait4), which covers the descendants it waited for."""
    out_path, err_path = cwd / ".stdout", cwd / ".stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        start = time.monotonic()
        child = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        killed = False
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > cap_s and not killed:
                os.killpg(child.pid, signal.SIGKILL)
                killed = True
            time.sleep(0.05)
        seconds = time.monotonic() - start
        child.returncode = 0  # reaped by wait4; keeps Popen from waiting again
    _kill_group(child.pid)
    stderr = err_path.read_text(errors="replace").splitlines()
    errors = [line for line in stderr if line.startswith("dlbench") and "error:" in line]
    if not errors and stderr and stderr[0].startswith("Traceback"):
        errors = [line for line in stderr if line.strip()][-1:]  # the exception a traceback ends with
    code = os.waitstatus_to_exitcode(status)
    return Measurement(exit=f"killed at {cap_s:.0f} s" if killed else str(code),
                       first_stderr=stderr[0] if stderr else "", error_line=errors[0] if errors else "",
                       seconds=round(seconds, 2), peak_mib=round(usage.ru_maxrss / 1024, 1),
                       stdout_head=out_path.read_text(errors="replace")[:2000])


def _kill_group(pgid: int) -> None:
    """A process the command left behind in its group (a worker, a held lock) ends with the case."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def images(n_train: int = 24, n_test: int = 8, classes: int = 3, side: int = 6) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(0)
    return {"x_train": rng.randint(0, 256, (n_train, side, side, 1)).astype(np.uint8),
            "y_train": rng.randint(0, classes, n_train), "x_test": rng.randint(0, 256, (n_test, side, side, 1))
            .astype(np.uint8), "y_test": rng.randint(0, classes, n_test)}


def header_only_npz(path: Path, shape: tuple[int, ...], descr: str) -> None:
    """An .npz whose x_train header claims `shape` of `descr`, followed by a few bytes; the rest as images()."""
    arrays = images()
    with zipfile.ZipFile(path, "w") as archive:
        with archive.open("x_train.npy", "w") as member:
            npy_format.write_array_header_1_0(member, {"descr": descr, "fortran_order": False, "shape": shape})
            member.write(bytes(64))
        for name in ("y_train", "x_test", "y_test"):
            with archive.open(f"{name}.npy", "w") as member:
                npy_format.write_array(member, arrays[name])


def run_args(sandbox: Sandbox, suite: Path, results: Path) -> tuple[str, ...]:
    return ("run", str(suite), "--results", str(results), "--plain")


def victim(sandbox: Sandbox) -> tuple[Path, bytes]:
    path = sandbox.root / "victim.txt"
    path.write_bytes(b"precious data\n")
    return path, path.read_bytes()


def victim_state(path: Path, before: bytes) -> str:
    after = path.read_bytes()
    return f"victim {len(before)} -> {len(after)} bytes" + (" (unchanged)" if after == before else " (CHANGED)")


def planted_link_case(sandbox: Sandbox, name: str) -> str:
    sandbox.fake_framework()
    sandbox.workload()
    sandbox.npz()
    results = sandbox.root / "R"
    results.mkdir()
    target, before = victim(sandbox)
    (results / name).symlink_to(target)
    sandbox.dlbench(*run_args(sandbox, sandbox.suite(), results), fake=True)
    return victim_state(target, before)


def item1_lock_link(sandbox: Sandbox) -> str:
    return planted_link_case(sandbox, "dlbench.lock")


def item1_report_html_link(sandbox: Sandbox) -> str:
    return planted_link_case(sandbox, "report.html")


def item1_live_report_json_link(sandbox: Sandbox) -> str:
    return planted_link_case(sandbox, "live-report.json")


def item2_loop_at_import_estimate(sandbox: Sandbox) -> str:
    sandbox.workload(top="while True:\n    pass\n")
    sandbox.npz()
    sandbox.dlbench("estimate", str(sandbox.suite(frameworks="[pytorch]")))
    return sandbox.user_code_ran()


def item2_sys_exit_in_model_run(sandbox: Sandbox) -> str:
    sandbox.fake_framework()
    sandbox.workload(body="    sys.exit(0)\n")
    sandbox.npz()
    results = sandbox.root / "R"
    sandbox.dlbench(*run_args(sandbox, sandbox.suite(), results), fake=True)
    return f"{sandbox.user_code_ran()}; {sandbox.new_files(results, set())}"


def item2_refused_run_folder_in_use(sandbox: Sandbox) -> str:
    sandbox.fake_framework()
    sandbox.workload()
    sandbox.npz()
    results = sandbox.root / "R"
    results.mkdir()
    hold = ("import fcntl, sys, time\nf = open(sys.argv[1], 'a')\nfcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\ntime.sleep(3600)\n")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(results / "dlbench.lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        sandbox.dlbench(*run_args(sandbox, sandbox.suite(), results), fake=True)
    finally:
        holder.kill()
        holder.wait()
    return sandbox.user_code_ran()


def item2_refused_run_read_only_folder(sandbox: Sandbox) -> str:
    if os.geteuid() == 0:
        sandbox.measured = Measurement(exit="skipped")
        return "not built: running as root, which writes into a read-only folder anyway"
    sandbox.fake_framework()
    sandbox.workload()
    sandbox.npz()
    results = sandbox.root / "R"
    results.mkdir()
    results.chmod(0o555)
    try:
        sandbox.dlbench(*run_args(sandbox, sandbox.suite(), results), fake=True)
    finally:
        results.chmod(0o755)
    return sandbox.user_code_ran()


def item2_estimate_says_it_runs_workload_files(sandbox: Sandbox) -> str:
    results = sandbox.synthetic_store("s.study_store(results)\n")  # so that estimate gets to forecast
    sandbox.workload()
    sandbox.npz()
    sandbox.dlbench("estimate", str(sandbox.suite(frameworks="[pytorch]")), "--results", str(results))
    said = [line for line in (sandbox.stdout + sandbox.stderr).splitlines() if "workload file" in line]
    return f"{sandbox.user_code_ran()}; says: {said[0] if said else 'nothing about running it'}"


def fake_run_case(sandbox: Sandbox, head: str = "threads: 1\n", layers: str = LAYERS, body: str = "",
                  arrays: dict[str, np.ndarray] | None = None, entry: str = "") -> str:
    """The fake framework runs the suite mine.py on data.npz; says what the results folder gained."""
    sandbox.fake_framework()
    sandbox.workload(layers=layers, body=body)
    if arrays is not None or not (sandbox.root / "data.npz").exists():
        sandbox.npz(arrays)
    results = sandbox.root / "R"
    sandbox.dlbench(*run_args(sandbox, sandbox.suite(entry=entry, head=head), results), fake=True)
    return f"{sandbox.user_code_ran()}; {sandbox.new_files(results, set())}"


def item3_model_of_1e19_parameters(sandbox: Sandbox) -> str:
    return fake_run_case(sandbox, layers="ir.flatten(), ir.dense(10**19), ir.dense(meta['num_classes'])")


def item3_threads_1e20(sandbox: Sandbox) -> str:
    return fake_run_case(sandbox, head=f"threads: {10**20}\n")


def item3_threads_1e250(sandbox: Sandbox) -> str:
    return fake_run_case(sandbox, head=f"threads: {10**250}\n")


def item3_threads_512(sandbox: Sandbox) -> str:
    return fake_run_case(sandbox, head="threads: 512\n")


def item3_estimate_epochs_1e400(sandbox: Sandbox) -> str:
    results = sandbox.synthetic_store("s.study_store(results)\n")  # runs a forecast can start from
    sandbox.workload()
    sandbox.npz()
    sandbox.dlbench("estimate", str(sandbox.suite(frameworks="[pytorch]")), "--results", str(results),
                    "--epochs", str(10**400))
    return f"a store of synthetic runs; {sandbox.user_code_ran()}"


def item4_large_sweep(sandbox: Sandbox) -> str:
    """One entry whose batch-size and thread lists make 2,000 x 1,000 = 2,000,000 cells."""
    batches = ", ".join(str(b) for b in range(1, 2001))
    threads = ", ".join(str(t) for t in range(1, 1001))
    size = fake_run_case(sandbox, entry=f"    batch_size: [{batches}]\n    threads: [{threads}]\n")
    return f"suite {(sandbox.root / 'suite.yaml').stat().st_size // 1024} KB; {size}"


def item4_10001_entries_one_workload_file(sandbox: Sandbox) -> str:
    sandbox.fake_framework()
    sandbox.workload()
    sandbox.npz()
    entry = "  - workload: mine.py\n    dataset: {path: data.npz, task: classification}\n"
    suite = sandbox.root / "suite.yaml"
    suite.write_text("name: mine\nframeworks: [fakefw]\nthreads: 1\nworkloads:\n" + entry * 10_001)
    sandbox.dlbench(*run_args(sandbox, suite, sandbox.root / "R"), fake=True)
    return sandbox.user_code_ran()


def item5_truncated_npz(sandbox: Sandbox) -> str:
    path = sandbox.npz()
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return fake_run_case(sandbox)


def item5_header_claiming_364_tib(sandbox: Sandbox) -> str:
    header_only_npz(sandbox.root / "data.npz", (25_000_000, 4000, 4000, 1), "|u1")
    return fake_run_case(sandbox)


def item5_symlink_loop(sandbox: Sandbox) -> str:
    (sandbox.root / "data.npz").symlink_to(sandbox.root / "data.npz")
    sandbox.fake_framework()
    sandbox.workload()
    results = sandbox.root / "R"
    sandbox.dlbench(*run_args(sandbox, sandbox.suite(), results), fake=True)
    return f"{sandbox.user_code_ran()}; {sandbox.new_files(results, set())}"


ZIP_BOMB_BYTES = 1_500_000_000


def zip_bomb(path: Path) -> None:
    """x_train: 1.5 GB of zeros (1,913,265 images of 28 x 28), deflated to about 1.5 MB; y_train to match."""
    count = ZIP_BOMB_BYTES // (28 * 28)
    arrays = images(side=28)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("x_train.npy", "w", force_zip64=True) as member:
            npy_format.write_array_header_1_0(member, {"descr": "|u1", "fortran_order": False,
                                                       "shape": (count, 28, 28, 1)})
            chunk = bytes(28 * 28 * 10_000)
            for start in range(0, count, 10_000):
                member.write(chunk[: 28 * 28 * min(10_000, count - start)])
        with archive.open("y_train.npy", "w", force_zip64=True) as member:
            npy_format.write_array(member, (np.arange(count) % 3).astype(np.int64))
        for name in ("x_test", "y_test"):
            with archive.open(f"{name}.npy", "w") as member:
                npy_format.write_array(member, arrays[name])


def item5_zip_bomb(sandbox: Sandbox) -> str:
    path = sandbox.root / "data.npz"
    zip_bomb(path)
    effect = fake_run_case(sandbox)
    return f"archive {path.stat().st_size / 2**20:.1f} MiB; {effect}"


def item6_stride_0(sandbox: Sandbox) -> str:
    conv = '{"type": "conv2d", "filters": 4, "kernel": 3, "stride": 0, "padding": "valid"}'
    return fake_run_case(sandbox, layers=f"{conv}, ir.relu(), ir.flatten(), ir.dense(meta['num_classes'])")


def item6_model_raises_on_a_later_call(sandbox: Sandbox) -> str:
    """model() raises on its third call: the old tree called it twice while loading the suite, then again
    for the cell."""
    body = ("    calls.append(1)\n    if len(calls) == 3:\n        raise RuntimeError('third call')\n")
    sandbox.fake_framework()
    path = sandbox.workload(body=body)
    path.write_text(path.read_text().replace("def model(meta):", "calls = []\n\n\ndef model(meta):"))
    sandbox.npz()
    results = sandbox.root / "R"
    sandbox.dlbench(*run_args(sandbox, sandbox.suite(), results), fake=True)
    runs = sorted(p.name for p in (results / "runs").iterdir()) if (results / "runs").is_dir() else []
    empty = [name for name in runs if not any((results / "runs" / name).iterdir())]
    return f"{sandbox.user_code_ran()}; {len(runs)} run folders, {len(empty)} empty"


def item6_wrong_output_shape(sandbox: Sandbox) -> str:
    return fake_run_case(sandbox, layers='ir.conv2d(4, kernel=3, padding="same"), ir.dense(meta["num_classes"])')


def item6_dropout_1_5(sandbox: Sandbox) -> str:
    return fake_run_case(sandbox, layers=f"ir.dropout(1.5), {LAYERS}")


def item7_nan_in_x_train(sandbox: Sandbox) -> str:
    arrays = images()
    x_train = arrays["x_train"].astype(np.float32)
    x_train[3, 2, 1, 0] = np.nan
    arrays["x_train"] = x_train
    arrays["x_test"] = arrays["x_test"].astype(np.float32)
    return fake_run_case(sandbox, arrays=arrays)


def item7_results_json_of_a_nan_accuracy(sandbox: Sandbox) -> str:
    """The store is built by the old tree's tests/synthetic_store.py (the new tree refuses NaN on the way in),
    so both trees read the same store."""
    results = sandbox.synthetic_store("run, rows, samples = s.synthetic_run('pytorch', 'cnn-mnist', 1, 1.0, 0.9)\n"
                                      "run['metric_value'] = math.nan\n"
                                      "for row in rows:\n"
                                      "    row['train_loss'] = row['metric_value'] = math.nan\n"
                                      "    row['metrics'] = {'accuracy': math.nan}\n"
                                      "s.store_of(results, [(run, rows, samples)])\n")
    sandbox.dlbench("results", "--results", str(results), "--format", "json")
    try:
        json.loads(sandbox.stdout, parse_constant=_refuse_constant)
        return "stdout is strict JSON (no NaN)" if sandbox.stdout else "nothing on stdout"
    except ValueError as error:
        return f"stdout is not strict JSON: {error}"[:120]


def _refuse_constant(name: str) -> None:
    raise ValueError(f"bare {name}, which JSON.parse rejects")


def item7_one_class_dataset(sandbox: Sandbox) -> str:
    arrays = images()
    arrays["y_train"] = np.zeros_like(arrays["y_train"])
    arrays["y_test"] = np.zeros_like(arrays["y_test"])
    return fake_run_case(sandbox, arrays=arrays)


def item8_certify_power_with_a_users_workload(sandbox: Sandbox) -> str:
    sandbox.real_environments()
    sandbox.workload()
    sandbox.npz()
    suite = sandbox.suite(frameworks="[pytorch]")
    sandbox.dlbench("certify", "--power", "--suite", str(suite), "-f", "pytorch",
                    "--results", str(sandbox.root / "R"))
    known = ("mine", "cnn-mnist", "lstm-ptb", "lstm-imdb", "frcnn-voc", "transformer-lm", "vit-cifar10")
    shown = [name for name in known if name in sandbox.stdout]
    return f"workloads in its output: {', '.join(shown) or 'none (cut before its table)'}"


def item9_int64_images(sandbox: Sandbox) -> str:
    arrays = images()
    arrays["x_train"] = arrays["x_train"].astype(np.int64)
    arrays["x_test"] = arrays["x_test"].astype(np.int64)
    return fake_run_case(sandbox, arrays=arrays)


def item9_5_gb_header_claim(sandbox: Sandbox) -> str:
    header_only_npz(sandbox.root / "data.npz", (1_600_000, 28, 28, 1), "<f4")
    return fake_run_case(sandbox)


CASES: list[Callable[[Sandbox], str]] = [
    item1_lock_link, item1_report_html_link, item1_live_report_json_link,
    item2_loop_at_import_estimate, item2_sys_exit_in_model_run, item2_refused_run_folder_in_use,
    item2_refused_run_read_only_folder, item2_estimate_says_it_runs_workload_files,
    item3_model_of_1e19_parameters, item3_threads_1e20, item3_threads_1e250, item3_threads_512,
    item3_estimate_epochs_1e400,
    item4_large_sweep, item4_10001_entries_one_workload_file,
    item5_truncated_npz, item5_header_claiming_364_tib, item5_symlink_loop, item5_zip_bomb,
    item6_stride_0, item6_model_raises_on_a_later_call, item6_wrong_output_shape, item6_dropout_1_5,
    item7_nan_in_x_train, item7_results_json_of_a_nan_accuracy, item7_one_class_dataset,
    item8_certify_power_with_a_users_workload,
    item9_int64_images, item9_5_gb_header_claim,
]


def run_case(case: Callable[[Sandbox], str], tree: str, src: Path, cap_s: float, old_src: Path) -> Result:
    root = Path(tempfile.mkdtemp(prefix=f"hostile-{tree}-"))
    try:
        sandbox = Sandbox(root, src, cap_s, old_src)
        try:
            effect = case(sandbox)
        except Exception as error:  # a case that could not be set up is a row that says so, not a lost table
            effect = f"case not built: {type(error).__name__}: {error}"[:200]
        return Result(case.__name__, tree, sandbox.measured, effect)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def cell(text: str) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= LINE_CUT else text[: LINE_CUT - 3] + "..."


def table(results: list[Result]) -> str:
    lines = ["| case | tree | exit | first stderr line | time s | peak MiB | lost/created |",
             "|---|---|---|---|---|---|---|"]
    for result in results:
        measured = result.measured
        stderr = measured.first_stderr
        if measured.error_line and measured.error_line != stderr:
            stderr = f"{stderr} / {measured.error_line}"
        lines.append(f"| {result.case} | {result.tree} | {measured.exit} | {cell(stderr)} | {measured.seconds:.1f} "
                     f"| {measured.peak_mib:.0f} | {cell(result.effect)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, type=Path, help="the old tree's src folder")
    parser.add_argument("--new", required=True, type=Path, help="the new tree's src folder")
    parser.add_argument("--only", action="append", default=[], metavar="SUBSTRING",
                        help="only the cases whose name holds this (repeatable)")
    parser.add_argument("--cap", type=float, default=DEFAULT_CAP_S, help="seconds per command before it is killed")
    parser.add_argument("--json", type=Path, help="also save the raw results here")
    args = parser.parse_args(argv)
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    for name, src in trees.items():
        if not (src / "dlbench").is_dir() or not (src.parent / "tests" / "fake_dlbench.py").is_file():
            parser.error(f"--{name} {src}: not a dlbench src folder with tests/fake_dlbench.py beside it")
    chosen = [case for case in CASES if not args.only or any(part in case.__name__ for part in args.only)]
    if not chosen:
        parser.error(f"--only {args.only}: no case matches; the cases: {', '.join(c.__name__ for c in CASES)}")
    results = []
    for case in chosen:
        for tree, src in trees.items():
            results.append(run_case(case, tree, src, args.cap, trees["old"]))
            print(f"{case.__name__} {tree}: {results[-1].measured.exit}", file=sys.stderr, flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(result) for result in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
