"""dlbench report: the HTML page opened in a real headless Chromium with networking blocked, the Markdown, the CLI."""
import csv
import http.server
import io
import os
import re
import shutil
import struct
import subprocess
import threading
from pathlib import Path

import guard
import pytest
from analysis_runs import build_store, history_runs
from synthetic_store import store_of, study_store, sweep_run, synthetic_run, thread_sweep

from dlbench.harness import cli
from dlbench.harness.present import html, report
from dlbench.harness.store import Store

# the report drawn from synthetic stores and opened in Chromium: a minute of the harness tests' two
pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_GUARD_S = 300
# Every request, loopback included (<-loopback>), goes to a proxy on the discard port where nothing listens.
OFFLINE = ["--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("results")
    study_store(folder)
    return folder


@pytest.fixture(scope="module")
def page(results: Path) -> Path:
    return report.write(results)


def need_chromium() -> str:
    if CHROMIUM:
        return CHROMIUM
    if os.environ.get("CI"):
        pytest.fail("chromium is missing in CI: .ci/run installs Debian's chromium package")
    pytest.skip("chromium is not installed (apt-get install chromium); CI installs it and runs this test")


def browse(profile: Path, url: str, *flags: str, offline: bool = True) -> subprocess.CompletedProcess:
    """Headless Chromium on one URL with a fresh profile; console messages go to stderr."""
    command = [need_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile}",
               "--enable-logging=stderr", "--v=0", *(OFFLINE if offline else []), *flags, url]
    return guard.run(command, BROWSER_GUARD_S)


def render_status(dom: str) -> dict[str, str]:
    tag = re.search(r'<p id="render-status"[^>]*>', dom)
    assert tag, f"no render status in the DOM: {dom[-2000:]}"
    return dict(re.findall(r'data-([\w-]+)="([^"]*)"', tag.group(0)))


