"""Findings in words: per workload x dataset x device, the fastest and the most accurate framework, how
large the gap is and whether it is shown, and the caveats that apply. Pure functions over cell summaries
(analysis.summary); nothing here reads a store or a clock.

A framework is ranked above another only when the pairwise test shows the difference (analysis.stats),
beyond the noise band for times and beyond the test set's sampling error for an accuracy; otherwise the
sentence says "no difference shown" and names them together. Steady epoch times are compared by Welch's t on
their logs (stats.log_t_test) and their frameworks ordered by geometric mean; final metrics by Mann-Whitney
and median. Holm's correction covers every pair of one workload group's frameworks, speed and metric apart:
benchmarks/stats_simulation.py measured that comparing each framework with the fastest alone, under Holm over
those k - 1, claims a gap among 7 equal frameworks in 9 % of experiments (docs/measurement.md). Equal
centres name no leader, and a metric at chance level in every framework, or the same in all, is not ordered at all.
"""
import math
import statistics
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from dlbench.harness.analysis.measures import metric_format
from dlbench.harness.analysis.stats import (
    LOG_T,
    NO_DIFFERENCE,
    NOISE,
    TOO_FEW,
    WITHIN_NOISE,
    Family,
    PairTest,
    all_pairs,
    family_tests,
    level_text,
    log_t_repetitions,
)
from dlbench.harness.analysis.summary import CellSummary, summarise
from dlbench.harness.measure.cores import IDLE_MACHINE, SHARED_MACHINE
from dlbench.harness.plan import modes
from dlbench.harness.plan.workloads import WORKLOADS, metric_label

COMPILATION_FACTOR = 3.0  # a first epoch this many times the steady one is mostly compilation or warm-up
UNCERTIFIED = ("failed", "none")
Z = 1.96  # two accuracies closer than Z standard errors of their difference are within sampling error
WITHIN_ERROR = "within the test set's sampling error"

# workload, dataset, train_samples, device, batch_size, threads (CellSummary.group)
Key = tuple[str, str | None, int | None, str | None, int | None, int | None]


@dataclass(frozen=True)
class FirstEpoch:
    """A framework whose first epoch a reader must read apart: over COMPILATION_FACTOR times its steady epoch,
    or from a warm compile cache. Said as a table of framework x workload (tables.first_epoch_table), once,
    not as one sentence per framework and workload."""
    label: str  # the framework, with its version where its group holds several (label())
    seconds: float | None  # the median first epoch
    ratio: float | None  # over the median steady epoch; None where that is unknown
    warm: bool  # every run of the cell started from a warm compile cache


@dataclass(frozen=True)
class Finding:
    workload: str
    dataset: str | None
    device: str | None
    speed: str
    metric: str  # the final metric's sentence: accuracy, perplexity or mAP
    caveats: tuple[str, ...]
    # what the sentences say, as values: the report's overview draws them (None: built by hand, no tests)
    speed_standing: "Standing | None" = field(default=None, compare=False)
    metric_standing: "Standing | None" = field(default=None, compare=False)
    dataset_label: str | None = field(default=None, compare=False)  # "NAME (first N of M)": dataset_label.run_label
    train_samples: int | None = None  # a suite entry's first N training samples; None: the whole split
    batch_size: int | None = None  # its cells' batch size (CellSummary.batch_size)
    threads: int | None = None  # its cells' threads (CellSummary.threads)
    # where its speed test shows no gap: how many runs would show a 10 % one (None: a gap is shown)
    needed: "Needed | None" = field(default=None, compare=False)
    first_epochs: tuple[FirstEpoch, ...] = ()  # its slow or warm first epochs (first_epochs), in its cells' order

    @property
    def title(self) -> str:
        return title(self.workload, self.dataset_label or self.dataset, self.device)


@dataclass(frozen=True)
class HeldOutSet:
    """A dataset's test set as the report's accuracy needs it: its size and its classes (None where the
    task has no classes)."""
    n: int
    classes: int | None


