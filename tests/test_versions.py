"""Framework versions: name@version in the CLI and suite files, a version's recipe and environment, two
versions of JAX run side by side in one suite and told apart in results and compare; env list, remove
and prune on environments' folders."""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import guard
import pytest

from dlbench.harness.environments import disk, envs
from dlbench.harness.environments.envs import EnvError, Recipe
from dlbench.harness.store import Store

OLDER_JAX = "jax@0.6.2"  # the one older version the tests build: jaxlib's wheel, about 80 MB from PyPI


def dlbench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return guard.run([sys.executable, "-m", "dlbench", *args], 1800, env=env)


@pytest.mark.parametrize("spec, message", [
    ("jax@", "'jax@': no version after '@'; for instance jax@0.10.2"),
    ("jax@0.1.0", "jax@0.1.0: jax 0.1.0 is outside the versions dlbench supports: 0.10.2, or >=0.4.38,<0.10.2"),
    ("jax@latest", "jax@latest: 'latest' is not a version number (nor a range, LOW..HIGH); jax versions dlbench "
                   "supports: 0.10.2, or >=0.4.38,<0.10.2"),
    ("theano@1.0.4", "theano@1.0.4: theano 1.0.4 is outside the versions dlbench supports: 1.0.5 only"),
    ("jaxx@0.6.2", "unknown framework 'jaxx'; known: pytorch, jax,"),
])
def test_a_bad_framework_version_is_refused_with_exit_2_naming_what_is_accepted(spec, message):
    for command in (("run", "quick", "-f", spec), ("env", "create", spec), ("certify", "-f", spec)):
        done = dlbench(*command)
        assert done.returncode == 2, (command, done.stderr)
        assert message in done.stderr, (command, done.stderr)


def test_a_suite_file_names_the_line_of_a_bad_version(tmp_path):
    suite = tmp_path / "versions.yaml"
    suite.write_text("name: versions\nframeworks: [jax, jax@9.9]\nworkloads:\n"
                     "  - {workload: lstm-ptb, dataset: lee-news-lm}\n")
    done = dlbench("run", str(suite))
    assert done.returncode == 2
    assert f"{suite}:2: field 'frameworks': jax@9.9: jax 9.9 is outside the versions dlbench supports" in done.stderr


def test_a_versions_recipe_pins_it_and_releases_the_companions():
    recipe = envs.get_recipe(OLDER_JAX)
    assert recipe.packages == ("jax==0.6.2", "flax", "optax", "numpy")
    assert recipe.digest() != envs.RECIPES["jax"].digest()
    # the default version written out is the default recipe, in the default environment's folder
    assert envs.get_recipe("jax@0.10.2") is envs.RECIPES["jax"]
    assert envs.folder_name("jax@0.10.2") == "jax" and envs.folder_name(OLDER_JAX) == OLDER_JAX
    assert envs.is_reference("pytorch") and envs.is_reference("pytorch@2.13.0") and not envs.is_reference("jax")


def test_an_older_torch_gets_the_companions_it_needs():
    # numpy 1 for the releases built against it, packaging for the one that compares versions with it undeclared
    assert envs.get_recipe("pytorch@2.1.2").packages == ("torch==2.1.2", "numpy", "numpy<2", "packaging")
    assert envs.get_recipe("pytorch@2.2.2").packages == ("torch==2.2.2", "numpy", "numpy<2")
    assert envs.get_recipe("pytorch@2.4.1").packages == ("torch==2.4.1", "numpy")