def console_messages(stderr: str) -> list[str]:
    """What the page's scripts logged (Chromium's own pages log from chrome:// sources, left out)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line and "source: file://" in line]


def test_the_page_needs_nothing_from_outside(page: Path) -> None:
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>")
    # no external script, stylesheet, image or frame: the only URLs are XML namespace names
    assert not re.search(r'<(script|img|iframe|link)\b[^>]*\b(src|href)=', text)
    assert set(re.findall(r'https?://[^"\s]+', text)) <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


def test_store_text_is_escaped(page: Path) -> None:
    text = page.read_text()
    assert "&lt;OOM&gt; &amp; friends" in text
    assert "<OOM>" not in text


def test_report_in_a_real_browser_shows_every_chart_without_errors(page: Path, results: Path,
                                                                   tmp_path: Path) -> None:
    # expand the folded timelines (#expand), so every chart must take room on the page
    done = browse(tmp_path / "profile", page.as_uri() + "#expand", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    status = render_status(done.stdout)
    with Store(results / "dlbench.sqlite") as store:
        runs = store.runs()
        sampled = sum(1 for run in runs if store.samples(run["id"]))
    groups = {(r["workload"], r["dataset"], r["device"]) for r in runs}
    # epoch times and convergence per workload, a timeline per run, and the overview's interval chart of
    # each workload's ratios to the fastest
    expected = 3 * len(groups) + sampled
    assert expected == 3 * 2 + 48
    assert status == {"expected": str(expected), "charts": str(expected), "charts-shown": str(expected),
                      "errors": "0"}
    assert '<pre id="js-errors" hidden=""></pre>' in done.stdout
    assert console_messages(done.stderr) == []

    shot = tmp_path / "report.png"
    done = browse(tmp_path / "profile", page.as_uri(), f"--screenshot={shot}", "--window-size=1400,3000")
    assert done.returncode == 0, done.stderr[-2000:]
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", header[16:24]) == (1400, 3000)
    assert shot.stat().st_size > 50_000  # charts and text, not a blank page


def test_a_sweeps_scaling_charts_render_in_a_real_browser(tmp_path: Path) -> None:
    store_of(tmp_path / "sweep", thread_sweep() + [sweep_run("pytorch", 2.0, rep, batch_size=64, position=90 + rep)
                                                   for rep in (1, 2)])
    page = report.write(tmp_path / "sweep")
    done = browse(tmp_path / "profile", page.as_uri() + "#expand", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    # four groups (batch 128 at 1, 2 and 4 threads, batch 64 at 2: epoch times, convergence and the overview's
    # interval chart each), a timeline per run (17), and the scaling section's two figures (threads at batch
    # 128, batch sizes at 2 threads)
    expected = 3 * 4 + 17 + 2
    assert render_status(done.stdout) == {"expected": str(expected), "charts": str(expected),
                                          "charts-shown": str(expected), "errors": "0"}
    assert console_messages(done.stderr) == []


def test_a_history_over_releases_renders_in_a_real_browser(tmp_path: Path) -> None:
    store = build_store(tmp_path / "releases", history_runs({"2.7.1": 2.0, "2.8.0": 2.0, "2.9.1": 2.5}))
    page = report.write(store)
    done = browse(tmp_path / "profile", page.as_uri() + "#releases", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    status = render_status(done.stdout)
    assert status["expected"] == status["charts"] == status["charts-shown"] and status["errors"] == "0", status
    assert 'aria-label="releases-0"' in done.stdout and "pytorch over 3 releases" in done.stdout
    assert console_messages(done.stderr) == []


def test_script_errors_reach_the_page_status(page: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.html"
    broken.write_text(page.read_text().replace("</body>", "<script>notDefined();</script></body>"))
    done = browse(tmp_path / "profile", broken.as_uri(), "--dump-dom")
    assert render_status(done.stdout)["errors"] == "1"
    assert "notDefined is not defined" in done.stdout
    assert any("notDefined" in line for line in console_messages(done.stderr))


class Recorder(http.server.BaseHTTPRequestHandler):
    paths: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (the http.server API)
        Recorder.paths.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_browser_flags_block_the_network(tmp_path: Path) -> None:
    """The same page fetching from a server on this machine: blocked with the flags, reached without."""
    need_chromium()
    server = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        probe = tmp_path / "probe.html"
        probe.write_text(f'<img src="{url}/img.png"><script>fetch("{url}/fetch").catch(function () {{}});</script>')
        Recorder.paths = []
        browse(tmp_path / "offline", probe.as_uri(), "--dump-dom", "--virtual-time-budget=3000")
        assert Recorder.paths == []
        browse(tmp_path / "online", probe.as_uri(), "--dump-dom", "--virtual-time-budget=3000", offline=False)
        assert "/img.png" in Recorder.paths  # the probe does reach the server when nothing blocks it
    finally:
        server.shutdown()
        server.server_close()


def test_markdown_holds_the_findings_and_tables(results: Path) -> None:
    text = report.write(results, "md").read_text()
    assert (results / "report.md").exists()
    assert "## Findings" in text and "### cnn-mnist on digits-28 (cpu)" in text
    assert "- **Speed**: jax is the fastest: steady epoch time 0.6" in text
    assert "- _Caveat_: tensorflow, repetition 2 (of 8 runs): failed before its first epoch: worker exited with " \
           "status 1: &lt;OOM&gt; &amp; friends." in text
    assert "### Final metric, cpu" in text and "### Training time, cpu" in text
    assert "| workload (dataset) | jax | pytorch | tensorflow |" in text
    assert "rep 8: time cap, 2 of 4 epochs" in text
    # the lowest median is not called the fastest (the findings decide that); 8 runs a side: each side's [min, max]
    assert "| cnn-mnist (digits-28) | lowest median, 0.604 s | 1.67x [1.62-1.71] |" in text
    # Welch's t on log times: its 95 % interval of the ratio of geometric means (Holm over the workload's 3 pairs)
    assert "takes 1.67x as long (95% CI of the ratio 1.65-1.68; shown, Holm-adjusted p = 3.4e-21)" in text
    assert "- **Final metric**: No difference shown in final accuracy between jax (93.2%) and pytorch" in text
    assert "| cnn-mnist (digits-28) | 0.60x [0.58-0.62] | reference, 1.01 s | 1.01x [0.98-1.04] |" in text
    assert "### Time to target, cpu" in text
    # digits-28 stands in for mnist and no run reached the study's target: the row is left out, and said so
    assert "| cnn-mnist (digits-28) | not reached" not in text
    assert "Left out: cnn-mnist (digits-28): stand-in data that no run brought to the target" in text
    assert "| lstm-ptb (lee-news-lm) | 9.81 s [9.79-9.84] | 4.53 s [4.46-4.59] |" in text
    assert "<svg" not in text


def test_a_framework_stopped_by_its_time_cap_shows_the_last_epochs_metric(tmp_path: Path) -> None:
    with Store(tmp_path / "dlbench.sqlite") as store:
        store.save_run(*synthetic_run("pytorch", "cnn-mnist", 1, 1.0, 0.95))
        store.save_run(*synthetic_run("jax", "cnn-mnist", 1, 1.0, 0.9, epochs=200, done=94, status="timeout",
                                      reason="timed out after 86400 s", machine=False))
    loaded = report.load(tmp_path / "dlbench.sqlite")
    metric = next(t for t in loaded.study_tables if t.title == "Final metric, cpu")
    assert metric.header == ["workload (dataset)", "jax", "pytorch"]
    assert metric.rows[0][1] == "47.6% after 94 of 200 epochs (time cap)"
    assert metric.rows[0][2] == "95.0%"  # one run: the table's note says so, once
    assert "; one successful run per cell: one measurement, no interval" in metric.note
    machine = next(t for t in loaded.manifest if t.title == "Machine")
    assert ["CPU", "Test CPU @ 2.0GHz"] in machine.rows  # from the run that recorded it


def test_a_caveat_of_every_workload_is_said_once_at_the_top(results: Path, page: Path) -> None:
    """tensorflow's certificate failed on both workloads of the study: one caveat above the findings, none in them."""
    said = ("tensorflow held no passing equivalence certificate for any workload of this report (its certificate "
            "failed)")
    text = report.write(results, "md").read_text()
    assert text.count("held no passing equivalence certificate") == 1
    assert said in text
    assert text.index("### Caveats for every workload") < text.index(said) < text.index("### cnn-mnist")
    page_text = page.read_text()
    assert page_text.count("held no passing equivalence certificate") == 1
    assert page_text.index("Caveats for every workload") < page_text.index(said) < page_text.index("cnn-mnist on")