@dataclass(frozen=True)
class Quantity:
    """What is ranked, and how its values and gaps read in a sentence."""
    figure: str  # a CellSummary figure: steady_epoch_s, metric_value
    what: str  # "steady epoch time"
    best: str  # "fastest"
    lower_is_better: bool
    fmt: Callable[[float], str]
    gap: Callable[[str, float, float], str]  # (other, best value, other value) -> words
    # the smallest gap between two medians that sampling the test set does not explain; None: not known
    margin: Callable[[float, float], float] | None = None
    chance: float | None = None  # the value of a guess (an accuracy's 1 / classes); None: no such level
    chance_ceiling: float | None = None  # values up to this are chance within the test set's sampling error
    # a framework's value over its runs, by which the group is ordered: its test's own centre (the median for
    # Mann-Whitney, the geometric mean for Welch's t on logs)
    centre: Callable[[Sequence[float]], float] = statistics.median


def title(workload: str, dataset: str | None, device: str | None) -> str:
    return f"{workload} on {dataset or '?'} ({device or '?'})"


def group(cells: Sequence[CellSummary]) -> dict[Key, list[CellSummary]]:
    """Cells by workload x dataset x device, in the order they come."""
    groups: dict[Key, list[CellSummary]] = {}
    for cell in cells:
        groups.setdefault(cell.group, []).append(cell)
    return groups


def label(cell: CellSummary, cells: Sequence[CellSummary]) -> str:
    """The framework's name; with its version where the group holds several versions of it; with its execution and
    precision where not the framework's defaults."""
    versions = {c.framework_version for c in cells if c.framework == cell.framework}
    name = cell.framework if len(versions) == 1 else f"{cell.framework} {cell.framework_version}"
    return name + modes.suffix(cell.framework, cell.execution, cell.precision)


def samples(cells: Sequence[CellSummary], figure: str) -> dict[str, list[float]]:
    """Label -> the figure's values, one per successful run."""
    return {label(cell, cells): list(cell.samples.get(figure, ())) for cell in cells}


def seconds(value: float) -> str:
    return f"{value:#.3g} s" if value < 100 else f"{value:,.0f} s"


def higher_is_better(workload: str) -> bool:
    known = WORKLOADS.get(workload)
    return known.target["higher_is_better"] if known else True


def speed_quantity() -> Quantity:
    def gap(other: str, best: float, value: float) -> str:
        return f"{other}, at {seconds(value)}, takes {value / best:.2f}x as long"
    return Quantity("steady_epoch_s", "steady epoch time", "fastest", True, seconds, gap,
                    centre=statistics.geometric_mean)


def binomial_se(accuracy: float, n: int) -> float:
    """The standard error of an accuracy measured on n test samples: sqrt(p (1 - p) / n)."""
    return math.sqrt(accuracy * (1 - accuracy) / n)


def metric_quantity(metric: str | None, higher: bool, held_out: HeldOutSet | None = None) -> Quantity:
    """The final metric. For an accuracy on a test set of known size, gaps within Z standard errors of
    the difference (binomial_se of each) are sampling error, and 1 / classes is chance level."""
    fmt = metric_format(metric)
    margin = chance = ceiling = None
    if metric == "accuracy" and held_out is not None:
        n = held_out.n

        def margin(a: float, b: float) -> float:
            return Z * math.hypot(binomial_se(a, n), binomial_se(b, n))
        if held_out.classes:
            chance = 1 / held_out.classes
            ceiling = chance + Z * binomial_se(chance, n)

    def gap(other: str, best: float, value: float) -> str:
        diff = abs(best - value)
        if diff == 0:
            return f"{other}, at {fmt(value)}, is level"
        size = f"{diff * 100:.1f} points" if metric == "accuracy" else f"{diff:.4g}"
        return f"{other}, at {fmt(value)}, is {size} {'lower' if higher else 'higher'}"
    return Quantity("metric_value", f"final {metric_label(metric)}", "most accurate", not higher, fmt, gap, margin,
                    chance, ceiling)


