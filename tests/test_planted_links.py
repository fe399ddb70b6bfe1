"""Links planted in a folder dlbench writes but did not just create (a shared results folder): a link at the
lock file, the store or a file beside it, report.html or live-report.json makes the command exit 2 with one
`dlbench: error:` line naming the link, and the file it points to keeps its bytes. A run folder is made new
by each run, so a link at its name is passed over. The temporary files a killed rewrite left, and the page it
left saying "Live", are corrected by the next command that writes the report."""
import os
import subprocess
import sys
import time
from pathlib import Path

import fake_dlbench
import pytest
from synthetic_store import study_store
from test_hostile_paths import RUN, error_line, never, tree

from dlbench.harness import cli, folders
from dlbench.harness.environments import envs
from dlbench.harness.present import report
from dlbench.harness.run import local, results_folder
from dlbench.harness.run.live_report import LiveReport, left_live
from dlbench.harness.store import Store, StoreError

VICTIM = b"data the runner may write, but no one else\n"


def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_bytes(VICTIM)
    return path


def plant(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def refused(link: Path, target: Path) -> str:
    """The start of the line that refuses `link`."""
    return f"dlbench: error: {link} is a symbolic link (to {target}); dlbench never writes through a link"


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# the folders module's helpers

def test_write_text_atomically_refuses_a_link_and_leaves_its_target_and_the_folder_as_they_were(tmp_path):
    target = victim(tmp_path)
    link = plant(tmp_path / "results" / "report.html", target)
    with pytest.raises(folders.PathError, match=f"^{link} is a symbolic link \\(to {target}\\); .*remove the link$"):
        folders.write_text_atomically(link, "a report")
    assert target.read_bytes() == VICTIM and link.is_symlink()
    assert os.listdir(tmp_path / "results") == ["report.html"]  # no temporary file left


def test_write_text_atomically_replaces_the_file_by_a_rename(tmp_path):
    path = tmp_path / "report.html"
    path.write_text("the earlier page")
    with open(path) as reader:  # a reader of the earlier page keeps reading it whole
        folders.write_text_atomically(path, "the new page")
        assert reader.read() == "the earlier page"
    assert path.read_text() == "the new page" and os.listdir(tmp_path) == ["report.html"]


def test_write_text_atomically_creates_its_temporary_file_exclusively(tmp_path, monkeypatch):
    """A link planted at the temporary file's name (guessed) is neither written through nor replaced."""
    target = victim(tmp_path)
    monkeypatch.setattr(folders.secrets, "token_hex", lambda size: "0badc0de")
    partial = plant(tmp_path / "results" / f".report.html.{os.getpid()}-0badc0de.partial", target)
    with pytest.raises(folders.PathError, match=f"^{tmp_path / 'results' / 'report.html'}: cannot write it "
                                                "\\(File exists\\); nothing there was changed$"):
        folders.write_text_atomically(tmp_path / "results" / "report.html", "a report")
    assert target.read_bytes() == VICTIM and not (tmp_path / "results" / "report.html").exists()
    assert partial.is_symlink()  # not this write's file: left for its owner to see


def test_open_no_follow_refuses_a_link_a_hard_link_and_a_fifo_and_empties_nothing(tmp_path):
    target = victim(tmp_path)
    link = plant(tmp_path / "lock", target)
    with pytest.raises(folders.PathError, match=f"^{link} is a symbolic link"):
        folders.open_no_follow(link, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    os.link(target, tmp_path / "hard")
    with pytest.raises(folders.PathError, match=f"^{tmp_path / 'hard'} is a file with 2 hard links; "):
        folders.open_no_follow(tmp_path / "hard", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(folders.PathError, match=f"^{tmp_path / 'fifo'} is not a plain file; "):
        folders.open_no_follow(tmp_path / "fifo", os.O_RDWR | os.O_CREAT)
    assert target.read_bytes() == VICTIM
    own = tmp_path / "own"
    own.write_text("old")
    os.close(folders.open_no_follow(own, os.O_WRONLY | os.O_TRUNC))
    assert own.read_bytes() == b""


def test_stale_partial_files_of_ended_processes_are_removed_and_a_live_writers_kept(tmp_path):
    ended, alive = dead_pid(), os.getpid()
    names = [f".report.html.{ended}.partial", f".report.html.{ended}-12ab.partial",
             f".live-report.json.{ended}-12ab.partial", f".report.html.{alive}-12ab.partial", "notes.partial"]
    for name in names:
        (tmp_path / name).write_text("part")
    removed = folders.remove_stale_partials(tmp_path, "report.html")
    assert sorted(p.name for p in removed) == sorted(names[:2])
    assert folders.remove_stale_partials(tmp_path) == [tmp_path / names[2]]
    assert sorted(os.listdir(tmp_path)) == sorted(names[3:])


# the lock file and the store

def test_a_lock_file_that_is_a_link_is_refused_naming_it(tmp_path):
    target = victim(tmp_path)
    link = plant(tmp_path / "results" / "dlbench.lock", target)
    with pytest.raises(StoreError, match=f"^the lock file {link} is a symbolic link \\(to {target}\\)"):
        with results_folder.locked(tmp_path / "results"):
            raise AssertionError("the lock was taken through a link")
    link.unlink()
    os.link(target, link)  # a hard link: emptied through, were it used
    with pytest.raises(StoreError, match=f"^the lock file {link} is a file with 2 hard links"):
        with results_folder.locked(tmp_path / "results"):
            raise AssertionError("the lock was taken through a hard link")
    assert target.read_bytes() == VICTIM


@pytest.mark.parametrize("name", ["dlbench.sqlite", "dlbench.sqlite-wal", "dlbench.sqlite-shm",
                                  "dlbench.sqlite-journal"])
@pytest.mark.parametrize("for_reading", [False, True], ids=["writer", "reader"])
def test_a_store_or_its_side_file_that_is_a_link_is_refused_naming_it(tmp_path, name, for_reading):
    target = victim(tmp_path)
    results = tmp_path / "results"
    study_store(results, repetitions=1)
    (results / name).unlink(missing_ok=True)  # the store itself, or a file SQLite writes beside it
    link = plant(results / name, target)
    with pytest.raises(StoreError, match=f"^{link} is a symbolic link \\(to {target}\\)"):
        Store(results / "dlbench.sqlite", for_reading=for_reading)
    assert target.read_bytes() == VICTIM


# the commands

@pytest.mark.parametrize("name", ["dlbench.lock", "dlbench.sqlite", "dlbench.sqlite-wal", "report.html",
                                  "live-report.json"])
def test_run_refuses_a_link_planted_in_its_results_folder_before_preparing_anything(
        tmp_path, name, monkeypatch, capsys):
    monkeypatch.setattr(local, "run_plan", never("the plan (environments, data, cells)"))
    target = victim(tmp_path)
    results = tmp_path / "results"
    link = plant(results / name, target)
    assert cli.main([*RUN, "--results", str(results)]) == 2
    assert error_line(capsys).startswith(refused(link, target))
    assert target.read_bytes() == VICTIM and os.listdir(results) == [name]


@pytest.fixture(scope="module")
def store_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("results")
    study_store(folder, repetitions=1)
    return folder


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_report_refuses_a_link_at_its_page_before_rendering(tmp_path, store_folder, fmt, monkeypatch, capsys):
    monkeypatch.setattr(report, "render", never("the report's rendering"))
    target = victim(tmp_path)
    link = plant(store_folder / report.FORMATS[fmt], target)
    try:
        before = tree(store_folder)
        assert cli.main(["report", "--results", str(store_folder), "--format", fmt]) == 2
        assert error_line(capsys).startswith(refused(link, target))
        output = plant(tmp_path / "out" / "page", target)  # --output names a link: refused as well
        assert cli.main(["report", "--results", str(store_folder), "--output", str(output)]) == 2
        assert error_line(capsys).startswith(refused(output, target))
        assert target.read_bytes() == VICTIM and tree(store_folder) == before
    finally:
        link.unlink()


def test_the_live_reports_cost_is_not_kept_through_a_link(tmp_path):
    target = victim(tmp_path)
    link = plant(tmp_path / "live-report.json", target)
    said: list[str] = []
    LiveReport(tmp_path, 2, cli.write_report, say=said.append).keep_cost(None)
    assert target.read_bytes() == VICTIM and link.is_symlink()
    assert said and f"{link} is a symbolic link (to {target})" in said[-1]


@pytest.mark.slow
def test_a_link_at_a_run_folders_name_is_passed_over(tmp_path, monkeypatch, digits_dir):
    """A run folder is made new (mkdir), so a link planted at the name a run would give it is passed over:
    the run makes name-2, and nothing is written where the link points."""
    monkeypatch.setitem(envs.RECIPES, "fakefw", fake_dlbench.RECIPE)
    suite = fake_dlbench.suite_file(tmp_path, monkeypatch)
    moment, strftime = time.localtime(), time.strftime
    monkeypatch.setattr(time, "strftime", lambda text, when=None: strftime(text, moment))
    results = tmp_path / "results"
    args = ["run", str(suite), "--results", str(results), "--data-dir", str(digits_dir), "--plain", "--force",
            "--no-live-report"]
    assert cli.main(args) == 0
    [first] = (results / "runs").iterdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "cell.json").write_bytes(VICTIM)
    first.rename(tmp_path / "first-run")
    plant(first, elsewhere)  # the next run, in the same second, would take this name first
    assert cli.main(args) == 0
    assert tree(elsewhere) == {"cell.json": VICTIM}
    assert sorted(p.name for p in (results / "runs").iterdir()) == [first.name, f"{first.name}-2"]
    assert (results / "runs" / f"{first.name}-2" / "events.jsonl").stat().st_size > 0


# a live rewrite killed midway

def live_page(results: Path) -> Path:
    """report.html as a run rewrites it between cells, and the temporary file a killed rewrite leaves."""
    page = report.write(results, live="Live: 1 of 3 cells done")
    (results / f".report.html.{dead_pid()}-1234abcd.partial").write_text("<!DOCTYPE html>\n<html")
    assert left_live(page)
    return page


def test_the_next_run_removes_a_killed_rewrites_file_and_says_it_is_live_itself(tmp_path):
    results = tmp_path / "results"
    study_store(results, repetitions=1)
    page = live_page(results)
    said: list[str] = []
    LiveReport(results, 4, cli.write_report, enabled=False, say=said.append).start()
    assert not list(results.glob(".*.partial")) and said == []
    assert "Live: 0 of 4 cells done" in page.read_text()  # this run's, until its full report replaces it


def test_dlbench_report_removes_a_killed_rewrites_file_and_writes_the_page_whole(tmp_path, capsys):
    results = tmp_path / "results"
    study_store(results, repetitions=1)
    page = live_page(results)
    assert cli.main(["report", "--results", str(results)]) == 0
    assert capsys.readouterr().out == f"{page}\n"
    assert not list(results.glob(".*.partial")) and not left_live(page) and "Live:" not in page.read_text()


# dlbench's own folders: an environment's lock and stamp, a download's partial file and pin

def test_an_environments_lock_and_stamp_are_never_opened_through_a_link(tmp_path, monkeypatch):
    from dlbench.harness.environments import disk
    target = victim(tmp_path)
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(envs, "create", never("the environment's build"))
    link = plant(envs.env_root() / f".{envs.folder_name('pytorch')}.lock", target)
    with pytest.raises(folders.PathError, match=f"^{link} is a symbolic link \\(to {target}\\)"):
        envs.ensure("pytorch")
    os.utime(target, (1_000_000_000, 1_000_000_000))
    stamp = plant(tmp_path / "env" / disk.USED_STAMP, target)
    with pytest.raises(folders.PathError, match=f"^{stamp} is a symbolic link"):
        disk.mark_used(envs.Environment("pytorch", tmp_path / "env"))
    assert target.read_bytes() == VICTIM and target.stat().st_mtime == 1_000_000_000


class Response:
    """What urlopen gives: a whole file of four bytes."""
    status, headers = 200, {"Content-Length": "4"}

    def __init__(self) -> None:
        self.body = [b"file", b""]

    def read(self, size: int) -> bytes:
        return self.body.pop(0)

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc) -> None:
        pass


def test_a_downloads_partial_file_and_pin_are_never_written_through_a_link(tmp_path, monkeypatch):
    from dlbench.harness.data import download
    target = victim(tmp_path)
    monkeypatch.setattr(download.urllib.request, "urlopen", lambda request, timeout: Response())
    part = plant(tmp_path / "raw" / "file.gz.part", target)
    with pytest.raises(folders.PathError, match=f"^{part} is a symbolic link \\(to {target}\\)"):
        download._download("http://127.0.0.1:9/file.gz", part, lambda *args: None, "file.gz")
    part.unlink()
    download._download("http://127.0.0.1:9/file.gz", part, lambda *args: None, "file.gz")
    assert part.read_bytes() == b"file"  # the same call, with no link there, writes the file
    pin = plant(tmp_path / "raw" / f"file.gz{download.PIN_SUFFIX}", target)
    spec = download.FileSpec("file.gz", ("http://127.0.0.1:9/file.gz",), None)
    with pytest.raises(folders.PathError, match=f"^{pin} is a symbolic link"):
        download.pin(spec, part)
    assert target.read_bytes() == VICTIM