def test_manifest_and_certificates(results: Path) -> None:
    loaded = report.load(results / "dlbench.sqlite")
    tables = {t.title: t for t in loaded.manifest}
    assert tables["Machine"].rows[:2] == [["host", "bench-1"], ["CPU", "Test CPU @ 2.0GHz"]]
    assert ["GPUs", "none"] in tables["Machine"].rows
    order = tables["Run order"]
    assert [row[0] for row in order.rows] == [str(i) for i in range(1, 49)]
    assert order.rows[0][-1] == "0.1.0 (0123456789)"
    assert order.rows[0][-2] == "1.00 % (monitor 0.40 %)"  # of one core, over the run's wall time
    settings = ["test", "cnn-mnist", "digits-28", "cpu", "4", "128", "?", "2", "0, 1, 2, 3, 4, 5, 6, 7"]
    assert settings in tables["Suite settings"].rows
    assert loaded.certificate_grid.rows == [
        ["pytorch", "reference", "reference"],
        ["jax", "pass (3.0e-06, grad/dense_1/kernel)", "pass (3.0e-06, grad/dense_1/kernel)"],
        ["tensorflow", "FAIL (4.0e-02, grad/dense_1/kernel), older code",
         "FAIL (4.0e-02, grad/dense_1/kernel), older code"]]
    assert html.expected_charts(loaded) == 52 + 2  # and the overview's interval chart of each of the 2 workloads


