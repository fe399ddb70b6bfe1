"""The report's first screen: per device, a frameworks x workloads matrix of the steady epoch time relative to
the fastest (lowest geometric mean), each cell with its ratio's interval and runs and marked by whether the
findings' test shows its gap, the final metric's distance to the best beside it, one line per framework that
counts those verdicts, and per workload where no gap is shown how many runs would show a 10 % one.

Nothing here tests anything: every mark comes from the findings' Standing of each group (analysis.findings),
the same values and verdicts the findings' sentences state, so the matrix and the prose never disagree.
"""
from collections.abc import Sequence
from dataclasses import dataclass

from dlbench.harness.analysis.findings import RANKED, Finding, Needed, Standing, to_best
from dlbench.harness.analysis.stats import FASTER, SLOWER
from dlbench.harness.environments.envs import REFERENCE
from dlbench.harness.plan.workloads import metric_label

WITHIN = 1.10  # "within 10 %": a ratio to the fastest up to this
# metrics between 0 and 1, whose gaps read in points (hundredths), by their names as the findings write them
FRACTIONS = (metric_label("accuracy"), metric_label("map"))
# why no framework of a group is ranked (Standing.kind), in the overview's few words
UNRANKED_WORDS = {"no values": "no values", "only one": "one framework", "equal": "all equal",
                  "at chance": "at chance level", "single runs": "single runs", "too few": "too few repetitions"}


@dataclass(frozen=True)
class Mark:
    """One framework's place in one group by one quantity."""
    value: float | None  # speed: steady epoch time over the lowest median; metric: the median
    gap: float | None  # metric only: value - best (None for speed)
    shown: bool  # the best: shown ahead of all others; any other: shown behind the best
    best: bool  # holds the group's best median
    low: float | None = None  # speed only: the interval of the ratio, from its test against the fastest
    high: float | None = None
    n: int = 0  # the framework's runs with a value


# a matrix column: workload, dataset as shown ("NAME (first N of M)" for a suite entry's train_samples), device
Column = tuple[str, str | None, str | None]


@dataclass(frozen=True)
class Matrix:
    device: str
    groups: list[Column]  # columns
    # rows: most often shown fastest first, then shown slower than the fewest others, then by name (row_key)
    frameworks: list[str]
    speed: dict[tuple[str, Column], Mark]
    metric: dict[tuple[str, Column], Mark]
    metric_names: dict[Column, str]
    unranked: dict[Column, tuple[str | None, str | None]]  # per group: why speed, metric are not ranked (None: ranked)
    lines: dict[str, str]  # framework -> its one-line summary
    needed: dict[Column, Needed | None]  # per group where no speed gap is shown: the runs a 10 % gap needs


def matrices(found: Sequence[Finding]) -> list[Matrix]:
    """One matrix per device of the findings that carry their standings."""
    devices = sorted({f.device or "?" for f in found if f.speed_standing and f.metric_standing})
    return [_matrix(device, [f for f in found if (f.device or "?") == device and f.speed_standing
                             and f.metric_standing]) for device in devices]


def _matrix(device: str, found: Sequence[Finding]) -> Matrix:
    groups = [(f.workload, f.dataset_label or f.dataset, f.device) for f in found]
    speed = {(name, key): mark for f, key in zip(found, groups, strict=True)
             for name, mark in speed_marks(f.speed_standing).items()}
    metric = {(name, key): mark for f, key in zip(found, groups, strict=True)
              for name, mark in metric_marks(f.metric_standing).items()}
    names = {name for name, _ in speed} | {name for name, _ in metric}
    frameworks = sorted(names, key=lambda name: row_key([m for (n, _), m in speed.items() if n == name],
                                                        shown_slower_pairs(name, found), name))
    unranked = {key: (_unranked(f.speed_standing), _unranked(f.metric_standing))
                for f, key in zip(found, groups, strict=True)}
    metric_names = {key: f.metric_standing.quantity.what.removeprefix("final ") for f, key in
                    zip(found, groups, strict=True)}
    lines = {name: summary_line(name, found) for name in frameworks}
    needed = {key: f.needed for f, key in zip(found, groups, strict=True)}
    return Matrix(device, groups, frameworks, speed, metric, metric_names, unranked, lines, needed)


