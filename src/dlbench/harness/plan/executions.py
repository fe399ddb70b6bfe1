"""How each framework can run a cell: its executions (the suite axis `execution`), the default it runs when a
suite names none, and why it refuses the others.

"eager" runs ops one by one from Python, "graph" builds a graph the framework runs whole without a compiler of
its own, "compiled" compiles the model's steps (docs/architecture.md has the table of what each means in each
framework). What each framework runs, its default first, is its recipe's `executions` (environments/envs.py), the
harness's copy of its adapter's (worker side); tests/test_adapters.py holds the two equal. The defaults are what
each adapter ran before executions were an axis, chosen by measurement on the 2-core CPU machines (docs/fairness.md,
"The default execution").
"""
import dataclasses

from dlbench.harness.environments.envs import EnvError, framework_name, get_recipe
from dlbench.harness.environments.envs import is_reference as is_reference_framework
from dlbench.harness.plan.workloads import Workload

EXECUTIONS = ("eager", "graph", "compiled")  # worker/base.py's, in the order tables list them
_NO_TORCH_GRAPH = "PyTorch's graph capture is torch.compile's own (TorchScript is deprecated): ask for compiled"
_NO_JAX_GRAPH = "JAX builds no graph apart from jax.jit's compilation: ask for compiled"
# why a framework refuses an execution it does not run
REFUSED: dict[tuple[str, str], str] = {
    ("pytorch", "graph"): _NO_TORCH_GRAPH,
    ("keras-torch", "graph"): _NO_TORCH_GRAPH,
    ("jax", "graph"): _NO_JAX_GRAPH,
    ("keras-jax", "graph"): _NO_JAX_GRAPH,
    ("jax", "eager"): "dlbench's JAX adapter is written for jax.jit, as JAX programs are; op by op "
                      "(jax.disable_jit) is JAX's debugging mode, not a way its users train",
    ("mxnet", "compiled"): "MXNet 1.9 has no compiler of its own: hybridize() builds a graph (ask for graph)",
    ("chainer", "graph"): "Chainer is define-by-run only: it builds no graph to run whole",
    ("chainer", "compiled"): "Chainer is define-by-run only: it has no compiler",
    ("theano", "eager"): "Theano runs a graph only once theano.function has compiled it: no op-by-op mode",
    ("theano", "graph"): "Theano runs a graph only once theano.function has compiled it: ask for compiled",
}
DETECTOR_ONLY_DEFAULT = ("the detector adapters (worker/detector.py) run each framework's default execution only "
                         "({default})")


class ExecutionError(ValueError):
    pass


def supported(framework: str) -> tuple[str, ...]:
    """The executions a framework (name or name@version) runs, its default first."""
    return get_recipe(framework).executions


def default(framework: str) -> str:
    """The execution a framework runs when a suite names none."""
    return supported(framework)[0]


def is_default(framework: str, execution: str | None) -> bool:
    """Whether `execution` (None: none named) is the framework's default."""
    return execution is None or execution == default(framework)


def is_reference(framework: str, execution: str | None) -> bool:
    """The reference framework in its default execution: what every other framework and execution is certified
    against (the reference compiled is certified against it too)."""
    return is_reference_framework(framework) and is_default(framework, execution)


def refusal(framework: str, execution: str, workload: Workload | None = None) -> str | None:
    """Why the framework cannot run the workload in this execution, or None when it can."""
    if execution not in EXECUTIONS:
        raise ExecutionError(f"execution {execution!r}: expected one of {', '.join(EXECUTIONS)}")
    runs = supported(framework)
    if execution not in runs:
        return REFUSED.get((framework_name(framework), execution), f"its adapter runs {', '.join(runs)} only")
    if workload is not None and "detection" in workload.tasks and execution != runs[0]:
        return DETECTOR_ONLY_DEFAULT.format(default=runs[0])
    return None


def resolved(framework: str, execution: str | None, workload: Workload | None = None) -> str:
    """The execution a cell runs: the one asked for, or the framework's default; refused with the reason."""
    chosen = execution or default(framework)
    why = refusal(framework, chosen, workload)
    if why:
        raise ExecutionError(f"{framework} cannot run execution {chosen!r}: {why}")
    return chosen


def as_run(workload: Workload, framework: str, execution: str | None = None) -> Workload:
    """The workload as the framework runs it in `execution` (else its default): an execution other than the
    default in its recipe, none for the default (the adapter's own when a recipe names none), so that the cell's
    hash, its record and the certificate's digest tell the executions apart while the default's stay as they were
    before executions were an axis."""
    chosen = resolved(framework, execution, workload)
    recipe = {key: value for key, value in workload.recipe.items() if key != "execution"}
    if chosen != default(framework):
        recipe["execution"] = chosen
    return dataclasses.replace(workload, recipe=recipe)


def of_recipe(framework: str, recipe: dict) -> str:
    """The execution a recipe runs the framework in: its own, else the framework's default."""
    return recipe.get("execution") or default(framework)


def of_run(run: dict) -> str | None:
    """A stored run's execution: what its adapter reported running, else its recipe's, else (a run stored before
    executions were recorded) its framework's default; None for a framework this version does not know."""
    recipe = (run.get("config") or {}).get("recipe") or {}
    if run.get("execution") or recipe.get("execution"):
        return run.get("execution") or recipe["execution"]
    try:
        return default(str(run.get("framework") or ""))
    except EnvError:
        return None
