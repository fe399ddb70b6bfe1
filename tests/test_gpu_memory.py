"""gpu_memory: grow. The suite field and run option reach a GPU cell's configuration (and so its hash) and
the worker's variables; CPU cells and default cells keep their hashes; inherited settings never leak in. And
TF32, off in every worker."""
from types import SimpleNamespace

import pytest

from dlbench.harness.environments.process import GROWING_GPU_MEMORY, NO_TF32, worker_environment
from dlbench.harness.plan import suite
from dlbench.harness.plan.suite import Cell, SuiteError
from dlbench.harness.run import cell_config


def test_grow_sets_the_frameworks_variables_and_default_clears_inherited_ones(monkeypatch, tmp_path):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the harness's own must not reach a worker
    default = worker_environment(tmp_path / "a", 1, {})
    assert not set(GROWING_GPU_MEMORY) & set(default)
    grow = worker_environment(tmp_path / "b", 1, {}, gpu_memory="grow")
    assert {name: grow[name] for name in GROWING_GPU_MEMORY} == {
        "TF_FORCE_GPU_ALLOW_GROWTH": "true", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def test_every_worker_computes_float32_without_tf32_whatever_the_harness_inherited(monkeypatch, tmp_path):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "1")  # a harness shell that allows TF32 must not pass it on
    for variables in (worker_environment(tmp_path / "a", 1, {}), worker_environment(tmp_path / "b", 2, {},
                                                                                     gpu_memory="grow")):
        assert {name: variables[name] for name in NO_TF32} == {"NVIDIA_TF32_OVERRIDE": "0"}


def test_only_a_growing_gpu_cell_adds_the_policy_to_its_configuration(monkeypatch, tmp_path):
    monkeypatch.setattr(cell_config.data, "prepare", lambda name, folder: SimpleNamespace(
        hash="d" * 64, meta={"input_shape": [28, 28, 1], "num_classes": 10}))
    monkeypatch.setattr(cell_config.envs, "require", lambda name, device="cpu": SimpleNamespace(
        info=lambda: {"packages": {"jax": "0.10.2"}, "python_version": "3.11.0"}))
    gpu = Cell("s", "jax", "cnn-mnist", "digits-28", "gpu", 1, 0, 1, 32, 1, 60.0)
    default, grow = (cell_config.resolve(Cell(**{**gpu.__dict__, "gpu_memory": policy}), tmp_path)
                     for policy in ("default", "grow"))
    assert "gpu_memory" not in default.config and grow.config["gpu_memory"] == "grow"
    assert default.hash != grow.hash
    cpu = Cell(**{**gpu.__dict__, "device": "cpu"})
    assert cell_config.resolve(Cell(**{**cpu.__dict__, "gpu_memory": "grow"}), tmp_path).hash == \
        cell_config.resolve(cpu, tmp_path).hash  # changes nothing on the CPU, so not part of its hash


@pytest.mark.parametrize(("line", "expected"), [("", "default"), ("gpu_memory: grow\n", "grow")])
def test_the_suite_field_reaches_every_cell_and_the_option_overrides_it(tmp_path, line, expected):
    path = tmp_path / "suite.yaml"
    path.write_text("name: g\nframeworks: [jax]\ndevice: gpu\n" + line
                    + "workloads: [{workload: cnn-mnist, dataset: digits-28}]\n")
    parsed = suite.load(str(path))
    assert {c.gpu_memory for c in suite.plan(parsed)} == {expected}
    assert {c.gpu_memory for c in suite.plan(parsed, gpu_memory="grow")} == {"grow"}  # --gpu-memory
    with pytest.raises(SuiteError, match="gpu memory policy 'half' is not one of: default, grow"):
        suite.plan(parsed, gpu_memory="half")


def test_an_unknown_policy_in_a_suite_file_names_its_line(tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text("name: g\nframeworks: [jax]\ngpu_memory: all\n"
                    "workloads: [{workload: cnn-mnist, dataset: digits-28}]\n")
    with pytest.raises(SuiteError) as caught:
        suite.load(str(path))
    assert str(caught.value) == f"{path}:3: field 'gpu_memory': 'all' is not one of: default, grow"
