"""Histories over a framework's releases: for each framework that ran one workload (dataset, device, batch size,
threads, execution and precision alike) in at least MIN_RELEASES of its versions, its steady epoch time, peak memory
and final metric release by release, and the steps between consecutive releases.

A step is a change from one release to the next that the report's test shows: the ratio of geometric means of the
later release's runs over the earlier's, with Welch's t interval on their logs (stats.log_t_test, as the findings
and the modes compare), Holm-corrected over every comparison of consecutive releases in the report (every history,
both figures), shown when the corrected p is below ALPHA and the interval excludes 1. Comparing each release with
the one before it, rather than fitting segments, names the release a change arrived in; Holm's correction keeps
the chance of any false step at ALPHA however many releases and figures are compared."""
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from packaging.version import InvalidVersion, Version

from dlbench.harness.analysis.stats import Estimate, holm, log_t_test
from dlbench.harness.analysis.summary import CellSummary

ALPHA = 0.05
MIN_RELEASES = 3  # two releases are a comparison (`dlbench compare --versions A B`), not a history
FIGURES = ("steady_epoch_s", "peak_rss_mb")  # tested for steps; the final metric is shown beside them
FIGURE_NAMES = {"steady_epoch_s": "steady epoch", "peak_rss_mb": "peak memory"}


@dataclass(frozen=True)
class Step:
    """One figure from one release to the next."""
    figure: str
    before: CellSummary
    after: CellSummary
    ratio: Estimate  # after's over before's (above 1: the later release takes longer or holds more memory)
    p_value: float | None
    p_adjusted: float | None  # Holm over every step of the report

    @property
    def shown(self) -> bool:
        return self.p_adjusted is not None and self.p_adjusted < ALPHA and self.ratio.excludes(1.0)

    @property
    def builds(self) -> str | None:
        """"cu130 build to cpu" where the two releases' builds differ (their local version labels: torch's CUDA
        wheels from the registry against a CPU wheel), which a step may owe to the build rather than the release."""
        before, after = (release(cell) for cell in (self.before, self.after))
        if before is None or after is None or before.local == after.local:
            return None
        return f"{before.local or 'plain'} build to {after.local or 'plain'}"

    def sentence(self) -> str:
        """"steady epoch 1.25x [1.10-1.40] from 2.9.1 to 2.10.0 (p 0.003)": what the step is and where."""
        ratio = self.ratio
        interval = f" [{ratio.low:.2f}-{ratio.high:.2f}]" if ratio.low is not None and ratio.high is not None else ""
        p = "" if self.p_adjusted is None else f" (p {self.p_adjusted:.2g})"
        builds = f", the {self.builds}" if self.builds else ""
        return (f"{FIGURE_NAMES[self.figure]} {ratio.median:.2f}x{interval} from {self.before.framework_version} "
                f"to {self.after.framework_version}{p}{builds}")


@dataclass(frozen=True)
class History:
    framework: str  # the name without a version
    cells: tuple[CellSummary, ...]  # one per release, oldest first
    steps: tuple[Step, ...]  # between consecutive releases, FIGURES' order within each

    @property
    def first(self) -> CellSummary:
        return self.cells[0]

    def shown_steps(self) -> list[Step]:
        return [step for step in self.steps if step.shown]


def release(cell: CellSummary) -> Version | None:
    try:
        return Version(cell.framework_version or "")
    except InvalidVersion:
        return None


def histories(cells: Sequence[CellSummary]) -> list[History]:
    """Every framework x workload x mode that ran in MIN_RELEASES releases or more, its steps tested."""
    series: dict[tuple, list[CellSummary]] = {}
    for cell in cells:
        if release(cell) is not None and cell.n_ok:
            key = (cell.framework.partition("@")[0], cell.group, cell.execution, cell.precision)
            series.setdefault(key, []).append(cell)
    found = []
    for (framework, *_), members in series.items():
        members = sorted(members, key=release)
        if len({release(cell) for cell in members}) < MIN_RELEASES or len(members) != len(set(map(release, members))):
            continue
        tested = [(figure, before, after, *log_t_test(after.samples.get(figure, ()), before.samples.get(figure, ())))
                  for before, after in pairwise(members) for figure in FIGURES]
        found.append((framework, members, tested))
    p_values = [p for _, _, tested in found for *_, p in tested if p is not None]
    adjusted = iter(holm(p_values))
    return [History(framework, tuple(members), tuple(
        Step(figure, before, after, ratio, p, None if p is None else next(adjusted))
        for figure, before, after, ratio, p in tested if ratio.median is not None))
        for framework, members, tested in found]