def _test_between(tests: Sequence[PairTest], a: str, b: str) -> PairTest | None:
    return next((t for t in tests if {t.a, t.b} == {a, b}), None)


def _ci(test: PairTest, best: str) -> str:
    """The ratio other/best's CI, whichever way round the test holds the pair."""
    r = test.ratio
    if r.low is None or r.high is None or r.level is None or not r.low > 0:
        return ""
    level = level_text(r.level)
    if test.a == best:  # the test's ratio is best/other: invert its interval
        return f"{level} CI of the ratio {1 / r.high:.3g}-{1 / r.low:.3g}; "
    return f"{level} CI of the ratio {r.low:.3g}-{r.high:.3g}; "


# How a group's frameworks stand by one quantity (Standing.kind): why nobody is ranked, or RANKED
NO_VALUES, ONLY_ONE, EQUAL, AT_CHANCE, SINGLE_RUNS, TOO_FEW_ALL, RANKED = (
    "no values", "only one", "equal", "at chance", "single runs", "too few", "ranked")


@dataclass(frozen=True)
class Standing:
    """One group's frameworks by one quantity, as the findings' sentence states it and the report's overview
    shows it: the centres (Quantity.centre: medians, or geometric means of times), best first; whether the
    tests could order anything (kind); and, where they could,
    who is shown behind the best (a shown test, beyond the test set's sampling error) and who is level with
    it, with each level one's reason."""
    quantity: Quantity
    medians: dict[str, float]  # label -> its centre (Quantity.centre), a median or a geometric mean
    order: tuple[str, ...]  # best first
    kind: str  # RANKED, or why nobody is ranked (NO_VALUES, ONLY_ONE, EQUAL, AT_CHANCE, SINGLE_RUNS, TOO_FEW_ALL)
    behind: tuple[str, ...] = ()  # shown behind the best, in order
    level: tuple[str, ...] = ()  # not shown behind the best, in order
    reasons: tuple[str, ...] = ()  # why the level ones are not shown behind, sorted, without NO_DIFFERENCE
    tests: tuple[PairTest, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)  # label -> its runs with a value

    @property
    def best(self) -> str | None:
        return self.order[0] if self.order else None

    @property
    def best_shown(self) -> bool:
        """The best is shown ahead of every other framework of the group."""
        return self.kind == RANKED and not self.level

    def shown_behind(self, name: str) -> bool:
        return name in self.behind


def to_best(ranked: Standing, name: str) -> tuple[float | None, float | None]:
    """The interval of name's ratio to the best from their test (other / best, whichever way round the test
    holds them); (None, None) for the best itself, or where no interval was computed (a side with one run)."""
    test = _test_between(ranked.tests, ranked.best, name) if name != ranked.best else None
    if test is None or test.ratio.low is None or test.ratio.high is None or not test.ratio.low > 0:
        return None, None
    if test.a == ranked.best:  # the test's ratio is best / other
        return 1 / test.ratio.high, 1 / test.ratio.low
    return test.ratio.low, test.ratio.high


