"""The fixed terms of a certificate's probes, shared by the whole-model probes (probes.py) and the checks of one
layer (layer_checks.py): the seed, batch and steps, the tolerances each kind of tensor is judged by, and the
recipe the probes step with."""
import numpy as np

BATCH = 16  # BatchNorm over fewer values (cnn-svhn ends at 2x2) turns rounding noise into chaos
STEPS = 3
SEED = 0
# Largest deviation allowed, relative to the reference tensor's largest magnitude, by kind of tensor; an
# activation's, relative to each input's magnitude (at least 1): layer_checks.activation_rows.
TOLERANCES = {"output": 1e-4, "serving": 1e-4, "loss": 1e-4, "grad": 1e-3, "after": 1e-3, "activation": 1e-5}
ABSOLUTE_FLOOR = 1e-7  # a deviation this small passes whatever the tensor's scale (tensors near zero)


def constant_rate(recipe: dict) -> dict:
    """The recipe without its learning-rate schedule: the few steps of the other probes run at the base rate
    (a schedule's first update has rate 0); the optimiser certificate's schedule check certifies the schedule."""
    return {key: value for key, value in recipe.items() if key != "schedule"}


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    """The largest absolute difference, in float64."""
    return float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0))
