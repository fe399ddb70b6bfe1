"""The report's section "The study side by side": the DLBench study's own results beside dlbench's runs of
the same workload on the study's dataset and device, as tables and lines of text for both renderers.

Times appear only as ratios to the fastest framework of their own side (never the study's seconds
beside dlbench's: other machines, other versions); accuracies as each side measured them.
"""
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from dlbench.harness.analysis import study_rankings
from dlbench.harness.analysis.study_rankings import Comparison, Missing, Ranking, StudyData, StudyRow
from dlbench.harness.plan import suite
from dlbench.harness.present.tables import Table

HEADER = ["framework", "study: accuracy %", "dlbench: accuracy %", "study: time per epoch, x its fastest",
          "dlbench: steady epoch, x its fastest", "time rank: study / dlbench",
          "accuracy rank: study / dlbench", "study's note"]
LEGEND = ("-: not run by that side, or not compared; ranks only among the frameworks both ran; ≥: a lower bound "
          "(the study's run stopped at 24 h after epochs not recorded, so its time per epoch is at least that)")
METHOD = ("Each side ranks the frameworks both ran, 1 for the best: by time (the study's training time over the "
          "epochs it completed; dlbench's median steady epoch, the first epoch and evaluation left out) and by "
          "test accuracy after the last epoch. Their agreement is Kendall's tau-b (scipy.stats.kendalltau, "
          "two-sided p): 1 for the same order, -1 for the reverse. Times are shown only as ratios to the fastest "
          "framework of their own side. A framework whose rank moves by "
          f"{study_rankings.DISPLACED} places or more is named with the documented differences between the "
          "study's implementation and dlbench's that may explain it. "
          "Only runs on the study's own dataset count: a stand-in is not the study's data.")


@dataclass(frozen=True)
class Block:
    """One comparison: its table, then lines on agreement, disagreements and what qualifies it."""
    table: Table
    lines: list[str]


@dataclass(frozen=True)
class StudySection:
    source: str  # where the study's figures come from
    method: str
    blocks: list[Block]
    to_run: list[str]  # what would produce the comparable runs this store lacks
    caveats: list[str]


def section(runs: Sequence[Mapping], data: StudyData | None = None) -> StudySection:
    data = data or study_rankings.load()
    comparisons, missing = study_rankings.compare(runs, data)
    by_key = {(r.workload, r.device, r.framework): r for r in data.rows}
    blocks = [Block(_table(c, by_key), _lines(c)) for c in comparisons]
    source = (f"The study: {data.citation}. Its figures here are derived from {data.derived_from}. "
              f"Its set-up: {data.setup}.")
    return StudySection(source, METHOD, blocks, _to_run(missing, runs, bool(comparisons)), data.caveats)


def _table(comparison: Comparison, rows: Mapping[tuple, StudyRow]) -> Table:
    time, accuracy = comparison.time, comparison.accuracy
    study_rows = {f: rows[(comparison.workload, comparison.study_device, f)] for f in time.study}
    frameworks = sorted(set(time.study) | set(time.dlbench), key=lambda f: (time.study_rank.get(f, 99), f))
    accuracy_study = {f: r.accuracy_percent for f, r in study_rows.items()}
    accuracy_ours = accuracy.dlbench if accuracy else {}
    table_rows = [[f, _number(accuracy_study.get(f)), _number(accuracy_ours.get(f)),
                   _study_ratio(time.study, study_rows.get(f)), _ratio(time.dlbench, f), _ranks(time, f),
                   _ranks(accuracy, f) if accuracy else "-", _row_note(study_rows.get(f))] for f in frameworks]
    title = (f"{comparison.workload} on {comparison.dataset} ({comparison.device}): the study beside dlbench's "
             f"{comparison.runs} runs")
    return Table(title, HEADER, table_rows, note=LEGEND,
                 row_keys=[{"framework": f} for f in frameworks],
                 keys={"workload": comparison.workload, "device": comparison.device})


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ratio(values: Mapping[str, float], framework: str) -> str:
    return "-" if framework not in values else f"{values[framework] / min(values.values()):.2f}x"


def _study_ratio(values: Mapping[str, float], row: StudyRow | None) -> str:
    """The study's ratio; a lower bound where its run stopped after epochs nobody recorded."""
    if row is None:
        return "-"
    return ("≥ " if row.capped and row.epochs_done is None else "") + _ratio(values, row.framework)


