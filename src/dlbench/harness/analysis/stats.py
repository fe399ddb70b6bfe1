"""Statistics over repetitions: medians with order-statistic confidence intervals, ratios, Mann-Whitney
tests with Holm's correction, verdicts that never rank what was not shown, and the repetitions a
difference needs.

Every statistic here takes ONE value per run (a run's steady_epoch_s, train_time_s, first_epoch_s,
metric_value, peak_rss_mb or mean_cpu_percent). The epochs of one run are not independent samples: they
share the process, its warm caches, its allocator state and the machine's state at that time, so
treating them as repetitions would make intervals too narrow and tests too eager. A run's steady epoch
time is already the median of its epochs after the first; that one number is the run's sample.

Intervals are order-statistic (binomial) intervals of the median, as asv computes them: [x_(k),
x_(n+1-k)] of the sorted values covers the true median with probability 1 - 2 P(B <= k - 1), B ~
Binomial(n, 1/2), whatever the distribution (continuous). The largest k that reaches 95 % is used; with
2 to 5 runs none does, and the interval is [min, max] with the level it really has (50 % at 2 runs, 75 %,
87.5 %, 93.75 % at 5). Every Estimate carries that level, and the report prints it wherever it is below
95 %. A ratio of two medians gets [low_a / high_b, high_a / low_b] from the two intervals: it covers the
true ratio whenever both cover their medians, so its level is at least the product of theirs (each side
aims at the square root of 95 %). That bound is conservative: simulated, the ratio's interval covers
more often than its stated level (65 % against 25 % at 2 runs a side, 88 % against 56 % at 3).

Speed comparisons (the findings' steady epoch times) use log_t_test instead: Welch's t-test on the logs of
the runs' times, whose ratio is the ratio of geometric means with the Welch t interval at CONFIDENCE. Unlike
Mann-Whitney's it can show a gap with 2 or 3 runs a side; benchmarks/stats_simulation.py measures its
false-positive rate and power (docs/measurement.md, "Statistics over repetitions", holds its tables).

The building blocks are scipy.stats (binom, mannwhitneyu, ttest_ind) and statsmodels (Holm).
"""
from __future__ import annotations

import dataclasses
import itertools
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

# scipy.stats and statsmodels take seconds to import: each function that computes a statistic imports
# them, so that commands computing none (run, list, --help) start at once.
if TYPE_CHECKING:
    from scipy import stats

CONFIDENCE = 0.95
RESAMPLES = 9999  # random arrangements of the permutation test for tied samples
EXACT_MAX = 100  # sides up to this size get the exact Mann-Whitney distribution (scipy, milliseconds at 100)
NOISE = 0.02  # a ratio whose interval reaches into 1 +- NOISE is "within noise" even when the test rejects
MAX_REPETITIONS = 1000  # repetitions_needed searches up to this many a side
SIMULATIONS = 400  # simulated experiments per sample size in repetitions_needed

FASTER, SLOWER = "faster", "slower"
NO_DIFFERENCE = "no difference shown"
WITHIN_NOISE = "within noise"  # the test rejects, but the gap's interval reaches into the NOISE band
TOO_FEW = "too few repetitions"
SINGLE = "single runs"
NO_RUNS = "no runs"  # a side without a single value (all its runs failed, or none ran)
MANN_WHITNEY, LOG_T = "mann-whitney", "log-t"  # a Family's test: mann_whitney, or log_t_test


@dataclass(frozen=True)
class Estimate:
    """A median with its order-statistic confidence interval. low and high are None with fewer than 2
    values (no interval is invented from one run); equal values give low == high == median. level: the
    coverage the interval guarantees (at least CONFIDENCE where n allows it, else what [min, max] gives);
    None without an interval, or for a ratio of one run to itself."""
    n: int
    median: float | None
    low: float | None
    high: float | None
    level: float | None = None

    def excludes(self, value: float) -> bool:
        """Whether the interval lies wholly above or below `value` (False without an interval)."""
        return self.low is not None and self.high is not None and (self.low > value or self.high < value)