def standing(values: Mapping[str, Sequence[float]], quantity: Quantity, tests: Sequence[PairTest]) -> Standing:
    """The frameworks of one group by this quantity. values: label -> one value per successful run;
    tests: stats.pairwise over the same values."""
    present = {name: list(v) for name, v in values.items() if v}
    medians = {name: quantity.centre(v) for name, v in present.items()}
    order = tuple(sorted(present, key=medians.__getitem__, reverse=not quantity.lower_is_better))
    unranked = Standing(quantity, medians, order, NO_VALUES, tests=tuple(tests),
                        counts={name: len(v) for name, v in present.items()})
    if not present:
        return unranked
    if len(order) == 1:
        return replace(unranked, kind=ONLY_ONE)
    if len(set(medians.values())) == 1:
        return replace(unranked, kind=EQUAL)
    if quantity.chance_ceiling is not None and all(medians[o] <= quantity.chance_ceiling for o in order):
        return replace(unranked, kind=AT_CHANCE)
    if all(len(v) == 1 for v in present.values()):
        return replace(unranked, kind=SINGLE_RUNS)
    best = order[0]
    pair = {o: _test_between(tests, best, o) for o in order[1:]}
    behind = tuple(o for o in order[1:] if pair[o] is not None and pair[o].shown
                   and not _within_error(medians[best], medians[o], quantity))
    level = tuple(o for o in order[1:] if o not in behind)
    verdicts = {_reason(pair[o], medians[best], medians[o], quantity) for o in level}
    if level and verdicts == {TOO_FEW} and not behind:
        return replace(unranked, kind=TOO_FEW_ALL)
    return replace(unranked, kind=RANKED, behind=behind, level=level,
                   reasons=tuple(sorted(verdicts - {NO_DIFFERENCE})))


def ranking(values: Mapping[str, Sequence[float]], quantity: Quantity, tests: Sequence[PairTest]) -> str:
    """One or two sentences naming the best framework by this quantity, or saying no difference is shown.
    values: label -> one value per successful run; tests: stats.pairwise over the same values."""
    return sentence(standing(values, quantity, tests))


def sentence(ranked: Standing) -> str:
    """The standing in words."""
    quantity, medians, order = ranked.quantity, ranked.medians, ranked.order
    best = ranked.best
    listed = ", ".join(f"{o} {quantity.fmt(medians[o])}" for o in order)
    if ranked.kind == NO_VALUES:
        return f"No {quantity.what}: no successful run recorded one."
    if ranked.kind == ONLY_ONE:
        return f"Only {best} completed: {quantity.what} {quantity.fmt(medians[best])}; nothing to compare."
    if ranked.kind == EQUAL:
        return f"The same {quantity.what} in every framework, {quantity.fmt(medians[best])}: no framework is ranked."
    if ranked.kind == AT_CHANCE:
        return (f"Every framework's {quantity.what} is at chance level ({quantity.fmt(quantity.chance)}, one "
                f"guess in {round(1 / quantity.chance)}) within the test set's sampling error, so no framework is "
                f"ranked; the medians: {listed}.")
    if ranked.kind == SINGLE_RUNS:
        return (f"Single runs, {quantity.what}: {listed}. One run each: no interval or test, so no framework is "
                f"ranked.")
    if ranked.kind == TOO_FEW_ALL:
        return (f"Too few repetitions to show any difference in {quantity.what}, so no framework is ranked; "
                f"the medians: {listed}.")
    if not ranked.level:
        runner = order[1]
        test = _test_between(ranked.tests, best, runner)
        return (f"{best} is the {quantity.best}: {quantity.what} {quantity.fmt(medians[best])}. "
                f"The next, {quantity.gap(runner, medians[best], medians[runner])} "
                f"({_ci(test, best)}shown, Holm-adjusted p = {test.p_adjusted:.2g}).")
    tied = ", ".join(f"{o} ({quantity.fmt(medians[o])})" for o in ranked.level)
    why = f" ({'; '.join(ranked.reasons)})" if ranked.reasons else ""
    text = (f"No difference shown in {quantity.what} between {best} ({quantity.fmt(medians[best])}) and "
            f"{tied}{why}: none of them is ranked above the others.")
    if ranked.behind:
        text += f" Shown behind all of these: {', '.join(f'{o} ({quantity.fmt(medians[o])})' for o in ranked.behind)}."
    return text


def _within_error(best: float, other: float, quantity: Quantity) -> bool:
    return quantity.margin is not None and abs(best - other) <= quantity.margin(best, other)