def _ranks(ranking: Ranking, framework: str) -> str:
    if framework not in ranking.common:
        return "-"
    return f"{_place(ranking.study_rank[framework])} / {_place(ranking.dlbench_rank[framework])}"


def _place(rank: float) -> str:
    return f"{rank:g}"


def _row_note(row: StudyRow | None) -> str:
    if row is None:
        return ""
    stopped = ""
    if row.capped:
        done = f"{row.epochs_done} of" if row.epochs_done else "an unrecorded number of its"
        stopped = f"stopped at 24 h after {done} {row.epochs} epochs"
    return "; ".join(part for part in (stopped, row.note) if part)


def _lines(comparison: Comparison) -> list[str]:
    lines = [_agreement(comparison.time)]
    lines.append(_agreement(comparison.accuracy) if comparison.accuracy else
                 "Accuracy: not ranked: the study's figure is not the accuracy dlbench measures (see its note).")
    for ranking in filter(None, (comparison.time, comparison.accuracy)):
        lines += [_disagreement(ranking, d) for d in ranking.disagreements]
    return lines + list(comparison.notes)


def _agreement(ranking: Ranking) -> str:
    name = ranking.aspect.capitalize()
    if ranking.tau is None:
        return (f"{name}: no agreement to measure over {len(ranking.common)} frameworks both ran "
                "(fewer than two, or one side ties them all).")
    return (f"{name}: Kendall's tau {ranking.tau:+.2f} (p = {ranking.p:.2g}) over the {len(ranking.common)} "
            "frameworks both ran.")


def _disagreement(ranking: Ranking, moved: study_rankings.Disagreement) -> str:
    where = (f"{moved.framework}'s {ranking.aspect} ranks {_place(moved.study_rank)} of {len(ranking.common)} in "
             f"the study and {_place(moved.dlbench_rank)} here")
    if not moved.reasons:
        return f"{where}; no documented difference explains it."
    numbered = "; ".join(f"({i}) {reason}" for i, reason in enumerate(moved.reasons, 1))
    return f"{where}. Documented differences that may explain it: {numbered}."


def _to_run(missing: list[Missing], runs: Sequence[Mapping], compared: bool) -> list[str]:
    """What would produce the comparable runs the store lacks; the first line says what it holds instead."""
    if not missing:
        return []
    if compared:
        head = "The study's settings without a run on their dataset and device here:"
    else:
        used = sorted({str(r.get("dataset")) for r in runs if r.get("dataset")})
        head = (f"No run here used the study's datasets (these used {', '.join(used) or 'none recorded'}), so "
                "nothing stands beside the study's figures. To produce comparable runs:")
    return [head] + [_command(device, [m for m in missing if m.device == device])
                     for device in sorted({m.device for m in missing})]


def _command(device: str, missing: list[Missing]) -> str:
    by_suite: dict[str, list[Missing]] = {}
    for setting in missing:
        by_suite.setdefault(_suite_for(setting) or "", []).append(setting)
    # the built-in suites first, then the workloads none of them runs on the study's data
    parts = [_suite_command(name, settings) for name, settings in sorted(by_suite.items()) if name]
    parts += [f"{s.workload}: no built-in suite runs it on {s.dataset}; a suite file that pairs it with {s.dataset} "
              f"on the {device} (`dlbench data fetch {s.dataset}` first)" for s in by_suite.get("", [])]
    return f"On the {device}: " + "; ".join(parts) + "."


def _suite_command(name: str, settings: list[Missing]) -> str:
    datasets = " ".join(dict.fromkeys(s.dataset for s in settings))
    only = " ".join(f"-w {s.workload}" for s in settings)
    return (f"{', '.join(s.workload for s in settings)}: `dlbench data fetch {datasets}` then "
            f"`dlbench run {name} {only}`, the study's datasets and epochs (`dlbench estimate {name} {only}` "
            "forecasts its time; with `--epochs N` its times still rank, its accuracies come from earlier in training)")


def _suite_for(setting: Missing) -> str | None:
    """The built-in suite that trains this workload on the study's dataset on this device, if one does (the
    study's figures are training's: an inference suite never compares with them)."""
    for candidate in _builtin_suites():
        if candidate.mode == "train" and candidate.device == setting.device and any(
                e.workload == setting.workload and e.dataset == setting.dataset for e in candidate.entries):
            return candidate.name
    return None


@cache
def _builtin_suites() -> tuple[suite.Suite, ...]:
    """Read once: every missing setting of a report asks them."""
    return tuple(suite.load(name) for name in suite.builtin_suites())
