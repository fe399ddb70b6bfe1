"""The machine's certificate store: every results folder finds its certificates there, `certify` knows which
pairs are missing, and `certify --show` creates nothing."""
import json
from pathlib import Path

import pytest
from synthetic_store import synthetic_run

from dlbench.harness.certification import machine_store
from dlbench.harness.certification.certified_model import workload_digest
from dlbench.harness.cli import main
from dlbench.harness.environments import envs, sources
from dlbench.harness.plan import suite
from dlbench.harness.plan.workloads import get_workload
from dlbench.harness.present import report
from dlbench.harness.store import Store

PACKAGES = {"jax": "0.6.2", "numpy": "2.1.0"}  # the environment the synthetic runs ran in


@pytest.fixture
def machine(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "home" / "certificates.sqlite"
    monkeypatch.setenv("DLBENCH_CERTIFICATES", str(path))
    return path


def certificate(framework: str, workload: str, framework_env: str, passed: bool = True, **key) -> dict:
    """A certificate row as certify stores it, for the code and workload of this dlbench unless `key` says."""
    return {"framework": framework, "framework_version": "0.6.2", "framework_env": framework_env,
            "reference": envs.REFERENCE, "reference_version": "2.13.0", "workload": workload, "passed": passed,
            "worst_tensor": "grad/dense_1/kernel", "worst_scaled_deviation": 2e-6,
            "created_at": "2026-12-05T10:00:00+0000",
            "deviations": [{"tensor": "grad/dense_1/kernel", "kind": "grad", "max_abs": 2e-6, "max_rel": 2e-6,
                            "tolerance": 1e-3, "passed": passed}],
            "worker_source": sources.framework_source(framework), "reference_source": sources.framework_source(
                envs.REFERENCE), "workload_digest": workload_digest(get_workload(workload)), **key}


def stored_run(framework: str, workload: str, repetition: int, steady: float, digest: bool = True) -> tuple:
    """A run as `dlbench run` stores it before any certificate existed: status none, with its key's parts."""
    run, epochs, samples = synthetic_run(framework, workload, repetition, steady, 0.9, certificate="none")
    run["config"] = dict(run["config"], env_packages=PACKAGES)
    run.update(worker_source=sources.framework_source(framework),
               workload_digest=workload_digest(get_workload(workload)) if digest else None)
    return run, epochs, samples


def test_a_second_results_folder_finds_the_machines_certificates(machine, tmp_path, capsys):
    folder = tmp_path / "second"
    with Store(folder / "dlbench.sqlite") as store:
        for rep in (1, 2, 3):
            store.save_run(*stored_run("pytorch", "cnn-mnist", rep, 1.0))
            store.save_run(*stored_run("jax", "cnn-mnist", rep, 0.5))
        # a run stored before runs recorded their workload's digest: no certificate can vouch for it
        store.save_run(*stored_run("jax", "lstm-imdb", 1, 0.5, digest=False))
    with machine_store.open_store() as store:  # as `dlbench certify --results first` leaves it
        store.save_certificate(certificate("jax", "cnn-mnist", envs.digest_of(PACKAGES)))
        store.save_certificate(certificate("jax", "lstm-imdb", envs.digest_of(PACKAGES)))
        # another environment's certificate is not this folder's runs'
        store.save_certificate(certificate("jax", "lstm-ptb", "0ther-env"))
    assert main(["results", "--results", str(folder), "--format", "json"]) == 0
    verdicts = {(run["workload"], run["repetition"]): run["certificate"]
                for run in json.loads(capsys.readouterr().out) if run["framework"] == "jax"}
    assert verdicts == {("cnn-mnist", 1): "passed", ("cnn-mnist", 2): "passed", ("cnn-mnist", 3): "passed",
                        ("lstm-imdb", 1): "none"}
    assert main(["results", "--results", str(folder)]) == 0
    shown = capsys.readouterr().out
    assert "grad/dense_1/kernel" in shown and "lstm-ptb" not in shown  # only the certificates of its pairs
    loaded = report.load(folder / "dlbench.sqlite")
    mnist = next(f for f in loaded.findings if f.workload == "cnn-mnist")
    assert not [c for c in [*mnist.caveats, *loaded.caveats] if "jax held no passing" in c]
    imdb = next(f for f in loaded.findings if f.workload == "lstm-imdb")
    assert any(c.startswith("jax held no passing equivalence certificate for lstm-imdb") for c in imdb.caveats)
    assert loaded.certificate_grid.rows[1][:2] == ["jax", "pass (2.0e-06, grad/dense_1/kernel)"]


@pytest.mark.framework
def test_a_changed_model_or_recipe_is_not_covered(machine):
    workload = get_workload("lstm-imdb")
    key = machine_store.key_now("jax", workload)
    with machine_store.open_store() as store:
        store.save_certificate(certificate("jax", "lstm-imdb", key.framework_env, workload_digest="0ld-recipe"))
    assert machine_store.status(key) == "none"
    changed = dict(workload.recipe, optimizer=dict(workload.recipe["optimizer"], lr=2e-3))
    assert workload_digest(workload) != workload_digest(type(workload)(**{**vars(workload), "recipe": changed}))
    unchanged = dict(workload.recipe, epochs=1)  # probes take a few steps: the epochs are not certified
    assert workload_digest(workload) == workload_digest(type(workload)(**{**vars(workload), "recipe": unchanged}))
    [cert] = machine_store.certificates_of([{"framework": "jax", "workload": "lstm-imdb"}])
    assert machine_store.workload_state(cert) == "older"


@pytest.mark.framework
def test_missing_pairs_and_the_command_that_certifies_them(machine):
    cells = suite.plan(suite.load("quick"), ["pytorch", "jax"], ["cnn-mnist", "transformer-lm"])
    pairs = machine_store.pairs_of(cells)
    names = sorted((framework, workload.name) for framework, workload in pairs)
    assert names == [("jax", "cnn-mnist"), ("jax", "transformer-lm")]  # the reference needs none
    assert machine_store.missing(pairs) == pairs
    assert not machine.exists()  # looking created nothing
    key = machine_store.key_now("jax", get_workload("cnn-mnist"))
    with machine_store.open_store() as store:
        store.save_certificate(certificate("jax", "cnn-mnist", key.framework_env, passed=False))
    # a failed certificate is a certificate: certifying again would give the same verdict
    assert [(framework, workload.name) for framework, workload in machine_store.missing(pairs)] == [
        ("jax", "transformer-lm")]
    command = machine_store.certify_command("quick", ["jax"], ["transformer-lm"])
    assert command == "dlbench certify --suite quick -f jax -w transformer-lm"
    quoted = machine_store.certify_command("my suite.yaml", None, None)
    assert quoted == "dlbench certify --suite 'my suite.yaml'"


def test_certify_show_on_a_missing_folder_creates_nothing(machine, tmp_path, capsys):
    assert main(["certify", "--show", "--results", str(tmp_path / "missing")]) == 0
    assert capsys.readouterr().out.startswith("no certificates stored yet")
    assert not (tmp_path / "missing").exists() and not machine.parent.exists()


def test_certify_refuses_a_gpu_suite_and_a_workload_outside_the_suite(machine, capsys):
    assert main(["certify", "--suite", "paper-gpu"]) == 2
    assert "suite paper-gpu runs on gpu: certification probes run in the CPU environments" in capsys.readouterr().err
    assert main(["certify", "--suite", "paper", "-w", "seq2seq-manythings"]) == 2
    assert "workload 'seq2seq-manythings' is not in suite 'paper'" in capsys.readouterr().err
    assert not machine.parent.exists()
