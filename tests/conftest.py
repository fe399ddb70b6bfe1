"""Session-wide test set-up: one folder that the pytest workers of a session share (`make test` runs
the suite on pytest-xdist workers, one test file per worker at a time)."""
import os
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
