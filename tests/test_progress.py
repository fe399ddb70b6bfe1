"""What `dlbench run` shows while it runs: the live display in a fake terminal, plain lines elsewhere,
and the estimate of the time left, all fed scripted progress calls and a fake clock."""
import dataclasses
import io
import re

import pytest
from rich.console import Console
from synthetic_store import synthetic_run

from dlbench.harness import cli
from dlbench.harness.analysis.dataset_label import recipe_batch_size
from dlbench.harness.analysis.estimate import Estimate, EstimateError, Forecast
from dlbench.harness.plan.suite import Cell
from dlbench.harness.present import progress
from dlbench.harness.present.progress import ETA, LiveProgress, PlainProgress, duration
from dlbench.harness.run.cell_config import Options
from dlbench.harness.store import Store


def cell(framework: str, workload: str, epochs: int = 4) -> Cell:
    dataset = {"cnn-mnist": "digits-28", "lstm-imdb": "pang-lee-polarity"}[workload]
    return Cell("quick", framework, workload, dataset, "cpu", 1, 0, epochs, recipe_batch_size(workload) or 32, None,
                600.0)


def test_a_changed_recipe_batch_size_is_labelled_in_the_run_display():
    changed = dataclasses.replace(cell("pytorch", "cnn-mnist"), batch_size=64)
    assert progress.head(1, 2, changed) == "[1/2] pytorch cnn-mnist on digits-28, batch 64 (recipe 128) (cpu, rep 1)"
    assert progress.head(1, 2, cell("pytorch", "cnn-mnist")) == "[1/2] pytorch cnn-mnist on digits-28 (cpu, rep 1)"


PLAN = [cell("pytorch", "cnn-mnist"), cell("jax", "cnn-mnist"), cell("theano", "lstm-imdb"),
        cell("pytorch", "lstm-imdb"), cell("jax", "lstm-imdb", epochs=2)]


# what `dlbench estimate` forecasts of each cell of PLAN, in seconds; a GEMM peak costs 5 s a framework
FORECAST = [60.0, 60.0, 100.0, 80.0, 40.0]
PEAK_S = 5.0


class Forecaster:
    """A stand-in for the store's forecast (cli.run_forecast): per-cell seconds, None for no forecast,
    counting how often it is read; raises EstimateError, as an empty store does, while `seconds` is None."""

    def __init__(self, cells: list[Cell], seconds: list[float | None] | None) -> None:
        self.cells, self.seconds, self.reads = cells, seconds, 0

    def __call__(self) -> Estimate:
        self.reads += 1
        if self.seconds is None:
            raise EstimateError("the store holds no completed run")
        forecasts = [Forecast(c, s, s, s, "1 run", "runs") for c, s in zip(self.cells, self.seconds, strict=True)]
        return Estimate(forecasts, [], {"": PEAK_S})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def ready_event() -> dict:
    return {"event": "ready", "elapsed_s": 4.0, "versions": {"torch": "2.13.0"}, "threads": 2}


def epoch_event(number: int, train: float, evaluation: float, accuracy: float) -> dict:
    return {"event": "epoch", "epoch": number, "train_time_s": train, "eval_time_s": evaluation,
            "metrics": {"accuracy": accuracy}}


def ok_row(train: float) -> dict:
    return {"status": "ok", "metric_name": "accuracy", "metric_value": 0.9125, "train_time_s": train}


