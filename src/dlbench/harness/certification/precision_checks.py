"""A reduced precision, seen: the rows that fail a run declared bfloat16 or mixed that computes, or keeps its
weights, in another type.

- precision/output and precision/serving: the model's outputs (predict's, the serving path's) deviate from the
  float32 reference's by at least terms.VISIBLE_ROUNDOFFS of the half type's unit roundoff, relative to the outputs'
  scale. Rounding the inputs and weights to bfloat16 alone moves a model's outputs by about its unit roundoff; a run
  that computed in float32 stays within float32's rounding of the float32 reference, thousands of times closer.
- precision/weights: the weights after the steps, as the adapter holds them. In "bfloat16" every one is a bfloat16
  number (none off the half type's grid); in a mixed precision the master weights are float32, so their share off
  the grid must be at least half the float32 reference's own (a canonical weight is almost never a half-type number;
  zeros and ones are), else they were kept in the half type.

storage_rounding widens the comparison of bfloat16 weights after the steps by their grid's spacing, and
normalised_steps judges a reduced precision's weights after Adam's steps by those steps' reach (probes.compare).
"""
import numpy as np

from dlbench.harness.certification.terms import NORMALISING, VISIBLE_ROUNDOFFS, max_abs
from dlbench.harness.plan import precisions

HALF_TYPES = {"bfloat16": "bfloat16", "float16": np.float16}


def rows(precision: str, candidate: dict[str, np.ndarray], float32: dict[str, np.ndarray]) -> list[dict]:
    """The precision's rows for a candidate's whole-model probe, against the float32 reference's probe."""
    if precision == precisions.DEFAULT:
        return []
    half = precisions.COMPUTES_IN[precision]
    least = VISIBLE_ROUNDOFFS * precisions.UNIT_ROUNDOFF[half]
    found = [_visible(name, candidate, float32, least) for name in ("output", "serving") if name in float32]
    return [*found, _weights_row(precision, half, candidate, float32)]


def _visible(name: str, candidate: dict[str, np.ndarray], float32: dict[str, np.ndarray], least: float) -> dict:
    row = {"tensor": f"precision/{name}", "kind": "precision", "tolerance": least, "at_least": True,
           "max_abs": None, "max_rel": None}
    got, expected = candidate.get(name), float32[name]
    if got is None or got.shape != expected.shape:
        return dict(row, passed=False, problem="missing" if got is None else f"shape {got.shape} != {expected.shape}")
    deviation = max_abs(got, expected)
    relative = deviation / max(float(np.max(np.abs(expected), initial=0.0)), 1e-30)
    return dict(row, max_abs=deviation, max_rel=relative, passed=bool(relative >= least))


def off_grid(arrays: list[np.ndarray], half: str) -> float:
    """The share of the arrays' elements that are not numbers of the half type."""
    total = sum(a.size for a in arrays)
    return sum(int(np.count_nonzero(_rounded(a, half) != a)) for a in arrays) / total if total else 0.0


def _rounded(a: np.ndarray, half: str) -> np.ndarray:
    """a rounded to the half type (to nearest, ties to even) and back to float32."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if half == "float16":
        return a.astype(np.float16).astype(np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16  # bfloat16: float32's top 16 bits, rounded
    return bits.astype(np.uint32).view(np.float32)


def storage_rounding(name: str, expected: np.ndarray, precision: str, steps: int) -> np.ndarray | None:
    """Per element of the weights "after/NAME" held in bfloat16 ("bfloat16"): `steps` spacings of bfloat16's grid at
    the reference's value, how far two programs whose steps differ only in rounding may part when each step's result
    is rounded to the grid (an Adam step of 1e-3 on a weight of 0.5 is about a spacing: it lands on either
    neighbour). None for other tensors and precisions: float32 master weights have no such grid."""
    if precision != "bfloat16" or not name.startswith("after/"):
        return None
    magnitude = np.maximum(np.abs(expected.astype(np.float64)), np.finfo(np.float32).tiny)
    return steps * 2.0 ** (np.floor(np.log2(magnitude)) - 7)  # bfloat16 keeps 8 significant bits


MOVEMENT_RATIO = 2.0  # a reduced precision's weights move between half and twice as far as the reference's


def normalised_steps(name: str, got: np.ndarray, expected: np.ndarray, start: dict[str, np.ndarray], config: dict,
                     steps: int) -> dict | None:
    """The weights "after/NAME" of a reduced precision after an Adam-like optimiser's steps, judged by the steps'
    own bounds, or None for other tensors and optimisers. Such a step moves each weight by lr times the gradient
    over its own size: by about lr whatever the gradient's size, so a gradient's rounding of a few percent flips or
    reorders the steps of every small gradient, and the next steps start from other weights. What stays true: each
    weight is within the steps' reach of the reference's (2 lr a step, plus decoupled decay), and the tensor moved
    between 1/MOVEMENT_RATIO and MOVEMENT_RATIO times as far as the reference's did (a step never taken, or taken
    twice, fails). The gradients' rows hold the precision's maths to its tolerance; the optimiser's rule is
    certified in float32 (optimizer.py)."""
    key = name[len("after/"):]
    if not name.startswith("after/") or config.get("name") not in NORMALISING or key not in start:
        return None
    reach = steps * 2 * config["lr"] * (1 + config.get("weight_decay", 0.0) * np.abs(expected.astype(np.float64)))
    ours = float(np.linalg.norm(got.astype(np.float64) - start[key]))
    theirs = float(np.linalg.norm(expected.astype(np.float64) - start[key]))
    ratio = ours / theirs if theirs > 0 else (1.0 if ours == 0 else float("inf"))
    within = bool(np.all(np.abs(got.astype(np.float64) - expected) <= reach)
                  and 1 / MOVEMENT_RATIO <= ratio <= MOVEMENT_RATIO)
    return {"steps_reach": float(reach.max()), "movement_ratio": ratio, "within_steps": within}


def _weights_row(precision: str, half: str, candidate: dict[str, np.ndarray], float32: dict[str, np.ndarray]) -> dict:
    names = sorted(name for name in float32 if name.startswith("after/"))
    row = {"tensor": "precision/weights", "kind": "precision", "max_abs": None, "max_rel": None}
    if any(name not in candidate for name in names):
        return dict(row, tolerance=0.0, passed=False, problem="missing")
    share = off_grid([candidate[name] for name in names], half)
    if precision == "bfloat16":  # stored in bfloat16: none off its grid
        return dict(row, tolerance=0.0, max_abs=share, max_rel=share, passed=share == 0.0)
    least = off_grid([float32[name] for name in names], half) / 2  # float32 master weights
    return dict(row, tolerance=least, at_least=True, max_abs=share, max_rel=share, passed=share >= least > 0)