def _reason(test: PairTest | None, best: float, other: float, quantity: Quantity) -> str:
    """Why `other` is not shown behind the best: its test's verdict, or the sampling error that explains
    a difference the test shows."""
    if test is None:
        return "not tested"
    if test.shown:  # shown by the test, but within the test set's sampling error
        return WITHIN_ERROR
    if test.verdict == WITHIN_NOISE:
        return f"a gap within the {NOISE:.0%} noise threshold"
    return test.verdict


def caveats(cells: Sequence[CellSummary]) -> list[str]:
    """What limits one group's findings: single runs, stand-in data, uncertified pairs, failed or stopped
    runs, warm runs left out, cores. (Its slow and warm first epochs are no sentence: Finding.first_epochs,
    one table for the whole report. Too few repetitions is no caveat of speed: Welch's t can
    show a gap from 2 runs a side; where it shows none, Finding.needed says how many runs would.)"""
    notes = []
    single = [label(c, cells) for c in cells if c.n_ok == 1]
    if single:
        notes.append(f"Single runs for {', '.join(single)}: their figures are one measurement each, "
                     f"with no confidence interval or test.")
    notes += _steady_notes(cells)
    notes += _stand_in_notes(cells[0])
    notes += _certificate_notes(cells)
    notes += _failure_notes(cells)
    notes += [note for cell in cells for note in _left_out_notes(cell, cells)]
    notes += _cores_notes(cells)
    return notes


def _cores_notes(cells: Sequence[CellSummary]) -> list[str]:
    """Runs whose steady training kept far fewer or more cores busy than the threads they were given."""
    flagged = [(f"{label(c, cells)} rep {run.repetition} {run.cores_flag}", IDLE_MACHINE in run.cores_flag)
               for c in cells for run in c.runs if run.cores_flag]
    own = [text for text, by_itself in flagged if by_itself]
    other = [text for text, by_itself in flagged if not by_itself]
    notes = [f"The framework's own threading, not the machine: {'; '.join(own)} in the steady epochs' training; "
             f"these times are the framework's at the cores it keeps busy by itself."] if own else []
    return notes + ([f"Threads not used as asked: {'; '.join(other)} in the steady epochs' training; their times "
                     f"do not measure the threads the suite set."] if other else [])


def _steady_notes(cells: Sequence[CellSummary]) -> list[str]:
    """A run's steady epoch time is the median of its epochs after the first: with 2 epochs, one epoch."""
    two = [label(c, cells) for c in cells if c.epochs_planned == 2]
    if not two:
        return []
    return [f"{', '.join(two)} ran 2 epochs: {'its' if len(two) == 1 else 'their'} steady epoch time is the "
            f"second epoch alone, not a median over several."]


def stand_in(cell: CellSummary) -> bool:
    """Whether the cell's dataset stands in for the study's (the workload's target was set for the study's)."""
    workload = WORKLOADS.get(cell.workload)
    return workload is not None and bool(cell.dataset) and cell.dataset != workload.study_dataset


def _stand_in_notes(cell: CellSummary) -> list[str]:
    if not stand_in(cell):
        return []
    workload = WORKLOADS[cell.workload]
    return [f"{cell.dataset} is not {workload.study_dataset}, the study's dataset for {workload.name}: its "
            f"{workload.target['metric']} is not comparable with the study's."]


# Why a framework holds no passing certificate: the words for each status of its runs
FAILED_CERTIFICATE = "its certificate failed"
NO_CERTIFICATE = ("no certificate of its environment, code and workload in this machine's store: "
                  "run dlbench certify")


def _uncertified(cells: Sequence[CellSummary]) -> dict[str, list[str]]:
    """Why -> the frameworks it applies to: a failed certificate, or none stored."""
    failed = [label(c, cells) for c in cells if "failed" in c.certificates]
    missing = [label(c, cells) for c in cells
               if any(status in UNCERTIFIED for status in c.certificates) and "failed" not in c.certificates]
    return {FAILED_CERTIFICATE: failed, NO_CERTIFICATE: missing}