def script(show, clock: Clock) -> None:
    """Cell 1 ends ok after 60 s (15 s an epoch), cell 2 fails, cell 3 is skipped, cell 4 runs two of
    its four epochs, the second one 9 s + 1 s."""
    n = len(PLAN)
    show("start", 1, n, PLAN[0])
    clock.now = 5.0
    show("event", 1, n, PLAN[0], ready_event())
    for number in range(1, 5):
        clock.now += 13.75
        show("event", 1, n, PLAN[0], epoch_event(number, 12.0, 1.5, 0.5 + number / 10))
    show("end", 1, n, PLAN[0], ok_row(48.0))
    show("start", 2, n, PLAN[1])
    clock.now = 62.0
    show("end", 2, n, PLAN[1], {"status": "failed", "reason": "ImportError: no module named 'jax'"})
    show("skip", 3, n, PLAN[2])
    show("start", 4, n, PLAN[3])
    clock.now = 70.0
    show("event", 4, n, PLAN[3], ready_event())
    clock.now = 90.0
    show("event", 4, n, PLAN[3], epoch_event(1, 18.0, 1.0, 0.55))
    clock.now = 100.0
    show("event", 4, n, PLAN[3], epoch_event(2, 9.0, 1.0, 0.6125))


# After that script: cell 4 has 2 epochs left at its latest 10 s; cell 5 its forecast 40 s, and jax has
# measured its GEMM peak already (cell 2). Left: 20 + 40 = 60 s.
LEFT_AFTER_SCRIPT = "about 1 min 00 s left"


# ---- the live display in a fake terminal -----------------------------------------------------------

def screen(raw: str) -> list[str]:
    """What a terminal shows after `raw`, for the few controls rich's Live writes: line feeds, carriage
    returns, erase line, cursor up; colours and cursor visibility are dropped."""
    lines, row = [""], 0
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]+", raw):
        if token == "\n":
            row += 1
            lines += [""] * (row + 1 - len(lines))
        elif token == "\x1b[2K":
            lines[row] = ""
        elif token.startswith("\x1b[") and token.endswith("A"):
            row -= int(token[2:-1] or 1)
        elif not token.startswith("\x1b") and token != "\r":
            lines[row] += token  # rich writes each line from its start: after \n, \r or an erase
    while lines and not lines[-1].strip():
        lines.pop()
    return [line.rstrip() for line in lines]


def fake_terminal() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=100, record=True)


def test_live_display_shows_count_epoch_metric_eta_and_failures():
    clock, terminal = Clock(), fake_terminal()
    with LiveProgress(PLAN, clock, terminal, Forecaster(PLAN, FORECAST)) as live:
        script(live, clock)
        shown = screen(terminal.file.getvalue())
    assert "\x1b[" in terminal.file.getvalue()  # a terminal's display, coloured and redrawn in place
    bar, _, summary = shown[3].partition(" ")
    assert shown[:3] + [summary] + shown[4:] == [
        "[1/5] pytorch cnn-mnist on digits-28 (cpu, rep 1): ok: accuracy 91.2%, train 48.0 s",
        "[2/5] jax cnn-mnist on digits-28 (cpu, rep 1): failed: ImportError: no module named 'jax'",
        "[3/5] theano lstm-imdb on pang-lee-polarity (cpu, rep 1): already complete, skipped (--force reruns it)",
        f"cell 4/5: 1 ok, 1 failed, 1 skipped; {LEFT_AFTER_SCRIPT}",
        "pytorch lstm-imdb on pang-lee-polarity (cpu, rep 1)",
        "  epoch 2/4: accuracy 61.3%; train 9.00 s, eval 1.00 s",
    ]
    assert len(bar) == 30 and set(bar) <= set("━╸╺")  # rich's bar: 3 of 5 cells done


def test_live_display_before_the_first_epoch_and_at_the_end():
    clock, terminal = Clock(), fake_terminal()
    with LiveProgress(PLAN[:1], clock, terminal) as live:
        live("start", 1, 1, PLAN[0])
        clock.now = 4.0
        live("event", 1, 1, PLAN[0], ready_event())
        assert screen(terminal.file.getvalue())[-3:] == [
            # an empty bar: nothing done; no forecaster, as with a store that has nothing to go by
            "━" * 30 + " cell 1/1: 0 ok; time left unknown: no stored run to forecast 1 cell",
            "pytorch cnn-mnist on digits-28 (cpu, rep 1)",
            "  ready after 4.0 s (torch 2.13.0; 2 threads)",
        ]
        clock.now = 30.0
        live("end", 1, 1, PLAN[0], {"status": "timeout", "reason": "no event for 600 s"})
    # the live area is gone; the cell's line stays
    assert screen(terminal.file.getvalue()) == [
        "[1/1] pytorch cnn-mnist on digits-28 (cpu, rep 1): timeout: no event for 600 s"]