@dataclass(frozen=True)
class PairTest:
    a: str  # labels, e.g. framework names
    b: str
    ratio: Estimate  # a's median / b's median, CI from resampling each side independently
    p_value: float | None  # two-sided Mann-Whitney U; None with fewer than 2 values a side
    p_adjusted: float | None  # Holm over the comparisons of one call
    shown: bool  # the corrected test rejects at alpha AND the ratio's interval lies beyond 1 +- the noise band
    min_p_possible: float | None  # the smallest two-sided p this test can give with these sample sizes
    # a's: the better / worse word ("faster" / "slower") when shown, else WITHIN_NOISE (the test rejects but
    # the interval reaches into the noise band), NO_DIFFERENCE, TOO_FEW (see family_tests), SINGLE (a side
    # with one run) or NO_RUNS (a side with none)
    verdict: str


def _values(values: Sequence[float | None]) -> np.ndarray:
    """The values as floats, None left out (a run without this figure, e.g. one epoch: no steady time)."""
    array = np.asarray([v for v in values if v is not None], dtype=float)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"values must be finite numbers or None, got {list(values)!r}")
    return array


def order_interval(n: int, confidence: float = CONFIDENCE) -> tuple[int, float]:
    """k and the level of the order-statistic interval [x_(k), x_(n+1-k)] of the median of n values (1-based
    ranks): the largest k whose level 1 - 2 P(Binomial(n, 1/2) <= k - 1) reaches `confidence`, else k = 1
    ([min, max]) with the level it has, 1 - 2^(1-n)."""
    from scipy import stats
    if n < 2:
        raise ValueError(f"an interval of the median needs 2 values or more, got n={n}")
    ks = np.arange(1, (n + 1) // 2 + 1)
    levels = 1.0 - 2.0 * stats.binom.cdf(ks - 1, n, 0.5)
    reaching = np.flatnonzero(levels >= confidence)
    k = int(ks[reaching[-1]]) if reaching.size else 1
    return k, float(levels[k - 1])


def _interval(array: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """low, high and level of the order-statistic interval of the values' median."""
    k, level = order_interval(array.size, confidence)
    ordered = np.sort(array)
    return float(ordered[k - 1]), float(ordered[array.size - k]), level


def estimate(values: Sequence[float | None], seed: int = 0) -> Estimate:
    """Median of the values (None left out) with its order-statistic interval (order_interval). seed is
    unused (the interval is exact, not resampled); it stays for callers that pass one to every statistic."""
    array = _values(values)
    if array.size == 0:
        return Estimate(0, None, None, None)
    median = float(np.median(array))
    if array.size == 1:
        return Estimate(1, median, None, None)
    low, high, level = _interval(array, CONFIDENCE)
    return Estimate(array.size, median, low, high, level)


def ratio(a: Sequence[float | None], b: Sequence[float | None], seed: int = 0) -> Estimate:
    """median(a) / median(b) with the interval [low_a / high_b, high_a / low_b] of the two sides'
    order-statistic intervals, each at the square root of CONFIDENCE where its size allows. Both cover
    their medians (independent sides) with probability level_a * level_b, and then the ratio's interval
    covers the true ratio: that product is its level. n is the smaller side's count; no interval unless
    both sides have 2 values or more and b's are all positive."""
    x, y = _values(a), _values(b)
    n = min(x.size, y.size)
    if n == 0 or np.median(y) == 0:
        return Estimate(n, None, None, None)
    value = float(np.median(x) / np.median(y))
    if n == 1 or np.any(y <= 0):
        return Estimate(n, value, None, None)
    side = float(np.sqrt(CONFIDENCE))
    low_a, high_a, level_a = _interval(x, side)
    low_b, high_b, level_b = _interval(y, side)
    return Estimate(n, value, low_a / high_b, high_a / low_b, level_a * level_b)


def level_text(level: float) -> str:
    """"95%", "87.5%", "93.7%": the level rounded down to 0.1 %, so it never claims more than it has."""
    return f"{np.floor(level * 1000 + 1e-9) / 10:g}%"


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (statsmodels): reject where the adjusted p is below alpha."""
    from statsmodels.stats.multitest import multipletests
    if len(p_values) == 0:
        return []
    return [float(p) for p in multipletests(list(p_values), method="holm")[1]]


def mwu_method(x: np.ndarray, y: np.ndarray, seed: int = 0) -> str | stats.PermutationMethod:
    """How mann_whitney computes p: "exact" (the exact null distribution of U, which assumes no ties) when
    both sides hold at most EXACT_MAX values and none tie; with ties, a permutation test of U over the
    pooled values (exact where the arrangements number at most RESAMPLES, about 7 a side, else RESAMPLES
    seeded random ones); beyond EXACT_MAX a side, the normal approximation ("asymptotic")."""
    from scipy import stats
    if max(x.size, y.size) > EXACT_MAX:
        return "asymptotic"
    if np.unique(np.concatenate([x, y])).size < x.size + y.size:
        return stats.PermutationMethod(n_resamples=RESAMPLES, rng=np.random.default_rng(seed))
    return "exact"


def mann_whitney(a: Sequence[float | None], b: Sequence[float | None], seed: int = 0) -> float | None:
    """Two-sided Mann-Whitney U p-value, None with fewer than 2 values a side."""
    from scipy import stats
    x, y = _values(a), _values(b)
    if min(x.size, y.size) < 2:
        return None
    return float(stats.mannwhitneyu(x, y, alternative="two-sided", method=mwu_method(x, y, seed)).pvalue)


def min_p_possible(n_a: int, n_b: int) -> float | None:
    """The smallest two-sided p mann_whitney gives for these sizes, by the same method: that of two samples
    with no overlap, 2 / C(n_a + n_b, n_a) up to EXACT_MAX a side (3 vs 3: 0.1, so 3 repetitions a side
    can never show a difference at 0.05)."""
    if min(n_a, n_b) < 2:
        return None
    return mann_whitney(np.arange(n_a, dtype=float), np.arange(n_a, n_a + n_b, dtype=float))


Pair = tuple[str, Sequence[float | None], str, Sequence[float | None]]  # label a, values a, label b, values b


@dataclass(frozen=True)
class Family:
    """Pairs whose verdicts speak of one quantity: lower_is_better, the words for a shown gap, and the
    noise band: a gap is shown only where the ratio's interval lies wholly outside 1 +- noise, as
    criterion.rs's noise threshold (0 for a quantity whose noise is judged elsewhere, e.g. a metric's
    test-set sampling error in findings)."""
    pairs: Sequence[Pair]
    lower_is_better: bool = True
    better: str = FASTER
    worse: str = SLOWER
    noise: float = NOISE
    test: str = MANN_WHITNEY  # or LOG_T: Welch's t on log values (positive values: times)


def family_tests(families: Sequence[Family], alpha: float = 0.05, seed: int = 0) -> list[list[PairTest]]:
    """One PairTest per pair of every family, Holm over all the pairs of all the families together (a
    report's comparisons, whatever they measure), each verdict in its family's words.

    A pair is "too few repetitions" when nothing these sample sizes could give would be shown: its own
    smallest possible p is not below alpha, or Holm's first step (m tests times the smallest possible p
    of any of them, a floor under every adjusted p) is not. 5 runs a side reach p 0.008, so Holm over 7
    or more such comparisons can show nothing."""
    untested = [[_unadjusted(label_a, _values(a), label_b, _values(b), seed, family.test)
                 for label_a, a, label_b, b in family.pairs] for family in families]
    testable = [t for tests in untested for t in tests if t.p_value is not None]
    adjusted = iter(holm([t.p_value for t in testable]))
    floor = len(testable) * min((t.min_p_possible for t in testable), default=0.0)
    results = []
    for family, tests in zip(families, untested, strict=True):
        finished = []
        for test in tests:
            p_adjusted = next(adjusted) if test.p_value is not None else None
            rejected = p_adjusted is not None and p_adjusted < alpha
            shown = rejected and _beyond(test.ratio, family.noise)
            tested = dataclasses.replace(test, p_adjusted=p_adjusted, shown=shown)
            verdict = _verdict(tested, alpha, floor, family)
            finished.append(dataclasses.replace(tested, verdict=verdict))
        results.append(finished)
    return results


def pair_tests(pairs: Sequence[Pair], lower_is_better: bool = True, alpha: float = 0.05, seed: int = 0,
               better: str = FASTER, worse: str = SLOWER, noise: float = NOISE) -> list[PairTest]:
    """One PairTest per (label a, values a, label b, values b), Holm over all of them (family_tests)."""
    return family_tests([Family(pairs, lower_is_better, better, worse, noise)], alpha, seed)[0]


def _beyond(r: Estimate, noise: float) -> bool:
    """Whether the ratio's interval lies wholly outside [1 - noise, 1 + noise] (wholly off 1 at noise 0)."""
    return r.low is not None and r.high is not None and (r.low > 1 + noise or r.high < 1 - noise)


def _unadjusted(label_a: str, a: np.ndarray, label_b: str, b: np.ndarray, seed: int, test: str) -> PairTest:
    if test == LOG_T:
        gap, p = log_t_test(a, b)
        # a t statistic grows without bound as the sides separate: any p is possible from 2 runs a side
        return PairTest(label_a, label_b, gap, p, None, False, None if p is None else 0.0, "")
    return PairTest(label_a, label_b, ratio(a, b, seed), mann_whitney(a, b, seed), None, False,
                    min_p_possible(a.size, b.size), "")


def log_t_test(a: Sequence[float | None], b: Sequence[float | None]) -> tuple[Estimate, float | None]:
    """Welch's two-sided t-test on the logs of a's and b's values (positive: times), and the ratio it speaks
    of: exp(mean log a - mean log b), the ratio of geometric means, with the Welch t interval of the mean log
    difference at CONFIDENCE, exponentiated. Log times because run-to-run noise is multiplicative (a busy
    neighbour slows a run by a factor); Welch because the frameworks' spreads differ. With one value on a
    side: the ratio without interval and no p. Two sides without any spread are equal (p 1) or apart (p 0,
    scipy's infinite t)."""
    from scipy import stats
    x, y = _values(a), _values(b)
    n = min(x.size, y.size)
    if n == 0:
        return Estimate(0, None, None, None), None
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError(f"log_t_test takes positive values, got {list(a)!r} and {list(b)!r}")
    log_x, log_y = np.log(x), np.log(y)
    value = float(np.exp(log_x.mean() - log_y.mean()))
    if n == 1:
        return Estimate(1, value, None, None), None
    if np.ptp(log_x) == 0 and np.ptp(log_y) == 0:  # scipy's interval is undefined without spread
        return Estimate(n, value, value, value, CONFIDENCE), 1.0 if value == 1.0 else 0.0
    with warnings.catch_warnings():
        # scipy warns of precision loss where a side's values nearly tie (identical timings to the last digits):
        # the statistic it computes from them stands, and a report's reader can do nothing about the warning
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_ind(log_x, log_y, equal_var=False)
    interval = result.confidence_interval(CONFIDENCE)
    return (Estimate(n, value, float(np.exp(interval.low)), float(np.exp(interval.high)), CONFIDENCE),
            float(result.pvalue))


def log_t_repetitions(sigma: float, effect: float = 0.10, comparisons: int = 1, alpha: float = 0.05,
                      power: float = 0.8, seed: int = 0) -> int | None:
    """The smallest n a side (2 to MAX_REPETITIONS) at which log_t_test shows a ratio of 1 + effect in a share
    `power` of SIMULATIONS simulated experiments (log times normal with standard deviation `sigma` on both
    sides, the same draws for every n), at the level Holm's first step gives the first of `comparisons` tests
    (alpha / comparisons: no later step is stricter); None beyond MAX_REPETITIONS. Simulated, not the
    noncentral t's power: with 2 or 3 runs a side Welch's degrees of freedom fall well below 2 n - 2, and
    that formula would promise nearly twice the power the test has (20 % against 11 % at n = 2, sigma 0.05, 10 %).
    sigma 0: 2 (no spread: any gap is apart)."""
    from scipy import stats
    if sigma < 0 or effect <= 0 or comparisons < 1 or not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"need sigma >= 0, effect > 0, comparisons >= 1, 0 < alpha < 1 and 0 < power < 1; got "
                         f"sigma={sigma}, effect={effect}, comparisons={comparisons}, alpha={alpha}, power={power}")
    if sigma == 0:
        return 2
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, sigma, (SIMULATIONS, MAX_REPETITIONS))
    shifted = rng.normal(np.log1p(effect), sigma, (SIMULATIONS, MAX_REPETITIONS))

    def detects(n: int) -> bool:
        p = stats.ttest_ind(shifted[:, :n], base[:, :n], axis=1, equal_var=False).pvalue
        return float(np.mean(p < alpha / comparisons)) >= power

    if not detects(MAX_REPETITIONS):
        return None
    low, high = 1, MAX_REPETITIONS  # detects(high) holds, low is below any n that can
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if detects(middle) else (middle, high)
    return high


