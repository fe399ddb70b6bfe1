"""Versions as a range: name@LOW..HIGH read from a registry's simple index (a fixture served on loopback), expanded
in suite files and -f; the history over releases (analysis/history.py) found in synthetic stores, printed by
`dlbench compare --versions LOW..HIGH` and drawn in the report."""
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from analysis_runs import build_store, history_runs

from dlbench.harness.analysis import compare
from dlbench.harness.analysis.history import histories
from dlbench.harness.analysis.summary import summarise
from dlbench.harness.cli import main
from dlbench.harness.environments import releases
from dlbench.harness.environments.envs import EnvError
from dlbench.harness.plan import suite
from dlbench.harness.present import report

WHEEL = "cp311-cp311-manylinux_2_28_x86_64.whl"
# (file name, attributes of its link): what the registry's page of torch lists, with what a range must skip
TORCH_FILES = [
    (f"torch-2.0.1-{WHEEL}", ""),  # older than the recipe supports
    (f"torch-2.6.0-{WHEEL}", ""),
    (f"torch-2.7.0-{WHEEL}", ""),
    (f"torch-2.7.1-{WHEEL}", ""),
    (f"torch-2.8.0-{WHEEL}", ""),
    ("torch-2.8.0.tar.gz", ""),
    (f"torch-2.9.0rc1-{WHEEL}", ""),  # a pre-release
    (f"torch-2.9.0-{WHEEL}", ' data-yanked="broken wheel"'),  # yanked
    (f"torch-2.10.0-{WHEEL}", ' data-requires-python="&gt;=3.12"'),  # not for the recipe's Python 3.11
    (f"torch-2.11.0-{WHEEL}", ' data-requires-python="&gt;=3.8.*"'),  # no valid specifier: says nothing
    (f"torch-2.12.0-{WHEEL}", ""),
    (f"torch-2.12.1-{WHEEL}", ""),
    (f"torch-2.13.0-{WHEEL}", ""),  # the recipe's default
]


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> str:
    """A simple index (PEP 503) on loopback holding TORCH_FILES; its URL."""
    root = tmp_path_factory.mktemp("index")
    page = root / "simple" / "torch"
    page.mkdir(parents=True)
    links = "".join(f'<a href="../../files/{name}#sha256={"0" * 64}"{extra}>{name}</a>\n'
                    for name, extra in TORCH_FILES)
    (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    (root / "simple" / "index.html").write_text('<!DOCTYPE html><html><body><a href="torch/">torch</a></body></html>')
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    server.shutdown()
    server.server_close()


@pytest.fixture
def registry(index, monkeypatch) -> str:
    monkeypatch.setenv("UV_DEFAULT_INDEX", index)
    return index


def test_a_range_names_the_newest_release_of_each_minor_version_the_registry_holds(registry):
    # 2.7.0 gives way to 2.7.1; the sdist is 2.8.0 again; 2.9's pre-release and yanked wheel, and 2.10's wheel for
    # Python 3.12 only, are no release of it, while 2.11's unreadable Requires-Python is; "2.12" as the high end
    # takes 2.12.1
    assert releases.expand("pytorch@2.7..2.12") == ["pytorch@2.7.1", "pytorch@2.8.0", "pytorch@2.11.0",
                                                    "pytorch@2.12.1"]
    assert releases.expand("pytorch@2.7.1..2.8.0") == ["pytorch@2.7.1", "pytorch@2.8.0"]
    assert releases.expanded(["jax", "pytorch@2.8..2.8", "pytorch@2.8.0"]) == ["jax", "pytorch@2.8.0"]
    # the default version by its name alone, as a suite names it, so its runs are the same cells
    assert releases.expand("pytorch@2.12..2.13") == ["pytorch@2.12.1", "pytorch"]


@pytest.mark.parametrize("spec, message", [
    ("pytorch@2.0..2.8", "pytorch@2.0.1: torch 2.0.1 is outside the versions dlbench supports: 2.13.0, or >=2.1,<2.13"),
    ("pytorch@2.9..2.9.9", "'pytorch@2.9..2.9.9': the registry http://127.0.0.1:"),
    ("pytorch@2.8..2.7", "'pytorch@2.8..2.7': the range's low end 2.8 is above its high end 2.7"),
    ("pytorch@2.7..new", "'pytorch@2.7..new': 'new' is not a version number; a range is name@LOW..HIGH"),
])
def test_a_bad_range_is_refused_naming_it(registry, spec, message):
    with pytest.raises(EnvError) as refused:
        releases.expand(spec)
    assert message in str(refused.value)


def test_a_registry_that_cannot_be_read_is_named(monkeypatch):
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://127.0.0.1:9/simple/")  # the discard port: nothing listens
    with pytest.raises(EnvError, match=r"pytorch: could not list torch's releases from http://127.0.0.1:9/simple/"):
        releases.expand("pytorch@2.7..2.8")


def test_a_suite_and_minus_f_expand_a_range_into_one_environment_each(registry, tmp_path, capsys):
    path = tmp_path / "history.yaml"
    path.write_text("name: history\nframeworks: [jax, pytorch@2.7..2.8]\nrepeat: 2\nworkloads:\n"
                    "  - {workload: cnn-mnist, dataset: digits-28}\n")
    loaded = suite.load(str(path))
    assert loaded.frameworks == ("jax", "pytorch@2.7.1", "pytorch@2.8.0")
    assert sorted({cell.framework for cell in suite.plan(loaded)}) == ["jax", "pytorch@2.7.1", "pytorch@2.8.0"]
    path.write_text("name: history\nframeworks: [jax,\n  pytorch@2.0..2.8]\nworkloads:\n"
                    "  - {workload: cnn-mnist, dataset: digits-28}\n")
    with pytest.raises(suite.SuiteError, match=rf"{path}:2: field 'frameworks': pytorch@2.0.1: torch 2.0.1 is outside"):
        suite.load(str(path))
    # -f: refused before any environment is built
    assert main(["env", "create", "pytorch@2.0..2.8"]) == 2
    assert "torch 2.0.1 is outside the versions dlbench supports" in capsys.readouterr().err


STEADY = {"2.7.1": 2.0, "2.8.0": 2.0, "2.9.1": 2.5, "2.10.0": 2.5}  # a 25 % slowdown in 2.9.1
PEAK = {"2.7.1": 500.0, "2.8.0": 650.0, "2.9.1": 650.0, "2.10.0": 650.0}  # 30 % more memory from 2.8.0


def stored_histories(folder: Path, runs: list[dict]):
    return histories(summarise(compare.read_runs(build_store(folder, runs))))


def test_the_history_shows_the_steps_where_they_are_and_nowhere_else(tmp_path):
    [found] = stored_histories(tmp_path / "r", history_runs(STEADY, PEAK))
    assert [cell.framework_version for cell in found.cells] == ["2.7.1", "2.8.0", "2.9.1", "2.10.0"]
    shown = [(step.figure, step.after.framework_version) for step in found.shown_steps()]
    assert shown == [("peak_rss_mb", "2.8.0"), ("steady_epoch_s", "2.9.1")]
    step = found.shown_steps()[1]
    assert step.ratio.median == pytest.approx(1.25, rel=0.03) and step.ratio.low > 1.15
    assert step.sentence().startswith("steady epoch 1.2") and "from 2.8.0 to 2.9.1 (p " in step.sentence()
    assert step.builds is None
    # a change of build between releases is named beside the step (torch's CUDA wheels against its CPU wheel)
    runs = history_runs({"2.11.0+cu130": 2.0, "2.12.1+cu130": 2.0, "2.13.0+cpu": 2.0},
                        {"2.11.0+cu130": 800.0, "2.12.1+cu130": 800.0, "2.13.0+cpu": 430.0})
    [built] = stored_histories(tmp_path / "builds", runs)
    [memory] = built.shown_steps()
    assert memory.sentence().endswith(", the cu130 build to cpu") and memory.figure == "peak_rss_mb"
    # two releases are a comparison, not a history; single runs are drawn but no step is claimed from them
    assert stored_histories(tmp_path / "two", history_runs({"2.7.1": 2.0, "2.8.0": 3.0})) == []
    [single] = stored_histories(tmp_path / "single", history_runs(STEADY, reps=1))
    assert single.shown_steps() == [] and all(step.p_adjusted is None for step in single.steps)


def test_compare_prints_the_history_of_a_range(tmp_path, capsys):
    store = build_store(tmp_path / "r", history_runs(STEADY, PEAK))
    assert main(["compare", "--results", str(store), "--versions", "pytorch@2.7..2.10"]) == 0
    out = capsys.readouterr().out
    assert "pytorch over 4 releases: cnn-mnist on digits-28 (cpu)" in out
    [row] = [line for line in out.splitlines() if line.startswith("2.9.1")]
    assert "time 1.2" in row and "STEP" in row
    assert "steps: peak memory 1.30x" in out and "from 2.7.1 to 2.8.0" in out
    # a range narrower than the store: two releases are no history
    assert main(["compare", "--results", str(store), "--versions", "pytorch@2.9..2.10"]) == 2
    assert "holds runs of 2 release(s) of pytorch from 2.9 to 2.10 (2.9.1, 2.10.0); a history needs 3" in (
        capsys.readouterr().err)


@pytest.mark.parametrize("versions, message", [
    (["pytorch@2.8.0"], "--versions pytorch@2.8.0: give two versions (FRAMEWORK@A FRAMEWORK@B) or one range"),
    (["pytorch@2.7..2.9", "pytorch@2.13.0"], "--versions pytorch@2.7..2.9 pytorch@2.13.0: give two versions"),
    (["pytorch@2.7.0", "pytorch@2.8.0", "pytorch@2.9.0"], "give two versions (FRAMEWORK@A FRAMEWORK@B)"),
])
def test_compare_refuses_a_lone_version_or_a_range_beside_another(tmp_path, capsys, versions, message):
    store = build_store(tmp_path / "r", history_runs(STEADY))
    assert main(["compare", "--results", str(store), "--versions", *versions]) == 2
    assert message in capsys.readouterr().err


def test_the_report_draws_each_history_beside_its_table(tmp_path):
    store = build_store(tmp_path / "r", history_runs(STEADY, PEAK))
    page = Path(report.write(store)).read_text()
    assert '<h2 id="releases">Releases</h2>' in page and 'href="#releases"' in page
    section = page.split('<h2 id="releases">')[1].split("<h2 ")[0]
    assert section.count("<svg") == 1 and "pytorch over 4 releases" in section and "STEP" in section
    markdown = Path(report.write(store, "md")).read_text()
    assert "## Releases" in markdown and "| 2.9.1 |" in markdown