# ---- plain lines ---------------------------------------------------------------------------------

def test_plain_lines_one_per_cell_start_end_and_epoch_without_controls():
    clock, out = Clock(), io.StringIO()
    script(PlainProgress(PLAN, clock, out, Forecaster(PLAN, FORECAST)), clock)
    text = out.getvalue()
    assert "\x1b[" not in text and "\r" not in text
    assert text.splitlines() == [
        "[1/5] pytorch cnn-mnist on digits-28 (cpu, rep 1): 4 epochs",
        "    ready after 4.0 s (torch 2.13.0; 2 threads)",
        "    epoch 1/4: accuracy 60.0%; train 12.00 s, eval 1.50 s",
        "    epoch 2/4: accuracy 70.0%; train 12.00 s, eval 1.50 s",
        "    epoch 3/4: accuracy 80.0%; train 12.00 s, eval 1.50 s",
        "    epoch 4/4: accuracy 90.0%; train 12.00 s, eval 1.50 s",
        # the forecasts of the 4 cells left, 60 + 100 + 80 + 40 s, and jax's and theano's GEMM peaks, 2 x 5 s
        "    ok: accuracy 91.2%, train 48.0 s (1/5 done, about 4 min 50 s left)",
        "[2/5] jax cnn-mnist on digits-28 (cpu, rep 1): 4 epochs",
        "    failed: ImportError: no module named 'jax' (2/5 done, about 3 min 45 s left)",  # 220 s, theano's 5 s
        "[3/5] theano lstm-imdb on pang-lee-polarity (cpu, rep 1): already complete, skipped (--force reruns it)",
        "[4/5] pytorch lstm-imdb on pang-lee-polarity (cpu, rep 1): 4 epochs",
        "    ready after 4.0 s (torch 2.13.0; 2 threads)",
        "    epoch 1/4: accuracy 55.0%; train 18.00 s, eval 1.00 s",
        "    epoch 2/4: accuracy 61.3%; train 9.00 s, eval 1.00 s",
    ]


def test_plain_last_end_line_has_no_eta(capsys):
    show = PlainProgress(PLAN[:1], Clock())
    show("start", 1, 1, PLAN[0])
    show("end", 1, 1, PLAN[0], ok_row(3.0))
    assert capsys.readouterr().out.splitlines()[-1] == "    ok: accuracy 91.2%, train 3.0 s (1/1 done)"


def test_a_pipe_gets_plain_lines_and_plain_is_kept_when_asked(monkeypatch):
    monkeypatch.setattr("sys.stdout", io.StringIO())  # not a terminal
    assert isinstance(progress.display(PLAN, plain=False), PlainProgress)
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert isinstance(progress.display(PLAN, plain=False), LiveProgress)
    assert isinstance(progress.display(PLAN, plain=True), PlainProgress)
    monkeypatch.setenv("TERM", "dumb")  # Emacs' shell: a terminal that cannot move the cursor
    assert isinstance(progress.display(PLAN, plain=False), PlainProgress)


# ---- the estimate of the time left --------------------------------------------------------------

def test_eta_not_known_while_the_store_has_nothing_to_go_by():
    clock = Clock()
    forecaster = Forecaster(PLAN, None)
    eta = ETA(PLAN, clock, forecaster)
    eta.feed("start", 1, PLAN[0])
    clock.now = 30.0
    assert eta.seconds_left() is None
    assert eta.describe() == "time left unknown: no stored run to forecast 5 cells"
    eta.feed("event", 1, PLAN[0], epoch_event(1, 20.0, 2.0, 0.5))  # the current cell is timed now
    assert eta.describe() == "time left unknown: no stored run to forecast 4 cells"
    assert ETA(PLAN, clock).describe() == "time left unknown: no stored run to forecast 5 cells"