def test_cli_writes_the_report_and_prints_its_path(results: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", "--results", str(results)]) == 0
    assert capsys.readouterr().out.strip() == str(results / "report.html")
    out = tmp_path / "paper" / "report.md"
    assert cli.main(["report", "--results", str(results), "--format", "md", "--output", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out) and out.read_text().startswith("# dlbench report")
    assert cli.main(["report", "--results", str(tmp_path / "none")]) == 2
    assert "no results at" in capsys.readouterr().err


def test_filters_hide_what_does_not_match(page: Path, tmp_path: Path) -> None:
    """A link can preselect the filters: with framework=jax only jax's timelines stay, and the findings
    of groups that hold jax."""
    done = browse(tmp_path / "profile", page.as_uri() + "#expand&framework=jax&workload=lstm-ptb", "--dump-dom")
    dom = done.stdout
    assert render_status(dom)["errors"] == "0"
    timelines = re.findall(r'<figure class="chart" data-framework="(\w+)"( hidden="")?>', dom)
    assert {f for f, hidden in timelines if not hidden} == {"jax"}
    assert {f for f, hidden in timelines if hidden} == {"pytorch", "tensorflow"}
    cards = re.findall(r'<details class="card" data-workload="([\w-]+)"[^>]*?( hidden="")?>', dom)
    assert cards == [("cnn-mnist", ' hidden=""'), ("lstm-ptb", "")]
    rows = re.findall(r'<tr data-workload="([\w-]+)"( hidden="")?>', dom)  # the study's tables
    # time to target leaves cnn-mnist out (stand-in data nobody brought to the target)
    assert rows == [("cnn-mnist", ' hidden=""'), ("lstm-ptb", "")] * 4 + [("lstm-ptb", "")]
    order = re.findall(r'<tr data-framework="(\w+)" data-workload="([\w-]+)" data-device="cpu"( hidden="")?>', dom)
    assert [(f, w) for f, w, hidden in order if not hidden] == [("jax", "lstm-ptb")] * 8


def test_gpu_samples_get_their_own_panels() -> None:
    from dlbench.harness.present import charts

    samples = [{"t_s": i / 10, "cpu_percent": 100.0, "system_cpu_percent": 110.0, "rss_mb": 500.0,
                "gpu_util_percent": 90.0, "gpu_mem_mb": 2048.0} for i in range(50)]
    svg = charts.timeline(samples, "gpu-run")
    assert svg.startswith('<svg role="img" aria-label="gpu-run"')
    assert ">GPU util %</text>" in svg and ">GPU MiB</text>" in svg
    assert "GPU" not in charts.timeline([{**s, "gpu_util_percent": None, "gpu_mem_mb": None} for s in samples], "cpu")


def test_failed_runs_and_missing_fields_still_make_a_report(tmp_path: Path) -> None:
    with Store(tmp_path / "dlbench.sqlite") as store:
        store.save_run(*synthetic_run("pytorch", "cnn-mnist", 1, 1.0, 0.9, status="failed", done=0, reason="boom"))
        store.save_run(*synthetic_run("jax", "cnn-mnist", 1, 1.0, 0.9, status="failed", done=0, reason="boom",
                                      n_samples=0))
        store.save_run({"cell_hash": "x", "framework": "pytorch", "workload": "unknown-workload", "status": "ok"},
                       [], [])
    loaded = report.load(tmp_path / "dlbench.sqlite")
    page = html.render(loaded)
    assert html.expected_charts(loaded) == 2 + 1  # epoch times of each group, one sampled run, no convergence
    assert page.count("<figure class=\"chart\"") == 3
    assert "No steady epoch time: no successful run recorded one." in page
    assert "jax, repetition 1 (of 1 run): failed before its first epoch: boom." in page
    assert "rep 1: failed, 0 of 4 epochs" in page
    assert ["machine", "not recorded"] not in loaded.manifest[0].rows  # the failed runs recorded a machine


def test_convergence_draws_the_workloads_target() -> None:
    from dlbench.harness.present import charts

    series = {"pytorch": [[(1.0, 0.5), (2.0, 0.8), (3.0, 0.95)]]}
    palette = charts.colours(["pytorch"])
    assert ">target</text>" in charts.convergence(series, palette, "accuracy", "with", target=0.9)
    assert ">target</text>" not in charts.convergence(series, palette, "accuracy", "without")


def test_both_panels_of_the_epoch_times_have_their_axis_label() -> None:
    from dlbench.harness.present import charts

    rows = [("a", (1.0, 0.9, 1.1), (3.0, 2.5, 3.5)), ("b", (2.0, 1.8, 2.2), (4.0, 3.9, 4.1))]
    svg = charts.epoch_times(rows, charts.colours(["a", "b"]), "epochs", warm=["b"])
    assert svg.count(">epoch time (s)</text>") == 2 and svg.count("> warm compile cache</text>") == 1


def test_first_epochs_of_warm_compile_caches_are_labelled(tmp_path: Path) -> None:
    """A cell whose runs all found a warm compile cache says so beside every figure that holds its first
    epoch, in the tables and on its first-epoch bar; a cold cell's figures carry no label."""
    with Store(tmp_path / "dlbench.sqlite") as store:
        for rep in (1, 2):
            run, epochs, samples = synthetic_run("theano", "cnn-mnist", rep, 1.0, 0.99, first=2.0)
            store.save_run({**run, "compile_cache": "warm"}, epochs, samples)
            store.save_run(*synthetic_run("pytorch", "cnn-mnist", rep, 1.0, 0.99))
    loaded = report.load(tmp_path / "dlbench.sqlite")
    training = next(t for t in loaded.study_tables if t.title == "Training time, cpu")
    assert training.header == ["workload (dataset)", "pytorch", "theano"]
    assert training.rows[0][2].endswith(" (warm compile cache)") and "warm" not in training.rows[0][1]
    assert "(warm compile cache): from runs whose first epoch found code compiled by earlier runs" in training.note
    target = next(t for t in loaded.study_tables if t.title == "Time to target, cpu")
    assert target.rows[0][2].endswith(" (warm compile cache)")
    page = html.render(loaded)
    assert "warm compile cache</text>" in page  # on theano's first-epoch bar
    assert page.count("warm compile cache</text>") == 1


def test_results_show_the_compile_cache_state(tmp_path: Path) -> None:
    from dlbench.harness.present import listing

    run, epochs, samples = synthetic_run("theano", "cnn-mnist", 1, 1.0, 0.99)
    table = listing.table([{**run, "compile_cache": "warm", "epochs": epochs}], listing.column_names())
    heading, _, row = table.splitlines()
    assert "cache" in heading.split() and "warm" in row.split()
    assert '"compile_cache": "warm"' in listing.to_json([{**run, "compile_cache": "warm"}])
    assert "compile_cache" in listing.to_csv([{**run, "compile_cache": "warm"}]).splitlines()[0].split(",")


def test_each_table_downloads_as_csv_from_the_page_and_ratio_cells_are_coloured(page: Path) -> None:
    """The CSV is inline (a data: URI) and holds the table's rows; the ratio tables' cells carry the scale's colours."""
    from urllib.parse import unquote

    from dlbench.harness.present import charts

    text = page.read_text()
    links = re.findall(r'<a class="csv" download="([\w-]+\.csv)" href="data:text/csv;charset=utf-8,([^"]*)">', text)
    assert len(links) == text.count("<table")  # one per table
    name, data = next(link for link in links if link[0] == "steady-epoch-time-relative-to-the-lowest-median-cpu.csv")
    rows = list(csv.reader(io.StringIO(unquote(data))))
    assert rows[0] == ["workload (dataset)", "jax", "pytorch", "tensorflow"]
    assert rows[1][:3] == ["cnn-mnist (digits-28)", "lowest median, 0.604 s", "1.67x [1.62-1.71]"]
    relative = text[text.index("Steady epoch time relative to the lowest median, cpu"):]
    shaded = re.findall(r'<td data-framework="(\w+)" style="background-color:(#\w{6})">([\d.]+)x', relative)
    assert shaded[0] == ("pytorch", charts.ratio_colour(1.67), "1.67")
    assert "; 8 successful runs per cell" not in text and "; 7 to 8 successful runs per cell" in text


def test_results_and_the_report_write_an_accuracy_alike(tmp_path: Path) -> None:
    """74.3% in `dlbench results`, in its per-epoch column and in the report's table: one form everywhere."""
    from dlbench.harness.present import listing

    run, epochs, _ = synthetic_run("pytorch", "lstm-imdb", 1, 1.0, 0.743)
    assert listing.columns({**run, "epochs": epochs})["final metric"] == "accuracy 74.3%"
    assert "accuracy 74.3%" in listing.table([{**run, "epochs": epochs}])
    assert listing.epochs_text({**run, "epochs": epochs}).endswith("4:74.3%@1.00s")
    with Store(tmp_path / "dlbench.sqlite") as store:
        store.save_run(run, epochs, [])
    metric = next(t for t in report.load(tmp_path / "dlbench.sqlite").study_tables if t.title == "Final metric, cpu")
    assert metric.rows[0][1] == "74.3%"


def test_time_to_target_of_stand_ins_nobody_reached_is_left_out_and_said_so(tmp_path: Path) -> None:
    with Store(tmp_path / "dlbench.sqlite") as store:
        for framework in ("pytorch", "jax"):
            store.save_run(*synthetic_run(framework, "cnn-mnist", 1, 1.0, 0.9))  # target 0.985: not reached
    loaded = report.load(tmp_path / "dlbench.sqlite")
    target = next(t for t in loaded.study_tables if t.title == "Time to target, cpu")
    assert target.rows == [] and "Left out: cnn-mnist (digits-28): stand-in data" in target.note
    page = html.render(loaded)
    shown = page[page.index("<h3>Time to target, cpu</h3>"):]
    assert shown.index("Left out: cnn-mnist") < shown.index("</div>") < shown.index("<table")  # no table of its own


def _csv_of(text: str, name: str) -> list[list[str]]:
    """The rows of the page's table whose CSV download is `name`."""
    from urllib.parse import unquote

    links = dict(re.findall(r'<a class="csv" download="([\w-]+\.csv)" href="data:text/csv;charset=utf-8,([^"]*)">',
                            text))
    return list(csv.reader(io.StringIO(unquote(links[name]))))


def test_the_serving_section_shows_each_inference_cell_and_its_latency_distribution(tmp_path: Path) -> None:
    """Inference runs beside training runs: their own section with the cells' figures (medians over the
    repetitions as numpy computes them from the stored latencies, the throughput's interval), one latency figure
    per workload; the epoch-based sections leave them out."""
    import numpy as np
    from synthetic_store import serving_store

    from dlbench.harness.present.tables import SERVING_HEADER

    serving_store(tmp_path, repetitions=3)
    text = report.write(tmp_path).read_text()
    assert '<a href="#serving">Serving</a>' in text and '<h2 id="serving">Serving</h2>' in text
    rows = _csv_of(text, "serving-cpu.csv")
    assert rows[0] == SERVING_HEADER
    by_cell = {(row[0], row[2]): row for row in rows[1:]}
    assert sorted(by_cell) == [("cnn-mnist", "jax 0.6.2"), ("cnn-mnist", "pytorch 2.13.0"),
                               ("lstm-imdb", "jax 0.6.2"), ("lstm-imdb", "pytorch 2.13.0")]
    with Store(tmp_path / "dlbench.sqlite") as store:
        served = [run for run in store.runs() if run["mode"] == "inference"]
        latencies = {run["id"]: store.latencies(run["id"]) for run in served}
    pytorch = [run for run in served if (run["framework"], run["workload"]) == ("pytorch", "cnn-mnist")]
    p99s = [np.percentile(latencies[run["id"]], 99) * 1000 for run in pytorch]
    row = by_cell[("cnn-mnist", "pytorch 2.13.0")]
    assert row[5] == f"{np.median(p99s):.3g}"  # the median over the three runs of each run's p99
    assert row[6] == "1,002 [1,001-1,003, 75%]"  # 1,000 + rep samples/s; three runs: [min-max] at 75%
    assert row[7:] == ["128", "0.5 s", "1 s", "400"]
    # jax's lstm-imdb cell: one of its three runs failed; the two others give its figures
    assert by_cell[("lstm-imdb", "jax 0.6.2")][6] == "2,002 [2,002-2,003, 50%]"
    # one latency figure per workload, after the training runs' charts; the page expects them
    assert len(re.findall(r"batch-1 latency per framework", text)) == 2
    expected = int(re.search(r'data-expected="(\d+)"', text).group(1))
    assert expected == text.count("<figure class=\"chart\"") and text.count("<svg") == expected
    # the training tables and findings hold no inference run: their cells are the training runs'
    training = _csv_of(text, "steady-epoch-time-relative-to-the-lowest-median-cpu.csv")
    assert [row[0] for row in training[1:]] == ["cnn-mnist (digits-28)", "lstm-ptb (lee-news-lm)"]
    markdown = report.write(tmp_path, "md").read_text()
    overview = markdown[markdown.index("## Overview"):markdown.index("## Findings")]
    assert "### Serving (cpu)" in overview and "| cnn-mnist | digits-28 | pytorch 2.13.0 |" in overview


def test_a_store_of_inference_runs_alone_makes_a_report_and_a_results_table(tmp_path: Path, capsys) -> None:
    from synthetic_store import serving_store

    serving_store(tmp_path, repetitions=1, with_training=False)
    text = report.write(tmp_path).read_text()
    assert "4 runs (3 ok, 1 failed or stopped) of 2 frameworks" in text
    rows = _csv_of(text, "serving-cpu.csv")
    # one run per cell: no interval; the failed cell says why
    assert [row[6] for row in rows[1:]] == ["2,001", "1,001", "failed: worker exited with status 1", "1,001"]
    assert text.count("<svg") == 2 and "### Serving (cpu)" in report.write(tmp_path, "md").read_text()
    assert cli.main(["results", "--results", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Inference runs\nevery run: device cpu, rep 1, peak MiB 400.00\n")
    assert "no runs stored yet" not in printed and max(len(line) for line in printed.splitlines()) <= 120


def test_the_serving_sections_charts_render_in_a_real_browser(tmp_path: Path) -> None:
    from synthetic_store import serving_store

    serving_store(tmp_path / "results", repetitions=2)
    page = report.write(tmp_path / "results")
    done = browse(tmp_path / "profile", page.as_uri() + "#expand", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    status = render_status(done.stdout)
    assert status["expected"] == status["charts"] == status["charts-shown"] and status["errors"] == "0"
    assert len(re.findall(r"batch-1 latency per framework", done.stdout)) == 2
    assert console_messages(done.stderr) == []


# reports, into the page's body, where the browser lays out the first chart and how tall the page is
LAYOUT_PROBE = ('<script>window.addEventListener("load", function () {'
                'var chart = document.querySelector("figure.chart > svg");'
                'document.body.setAttribute("data-first-chart", chart.getAttribute("aria-label") + " "'
                ' + Math.round(chart.getBoundingClientRect().top + window.scrollY));'
                'document.body.setAttribute("data-height", document.documentElement.scrollHeight);});</script></body>')


def test_nine_frameworks_on_six_workloads_show_a_chart_on_the_first_screen_and_fold_long_tables(
        tmp_path: Path) -> None:
    """The quick suite's shape (6 workloads x 9 frameworks): the overview's first interval chart starts on a
    1400 x 1000 first screen; the manifest's run order (one row per run) and the first-epoch table are
    folded, and open with #expand."""
    from synthetic_store import quick_store

    quick_store(tmp_path / "quick", repetitions=2)
    page = report.write(tmp_path / "quick")
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", LAYOUT_PROBE))
    done = browse(tmp_path / "profile", probed.as_uri(), "--window-size=1400,1000", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    chart, top = re.search(r'data-first-chart="([\w-]+) (\d+)"', done.stdout).groups()
    assert chart == "intervals-cpu-0" and int(top) < 1000
    folded = re.findall(r'<details class="table"[^>]*><summary><h3>([^<]*)', done.stdout)
    assert "Run order (108 rows) " in folded
    assert re.search(r"<details><summary>First epochs: 42 framework x workload pairs over 3x", done.stdout)
    height = int(re.search(r'data-height="(\d+)"', done.stdout).group(1))
    done = browse(tmp_path / "profile", probed.as_uri() + "#expand", "--window-size=1400,1000", "--dump-dom")
    assert int(re.search(r'data-height="(\d+)"', done.stdout).group(1)) > height  # the folds held rows
