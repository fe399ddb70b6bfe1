"""GPU environments: each framework's CUDA recipe (the same versions, the registry's CUDA wheels), the
device in an environment's identity (its folder, its digest, env list), the frameworks without one
refused with the reason, and GPU cells refused at once on a machine without a GPU. CUDA environments are
never built here: their recipes are resolved by uv from the registry's metadata alone."""
import json
import os
import subprocess
import sys

import guard
import pytest

from dlbench.harness.environments import disk, envs
from dlbench.harness.plan import suite
from dlbench.harness.plan.suite import Cell, SuiteError
from dlbench.harness.run import ExecutorError, readiness

WITH_CUDA = ["pytorch", "jax", "tensorflow", "keras-tensorflow", "keras-jax", "keras-torch", "mxnet"]
WITHOUT_CUDA = {"chainer": "CuPy >=7.7,<8", "theano": "pygpu and libgpuarray"}


def dlbench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return guard.run([sys.executable, "-m", "dlbench", *args], 1200, env=env)


@pytest.mark.parametrize("name", WITH_CUDA)
def test_a_cuda_recipe_pins_the_cpu_recipes_versions_in_its_own_folder(name):
    cpu, gpu = envs.get_recipe(name), envs.get_recipe(name, "gpu")
    assert gpu.device == "gpu" and not gpu.find_links_from_pip  # the registry's wheels, not the local CPU ones
    assert gpu.default_version == cpu.default_version
    assert gpu.digest() != cpu.digest()
    assert envs.folder_name(name, "gpu") == f"{name}+gpu" and envs.folder_name(name) == name
    assert envs.environment(name, "gpu").path.name == f"{name}+gpu"


def test_the_cuda_builds_are_the_registrys():
    packages = {name: envs.get_recipe(name, "gpu").packages for name in WITH_CUDA}
    assert packages["jax"][0] == "jax[cuda12]==0.10.2" and packages["keras-jax"][1] == "jax[cuda12]==0.10.2"
    assert packages["tensorflow"][0] == "tensorflow[and-cuda]==2.21.0"
    assert packages["mxnet"][0] == "mxnet-cu117==1.9.1" and "nvidia-cudnn-cu11<9" in packages["mxnet"]
    assert envs.get_recipe("tensorflow", "gpu").version_package == "tensorflow"
    assert envs.get_recipe("mxnet", "gpu").version_package == "mxnet-cu117"


def test_another_version_on_the_gpu_keeps_the_cuda_extra():
    recipe = envs.get_recipe("jax@0.6.2", "gpu")
    assert recipe.packages == ("jax[cuda12]==0.6.2", "flax", "optax", "numpy")
    assert envs.folder_name("jax@0.6.2", "gpu") == "jax@0.6.2+gpu"
    assert envs.parse_folder("jax@0.6.2+gpu") == ("jax@0.6.2", "gpu") and envs.parse_folder("jax") == ("jax", "cpu")


def test_the_cpu_digests_do_not_depend_on_the_cuda_fields():
    for recipe in envs.RECIPES.values():
        bare = envs.Recipe(recipe.framework, recipe.python, recipe.packages, recipe.adapter, recipe.import_check,
                           recipe.version_package, recipe.find_links_from_pip, recipe.worker_env,
                           recipe.build_constraints, recipe.uses_compile_cache)
        assert bare.digest() == recipe.digest(), recipe.framework  # environments built before stay current


@pytest.mark.parametrize("name, reason", WITHOUT_CUDA.items())
def test_a_framework_without_a_cuda_build_is_refused_with_the_reason(name, reason, tmp_path):
    done = dlbench("env", "create", name, "--device", "gpu", env=dict(os.environ, DLBENCH_HOME=str(tmp_path)))
    assert done.returncode == 2 and f"{name} has no GPU environment: " in done.stderr and reason in done.stderr
    assert not (tmp_path / "envs").exists()
    planned = suite.load("quick")
    with pytest.raises(SuiteError, match=f"{name} has no GPU environment"):
        suite.plan(planned, frameworks=[name], device="gpu")


def test_frameworks_all_means_those_with_a_cuda_build_on_a_gpu(tmp_path):
    assert suite.load("paper-gpu").frameworks == (
        "pytorch", "tensorflow", "keras-tensorflow", "keras-jax", "keras-torch", "jax", "mxnet")
    assert suite.load("paper-gpu").device == "gpu"
    cells = suite.plan(suite.load("quick"), workloads=["cnn-mnist"], device="gpu", repeat=1)
    assert sorted(cell.framework for cell in cells) == sorted(WITH_CUDA)
    path = tmp_path / "gpu.yaml"
    path.write_text("name: g\nframeworks: all\ndevice: gpu\nworkloads: [{workload: cnn-mnist, dataset: digits-28}]\n")
    assert set(suite.load(str(path)).frameworks) == set(WITH_CUDA)
    path.write_text("name: g\nframeworks: [pytorch, theano]\ndevice: gpu\n"
                    "workloads: [{workload: cnn-mnist, dataset: digits-28}]\n")
    with pytest.raises(SuiteError, match=f"{path}:2: field 'frameworks': theano has no GPU environment"):
        suite.load(str(path))