def _verdict(test: PairTest, alpha: float, floor: float, family: Family) -> str:
    if test.ratio.n == 0:
        return NO_RUNS
    if test.ratio.n == 1:
        return SINGLE
    if test.min_p_possible is not None and max(test.min_p_possible, floor) >= alpha:
        return TOO_FEW
    if not test.shown:
        rejected = test.p_adjusted is not None and test.p_adjusted < alpha
        return WITHIN_NOISE if rejected and test.ratio.excludes(1.0) else NO_DIFFERENCE
    a_lower = test.ratio.high is not None and test.ratio.high < 1.0
    return family.better if a_lower == family.lower_is_better else family.worse


def all_pairs(samples: Mapping[str, Sequence[float | None]]) -> list[Pair]:
    """Every pair of labels, a before b in the mapping's order."""
    return [(a, samples[a], b, samples[b]) for a, b in itertools.combinations(samples, 2)]


def pairwise(samples: Mapping[str, Sequence[float | None]], lower_is_better: bool = True, alpha: float = 0.05,
             seed: int = 0, better: str = FASTER, worse: str = SLOWER, noise: float = NOISE) -> list[PairTest]:
    """Every pair of labels, Holm over all pairs. The verdict is a's: `better` / `worse` only when shown
    (say better="more accurate", worse="less accurate" for a metric)."""
    return pair_tests(all_pairs(samples), lower_is_better, alpha, seed, better, worse, noise)