def row_key(marks: Sequence[Mark], slower_pairs: int, name: str) -> tuple[int, int, str]:
    """A row's place: the workloads where the framework is shown fastest (most first), then the frameworks it
    is shown slower than, counted over the workloads (fewest first: the tests cover every pair, so a framework
    shown slower than the fastest alone stands above one shown slower than three), then its name. Only shown
    verdicts order rows: two frameworks that no test tells apart stand in name order, however their unshown
    ratios differ."""
    return -sum(m.best and m.shown for m in marks), slower_pairs, name


def shown_slower_pairs(name: str, found: Sequence[Finding]) -> int:
    """(workload, framework) pairs whose speed test shows `name` slower than that framework."""
    return sum(_slower_than(f.speed_standing.tests, name, other) for f in found for other in f.speed_standing.order
               if other != name)


def _unranked(ranked: Standing) -> str | None:
    return None if ranked.kind == RANKED else UNRANKED_WORDS.get(ranked.kind, ranked.kind)


def _shown(ranked: Standing, name: str) -> bool:
    return ranked.best_shown if name == ranked.best else ranked.shown_behind(name)


def _holds_best(ranked: Standing, name: str) -> bool:
    """Whether the framework's median is the group's best one (several where they tie)."""
    return ranked.medians[name] == ranked.medians[ranked.best]


def speed_marks(ranked: Standing) -> dict[str, Mark]:
    """Each framework's steady epoch time over the fastest's (geometric means: the test's ratio), its interval
    from their test, its runs, and whether its gap is shown."""
    best = ranked.medians[ranked.best] if ranked.order else None
    return {name: Mark(ranked.medians[name] / best if best else None, None, _shown(ranked, name),
                       _holds_best(ranked, name), *to_best(ranked, name), ranked.counts.get(name, 0))
            for name in ranked.order}


def metric_marks(ranked: Standing) -> dict[str, Mark]:
    """Each framework's final metric, its distance to the best median, and whether that is shown."""
    return {name: Mark(ranked.medians[name], ranked.medians[name] - ranked.medians[ranked.best],
                       _shown(ranked, name), _holds_best(ranked, name)) for name in ranked.order}


METRIC_NAMES = {"accuracy": "acc."}  # a narrow column's words for a metric


def metric_value_text(metric: str, value: float) -> str:
    """The best median of a metric: in percent for an accuracy or mAP (the gaps' points), plain otherwise."""
    return f"{value * 100:.1f}" if metric in FRACTIONS else f"{value:.4g}"


def metric_gap_text(metric: str, gap: float) -> str:
    """A metric's distance to the best: in points (hundredths) for an accuracy or mAP, the plain difference
    otherwise; the column's heading gives the unit."""
    if metric in FRACTIONS:
        return f"{gap * 100:+.1f}"
    return f"{gap:+.3g}"


def _slower_than(tests: Sequence, name: str, other: str) -> bool:
    """Whether the group's test of name against other shows name slower (the findings' own verdict)."""
    for test in tests:
        if {test.a, test.b} == {name, other} and test.shown:
            return test.verdict == (SLOWER if test.a == name else FASTER)
    return False