def test_older_pins_apply_only_to_the_versions_they_name():
    recipe = Recipe("demo", "3.11", ("demo==3.0", "helper==1.5", "numpy"), "m:A", "demo", "demo",
                    supported=">=1.0,<3.0", released=("helper",), older_pins=(("<2.0", "numpy<2"),))
    assert recipe.for_version("1.4").packages == ("demo==1.4", "helper", "numpy", "numpy<2")
    assert recipe.for_version("2.1").packages == ("demo==2.1", "helper", "numpy")
    with pytest.raises(EnvError, match=r"demo 3.1 is outside the versions dlbench supports: 3.0, or >=1.0,<3.0"):
        recipe.for_version("3.1")


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> dict:
    """The variables that give the module's runs a certificate store of their own, empty at first."""
    return dict(os.environ, DLBENCH_CERTIFICATES=str(tmp_path_factory.mktemp("certificates") / "store.sqlite"))


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory, certificates) -> tuple[Path, Path, str]:
    """JAX's default and one older version, both on lstm-ptb's stand-in for 2 epochs, in one suite; and what the
    run printed."""
    envs.require("jax")  # make test builds it
    envs.ensure(OLDER_JAX)  # built here (and kept, as any environment): uv's cache makes a rebuild cheap
    results = tmp_path_factory.mktemp("versions") / "results"
    data = tmp_path_factory.mktemp("versions-data")
    # one thread a cell, as in test_e2e: beside the other pytest worker, more threads fight for its core
    done = dlbench("run", "quick-large", "-f", "jax", "-f", OLDER_JAX, "-w", "lstm-ptb", "--epochs", "2",
                   "--threads", "1", "--results", str(results), "--data-dir", str(data), env=certificates)
    assert done.returncode == 0, done.stdout + done.stderr
    return results, data, done.stdout


@pytest.mark.framework
def test_a_version_is_certified_on_first_use_and_its_runs_say_so(two_versions, certificates):
    out = two_versions[2]
    assert "certifying 1 framework version x workload pair before their first run (certified on first use)" in out
    assert "certified on first use: jax 0.6.2 lstm-ptb: pass" in out
    assert out.index("certified on first use") < out.index("suite quick-large: 2 cells")  # before its first cell
    assert not (two_versions[0] / "certify").exists()  # a passed certificate's probes (hundreds of MB) removed
    runs = json.loads(dlbench("results", "--results", str(two_versions[0]), "--format", "json",
                              env=certificates).stdout)
    assert {r["framework"]: r["certificate"] for r in runs}[OLDER_JAX] == "passed"
    # the default version is certified by `dlbench certify`, as before: the run only names the command
    assert "certificates: 1 framework x workload pair of this plan has no equivalence certificate" in out


@pytest.mark.framework
def test_a_version_whose_certificate_failed_runs_none_of_its_cells(two_versions, certificates, tmp_path):
    # a copy of the module's store, its newest certificate of the pair a failed one
    shutil.copy(certificates["DLBENCH_CERTIFICATES"], tmp_path / "certificates.sqlite")
    certificates = dict(certificates, DLBENCH_CERTIFICATES=str(tmp_path / "certificates.sqlite"))
    with Store(tmp_path / "certificates.sqlite") as store:
        [passed] = [cert for cert in store.certificates() if cert["framework_version"] == "0.6.2"]
        failed = {k: v for k, v in passed.items() if k != "id"}
        store.save_certificate(dict(failed, passed=False, worst_tensor="after/dense/kernel",
                                    worst_scaled_deviation=0.5))
    done = dlbench("run", "quick-large", "-f", OLDER_JAX, "-w", "lstm-ptb", "--epochs", "1", "--results",
                   str(tmp_path / "r"), "--data-dir", str(two_versions[1]), env=certificates)
    assert ("left out: jax 0.6.2 lstm-ptb (jax@0.6.2): its certificate against the reference failed (worst "
            "after/dense/kernel, 0.5 relative)") in done.stdout, done.stdout + done.stderr
    assert done.returncode == 1 and "dlbench: every cell of the plan was left out; nothing ran" in done.stderr


@pytest.mark.framework
def test_two_versions_run_in_one_suite_and_are_stored_apart(two_versions):
    done = dlbench("results", "--results", str(two_versions[0]), "--format", "json")
    runs = json.loads(done.stdout)
    assert sorted((r["framework"], r["framework_version"], r["status"]) for r in runs) == [
        ("jax", "0.10.2", "ok"), (OLDER_JAX, "0.6.2", "ok")]
    packages = {r["framework"]: r["packages"] for r in runs}
    assert packages["jax"]["jaxlib"] == "0.10.2" and packages[OLDER_JAX]["jaxlib"] == "0.6.2"
    assert len({r["cell_hash"] for r in runs}) == 2


