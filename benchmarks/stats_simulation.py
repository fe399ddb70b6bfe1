"""How often the speed test of dlbench's findings (analysis.stats.log_t_test) claims a gap, by simulation:
its false-positive rate where there is no gap, its power where there is one, and the family-wise error of
the two ways of choosing which comparisons Holm's correction covers.

Each simulated run's steady epoch time is exp(normal(0, sigma)) times the gap, and under the contaminated
model a run is, with probability 0.1, slowed by a factor drawn uniformly from 1.5 to 3 (a neighbouring
process). n runs a side, DRAWS experiments per setting, seeded; two-sided tests at alpha 0.05.

    python benchmarks/stats_simulation.py [--draws 10000] [--seed 0]

Prints Markdown tables (docs/measurement.md holds their output). Needs numpy and scipy (the harness venv).
"""
import argparse

import numpy as np
from scipy import stats

ALPHA = 0.05
SIZES = range(2, 10)
GAPS = (1.0, 1.1, 1.3, 2.0)
SLOWED_SHARE, SLOWED_RANGE = 0.1, (1.5, 3.0)
NOISE_MODELS = {"lognormal 5 %": (0.05, False), "lognormal 15 %": (0.15, False),
                "contaminated 5 %": (0.05, True), "contaminated 15 %": (0.15, True)}
TESTS = {"Welch": 0.0, "Yuen 20 %": 0.2}  # ttest_ind's trim: the share cut from each end of each side
FRAMEWORKS = 7  # dlbench's frameworks: a workload's family of comparisons at most


def log_times(rng: np.random.Generator, draws: int, n: int, sigma: float, contaminated: bool,
              gap: float = 1.0) -> np.ndarray:
    """draws x n simulated runs' log steady epoch times."""
    logs = rng.normal(np.log(gap), sigma, (draws, n))
    if contaminated:
        slowed = rng.random((draws, n)) < SLOWED_SHARE
        logs += np.where(slowed, np.log(rng.uniform(*SLOWED_RANGE, (draws, n))), 0.0)
    return logs


def p_values(a: np.ndarray, b: np.ndarray, trim: float) -> np.ndarray:
    """Welch's (trim 0) or Yuen's two-sided p of each row pair; where both rows are constant, 1."""
    with np.errstate(invalid="ignore", divide="ignore"):
        p = stats.ttest_ind(a, b, axis=-1, equal_var=False, trim=trim).pvalue
    return np.nan_to_num(p, nan=1.0)


def rejections(rng: np.random.Generator, draws: int, n: int, gap: float, sigma: float, contaminated: bool,
               trim: float, alpha: float = ALPHA) -> float:
    """The share of experiments whose test rejects at alpha."""
    slow = log_times(rng, draws, n, sigma, contaminated, gap)
    fast = log_times(rng, draws, n, sigma, contaminated)
    return float(np.mean(p_values(slow, fast, trim) < alpha))


def holm_rejects_any(p: np.ndarray) -> np.ndarray:
    """Per row of p-values (one family each): whether Holm at ALPHA rejects anything, which is whether its
    first step does (the smallest p below ALPHA / m)."""
    return p.min(axis=1) < ALPHA / p.shape[1]


def family_error(rng: np.random.Generator, draws: int, n: int, sigma: float, contaminated: bool, trim: float,
                 against_fastest: bool) -> float:
    """The share of experiments with FRAMEWORKS equal frameworks in which Holm rejects anything: each
    framework against the one of lowest mean log time (FRAMEWORKS - 1 comparisons), or every pair."""
    logs = np.stack([log_times(rng, draws, n, sigma, contaminated) for _ in range(FRAMEWORKS)], axis=1)
    if against_fastest:
        fastest = np.argmin(logs.mean(axis=2), axis=1)
        best = logs[np.arange(draws), fastest][:, None, :]
        others = np.stack([logs[np.arange(draws), (fastest + k) % FRAMEWORKS] for k in range(1, FRAMEWORKS)], axis=1)
        p = p_values(others, np.broadcast_to(best, others.shape), trim)
    else:
        first, second = np.triu_indices(FRAMEWORKS, 1)
        p = p_values(logs[:, first], logs[:, second], trim)
    return float(np.mean(holm_rejects_any(p)))


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    lines = [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=10_000, help="experiments per setting")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    header = ["test", "noise", "gap"] + [f"n={n}" for n in SIZES]
    rows = []
    for test, trim in TESTS.items():
        for noise, (sigma, contaminated) in NOISE_MODELS.items():
            for gap in GAPS:
                shares = [rejections(rng, args.draws, n, gap, sigma, contaminated, trim) for n in SIZES]
                rows.append([test, noise, f"{gap:g}x"] + [f"{share * 100:.1f}" for share in shares])
    print(table(f"Share of {args.draws:,} experiments per cell that reject at {ALPHA} (%): at gap 1x the "
                "false-positive rate, else the power", header, rows))
    family_rows = []
    for against_fastest, family in ((True, f"each against the fastest ({FRAMEWORKS - 1})"),
                                    (False, f"every pair ({FRAMEWORKS * (FRAMEWORKS - 1) // 2})")):
        for noise, (sigma, contaminated) in NOISE_MODELS.items():
            errors = [family_error(rng, args.draws, n, sigma, contaminated, TESTS["Welch"], against_fastest)
                      for n in SIZES]
            family_rows.append([family, noise] + [f"{e * 100:.1f}" for e in errors])
    holm_rows = []
    for comparisons, frameworks in ((3, 3), (21, 7)):
        for noise, (sigma, contaminated) in NOISE_MODELS.items():
            for gap in GAPS[1:]:
                shares = [rejections(rng, args.draws, n, gap, sigma, contaminated, TESTS["Welch"],
                                     ALPHA / comparisons) for n in SIZES]
                holm_rows.append([f"{frameworks} ({comparisons} pairs)", noise, f"{gap:g}x"]
                                 + [f"{share * 100:.1f}" for share in shares])
    print(table("Power (%) of Welch at Holm's first step, alpha / pairs: what one gap gets among a workload's "
                "frameworks at least", ["frameworks", "noise", "gap"] + [f"n={n}" for n in SIZES], holm_rows))
    print(table(f"Family-wise error (%), {FRAMEWORKS} frameworks with no gap, Welch under Holm at {ALPHA}",
                ["Holm over", "noise"] + [f"n={n}" for n in SIZES], family_rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