def _uncertified_note(names: Sequence[str], why: str, where: str) -> str:
    return (f"{', '.join(names)} held no passing equivalence certificate {where} ({why}): "
            f"{'it' if len(names) == 1 else 'they'} may not train the same model as the reference, "
            f"so {'its' if len(names) == 1 else 'their'} figures are not a like-for-like comparison.")


def _certificate_notes(cells: Sequence[CellSummary], leave_out: Collection[str] = ()) -> list[str]:
    """One note per reason (a failed certificate, none stored), naming the frameworks it applies to, but
    those in leave_out (said once for the whole report: shared_caveats)."""
    notes = []
    for why, names in _uncertified(cells).items():
        named = [name for name in names if name not in leave_out]
        if named:
            notes.append(_uncertified_note(named, why, f"for {cells[0].workload}"))
    return notes


def _failure_notes(cells: Sequence[CellSummary]) -> list[str]:
    notes = []
    for cell in cells:
        for run in cell.runs:
            if run.status == "ok":
                continue
            done = run.epochs_completed
            stopped = (" before its first epoch" if not done else
                       f" after {done} of {cell.epochs_planned or '?'} epochs")
            what = {"timeout": "timed out", "interrupted": "interrupted"}.get(run.status, "failed")
            runs = f"{len(cell.runs)} run{'s' if len(cell.runs) > 1 else ''}"
            notes.append(f"{label(cell, cells)}, repetition {run.repetition} (of {runs}): "
                         f"{what}{stopped}: {run.reason or 'no reason recorded'}.")
    return notes


def first_epochs(cells: Sequence[CellSummary]) -> tuple[FirstEpoch, ...]:
    """The cells whose first epoch takes over COMPILATION_FACTOR times their steady epoch (compilation or
    warm-up, which their training time includes), and those whose first epoch came from a warm compile cache
    (without the compilation earlier runs did, so not comparable with cold ones)."""
    result = []
    for cell in cells:
        first, steady = cell.first_epoch_s.median, cell.steady_epoch_s.median
        ratio = first / steady if first is not None and steady else None
        if cell.warm or (ratio is not None and ratio > COMPILATION_FACTOR):
            result.append(FirstEpoch(label(cell, cells), first, ratio, cell.warm))
    return tuple(result)


def _left_out_notes(cell: CellSummary, cells: Sequence[CellSummary]) -> list[str]:
    """Runs with a warm compile cache left out of a cell whose cold runs give its first epoch."""
    left = cell.warm_runs_left_out
    if not left:
        return []
    return [f"{label(cell, cells)}: {left} run{'s' if left > 1 else ''} with a warm compile cache "
            f"{'are' if left > 1 else 'is'} left out of its first epoch, training time and time to target, "
            f"which its cold runs give."]


def _families(cells: Sequence[CellSummary]) -> tuple[Family, Family]:
    """The speed and the metric comparisons of one workload x dataset x device group."""
    higher = higher_is_better(cells[0].workload)
    steady = {k: v for k, v in samples(cells, "steady_epoch_s").items() if v}
    final = {k: v for k, v in samples(cells, "metric_value").items() if v}
    return (Family(all_pairs(steady), test=LOG_T),
            # a metric's noise is the test set's sampling error, which ranking judges (Quantity.margin)
            Family(all_pairs(final), lower_is_better=not higher, better="more accurate", worse="less accurate",
                   noise=0.0))


