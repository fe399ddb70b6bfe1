"""Every framework adapter, run in its own environment: each of the six architectures loads canonical
weights exactly, computes what an independent numpy forward pass computes, and learns."""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from adapter_check import probe_inputs, probe_weights
from numpy_forward import forward

from dlbench import envs
from dlbench.runner import PACKAGE_PARENT
from dlbench.workloads import WORKLOADS

TESTS = Path(__file__).parent
FRAMEWORKS = sorted(envs.RECIPES)
# Full study shapes for the CNNs; small vocabularies and sequences keep the LSTMs quick.
SMALL_META = {"lstm-imdb": {"vocab_size": 50, "seq_len": 12}, "lstm-ptb": {"vocab_size": 40, "seq_len": 10},
              "seq2seq-manythings": {"source_vocab_size": 30, "target_vocab_size": 20, "source_len": 7,
                                     "target_len": 5}}


def cases() -> list[dict]:
    result = []
    for workload in WORKLOADS.values():
        meta = dict(workload.study_meta, **SMALL_META.get(workload.name, {}))
        classes = meta.get("num_classes") or meta.get("target_vocab_size") or (
            2 if meta["task"] == "binary" else meta["vocab_size"])
        result.append({"workload": workload.name, "model": workload.model(meta), "recipe": workload.recipe,
                       "task": meta["task"], "n_classes": classes, "target_len": meta.get("target_len")})
    return result


CASES = cases()


def run_check(framework: str, payload: list[dict], compile_cache: Path) -> dict[str, dict]:
    env = envs.require(framework)  # make test builds it first; a missing one fails with the command to run
    recipe = envs.get_recipe(framework)
    (compile_cache.parent / "home").mkdir(parents=True, exist_ok=True)
    variables = {"PYTHONPATH": str(PACKAGE_PARENT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                 "DLBENCH_THREADS": "1", "HOME": str(compile_cache.parent / "home"),
                 "DLBENCH_COMPILE_CACHE": str(compile_cache), **recipe.worker_env}
    done = subprocess.run([str(env.python), str(TESTS / "adapter_check.py"), recipe.adapter],
                          input=json.dumps(payload), capture_output=True, text=True, timeout=1200, env=variables)
    assert done.returncode == 0, done.stderr[-3000:]
    return {row["workload"]: row for row in map(json.loads, done.stdout.splitlines())}


@pytest.fixture(scope="module", params=FRAMEWORKS)
def checked(request, compile_cache) -> dict[str, dict]:
    return run_check(request.param, CASES, compile_cache)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["workload"])
def test_canonical_weights_round_trip_exactly(checked, case):
    result = checked[case["workload"]]
    assert result["same_shapes"] and result["roundtrip_max_abs"] == 0.0


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["workload"])
def test_outputs_match_an_independent_numpy_forward(checked, case):
    expected = forward(case["model"], probe_weights(case["model"]), probe_inputs(case["model"]))
    got = np.array(checked[case["workload"]]["predictions"])
    assert got.shape == expected.shape
    scale = np.abs(expected).max()
    assert np.abs(got - expected).max() <= 1e-4 * scale + 1e-5


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["workload"])
def test_a_few_steps_lower_the_loss(checked, case):
    result = checked[case["workload"]]
    assert result["eval_after"]["loss"] < result["eval_before"]["loss"]
    assert np.isfinite(result["train_losses"]).all()


def test_threads_are_set_and_versions_reported(checked):
    for result in checked.values():
        assert result["threads"] == 1
        assert all(isinstance(v, str) and v for v in result["versions"].values())


RECURRENT = {case["workload"] for case in CASES
             if any(layer["type"] in ("lstm", "seq2seq") for layer in case["model"]["layers"])}


@pytest.mark.parametrize("checked", [name for name in FRAMEWORKS if name == "theano"], indirect=True)
def test_theano_reports_the_scan_it_ran(checked):
    """Theano's scan runs its compiled (Cython) loop where the interpreter builds it (up to Python
    3.10), else its Python loop; the adapter reports which one its compiled functions ran."""
    major, minor = map(int, envs.require("theano").info()["python_version"].split(".")[:2])
    expected = "c" if (major, minor) < (3, 11) else "python"
    for workload, result in checked.items():
        assert result["versions"]["theano-scan"] == (expected if workload in RECURRENT else "none"), workload
