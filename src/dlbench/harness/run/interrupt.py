"""Ctrl-C (SIGINT) and SIGTERM during `dlbench run`: the plan stops, and the cell it was measuring is
stored as `interrupted` with everything its worker reported, its run folder and its peak, instead of
leaving a run folder and a peak that no stored run names.

While `handled()` is in force, such a signal raises Interrupted, except inside `held()`, the stretch from
a cell's peak to its stored run: there the first signal is only noted. The worker's wait sees it
(`requested()`) and stops the worker; the run is stored as interrupted; the end of `held()` raises.
A second signal raises at once, even there: a user who presses Ctrl-C twice gets the prompt back.
`allowed()` lets a step inside `held()` that leaves nothing behind (a peak being measured) stop at once.

Signal handlers belong to the main thread: elsewhere `handled()` changes nothing.
"""
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The plan was stopped by a signal. A KeyboardInterrupt, so code that lets Ctrl-C through lets it through."""

    def __init__(self, signal_number: int, detail: str = "") -> None:
        super().__init__(signal_number)
        self.signal_number = signal_number
        self.detail = detail  # what was kept, said by the executor that stopped

    @property
    def exit_status(self) -> int:
        return 128 + self.signal_number  # as a shell reports a process its signal ended

    def __str__(self) -> str:
        if not self.detail:  # stopped between cells, or before any ran: cli.main says the same of Ctrl-C
            by = "" if self.signal_number == signal.SIGINT else f" by {signal_name(self.signal_number)}"
            return f"interrupted{by}; the cells that ended are stored, and the same command resumes after them"
        return (f"interrupted by {signal_name(self.signal_number)}: {self.detail}. The same command resumes: "
                "complete cells are skipped")


def signal_name(signal_number: int) -> str:
    name = signal.Signals(signal_number).name
    return "Ctrl-C (SIGINT)" if signal_number == signal.SIGINT else name


class _State:
    depth = 0  # how many held() blocks are open
    noted: int | None = None  # the signal received inside held(), not raised yet


_state = _State()


def _on_signal(signal_number: int, frame: FrameType | None) -> None:
    if _state.depth and _state.noted is None:
        _state.noted = signal_number
        return
    _state.noted = None
    raise Interrupted(signal_number)


@contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted (or are noted inside held()) while the block runs. A signal this
    process was started with ignored (a background job of a shell) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.getsignal(number) for number in SIGNALS}
    for number, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(number, _on_signal)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        _state.depth, _state.noted = 0, None


def requested() -> int | None:
    """The signal noted inside held(), which asks the worker being waited on to be stopped; else None."""
    return _state.noted


@contextmanager
def held() -> Iterator[None]:
    """Inside: a first signal is noted, not raised. At the end of the outermost held(), a noted signal
    raises Interrupted."""
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1
    if _state.depth == 0 and _state.noted is not None:
        noted, _state.noted = _state.noted, None
        raise Interrupted(noted)


@contextmanager
def allowed() -> Iterator[None]:
    """Inside held(): a signal raises at once again, one noted before the block included."""
    if _state.noted is not None:
        noted, _state.noted = _state.noted, None
        raise Interrupted(noted)
    depth, _state.depth = _state.depth, 0
    try:
        yield
    finally:
        _state.depth = depth