def group_finding(cells: Sequence[CellSummary], speed_tests: Sequence[PairTest], metric_tests: Sequence[PairTest],
                  held_out: HeldOutSet | None = None) -> Finding:
    """The finding of one workload x dataset x device (its cells all share that group), from its tests;
    held_out: the dataset's, where known (an accuracy's sampling error and chance level)."""
    first = cells[0]
    speed = speed_quantity()
    metric = metric_quantity(first.metric_name, higher_is_better(first.workload), held_out)
    steady, final = samples(cells, speed.figure), samples(cells, metric.figure)
    notes = caveats(cells) + (_sampling_notes(final, held_out) if metric.margin else [])
    by_speed, by_metric = standing(steady, speed, speed_tests), standing(final, metric, metric_tests)
    return Finding(first.workload, first.dataset, first.device, sentence(by_speed), sentence(by_metric),
                   tuple(notes), by_speed, by_metric, first.dataset_label, first.train_samples, first.batch_size,
                   first.threads, needed(cells, by_speed), first_epochs(cells))


NEEDED_GAP = 0.10  # the gap whose repetitions a group without a shown speed gap is told


@dataclass(frozen=True)
class Needed:
    """How many runs a group whose speed test shows nothing needs to show a NEEDED_GAP, and their cost."""
    workload: str
    suite: str | None  # the suite its runs came from, for the command that runs more
    have: int  # the fewest successful runs of any of its frameworks
    sigma: float | None  # the median spread (standard deviation) of log steady times over its cells with 2 runs
    # or more; None: single runs only, whose spread is unknown
    comparisons: int  # Holm's family: every pair of its frameworks
    runs: int | None  # a side (stats.log_t_repetitions); None: sigma unknown, or more than stats.MAX_REPETITIONS
    more_s: float | None  # the wall time of the runs it lacks: per cell, the runs short of `runs` times the
    # median wall time of its own runs (as dlbench estimate forecasts a cell from its own runs)


def needed(cells: Sequence[CellSummary], by_speed: Standing) -> Needed | None:
    """A Needed where the group's speed standing shows no gap at all (none behind the best, and the best not
    shown ahead), else None; None too where nothing is compared (no values, or one framework)."""
    if by_speed.kind in (NO_VALUES, ONLY_ONE) or by_speed.behind:
        return None
    timed = [c for c in cells if c.samples.get("steady_epoch_s")]
    spreads = [statistics.stdev(math.log(v) for v in c.samples["steady_epoch_s"]) for c in timed
               if len(c.samples["steady_epoch_s"]) > 1]
    sigma = statistics.median(spreads) if spreads else None
    comparisons = len(timed) * (len(timed) - 1) // 2
    runs = None if sigma is None else log_t_repetitions(sigma, NEEDED_GAP, comparisons)
    walls = [c.wall_time_s.median for c in timed]
    more_s = (None if runs is None or None in walls else
              sum(max(runs - c.n_ok, 0) * wall for c, wall in zip(timed, walls, strict=True)))
    return Needed(cells[0].workload, cells[0].suite, min(c.n_ok for c in timed), sigma, comparisons, runs, more_s)


def _sampling_notes(final: Mapping[str, Sequence[float]], held_out: HeldOutSet | None) -> list[str]:
    """An accuracy's standard error from its test set's size, at the group's median accuracy."""
    values = [v for runs in final.values() for v in runs]
    if held_out is None or not values:
        return []
    accuracy = statistics.median(values)
    return [f"Accuracy is measured on {held_out.n} test samples: at {accuracy * 100:.1f}% its standard error "
            f"is {binomial_se(accuracy, held_out.n) * 100:.1f} points, and a gap within {Z} standard errors of "
            f"the difference ranks nobody."]


def findings(cells: Sequence[CellSummary], seed: int = 0,
             held_out_sets: Mapping[str, HeldOutSet] | None = None) -> list[Finding]:
    """One finding per workload x dataset x device of the summaries. Each group's speed comparisons (every
    pair of its frameworks) are one family for Holm's correction, and its metric comparisons another: the
    claims of one workload's speed verdicts hold at 5 % together (docs/measurement.md says why every pair,
    and why per workload). held_out_sets: dataset name -> its test set, where known."""
    sets = held_out_sets or {}
    result = []
    for group_cells in group(cells).values():
        speed, metric = (family_tests([family], seed=seed)[0] for family in _families(group_cells))
        result.append(group_finding(group_cells, speed, metric, sets.get(group_cells[0].dataset or "")))
    return result