def test_gpu_cells_without_a_gpu_are_refused_before_anything_is_built(tmp_path):
    home = tmp_path / "home"
    done = dlbench("run", "quick", "--device", "gpu", "-w", "cnn-mnist", "-f", "pytorch", "--repeat", "1", "--results",
                   str(tmp_path / "results"), env=dict(os.environ, DLBENCH_HOME=str(home), CUDA_VISIBLE_DEVICES=""))
    if done.returncode != 2:
        pytest.skip("this machine has an NVIDIA GPU")  # CI's machines have none
    assert "1 cells ask for device gpu, but NVML finds no NVIDIA GPU on this machine" in done.stderr
    assert not home.exists() and not (tmp_path / "results" / "runs").exists()


def test_cpu_environments_are_required_and_gpu_ones_built_as_needed(monkeypatch):
    calls = []
    monkeypatch.setattr(envs, "require", lambda name, device="cpu": calls.append(("require", name, device)))
    monkeypatch.setattr(envs, "ensure", lambda name, device, log: calls.append(("ensure", name, device)))
    monkeypatch.setattr(disk, "mark_used", lambda env: None)
    cells = [Cell("s", name, "cnn-mnist", "digits-28", device, 1, 0, 1, 32, 1, 60.0)
             for name, device in (("jax", "gpu"), ("pytorch", "cpu"), ("pytorch", "gpu"), ("jax", "gpu"))]
    readiness.prepare(cells, print)
    assert calls == [("require", "pytorch", "cpu"), ("ensure", "pytorch", "gpu"), ("ensure", "jax", "gpu")]
    monkeypatch.setattr(readiness.machine, "gpu_names", lambda: [])
    with pytest.raises(ExecutorError, match="3 cells ask for device gpu"):
        readiness.refuse_gpu_cells_without_a_gpu(cells)
    monkeypatch.setattr(readiness.machine, "gpu_names", lambda: ["NVIDIA H200"])
    readiness.refuse_gpu_cells_without_a_gpu(cells)  # a GPU: nothing to refuse


def test_env_list_and_remove_tell_the_gpu_environment_apart(tmp_path):
    for folder, framework, packages, device in (("tensorflow", "tensorflow", {"tensorflow-cpu": "2.21.0"}, "cpu"),
                                                ("tensorflow+gpu", "tensorflow", {"tensorflow": "2.21.0"}, "gpu")):
        path = tmp_path / "envs" / folder
        path.mkdir(parents=True)
        recipe = envs.get_recipe(framework, device)
        (path / "dlbench-env.json").write_text(json.dumps({"framework": framework, "device": device,
                                                           "recipe": recipe.digest(), "packages": packages}))
    variables = dict(os.environ, DLBENCH_HOME=str(tmp_path))
    listed = dlbench("env", "list", env=variables).stdout.splitlines()
    rows = {line.split()[0]: line.split() for line in listed[2:] if line.strip()}
    assert rows["tensorflow+gpu"][1:4] == ["tensorflow", "2.21.0", "gpu"] and rows["tensorflow+gpu"][-1] == "ok"
    assert rows["tensorflow"][1:4] == ["tensorflow", "2.21.0", "cpu"]
    done = dlbench("env", "remove", "tensorflow", "--device", "gpu", env=variables)
    assert done.returncode == 0 and "removed" in done.stdout
    assert sorted(p.name for p in (tmp_path / "envs").iterdir()) == ["tensorflow"]


@pytest.mark.framework
def test_the_cuda_recipes_resolve_on_the_registry():
    """uv's resolver on PyPI's metadata (nothing installed, no CUDA wheel downloaded): each CUDA recipe
    resolves for Linux x86-64 to the framework's pinned version and NVIDIA's CUDA libraries."""
    cuda_library = {"pytorch": "nvidia-cublas", "keras-torch": "nvidia-cublas", "jax": "nvidia-cudnn-cu12",
                    "keras-jax": "nvidia-cudnn-cu12", "tensorflow": "nvidia-cudnn-cu12",
                    "keras-tensorflow": "nvidia-cudnn-cu12", "mxnet": "nvidia-cudnn-cu11"}
    for name in WITH_CUDA:
        recipe = envs.get_recipe(name, "gpu")
        resolved = dict(line.split("==", 1) for line in envs.resolve(name, "gpu"))
        assert resolved[recipe.version_package] == recipe.default_version, name
        assert cuda_library[name] in resolved, (name, sorted(resolved))
    cudnn = dict(line.split("==", 1) for line in envs.resolve("mxnet", "gpu"))["nvidia-cudnn-cu11"]
    assert cudnn.startswith("8."), cudnn  # libmxnet.so links libcudnn.so.8


def test_mxnets_cuda_libraries_from_nvidias_wheels_go_on_the_workers_library_path(tmp_path, monkeypatch):
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    for package in ("cudnn", "cublas"):
        (tmp_path / "lib" / "python3.8" / "site-packages" / "nvidia" / package / "lib").mkdir(parents=True)
    variables = envs.worker_variables(envs.get_recipe("mxnet", "gpu"), tmp_path)
    nvidia = tmp_path / "lib" / "python3.8" / "site-packages" / "nvidia"
    assert variables["LD_LIBRARY_PATH"] == f"{nvidia / 'cublas' / 'lib'}:{nvidia / 'cudnn' / 'lib'}"
    assert variables["MXNET_CPU_WORKER_NTHREADS"] == "1"  # the recipe's own variables stay
    assert "LD_LIBRARY_PATH" not in envs.worker_variables(envs.get_recipe("mxnet"), tmp_path)  # the CPU build
    assert "LD_LIBRARY_PATH" not in envs.worker_variables(envs.get_recipe("jax", "gpu"), tmp_path)  # finds its own
