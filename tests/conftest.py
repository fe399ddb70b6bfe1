"""Session-wide test set-up: one folder that the pytest workers of a session share (`make test` runs
the suite on pytest-xdist workers, one test file per worker at a time), the compile cache of the
framework processes that time nothing, the last hang guard, and an empty DLBENCH_HOME for every test
that lacks the marker `framework` (`make test-fast` runs those)."""
import os
from pathlib import Path

import guard
import pytest

from dlbench.harness import data
from dlbench.harness.environments import envs
from dlbench.harness.plan import workloads

# The last hang guard, for waits inside the test process (a Ray plan, a monitor's thread): longer than any
# test's own guard on a child process, which fires first and shows the child's output. pytest-timeout
# then fails the test with every thread's stack.
TEST_GUARD_S = 3600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(guard.bound(TEST_GUARD_S), method="signal"))


@pytest.fixture(autouse=True)
def no_environments(request, tmp_path_factory, monkeypatch) -> None:
    """A test without the marker `framework` runs, with every process it starts in this process's environment,
    with DLBENCH_HOME a folder of its own that holds nothing (no environment, no data, no compile cache),
    DLBENCH_DATA unset and uv offline with an empty cache: one that needs a framework environment and lacks the
    marker fails, naming the environment, instead of quietly using the machine's, and builds none. A test may
    still set a home of its own (the fake framework's). Fixtures of a wider scope are set up before this one and
    see the machine's home."""
    if request.node.get_closest_marker("framework") is None:
        folder = tmp_path_factory.mktemp("no-environments")
        monkeypatch.setenv("DLBENCH_HOME", str(folder / "home"))
        monkeypatch.delenv("DLBENCH_DATA", raising=False)
        monkeypatch.setenv("UV_OFFLINE", "1")
        monkeypatch.setenv("UV_CACHE_DIR", str(folder / "uv-cache"))


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory) -> Path:
    """Shared by every worker of this pytest session (each worker's basetemp sits inside it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="module")
def digits_dir(tmp_path_factory) -> Path:
    """A data folder holding digits-28 prepared (from scikit-learn, no download), once per test module."""
    folder = tmp_path_factory.mktemp("data")
    data.prepare("digits-28", folder)
    return folder


@pytest.fixture(scope="session")
def compile_cache(session_dir) -> Path:
    """One compile folder for the framework processes of the tests that time nothing (adapter checks,
    certification probes, detector checks), where certification's probes of the session compile
    (certify_dir / "compile-cache"). It links to a folder kept between test runs beside the framework
    environments, as Theano's own ~/.theano is kept: Theano keys each compiled module by its code, so a
    module is compiled once per machine, not per process or per run. Cold, the suite spends about 3 more
    minutes compiling."""
    kept = envs.dlbench_home() / "tests" / "compile-cache"
    kept.mkdir(parents=True, exist_ok=True)
    link = session_dir / "certify" / "compile-cache"
    link.parent.mkdir(parents=True, exist_ok=True)
    try:
        link.symlink_to(kept, target_is_directory=True)
    except FileExistsError:  # the other pytest worker made it
        pass
    return link


@pytest.fixture(scope="session", autouse=True)
def certificates_apart(tmp_path_factory) -> Path:
    """Every test, and every dlbench process a test starts, reads and writes certificates in a store of its
    pytest worker, never in the machine's (DLBENCH_HOME/certificates.sqlite): its verdicts would change
    what runs record, and the tests' would land in it. The environments stay where they are."""
    path = tmp_path_factory.getbasetemp() / "certificates.sqlite"
    before = os.environ.get("DLBENCH_CERTIFICATES")
    os.environ["DLBENCH_CERTIFICATES"] = str(path)
    yield path
    if before is None:
        del os.environ["DLBENCH_CERTIFICATES"]
    else:
        os.environ["DLBENCH_CERTIFICATES"] = before


@pytest.fixture
def user_registries():
    """The users' workloads and datasets a test registers in this process (reading a suite registers them),
    forgotten after it."""
    before = dict(data._DATASETS)
    yield
    workloads.USER_WORKLOADS.clear()
    workloads.USER_FILES.clear()
    data._DATASETS.clear()
    data._DATASETS.update(before)