def shared_caveats(cells: Sequence[CellSummary], found: Sequence[Finding]) -> tuple[list[str], list[Finding]]:
    """The caveats that hold for every workload group of findings(cells), to be said once at the top of the
    report, and the findings without them: a framework without a passing certificate, for one reason, in
    every group; stand-in data in every group; then any caveat that every finding repeats word for word.
    With one group, none."""
    groups = list(group(cells).values())
    if len(groups) < 2:
        return [], list(found)
    shared, everywhere = [], set()
    for why in (FAILED_CERTIFICATE, NO_CERTIFICATE):
        names = [name for name in _uncertified(groups[0])[why] if all(name in _uncertified(g)[why] for g in groups)]
        if names:
            shared.append(_uncertified_note(names, why, "for any workload of this report"))
            everywhere.update(names)
    found = [_with_certificate_notes(finding, _certificate_notes(cells_of, everywhere), _certificate_notes(cells_of))
             for finding, cells_of in zip(found, groups, strict=True)]
    stand_ins = [_stand_in_notes(cells_of[0]) for cells_of in groups]
    if all(stand_ins):  # every group on stand-in data: one note names them all, the groups' own notes go
        shared.append(_stand_ins_note([cells_of[0] for cells_of in groups]))
        said = {note for notes in stand_ins for note in notes}
        found = [replace(f, caveats=tuple(c for c in f.caveats if c not in said)) for f in found]
    shared += _shared_machine_note(cells)
    repeated = [note for note in found[0].caveats if all(note in finding.caveats for finding in found)]
    return shared + repeated, [replace(f, caveats=tuple(c for c in f.caveats if c not in repeated)) for f in found]


def _shared_machine_note(cells: Sequence[CellSummary]) -> list[str]:
    """How many runs other processes slowed, said once at the top: a reader comparing times must know that
    before the matrix, not only from each workload's folded findings (_cores_notes names the runs)."""
    runs = [run for cell in cells for run in cell.runs]
    slowed = [run for run in runs if run.cores_flag and SHARED_MACHINE in run.cores_flag]
    if not slowed:
        return []
    return [f"Other processes kept this machine's cores busy during the steady training of {len(slowed)} of "
            f"{len(runs)} runs: their times are slower than the machine's own, and ratios between them say more "
            f"about the other load than about the frameworks (each workload's findings name the runs)."]


def _stand_ins_note(cells: Sequence[CellSummary]) -> str:
    """Every workload on stand-in data, said once: which dataset stands in for which of the study's."""
    pairs = dict.fromkeys(f"{cell.dataset} for {WORKLOADS[cell.workload].study_dataset}" for cell in cells)
    targets = ("its times to target are to each stand-in's own target, or none, not the study's (the "
               "time-to-target table says which and why)" if all(cell.own_target for cell in cells) else
               "its targets, set for the study's data, may not be reached")
    return (f"Every workload runs on stand-in data ({', '.join(pairs)}), not the study's datasets: its metrics "
            f"are not comparable with the study's, and {targets}.")


def _with_certificate_notes(finding: Finding, notes: list[str], replaced: list[str]) -> Finding:
    """The finding with its certificate notes (`replaced`) replaced by `notes`, where they stood."""
    caveats: list[str] = []
    for caveat in finding.caveats:
        if caveat in replaced:
            caveats += notes
            notes = []
        else:
            caveats.append(caveat)
    return replace(finding, caveats=tuple(caveats))


def findings_of_runs(runs: list[dict], seed: int = 0,
                     held_out_sets: Mapping[str, HeldOutSet] | None = None) -> list[Finding]:
    """findings() of the runs as Store.runs() returns them."""
    return findings(summarise(runs, seed), seed, held_out_sets)
