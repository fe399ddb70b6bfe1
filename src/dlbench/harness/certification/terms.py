"""The fixed terms of a certificate's probes, shared by the whole-model probes (probes.py) and the checks of one
layer (layer_checks.py): the seed, batch and steps, the tolerances each kind of tensor is judged by, and the
recipe the probes step with."""
import numpy as np

from dlbench.harness.plan import precisions

BATCH = 16  # BatchNorm over fewer values (cnn-svhn ends at 2x2) turns rounding noise into chaos
STEPS = 3
SEED = 0
# Largest deviation allowed, relative to the reference tensor's largest magnitude, by kind of tensor; an
# activation's, relative to each input's magnitude (at least 1): layer_checks.activation_rows.
TOLERANCES = {"output": 1e-4, "serving": 1e-4, "loss": 1e-4, "grad": 1e-3, "after": 1e-3, "activation": 1e-5}
ABSOLUTE_FLOOR = 1e-7  # a deviation this small passes whatever the tensor's scale (tensors near zero)
NORMALISING = ("adam", "adamw")  # optimisers whose step divides the gradient by its own size plus epsilon
# A reduced precision's tolerances (docs/fairness.md): these many unit roundoffs of the type it computes in
# (precisions.UNIT_ROUNDOFF), by kind of tensor. Two correct programs in bfloat16 round differently at every
# operation, so their deviation grows with the model's depth; where it exceeds these, the tensor is judged as a
# float32 one is, by its distance from the float64 result against the reference's own in the same precision.
ROUNDOFF_MULTIPLES = {"output": 8, "serving": 8, "loss": 8, "grad": 32, "after": 32}
# A reduced precision must show: the outputs and the serving path's deviate from the float32 reference's by at
# least this many of its unit roundoffs (a run that computed in float32 deviates by float32's rounding, ~1e-6).
VISIBLE_ROUNDOFFS = 1 / 8


def tolerances(precision: str) -> dict[str, float]:
    """Every kind of tensor's tolerance in `precision`: TOLERANCES in float32, else ROUNDOFF_MULTIPLES unit
    roundoffs of the half type it computes in."""
    if precision == precisions.DEFAULT:
        return TOLERANCES
    roundoff = precisions.UNIT_ROUNDOFF[precisions.COMPUTES_IN[precision]]
    return dict(TOLERANCES, **{kind: multiple * roundoff for kind, multiple in ROUNDOFF_MULTIPLES.items()})


def share_of_tolerance(row: dict) -> float:
    """How much of its tolerance a row's deviation uses (over 1: failed); a row of a deviation that must reach at
    least its tolerance (`at_least`, a precision's visibility) uses the tolerance over the deviation."""
    if row["max_abs"] is None:
        return float("inf")
    if row.get("at_least"):
        return row["tolerance"] / row["max_rel"] if row["max_rel"] else float("inf")
    if row["max_abs"] <= ABSOLUTE_FLOOR:
        return 0.0
    return row["max_rel"] / row["tolerance"] if row["tolerance"] else float("inf")


def worst(rows: list[dict]) -> dict:
    """The row a certificate names as its worst: a failed one before any that passed, then the largest share of its
    tolerance. A precision's visibility rows that passed rank last: the worst names a deviation from the reference."""
    return max(rows, key=lambda row: (not row["passed"], not row.get("at_least"), share_of_tolerance(row)))


def constant_rate(recipe: dict) -> dict:
    """The recipe without its learning-rate schedule: the few steps of the other probes run at the base rate
    (a schedule's first update has rate 0); the optimiser certificate's schedule check certifies the schedule."""
    return {key: value for key, value in recipe.items() if key != "schedule"}


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    """The largest absolute difference, in float64."""
    return float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0))