def summary_line(name: str, found: Sequence[Finding]) -> str:
    """What the verdicts of one device's groups say of one framework, counted: where it is shown fastest,
    is the fastest without being shown ahead, is within 10 % of the fastest, is shown slower, against the
    reference, and where it is shown the most or less accurate."""
    mine = [f for f in found if name in f.speed_standing.medians]
    if not mine:
        return "no steady epoch time on any workload"
    marks = [speed_marks(f.speed_standing)[name] for f in mine]
    counts = [(sum(m.best and m.shown for m in marks), "shown fastest on {}"),
              (sum(m.best and not m.shown for m in marks), "fastest, not shown ahead, on {}"),
              (sum(not m.best and m.value is not None and m.value <= WITHIN for m in marks),
               f"within {WITHIN - 1:.0%} of the fastest on " + "{}"),
              (sum(not m.best and m.shown for m in marks), "shown slower than the fastest on {}")]
    parts = [text.format(count) for count, text in counts if count]
    parts.append(_against_reference(name, mine))
    accurate = [metric_marks(f.metric_standing)[name] for f in found if name in f.metric_standing.medians]
    most = sum(m.best and m.shown for m in accurate)
    less = sum(not m.best and m.shown for m in accurate)
    if most:
        parts.append(f"shown the most accurate on {most}")
    if less:
        parts.append(f"shown less accurate than the best on {less}")
    return f"of {len(mine)} workloads: " + "; ".join(parts)


def _against_reference(name: str, mine: Sequence[Finding]) -> str:
    """How the framework stands against the reference where a test could rank them, or why none could."""
    tested = [f for f in mine if REFERENCE in f.speed_standing.medians and f.speed_standing.kind == RANKED]
    reference = "the reference; " if name == REFERENCE else ""
    if not tested:
        kinds = sorted({_unranked(f.speed_standing) or "" for f in mine} - {""})
        return reference + (f"no speed difference can be shown ({', '.join(kinds)})" if kinds
                            else "no reference to compare")
    if name == REFERENCE:
        return "the reference"
    slower = sum(_slower_than(f.speed_standing.tests, name, REFERENCE) for f in tested)
    if not slower:
        return f"never shown slower than the reference ({REFERENCE}) on the {len(tested)} tested"
    return f"shown slower than the reference ({REFERENCE}) on {slower} of the {len(tested)} tested"


def repeat_line(found: Sequence[Finding], suite: str, planned: Sequence[str] = ()) -> str | None:
    """The one line `dlbench run` ends with where workloads show no speed gap: how many repetitions would show
    a 10 % gap on each (the most any of them needs, Finding.needed, as the report's overview says per
    workload), what the runs they lack cost, and the commands that forecast and run them. planned: the run's
    workloads; where only some of them lack a gap, the commands name those with -w. None where every
    workload shows a gap."""
    from dlbench.harness.present.estimate import duration

    lacking = [f.needed for f in found if f.needed is not None]
    if not lacking:
        return None
    names = list(dict.fromkeys(n.workload for n in lacking))
    where = (f"no speed gap shown on {len(names)} workload{'s' if len(names) != 1 else ''} "
             f"({', '.join(names)})")
    known = [n for n in lacking if n.runs is not None]
    if known:
        repeat = max(n.runs for n in known)
        if all(n.have >= repeat for n in lacking):  # more runs would not help: the gaps are below 10 %
            return (f"{where}: their {min(n.have for n in lacking)} runs a side would show a 10 % gap 4 times in 5, "
                    "so their gaps are smaller than that.")
        costs = [n.more_s for n in known if n.more_s]
        how = (f"{repeat} runs a side would show a 10 % gap 4 times in 5 on each at its measured spread"
               + (f" (the runs they lack: about {duration(sum(costs))})" if costs else ""))
    elif any(n.sigma is None for n in lacking):
        repeat, how = 3, "one run per framework measures no spread: 3 repetitions measure it"
    else:
        return f"{where}: even 1,000 runs a side would not show a 10 % gap at their spread."
    only = "".join(f" -w {name}" for name in names) if set(planned) - set(names) else ""
    return (f"{where}: {how}; `dlbench estimate {suite}{only} --repeat {repeat}` forecasts them, "
            f"`dlbench run {suite}{only} --repeat {repeat}` runs them.")
