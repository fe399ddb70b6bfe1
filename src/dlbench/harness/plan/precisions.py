"""The number formats a framework can train a cell in (the suite axis `precision`), and why it refuses the others.

"float32" is every framework's default and the only format of the reference's float32 certificate; "bfloat16" holds
weights, optimiser state and compute in bfloat16; "mixed-bfloat16" and "mixed-float16" keep float32 weights and
optimiser and compute the forward and backward passes in the half type, by the framework's own mechanism (worker/
base.py's PRECISIONS; docs/architecture.md has the table). What each framework runs is its recipe's `precisions`
(environments/envs.py), the harness's copy of its adapter's; tests/test_adapters.py holds the two equal.
"""
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from dlbench.harness.environments import envs
from dlbench.harness.environments.envs import EnvError, get_recipe
from dlbench.harness.environments.envs import framework_name as name_of
from dlbench.harness.plan import executions
from dlbench.harness.plan.workloads import Workload
from dlbench.shared.ir import all_shapes

PRECISIONS = ("float32", "bfloat16", "mixed-bfloat16", "mixed-float16")  # worker/base.py's
DEFAULT = "float32"
# the half type each reduced precision computes in, and its unit roundoff (half the gap between 1 and the next
# number: 2^-8 for bfloat16's 8 significant bits, 2^-11 for float16's 11)
COMPUTES_IN = {"bfloat16": "bfloat16", "mixed-bfloat16": "bfloat16", "mixed-float16": "float16"}
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
_NOT_BUILT = "dlbench's {framework} adapter has no reduced-precision path yet"
_NO_NUMPY_BFLOAT16 = "{framework} holds its arrays in numpy, which has no bfloat16 type"
# why a framework refuses a precision it does not run
REFUSED: dict[tuple[str, str], str] = {
    ("chainer", "bfloat16"): _NO_NUMPY_BFLOAT16.format(framework="Chainer"),
    ("chainer", "mixed-bfloat16"): _NO_NUMPY_BFLOAT16.format(framework="Chainer"),
    ("mxnet", "bfloat16"): "MXNet 1.9's Gluon cannot hold parameters in bfloat16 (Block.cast('bfloat16') fails: "
                           "\"data type 'bfloat16' not understood\"); its bfloat16 is AMP's, with float32 weights "
                           "(mixed-bfloat16)",
    ("mxnet", "mixed-float16"): "MXNet 1.9's AMP in float16 trains nothing on the CPU: its first backward pass "
                                "raises \"FP16 gemm on cpu not implemented!\"; dlbench has no GPU to build and "
                                "test its CUDA path on",
    ("theano", "bfloat16"): _NO_NUMPY_BFLOAT16.format(framework="Theano"),
    ("theano", "mixed-bfloat16"): _NO_NUMPY_BFLOAT16.format(framework="Theano"),
    ("theano", "mixed-float16"): "Theano has no mixed precision of its own: floatX=float16 makes every tensor "
                                 "float16, weights and optimiser state included, and its CPU convolutions refuse "
                                 "float16 (\"On the CPU we do not support float16\")",
}
# a precision a framework runs on one device only: (framework, precision, device) -> why not on that device
DEVICE_REFUSED: dict[tuple[str, str, str], str] = {
    ("mxnet", "mixed-bfloat16", "gpu"): "MXNet's AMP computes bfloat16 with oneDNN, on the CPU only",
}


def _has_kind(kind: str) -> Callable[[dict], bool]:
    return lambda layer: layer["type"] == kind


def _attention(layer: dict) -> bool:
    return layer["type"] in ("attention", "grouped_query_attention")


@dataclass(frozen=True)
class LayerRefusal:
    """A framework that cannot train a model holding a layer `applies` to in `precision` on a CPU (in `executions`
    only, where named), and why: its adapter fails there, with the error the reason quotes or a refusal of its own."""
    framework: str
    precision: str
    applies: Callable[[dict], bool]
    why: str
    executions: tuple[str, ...] = ()