@pytest.mark.framework
def test_compare_tells_the_two_versions_apart(two_versions):
    done = dlbench("compare", "--results", str(two_versions[0]), "--versions", "jax@0.10.2", OLDER_JAX)
    assert done.returncode == 0, done.stderr
    assert "A: jax@0.10.2" in done.stdout and f"B: {OLDER_JAX}" in done.stdout
    row = next(line for line in done.stdout.splitlines() if line.rstrip().endswith("lstm-ptb lee-news-lm cpu"))
    assert "1/1" in row  # one run a side matched


@pytest.mark.framework
def test_env_list_shows_both_versions_with_their_sizes(two_versions):
    done = dlbench("env", "list")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:] if line.strip()}
    assert rows[OLDER_JAX][1:4] == ["jax", "0.6.2", "cpu"] and rows["jax"][1:4] == ["jax", "0.10.2", "cpu"]
    assert "never" not in rows[OLDER_JAX]  # the suite's run marked it used


@pytest.mark.framework
def test_an_environment_rebuilt_from_a_run_has_its_packages_and_its_runs_say_so(two_versions, certificates,
                                                                                   tmp_path):
    results, data, _ = two_versions
    runs = json.loads(dlbench("results", "--results", str(results), "--format", "json").stdout)
    older = next(r for r in runs if r["framework"] == OLDER_JAX)
    # beside the shared environments, not over them; the module's certificates: the run's packages rebuilt are
    # the environment certified on first use, so the run below needs no certificate made anew (nor the reference)
    variables = dict(certificates, DLBENCH_HOME=str(tmp_path))
    done = dlbench("env", "create", "--from-run", str(older["id"]), "--results", str(results), env=variables)
    assert done.returncode == 0, done.stderr
    info = json.loads((tmp_path / "envs" / OLDER_JAX / "dlbench-env.json").read_text())
    assert info["packages"] == older["packages"]  # the freezes match
    assert info["from_run"]["run_id"] == older["id"] and info["from_run"]["cell_hash"] == older["cell_hash"]
    # every package of a JAX environment comes from PyPI, so each was checked against a recorded hash
    assert info["from_run"]["packages_checked_by_hash"] == len(older["packages"])
    assert f"{len(older['packages'])} of them checked against the registry's hashes" in done.stdout
    listed = dlbench("env", "list", env=variables).stdout
    assert f"ok: the packages of run {older['id']} (env create --from-run)" in listed
    again = tmp_path / "again"
    done = dlbench("run", "quick-large", "-f", OLDER_JAX, "-w", "lstm-ptb", "--epochs", "1", "--results", str(again),
                   "--data-dir", str(data), env=variables)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"0.6.2 (env of run {older['id']})" in dlbench("results", "--results", str(again), env=variables).stdout
    [rerun] = json.loads(dlbench("results", "--results", str(again), "--format", "json").stdout)
    assert rerun["config"]["environment_from_run"]["run_id"] == older["id"]
    assert rerun["packages"] == older["packages"]


@pytest.mark.framework
def test_from_run_refuses_a_missing_run_or_extra_names(two_versions):
    results = str(two_versions[0])
    missing = dlbench("env", "create", "--from-run", "999", "--results", results)
    assert missing.returncode == 2 and "no run 999 in" in missing.stderr and "(its runs: 1 to 2)" in missing.stderr
    extra = dlbench("env", "create", "jax", "--from-run", "1", "--results", results)
    assert extra.returncode == 2 and "--from-run RUN_ID goes with 'env create' alone" in extra.stderr


def fake_environment(root: Path, folder: str, used_days_ago: float | None, built_days_ago: float = 100) -> Path:
    path = root / "envs" / folder
    path.mkdir(parents=True)
    info = path / "dlbench-env.json"
    info.write_text(json.dumps({"framework": folder.partition("@")[0], "packages": {"jax": "0.6.2"}}))
    os.utime(info, (time.time() - built_days_ago * 86400,) * 2)
    if used_days_ago is not None:
        (path / disk.USED_STAMP).touch()
        os.utime(path / disk.USED_STAMP, (time.time() - used_days_ago * 86400,) * 2)
    return path


