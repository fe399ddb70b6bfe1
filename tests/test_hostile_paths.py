"""Hostile and careless paths on the command line lose nothing and never crash: damaged stores, missing and
read-only results folders, results folders and report files that cannot be written, a prepared dataset that
is a link, Ctrl-C. Each refusal is exit status 2 and one `dlbench: error:` line naming the path (Ctrl-C: 130
and one line), with every file as it was and nothing created."""
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import guard
import numpy as np
import psutil
import pytest
from synthetic_store import study_store

from dlbench.harness import cli
from dlbench.harness.certification import machine_store, probes
from dlbench.harness.data import prepare
from dlbench.harness.present import report
from dlbench.harness.run import local

REPO = Path(__file__).resolve().parents[1]
RUN = ["run", "quick", "-f", "pytorch", "-w", "cnn-mnist"]


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a refused command prints, which must be all it prints to stderr."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dlbench: error: "), err
    return err.strip()


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its bytes (None for a folder or a link): what "nothing changed" compares."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() and not p.is_symlink() else None
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """good/, damaged/ (page 2 on overwritten: the runs table) and bad-json/ (run 3's config cut short)."""
    root = tmp_path_factory.mktemp("stores")
    for name in ("good", "damaged", "bad-json"):
        (root / name).mkdir()
        study_store(root / name, repetitions=2)
    damaged = root / "damaged" / "dlbench.sqlite"
    content = bytearray(damaged.read_bytes())
    content[4096:4096 + len(content) // 3] = bytes((i * 37) % 251 for i in range(len(content) // 3))
    damaged.write_bytes(bytes(content))
    with sqlite3.connect(root / "bad-json" / "dlbench.sqlite") as conn:
        conn.execute("UPDATE runs SET config = '{\"threads\": 2,' WHERE id = 3")
    conn.close()
    return root


@pytest.mark.parametrize("command", ["results", "report", "compare", "estimate"])
@pytest.mark.parametrize(("name", "says"), [
    ("damaged", "the store is damaged (database disk image is malformed); it is left as it is"),
    ("bad-json", "table runs, row id 3: column config holds invalid JSON"),
])
def test_a_damaged_store_is_refused_by_name_and_left_unchanged(stores: Path, tmp_path: Path, command: str, name: str,
                                                               says: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = tree(stores)
    args = {"results": ["results", "--results", str(stores / name)],
            "report": ["report", "--results", str(stores / name), "--output", str(tmp_path / "report.html")],
            "compare": ["compare", "--baseline", str(stores / "good"), "--results", str(stores / name)],
            "estimate": ["estimate", "quick", "--results", str(stores / name)]}[command]
    assert cli.main(args) == 2
    assert error_line(capsys).startswith(f"dlbench: error: {stores / name / 'dlbench.sqlite'}: {says}")
    assert tree(stores) == before and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["results"], ["report"], ["certify", "--show"]])