def test_eta_from_the_forecast_before_the_first_cell_ends():
    """Right from the start: the forecast of every cell and each framework's GEMM peak, not a rate taken
    from the cells done so far."""
    clock = Clock()
    eta = ETA(PLAN, clock, Forecaster(PLAN, FORECAST))
    assert eta.seconds_left() == pytest.approx(sum(FORECAST) + 3 * PEAK_S)  # pytorch, jax and theano
    eta.feed("start", 1, PLAN[0])
    clock.now = 25.0  # before its first epoch: its forecast and its peak less the 25 s it has run
    assert eta.seconds_left() == pytest.approx(60 + PEAK_S - 25 + sum(FORECAST[1:]) + 2 * PEAK_S)
    clock.now = 30.0  # its first epoch took 22 s: 3 more like it
    eta.feed("event", 1, PLAN[0], epoch_event(1, 20.0, 2.0, 0.5))
    assert eta.seconds_left() == pytest.approx(3 * 22 + sum(FORECAST[1:]) + 2 * PEAK_S)
    clock.now = 500.0  # slower than its forecast before an epoch: nothing left rather than less than nothing
    eta.feed("start", 2, PLAN[1])
    clock.now = 700.0
    assert eta.current_left() == 0.0


def test_eta_reads_the_forecast_again_when_a_cell_ends():
    """The run's own stored cells sharpen the forecast of those after them: it is read at each end."""
    clock = Clock()
    forecaster = Forecaster(PLAN, [None] * 5)
    eta = ETA(PLAN, clock, forecaster)
    eta.feed("start", 1, PLAN[0])
    clock.now = 50.0
    assert eta.describe() == "time left unknown: no stored run to forecast 5 cells"
    forecaster.seconds = [50.0, 45.0, 90.0, 70.0, None]  # what the store says once cell 1 is stored
    eta.feed("end", 1, PLAN[0], ok_row(40.0))
    assert forecaster.reads == 2
    assert eta.describe() == "time left unknown: no stored run to forecast 1 cell"
    forecaster.seconds = [50.0, 45.0, 90.0, 70.0, 35.0]
    eta.feed("end", 1, PLAN[0], {"status": "failed", "reason": "boom"})  # a failed cell's end reads it too
    assert eta.seconds_left() == pytest.approx(45 + 90 + 70 + 35 + 2 * PEAK_S)


def test_the_run_forecasts_from_its_results_store_as_estimate_does(tmp_path):
    """cli.run_forecast: the forecast of `dlbench estimate` from the store in the run's results folder."""
    results = tmp_path / "results"
    plan = [Cell("test", "pytorch", "cnn-mnist", "digits-28", "cpu", 1, 0, 10, 128, 2, 3600.0),
            Cell("test", "pytorch", "cnn-mnist", "digits-28", "cpu", 2, 0, 4, 128, 2, 3600.0)]
    forecast = cli.run_forecast(plan, Options(results, tmp_path / "no-data"))
    assert ETA(plan, Clock(), forecast).seconds_left() is None  # no store yet
    with Store(results / "dlbench.sqlite") as store:
        for repetition, steady in ((1, 1.0), (2, 1.2)):
            row, epochs, samples = synthetic_run("pytorch", "cnn-mnist", repetition, steady, 0.9,
                                                 position=repetition)
            store.save_run(row, epochs, samples)
    # tests/test_estimate.py works these out: fixed 3.35 s and 1.15 s an epoch, 14.85 s and 7.95 s
    assert ETA(plan, Clock(), forecast).seconds_left() == pytest.approx(14.85 + 7.95)


@pytest.mark.parametrize(("seconds", "text"), [(0.4, "0 s"), (59.4, "59 s"), (59.6, "1 min 00 s"),
                                               (245, "4 min 05 s"), (3600, "1 h 00 min"), (4020, "1 h 07 min")])
def test_duration(seconds, text):
    assert duration(seconds) == text
