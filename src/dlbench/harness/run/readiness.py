"""The framework environments a plan needs, made ready before any cell runs: a CPU environment must
have been built (`dlbench env create`), a GPU (CUDA) environment is built here the first time a plan
needs it, and GPU cells on a machine where NVML finds no GPU are refused before gigabytes of CUDA
wheels are installed for nothing."""
from collections.abc import Callable, Iterable

from dlbench.harness.environments import disk, envs
from dlbench.harness.measure import machine
from dlbench.harness.plan.suite import Cell
from dlbench.harness.run import ExecutorError


def needed(cells: Iterable[Cell]) -> list[tuple[str, str]]:
    """(framework, device) of every environment the cells use, in recipe order."""
    pairs = {(cell.framework, cell.device) for cell in cells}
    order = {spec: index for index, spec in enumerate(envs.in_recipe_order({spec for spec, _ in pairs}))}
    return sorted(pairs, key=lambda pair: (order[pair[0]], pair[1]))


def refuse_gpu_cells_without_a_gpu(cells: list[Cell]) -> None:
    gpu_cells = sum(cell.device == "gpu" for cell in cells)
    if gpu_cells and not machine.gpu_names():
        raise ExecutorError(f"{gpu_cells} cells ask for device gpu, but NVML finds no NVIDIA GPU on this machine "
                            "(no driver library, or no device); run them on a machine with one, or plan them "
                            "with --device cpu")


def prepare(cells: list[Cell], log: Callable[[str], None]) -> None:
    """Every environment the cells use, required (CPU) or built where missing (GPU), and stamped as used."""
    for framework, device in needed(cells):
        env = envs.ensure(framework, device, log) if device == "gpu" else envs.require(framework)
        disk.mark_used(env)