LAYER_REFUSALS = (
    LayerRefusal("pytorch", "mixed-float16", _has_kind("lstm"),
                 "torch's CPU LSTM (oneDNN) has no float16 training primitive: its forward pass in training mode "
                 "raises 'could not create a primitive descriptor for the LSTM forward propagation primitive'"),
    # Keras fuses attention only without dropout on its weights (keras3/layers.fused_attention), but a certificate
    # runs the model with dropout off, where it fuses every attention: refused for any, or no cell could be certified
    LayerRefusal("keras-jax", "mixed-float16", _attention,
                 "keras-jax compiles no float16 x float16 -> float32 dot on the CPU, which Keras's attention reaches "
                 "(jax.nn.dot_product_attention: 'The precision F16_F16_F32 is not supported by dot_general on "
                 "CPU') wherever it has no dropout, as in every certificate's model", ("compiled",)),
)
DETECTOR_ONLY_FLOAT32 = "the detector adapters (worker/detector.py) train in float32 only"


class PrecisionError(ValueError):
    pass


def supported(framework: str) -> tuple[str, ...]:
    """The precisions a framework (name or name@version) runs, float32 first."""
    return get_recipe(framework).precisions


def refusal(framework: str, precision: str, workload: Workload | None = None, device: str = "cpu",
            execution: str | None = None) -> str | None:
    """Why the framework cannot run the workload in this precision on the device in the execution (None: its
    default), or None when it can."""
    if precision not in PRECISIONS:
        raise PrecisionError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    name = name_of(framework)
    runs = supported(framework)
    if precision not in runs:
        return REFUSED.get((name, precision), _NOT_BUILT.format(framework=name) if runs == (DEFAULT,)
                           else f"its adapter runs {', '.join(runs)} only")
    if (name, precision, device) in DEVICE_REFUSED:
        return DEVICE_REFUSED[name, precision, device]
    if workload is None or precision == DEFAULT:
        return None
    if "detection" in workload.tasks:
        return DETECTOR_ONLY_FLOAT32
    execution = execution or executions.default(framework)
    layers = [layer for layer, _, _ in all_shapes(workload.model())]
    return next((rule.why for rule in LAYER_REFUSALS if (rule.framework, rule.precision) == (name, precision)
                 and device == "cpu" and (not rule.executions or execution in rule.executions)
                 and any(map(rule.applies, layers))), None)


def reference_refusal(workload: Workload) -> str | None:
    """Why the reference cannot probe the workload in the reduced precision its recipe holds, so that no framework's
    run of it can be certified against the reference in the same precision, or None."""
    precision = of_recipe(workload.recipe)
    return None if precision == DEFAULT else refusal(envs.REFERENCE, precision, workload)


def resolved(framework: str, precision: str | None, workload: Workload | None = None, device: str = "cpu",
             execution: str | None = None) -> str:
    """The precision a cell runs: the one asked for, or float32; refused with the reason."""
    chosen = precision or DEFAULT
    why = refusal(framework, chosen, workload, device, execution)
    if why:
        raise PrecisionError(f"{framework} cannot run precision {chosen!r}: {why}")
    return chosen


def as_run(workload: Workload, framework: str, precision: str | None = None, device: str = "cpu") -> Workload:
    """The workload as the framework runs it in `precision` (in the execution its recipe holds): a reduced one in its
    recipe, none for float32, so that the cell's hash, its record and its certificate's digest tell precisions apart
    while float32's stay as they were before precision was an axis."""
    chosen = resolved(framework, precision, workload, device, workload.recipe.get("execution"))
    recipe = {key: value for key, value in workload.recipe.items() if key != "precision"}
    if chosen != DEFAULT:
        recipe["precision"] = chosen
    return dataclasses.replace(workload, recipe=recipe)


def of_recipe(recipe: dict) -> str:
    """The precision a recipe trains in."""
    return recipe.get("precision") or DEFAULT


def of_run(run: dict) -> str | None:
    """A stored run's precision: what its adapter reported, else its recipe's, else (a run stored before precision
    was recorded) float32; None for a framework this version does not know."""
    recipe = (run.get("config") or {}).get("recipe") or {}
    if run.get("precision") or recipe.get("precision"):
        return run.get("precision") or recipe["precision"]
    try:
        get_recipe(str(run.get("framework") or ""))
    except EnvError:
        return None
    return DEFAULT