def test_readers_of_a_missing_results_folder_create_nothing(tmp_path: Path, args: list[str],
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DLBENCH_CERTIFICATES", str(tmp_path / "home" / "certificates.sqlite"))
    monkeypatch.chdir(tmp_path)  # the default ./dlbench-results, and one named
    for results in ([], ["--results", str(tmp_path / "missing")]):
        code = cli.main(args + results)
        if args[0] == "certify":
            assert code == 0 and capsys.readouterr().out.startswith("no certificates stored yet")
        else:
            assert code == 2 and "no results at" in error_line(capsys)
    assert list(tmp_path.iterdir()) == []
    assert cli.main(["compare", "--baseline", str(tmp_path / "missing"), "--results", str(tmp_path / "missing")]) == 2
    assert error_line(capsys) == (f"dlbench: error: {tmp_path / 'missing'} does not exist; give a results folder "
                                  "or a dlbench.sqlite file")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder that the user `as_reader` runs dlbench as can search (pytest's own are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="dlbench-read-only-"))
    folder.chmod(0o755)
    yield folder
    for path in (folder, *folder.rglob("*")):
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(folder)


def as_reader(args: list[str], folder: Path) -> subprocess.CompletedProcess:
    """dlbench run by a user who cannot write the folders this test made read-only: root writes any folder
    whatever its mode, so as root it runs as nobody (setpriv); any other user is one already."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "DLBENCH_CERTIFICATES": str(folder / "certificates.sqlite")}
    command = [sys.executable, "-m", "dlbench", *args]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: no user here for whom a folder is read-only")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        if subprocess.run(command[:4] + [sys.executable, "-c", "import dlbench"], env=env,
                          capture_output=True).returncode != 0:
            pytest.skip("user nobody cannot read this checkout or its Python, so cannot stand in for a reader")
    return subprocess.run(command, env=env, capture_output=True, text=True, cwd=folder, timeout=120)


def read_only(folder: Path) -> Path:
    folder.chmod(0o555)
    return folder


def read_only_results(shared_folder: Path) -> Path:
    results = shared_folder / "results"
    results.mkdir()
    study_store(results, repetitions=1)
    return read_only(results)


@pytest.mark.slow
def test_readers_read_a_read_only_results_folder(shared_folder: Path) -> None:
    results = read_only_results(shared_folder)
    before = tree(results)
    shown = as_reader(["results", "--results", str(results), "--format", "csv"], shared_folder)
    assert shown.returncode == 0, shown.stderr
    assert len(shown.stdout.strip().splitlines()) == 1 + 6  # the header and 3 frameworks x 2 workloads
    compared = as_reader(["compare", "--results", str(results), "--baseline", str(results)], shared_folder)
    assert compared.returncode == 0, compared.stderr
    forecast = as_reader(["estimate", "quick", "--results", str(results)], shared_folder)
    assert forecast.returncode == 0 and forecast.stdout.startswith("forecast of quick"), forecast.stderr
    elsewhere = shared_folder / "elsewhere"
    elsewhere.mkdir()
    elsewhere.chmod(0o777)  # the reader writes here
    written = as_reader(["report", "--results", str(results), "--format", "md", "--output",
                         str(elsewhere / "report.md")], shared_folder)
    assert written.returncode == 0, written.stderr
    assert (elsewhere / "report.md").read_text().startswith("# dlbench report")
    assert tree(results) == before


def store_with_a_write_ahead_log(results: Path) -> None:
    """A store as a killed `dlbench run` leaves it: its last run only in dlbench.sqlite-wal, with the -shm."""
    results.mkdir()
    study_store(results, repetitions=1)
    writer = sqlite3.connect(results / "dlbench.sqlite", isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO runs (cell_hash, framework, workload, status, config) "
                   "VALUES ('h', 'jax', 'cnn-mnist', 'ok', '{}')")
    for suffix in ("", "-wal", "-shm"):  # copied while the writer holds them, as a kill leaves them
        shutil.copy(f"{results}/dlbench.sqlite{suffix}", f"{results}/kept{suffix}")
    writer.close()
    for suffix in ("", "-wal", "-shm"):
        os.replace(f"{results}/kept{suffix}", f"{results}/dlbench.sqlite{suffix}")


def test_a_read_only_store_with_a_write_ahead_log_shows_its_runs_or_says_why_not(shared_folder: Path) -> None:
    results = shared_folder / "results"
    store_with_a_write_ahead_log(results)
    before = tree(read_only(results))
    shown = as_reader(["results", "--results", str(results), "--format", "csv"], shared_folder)
    assert shown.returncode == 0, shown.stderr
    assert len(shown.stdout.strip().splitlines()) == 1 + 7  # the log's run too
    assert tree(results) == before

    results.chmod(0o755)
    (results / "dlbench.sqlite-shm").unlink()  # without it SQLite must write one to read the log
    before = tree(read_only(results))
    refused = as_reader(["results", "--results", str(results)], shared_folder)
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"dlbench: error: {results / 'dlbench.sqlite'}: cannot read the store in a "
                                     "read-only folder: its write-ahead log dlbench.sqlite-wal holds commits")
    assert f"make {results} writable" in refused.stderr
    assert tree(results) == before


def unwritable_paths(tmp_path: Path) -> list[tuple[Path, str]]:
    """A folder under a regular file; one where nothing can be created (/proc takes no folders, even from root)."""
    (tmp_path / "afile").write_text("in the way\n")
    paths = [(tmp_path / "afile", f"{tmp_path / 'afile'} is a file, not a folder"),
             (tmp_path / "afile" / "results", f"{tmp_path / 'afile'} is a file, not a folder")]
    if Path("/proc/self").is_dir():
        paths.append((Path("/proc/dlbench-results"), "cannot create /proc/dlbench-results, since /proc cannot be "
                                                     "written"))
    return paths


def never(what: str):
    def called(*args, **kwargs):
        raise AssertionError(f"{what} was reached: the results folder was not checked first")
    return called


def test_run_checks_its_results_folder_before_preparing_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(local, "run_plan", never("the plan (environments, data, cells)"))
    for results, says in unwritable_paths(tmp_path):
        assert cli.main([*RUN, "--results", str(results)]) == 2
        line = error_line(capsys)
        assert line.startswith(f"dlbench: error: --results {results}: {says}") and "give a folder" in line
    assert tree(tmp_path) == {"afile": b"in the way\n"}


def test_certify_checks_its_results_folder_before_any_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DLBENCH_CERTIFICATES", str(tmp_path / "home" / "certificates.sqlite"))
    # a pair with no certificate, whatever environments this machine has built
    monkeypatch.setattr(machine_store, "key_now", lambda framework, workload: machine_store.Key(
        framework, "env", workload.name, "source", "reference", "digest"))
    monkeypatch.setattr(probes, "reference_probes", never("the reference's probes"))
    from dlbench.harness.certification import power
    monkeypatch.setattr(power, "power", never("certify --power's probes"))
    for results, says in unwritable_paths(tmp_path):
        for args in (["certify", "-f", "jax", "-w", "cnn-mnist"], ["certify", "--power", "-w", "cnn-mnist"]):
            assert cli.main([*args, "--results", str(results)]) == 2
            assert error_line(capsys).startswith(f"dlbench: error: --results {results}: {says}")
    assert (tmp_path / "afile").read_text() == "in the way\n" and not (tmp_path / "afile").is_dir()


def never_ends(*args) -> str:
    raise KeyboardInterrupt  # Ctrl-C while the report renders


@pytest.mark.slow
def test_report_checks_its_output_before_rendering_and_writes_it_whole(stores: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    rendered = []
    real_render = report.render
    monkeypatch.setattr(report, "render", lambda *args: rendered.append(args) or real_render(*args))
    good = str(stores / "good")
    outputs = [(tmp_path, f"{tmp_path} is a folder; give a file in a folder this user can write, such as "
                          f"{tmp_path / 'report.html'}")]
    outputs += [(path / "report.html", says) for path, says in unwritable_paths(tmp_path)]
    for output, says in outputs:
        assert cli.main(["report", "--results", good, "--output", str(output)]) == 2
        assert error_line(capsys).startswith(f"dlbench: error: --output {output}: {says}")
    assert rendered == []

    kept = tmp_path / "report.md"
    kept.write_text("an earlier report\n")
    monkeypatch.setattr(report, "render", never_ends)
    with pytest.raises(KeyboardInterrupt):
        report.write(stores / "good", "md", kept)
    assert tree(tmp_path) == {"afile": b"in the way\n", "report.md": b"an earlier report\n"}


@pytest.mark.slow
def test_writers_refuse_a_read_only_results_folder_first(shared_folder: Path) -> None:
    results = read_only_results(shared_folder)
    before = tree(results)
    refused = as_reader(["report", "--results", str(results), "--format", "md"], shared_folder)
    assert refused.returncode == 2
    assert refused.stderr == (f"dlbench: error: the report {results / 'report.md'}: cannot write in {results} "
                              "(Permission denied); write it elsewhere with --output PATH\n")
    run = as_reader([*RUN, "--results", str(results)], shared_folder)
    assert run.returncode == 2
    assert run.stderr.startswith(f"dlbench: error: --results {results}: cannot write in {results} (Permission "
                                 "denied); give a folder this user can write")
    assert tree(results) == before


def linked_dataset(tmp_path: Path) -> tuple[Path, Path]:
    """A data folder whose prepared pang-lee-polarity is a link to a prepared copy elsewhere."""
    elsewhere = prepare("pang-lee-polarity", tmp_path / "elsewhere").path
    data = tmp_path / "data"
    (data / "prepared").mkdir(parents=True)
    (data / "prepared" / "pang-lee-polarity").symlink_to(elsewhere, target_is_directory=True)
    return data, elsewhere


def test_a_prepared_dataset_that_is_a_link_is_never_deleted_through_it(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    data, elsewhere = linked_dataset(tmp_path)
    fetch = ["data", "fetch", "pang-lee-polarity", "--data-dir", str(data)]
    assert cli.main(fetch) == 0  # a valid prepared copy behind a link is used as it is
    capsys.readouterr()
    np.save(elsewhere / "y_test.npy", np.zeros(3, dtype=np.int64))  # now it fails its hash
    before = tree(tmp_path / "elsewhere")
    link = data / "prepared" / "pang-lee-polarity"
    assert cli.main(fetch) == 2
    line = error_line(capsys)
    assert line.startswith(f"dlbench: error: {link} is a link to {elsewhere}, whose prepared arrays are invalid "
                           "(content does not match the hash")
    assert "remove the link to prepare pang-lee-polarity afresh in the data folder" in line
    assert tree(tmp_path / "elsewhere") == before and link.is_symlink()

    shutil.rmtree(elsewhere)
    assert cli.main(fetch) == 2
    assert error_line(capsys).startswith(f"dlbench: error: {link} is a link to {elsewhere}, which does not exist;")
    assert link.is_symlink() and not elsewhere.exists()


# The plan stood in for by one worker process that sleeps, started as run_worker starts every worker: Ctrl-C
# must stop the harness with one line and status 130 and leave no worker behind.
SLEEPING_WORKER = """
import os, sys
from dlbench.harness import cli
from dlbench.harness.run import launch, local

def one_sleeping_worker(cells, options, progress, live=None):
    folder = options.results / "worker"
    folder.mkdir(parents=True)
    sleep = ("import os, time; open('pid.tmp', 'w').write(str(os.getpid())); os.rename('pid.tmp', 'pid'); "
             "time.sleep(600)")
    launch.run_worker([sys.executable, "-c", sleep], dict(os.environ), folder, 600)
    raise AssertionError("the worker ended without being interrupted")

local.run_plan = one_sleeping_worker
sys.exit(cli.main(sys.argv[1:]))
"""


def test_ctrl_c_prints_one_line_exits_130_and_leaves_no_worker(tmp_path: Path) -> None:
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    # its own process group, which Ctrl-C signals as a terminal does its foreground group
    harness = subprocess.Popen([sys.executable, "-c", SLEEPING_WORKER, *RUN, "--plain", "--results", str(results)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, preexec_fn=guard.default_sigint)
    try:
        pid_file = results / "worker" / "pid"
        deadline = time.monotonic() + 60
        while not pid_file.exists() and harness.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pid_file.exists(), harness.communicate(timeout=10)
        worker = psutil.Process(int(pid_file.read_text()))
        os.killpg(harness.pid, signal.SIGINT)
        _, err = harness.communicate(timeout=60)
    finally:
        if harness.poll() is None:
            os.killpg(harness.pid, signal.SIGKILL)
    assert harness.returncode == 130
    assert err == ("dlbench: interrupted; the cells that ended are stored, and the same command resumes after "
                   "them\n")
    assert not alive_after(worker, 10.0)


def alive_after(process: psutil.Process, seconds: float) -> bool:
    """Whether the process still runs after waiting up to `seconds` for it to die (a zombie counts as dead)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            return False
        time.sleep(0.1)
    return True


def test_a_reader_that_closes_the_pipe_ends_dlbench_quietly():
    """`dlbench list workloads | head -1`: the reader gone, dlbench ends as a shell tool does, with no
    traceback and the status a shell gives a writer stopped by SIGPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "dlbench", "list", "workloads"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (cli.BROKEN_PIPE, "")