def test_prune_removes_what_no_run_used_lately(tmp_path):
    fake_environment(tmp_path, "jax@0.6.2", used_days_ago=40)
    fake_environment(tmp_path, "jax", used_days_ago=2)
    fake_environment(tmp_path, "chainer", used_days_ago=None, built_days_ago=50)  # built, never run
    variables = dict(os.environ, DLBENCH_HOME=str(tmp_path))
    dry = dlbench("env", "prune", "--older-than", "30", "--dry-run", env=variables)
    assert dry.returncode == 0 and "jax@0.6.2: would remove" in dry.stdout and "chainer: would remove" in dry.stdout
    assert sorted(p.name for p in (tmp_path / "envs").iterdir()) == ["chainer", "jax", "jax@0.6.2"]
    done = dlbench("env", "prune", "--older-than", "30", env=variables)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "envs").iterdir()) == ["jax"]
    assert dlbench("env", "prune", "--older-than", "-1", env=variables).returncode == 2


def test_remove_takes_a_version_even_one_no_longer_supported(tmp_path):
    fake_environment(tmp_path, "jax@0.4.1", used_days_ago=1)  # a version an older dlbench supported
    variables = dict(os.environ, DLBENCH_HOME=str(tmp_path))
    done = dlbench("env", "remove", "jax@0.4.1", env=variables)
    assert done.returncode == 0, done.stderr
    assert "jax@0.4.1: removed" in done.stdout and not (tmp_path / "envs" / "jax@0.4.1").exists()
    listed = dlbench("env", "list", env=variables)
    assert "create the missing ones with:\n  dlbench env create pytorch jax tensorflow" in listed.stdout


def test_disk_usage_counts_hard_linked_files_apart(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 1000)
    (tmp_path / "b").write_bytes(b"y" * 300)
    os.link(tmp_path / "a", tmp_path.parent / f"{tmp_path.name}-link")  # shared, as with uv's cache
    try:
        assert disk.disk_usage(tmp_path) == (1300, 300)
    finally:
        (tmp_path.parent / f"{tmp_path.name}-link").unlink()


@pytest.mark.framework
def test_the_build_records_the_registrys_hashes_of_every_package(two_versions):
    env = envs.require(OLDER_JAX)
    hashes = env.info()["hashes"]
    assert set(hashes) == set(env.info()["packages"])  # all from PyPI: none without a hash
    assert all(digest.startswith("sha256:") and len(digest) == 71 for listed in hashes.values() for digest in listed)
    with Store(two_versions[0] / "dlbench.sqlite") as store:  # the store keeps them with the run's environment
        assert store.environment(env.packages_digest())["hashes"] == hashes


@pytest.mark.framework
def test_from_run_refuses_a_package_whose_hash_differs(two_versions, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(two_versions[0], results, ignore=shutil.ignore_patterns("runs"))
    runs = json.loads(dlbench("results", "--results", str(results), "--format", "json").stdout)
    older = next(r for r in runs if r["framework"] == OLDER_JAX)
    digest = envs.digest_of(older["config"]["env_packages"])
    with sqlite3.connect(results / "dlbench.sqlite") as db:
        [hashes] = db.execute("SELECT hashes FROM environments WHERE packages_digest = ?", (digest,)).fetchone()
        tampered = {**json.loads(hashes), "opt-einsum": ["sha256:" + "0" * 64]}
        db.execute("UPDATE environments SET hashes = ? WHERE packages_digest = ?", (json.dumps(tampered), digest))
    variables = dict(os.environ, DLBENCH_HOME=str(tmp_path / "home"))
    done = dlbench("env", "create", "--from-run", str(older["id"]), "--results", str(results), env=variables)
    assert done.returncode == 2 and "opt-einsum" in done.stderr and "hash" in done.stderr.lower(), done.stderr
    assert not (tmp_path / "home" / "envs" / OLDER_JAX).exists()  # nothing that looks usable is left
