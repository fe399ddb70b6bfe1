"""What `dlbench run` shows while it runs: the live display in a fake terminal, plain lines elsewhere,
and the estimate of the time left, all fed scripted progress calls and a fake clock."""
import dataclasses
import io
import re

import pytest
from rich.console import Console

from dlbench.harness.plan.dataset_label import recipe_batch_size
from dlbench.harness.plan.suite import Cell
from dlbench.harness.present import progress
from dlbench.harness.present.progress import ETA, LiveProgress, PlainProgress, duration


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


# After that script: cell 4 has 2 epochs left at its latest 10 s; cell 5 (lstm-imdb, 2 epochs) has no
# cell of its workload ended ok, so it takes cell 1's 60 s / 4 epochs: 2 x 15 s. Left: 20 + 30 = 50 s.
LEFT_AFTER_SCRIPT = "about 50 s left"


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
    with LiveProgress(PLAN, clock, terminal) as live:
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
            "━" * 30 + " cell 1/1: 0 ok; time left not known yet",  # an empty bar: nothing done
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
    script(PlainProgress(PLAN, clock, out), clock)
    text = out.getvalue()
    assert "\x1b[" not in text and "\r" not in text
    assert text.splitlines() == [
        "[1/5] pytorch cnn-mnist on digits-28 (cpu, rep 1): 4 epochs",
        "    ready after 4.0 s (torch 2.13.0; 2 threads)",
        "    epoch 1/4: accuracy 60.0%; train 12.00 s, eval 1.50 s",
        "    epoch 2/4: accuracy 70.0%; train 12.00 s, eval 1.50 s",
        "    epoch 3/4: accuracy 80.0%; train 12.00 s, eval 1.50 s",
        "    epoch 4/4: accuracy 90.0%; train 12.00 s, eval 1.50 s",
        # 4 cells left by cell 1's 15 s an epoch: 4 + 4 + 4 + 2 epochs
        "    ok: accuracy 91.2%, train 48.0 s (1/5 done, about 3 min 30 s left)",
        "[2/5] jax cnn-mnist on digits-28 (cpu, rep 1): 4 epochs",
        "    failed: ImportError: no module named 'jax' (2/5 done, about 2 min 30 s left)",
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

def test_eta_not_known_until_something_is_timed():
    clock = Clock()
    eta = ETA(PLAN, clock)
    assert eta.seconds_left() is None
    eta.feed("start", 1, PLAN[0])
    clock.now = 5.0
    eta.feed("event", 1, PLAN[0], ready_event())
    assert eta.seconds_left() is None and eta.describe() == "time left not known yet"


def test_eta_from_the_current_cell_alone_before_any_cell_ended():
    clock = Clock()
    eta = ETA(PLAN, clock)
    eta.feed("start", 1, PLAN[0])
    clock.now = 30.0  # 30 s to the end of epoch 1 (start-up included): 30 s an epoch for later cells
    eta.feed("event", 1, PLAN[0], epoch_event(1, 20.0, 2.0, 0.5))
    # this cell: 3 epochs x 22 s; later: (4 + 4 + 4 + 2) epochs x 30 s
    assert eta.seconds_left() == pytest.approx(3 * 22 + 14 * 30)


def test_eta_prefers_the_same_framework_and_workload_then_the_workload_then_any():
    clock = Clock()
    plan = [cell("pytorch", "cnn-mnist"), cell("jax", "lstm-imdb", epochs=2), cell("pytorch", "cnn-mnist"),
            cell("jax", "cnn-mnist"), cell("pytorch", "lstm-imdb"), cell("jax", "lstm-imdb", epochs=8)]
    eta = ETA(plan, clock)
    for index, seconds in ((1, 40.0), (2, 30.0)):  # 10 s an epoch, then 15 s an epoch
        eta.feed("start", index, plan[index - 1])
        clock.now += seconds
        eta.feed("end", index, plan[index - 1], ok_row(1.0))
    assert eta.rate(plan[2]) == 10.0  # pytorch cnn-mnist: itself
    assert eta.rate(plan[3]) == 10.0  # jax cnn-mnist: the workload's
    assert eta.rate(plan[4]) == 15.0  # pytorch lstm-imdb: the workload's
    assert eta.rate(plan[5]) == 15.0  # jax lstm-imdb: itself
    assert eta.rate(cell("theano", "cnn-mnist")) == 10.0
    assert eta.seconds_left() == 4 * 10 + 4 * 10 + 4 * 15 + 8 * 15


def test_eta_for_a_cell_before_its_first_epoch_counts_its_time_so_far():
    clock = Clock()
    eta = ETA(PLAN[:2], clock)
    eta.feed("start", 1, PLAN[0])
    clock.now = 48.0
    eta.feed("end", 1, PLAN[0], ok_row(1.0))  # 12 s an epoch
    eta.feed("start", 2, PLAN[1])
    clock.now = 58.0
    assert eta.seconds_left() == 4 * 12 - 10
    clock.now = 200.0  # slower than its estimate: nothing left rather than less than nothing
    assert eta.seconds_left() == 0.0


def test_failed_cells_give_no_time_per_epoch():
    clock = Clock()
    eta = ETA(PLAN[:2], clock)
    eta.feed("start", 1, PLAN[0])
    clock.now = 2.0
    eta.feed("end", 1, PLAN[0], {"status": "failed", "reason": "boom"})
    assert eta.seconds_left() is None


@pytest.mark.parametrize(("seconds", "text"), [(0.4, "0 s"), (59.4, "59 s"), (59.6, "1 min 00 s"),
                                               (245, "4 min 05 s"), (3600, "1 h 00 min"), (4020, "1 h 07 min")])
def test_duration(seconds, text):
    assert duration(seconds) == text