def repetitions_needed(cv: float, effect: float = 0.10, alpha: float = 0.05, power: float = 0.8,
                       seed: int = 0) -> int:
    """The smallest n a side at which a two-sided Mann-Whitney test at `alpha` detects a ratio of
    1 + effect between two lognormal samples of this coefficient of variation in a share `power` of
    SIMULATIONS simulated experiments (the same draws for every n, so power grows with n smoothly).
    Binary search over 2..MAX_REPETITIONS; ValueError when even MAX_REPETITIONS is not enough."""
    from scipy import stats
    if cv < 0 or effect <= 0 or not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"need cv >= 0, effect > 0, 0 < alpha < 1 and 0 < power < 1; got cv={cv}, "
                         f"effect={effect}, alpha={alpha}, power={power}")
    if cv == 0:  # no noise: any difference separates the samples, so only the test's resolution counts
        return next(n for n in range(2, MAX_REPETITIONS + 1) if min_p_possible(n, n) < alpha)
    sigma = np.sqrt(np.log1p(cv ** 2))  # a lognormal's sigma for this coefficient of variation
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, sigma, (SIMULATIONS, MAX_REPETITIONS))
    shifted = rng.normal(np.log1p(effect), sigma, (SIMULATIONS, MAX_REPETITIONS))

    def detects(n: int) -> bool:
        # ranks are the same for logs, so the lognormal draws need not be exponentiated; continuous draws
        # never tie, so mann_whitney's method is exact up to EXACT_MAX a side
        method = "exact" if n <= EXACT_MAX else "asymptotic"
        p = stats.mannwhitneyu(base[:, :n], shifted[:, :n], axis=1, alternative="two-sided", method=method).pvalue
        return float(np.mean(p < alpha)) >= power

    if not detects(MAX_REPETITIONS):
        raise ValueError(f"a {effect:.0%} difference at cv {cv:.3f} needs more than {MAX_REPETITIONS} "
                         "repetitions a side")
    low, high = 1, MAX_REPETITIONS  # detects(high) holds, low is below any n that can
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if detects(middle) else (middle, high)
    return high
