"""A cell's mode, its execution and its precision together: how tables name it, and whether it is the reference's."""
from dlbench.harness.plan import executions, precisions
from dlbench.harness.plan.workloads import Workload


def label(framework: str, execution: str | None, precision: str | None = None) -> str:
    """How tables name a framework in a mode: its name, with what is not its default beside it."""
    return framework + suffix(framework, execution, precision)


def suffix(framework: str, execution: str | None, precision: str | None = None) -> str:
    """" (compiled)", " (bfloat16)", " (compiled, bfloat16)" for a mode other than the framework's default, else ""."""
    shown = [] if executions.is_default(framework, execution) else [execution]
    shown += [] if precision in (None, precisions.DEFAULT) else [precision]
    return f" ({', '.join(shown)})" if shown else ""


def is_default(framework: str, execution: str | None, precision: str | None) -> bool:
    """The framework's default execution in float32."""
    return executions.is_default(framework, execution) and precision in (None, precisions.DEFAULT)


def is_reference(framework: str, execution: str | None, precision: str | None) -> bool:
    """The reference framework in its default execution and float32: what every other mode is certified against."""
    return executions.is_reference(framework, execution) and precision in (None, precisions.DEFAULT)


def as_run(workload: Workload, framework: str, execution: str | None, precision: str | None,
           device: str = "cpu") -> Workload:
    """The workload as the framework runs it in this execution and precision (None: its defaults): each in the
    recipe where not the default (executions.as_run, precisions.as_run); refused with the reason."""
    return precisions.as_run(executions.as_run(workload, framework, execution), framework, precision, device)


def of_workload(workload: Workload) -> tuple[str | None, str | None]:
    """The (execution, precision) a workload's recipe holds (None: the framework's defaults)."""
    return workload.recipe.get("execution"), workload.recipe.get("precision")
