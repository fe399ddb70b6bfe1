"""Session-wide test set-up: one folder the pytest workers of a session share, and the groups that
keep each expensive module fixture on one worker when the suite runs in parallel (pytest-xdist)."""
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory) -> Path:
    """Shared by every worker of this pytest session (each worker's basetemp sits inside it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def compile_cache(session_dir) -> Path:
    """One compile folder for the framework processes of the tests that time nothing (adapter checks,
    certification probes): Theano compiles each of its C modules once per session, not per process."""
    return session_dir / "certify" / "compile-cache"


@contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Held by one pytest worker at a time: the first computes a shared result, the others wait and reuse it."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that share a costly module fixture run on one worker (`--dist loadgroup`): the adapter
    checks of one framework, the end-to-end runs, the Python 3.8 venv, the float64 probes."""
    for item in items:
        params = getattr(item, "callspec", None) and item.callspec.params
        if params and "checked" in params:
            group = f"adapters-{params['checked']}"
        elif {"quick_run", "python38", "probes"} & set(item.fixturenames):
            group = item.module.__name__
        else:
            continue
        item.add_marker(pytest.mark.xdist_group(group))
