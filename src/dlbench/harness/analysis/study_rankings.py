"""The DLBench study's own results (study_data/), and their rankings beside dlbench's runs of the same
workload on the study's dataset and device.

Only rankings and ratios within each source are compared: the study's times come from other machines
and 2018 framework versions, so one side's seconds never meet the other's. A run counts only when the
store records the workload's study dataset for it (Workload.study_dataset, as findings' caveat reads
it): a stand-in such as the quick suite's digits-28 is not MNIST, whatever it stands in for.
"""
import csv
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from statistics import median

import yaml
from packaging.version import InvalidVersion, Version
from scipy.stats import kendalltau, rankdata

from dlbench.harness.environments.envs import RECIPES
from dlbench.harness.plan.workloads import WORKLOADS

DATA = "study_data"
RESULTS_FILE = "results.csv"
ABOUT_FILE = "study.yaml"
COLUMNS = ("workload", "dataset", "device", "framework", "accuracy_percent", "time", "time_unit", "epochs",
           "epochs_done", "capped", "accuracy_comparable", "note")
DEVICES = ("cpu", "gpu")
UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0}
FLAGS = {"yes": True, "no": False}
ASPECTS = ("time", "accuracy", "both")
ALL = "all"
# The study ran each configuration once, so two neighbours trading places is within what one run can
# show; a framework is named as disagreeing when its rank moves by this many places or more.
DISPLACED = 2


# (aspect, framework) -> the documented reasons its rank may differ (ReasonFinder, for one workload and device)
Explain = Callable[[str, str], tuple[str, ...]]


class StudyDataError(ValueError):
    """A malformed study data file: the message names the file, the line or entry, and the field."""


@dataclass(frozen=True)
class StudyRow:
    """One framework's result in the study, on one workload and device."""
    workload: str
    dataset: str
    device: str
    framework: str  # dlbench's name for it: the study's Keras (on TensorFlow 1.11) is keras-tensorflow
    accuracy_percent: float
    time_s: float  # its whole training time, as the study gives it, in seconds
    epochs: int  # planned
    epochs_done: int | None  # None: stopped at the 24-hour cap after a number of epochs not recorded
    capped: bool
    accuracy_comparable: bool  # False where the study's accuracy is not what dlbench measures
    note: str

    @property
    def time_per_epoch_s(self) -> float:
        """Training time per epoch completed; where the epochs done are unknown, over every planned epoch:
        a lower bound, which ties the runs so stopped with each other."""
        return self.time_s / (self.epochs_done or self.epochs)


@dataclass(frozen=True)
class Reason:
    """A documented difference between the study's implementation and dlbench's, with where it applies."""
    id: str
    aspect: str  # "time", "accuracy" or "both": which ranking it can move
    frameworks: tuple[str, ...]  # ("all",) for every one
    workloads: tuple[str, ...]
    devices: tuple[str, ...]
    text: str
    source: str

    def applies(self, aspect: str, framework: str, workload: str, device: str) -> bool:
        return (self.aspect in (aspect, "both") and _within(framework, self.frameworks)
                and _within(workload, self.workloads) and _within(device, self.devices))


def _within(value: str, scope: tuple[str, ...]) -> bool:
    return ALL in scope or value in scope


@dataclass(frozen=True)
class StudyData:
    rows: list[StudyRow]
    citation: str
    derived_from: str
    setup: str
    caveats: list[str]
    reasons: list[Reason]


def load() -> StudyData:
    """The study's data as the package ships it."""
    folder = resources.files(__package__) / DATA
    about = read_about((folder / ABOUT_FILE).read_text(encoding="utf-8"), str(folder / ABOUT_FILE))
    rows = read_results((folder / RESULTS_FILE).read_text(encoding="utf-8"), str(folder / RESULTS_FILE))
    return StudyData(rows=rows, **about)


def read_results(text: str, source: str) -> list[StudyRow]:
    """results.csv's rows, checked; a malformed row raises StudyDataError naming source, line and field."""
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise StudyDataError(f"{source}, line 1: the header must be {','.join(COLUMNS)}")
    rows, seen = [], set()
    for fields in reader:
        row = _row(fields, f"{source}, line {reader.line_num}")
        key = (row.workload, row.device, row.framework)
        if key in seen:
            raise StudyDataError(f"{source}, line {reader.line_num}: a second row for {' '.join(key)}")
        seen.add(key)
        rows.append(row)
    return rows


def _row(fields: Mapping[str, str | None], where: str) -> StudyRow:
    if None in fields or any(fields[name] is None for name in COLUMNS):
        raise StudyDataError(f"{where}: {len(COLUMNS)} fields expected ({','.join(COLUMNS)})")
    workload = _choice(fields, "workload", tuple(WORKLOADS), where)
    dataset = _choice(fields, "dataset", (WORKLOADS[workload].study_dataset,), where)
    epochs = _integer(fields, "epochs", where)
    capped = FLAGS[_choice(fields, "capped", tuple(FLAGS), where)]
    done = None if capped and not fields["epochs_done"] else _integer(fields, "epochs_done", where)
    if done is not None and (done > epochs or (not capped and done != epochs)):
        raise StudyDataError(f"{where}: field epochs_done: {done} does not fit epochs {epochs} with capped "
                             f"{fields['capped']} (a run not capped did every epoch)")
    return StudyRow(workload, dataset, _choice(fields, "device", DEVICES, where),
                    _choice(fields, "framework", tuple(RECIPES), where), _percent(fields, "accuracy_percent", where),
                    _number(fields, "time", where) * UNITS[_choice(fields, "time_unit", tuple(UNITS), where)],
                    epochs, done, capped, FLAGS[_choice(fields, "accuracy_comparable", tuple(FLAGS), where)],
                    fields["note"] or "")


def _choice(fields: Mapping[str, str | None], name: str, allowed: Sequence[str], where: str) -> str:
    value = (fields[name] or "").strip()
    if value not in allowed:
        raise StudyDataError(f"{where}: field {name}: {value!r} is not one of: {', '.join(allowed)}")
    return value


def _number(fields: Mapping[str, str | None], name: str, where: str) -> float:
    try:
        value = float(fields[name] or "")
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise StudyDataError(f"{where}: field {name}: {fields[name]!r} is not a positive number")
    return value


def _percent(fields: Mapping[str, str | None], name: str, where: str) -> float:
    value = _number(fields, name, where)
    if value > 100:
        raise StudyDataError(f"{where}: field {name}: {fields[name]!r} is over 100")
    return value


def _integer(fields: Mapping[str, str | None], name: str, where: str) -> int:
    text = (fields[name] or "").strip()
    if not text.isdigit() or int(text) == 0:
        raise StudyDataError(f"{where}: field {name}: {fields[name]!r} is not a positive whole number")
    return int(text)


def read_about(text: str, source: str) -> dict:
    """study.yaml's fields, checked; a malformed entry raises StudyDataError naming source, entry and field."""
    try:
        about = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise StudyDataError(f"{source}: not valid YAML ({error})") from None
    if not isinstance(about, dict):
        raise StudyDataError(f"{source}: a mapping expected")
    for name in ("citation", "derived_from", "setup"):
        if not isinstance(about.get(name), str):
            raise StudyDataError(f"{source}: field {name}: text expected")
    if not isinstance(about.get("caveats"), list) or not all(isinstance(c, str) for c in about["caveats"]):
        raise StudyDataError(f"{source}: field caveats: a list of text expected")
    reasons = [_reason(entry, f"{source}, reason {i + 1}") for i, entry in enumerate(about.get("reasons") or [])]
    return {"citation": about["citation"], "derived_from": about["derived_from"], "setup": about["setup"],
            "caveats": about["caveats"], "reasons": reasons}


def _reason(entry: object, where: str) -> Reason:
    if not isinstance(entry, dict):
        raise StudyDataError(f"{where}: a mapping expected")
    for name in ("id", "text", "source"):
        if not isinstance(entry.get(name), str):
            raise StudyDataError(f"{where}: field {name}: text expected")
    if entry.get("aspect") not in ASPECTS:
        raise StudyDataError(f"{where}: field aspect: {entry.get('aspect')!r} is not one of: {', '.join(ASPECTS)}")
    scopes = {"frameworks": tuple(RECIPES), "workloads": tuple(WORKLOADS), "devices": DEVICES}
    for name, known in scopes.items():
        values = entry.get(name)
        if not isinstance(values, list) or not values or not set(values) <= {ALL, *known}:
            raise StudyDataError(f"{where}: field {name}: a list of {ALL} or of: {', '.join(known)}")
    return Reason(entry["id"], entry["aspect"], *(tuple(entry[name]) for name in scopes),
                  " ".join(entry["text"].split()), entry["source"])


@dataclass(frozen=True)
class Disagreement:
    """A framework whose rank among the frameworks both sources ran moves by DISPLACED places or more."""
    framework: str
    study_rank: float
    dlbench_rank: float
    reasons: tuple[str, ...]  # the documented differences that may explain it (Reason.text); empty: none known


@dataclass(frozen=True)
class Ranking:
    """One quantity ranked by each source, 1 for the best (fastest or most accurate), ties averaged."""
    aspect: str  # "time" or "accuracy"
    study: dict[str, float]  # framework -> the study's value: seconds per epoch, or accuracy in %
    dlbench: dict[str, float]  # framework -> dlbench's median over its runs
    common: tuple[str, ...]  # the frameworks both ran, which alone are ranked
    study_rank: dict[str, float]
    dlbench_rank: dict[str, float]
    tau: float | None  # Kendall's tau-b between the two rankings; None with fewer than 2 frameworks, or all tied
    p: float | None  # its two-sided p (scipy.stats.kendalltau)
    disagreements: tuple[Disagreement, ...]


@dataclass(frozen=True)
class Comparison:
    """The study's results and dlbench's runs of one workload on the study's dataset, on one device."""
    workload: str
    dataset: str
    device: str  # as the runs name it ("cpu", or "cpu: AMD EPYC" where the store spans hardware models)
    study_device: str  # "cpu" or "gpu", the study's machine
    runs: int  # dlbench's successful runs compared
    time: Ranking
    accuracy: Ranking | None  # None where the study's accuracy is not comparable (accuracy_comparable)
    notes: tuple[str, ...]  # what qualifies this comparison (stopped study runs, other epochs, versions)


@dataclass(frozen=True)
class Missing:
    """A study setting without any dlbench run on its dataset and device in the store."""
    workload: str
    dataset: str
    device: str


def rank(values: Mapping[str, float], higher_is_better: bool) -> dict[str, float]:
    """Each name's rank, 1 for the best, ties sharing the mean of their places."""
    names = list(values)
    ranks = rankdata([-values[n] if higher_is_better else values[n] for n in names], method="average")
    return {name: float(r) for name, r in zip(names, ranks, strict=True)}


def agreement(study: Mapping[str, float], ours: Mapping[str, float], higher_is_better: bool
              ) -> tuple[tuple[str, ...], dict[str, float], dict[str, float], float | None, float | None]:
    """The frameworks both have, each side's ranks among them, and Kendall's tau-b with its p (None where
    fewer than two are common or one side ties them all)."""
    common = tuple(sorted(set(study) & set(ours)))
    study_rank = rank({f: study[f] for f in common}, higher_is_better)
    our_rank = rank({f: ours[f] for f in common}, higher_is_better)
    if len(common) < 2:
        return common, study_rank, our_rank, None, None
    result = kendalltau([study_rank[f] for f in common], [our_rank[f] for f in common])
    tau, p = float(result.statistic), float(result.pvalue)
    return (common, study_rank, our_rank, *((None, None) if math.isnan(tau) else (tau, p)))


def ranking(aspect: str, study: Mapping[str, float], ours: Mapping[str, float], why: Explain) -> Ranking:
    common, study_rank, our_rank, tau, p = agreement(study, ours, higher_is_better=aspect == "accuracy")
    # where one side ties every framework (tau None) it ranks nothing, so no framework moves
    moved = () if tau is None else tuple(Disagreement(f, study_rank[f], our_rank[f], why(aspect, f))
                                         for f in common if abs(study_rank[f] - our_rank[f]) >= DISPLACED)
    return Ranking(aspect, dict(study), dict(ours), common, study_rank, our_rank, tau, p, moved)


class ReasonFinder:
    """The documented reasons a framework's rank may differ, for one workload on one device."""

    def __init__(self, data: StudyData, workload: str, device: str, rows: Mapping[str, StudyRow]) -> None:
        self.data, self.workload, self.device, self.rows = data, workload, device, rows

    def __call__(self, aspect: str, framework: str) -> tuple[str, ...]:
        found = [r.text for r in self.data.reasons if r.applies(aspect, framework, self.workload, self.device)]
        row = self.rows[framework]
        if aspect == "accuracy" and row.capped:  # a stopped run's accuracy is from fewer epochs
            done = f"{row.epochs_done} of" if row.epochs_done else "an unrecorded number of its"
            found.append(f"the study's run stopped at the 24-hour cap after {done} {row.epochs} epochs")
        return tuple(found)


def compare(runs: Sequence[Mapping], data: StudyData) -> tuple[list[Comparison], list[Missing]]:
    """Every study setting with dlbench runs on its dataset and device, compared; the others, missing."""
    groups = _study_runs(runs)
    comparisons, missing = [], []
    for (workload, study_device), rows in _study_groups(data.rows).items():
        devices = sorted(d for (w, d) in groups if w == workload and _machine(d) == study_device)
        if not devices:
            missing.append(Missing(workload, rows[0].dataset, study_device))
        comparisons += [_comparison(rows, groups[(workload, d)], d, data) for d in devices]
    return comparisons, missing


def _study_groups(rows: Sequence[StudyRow]) -> dict[tuple[str, str], list[StudyRow]]:
    groups: dict[tuple[str, str], list[StudyRow]] = {}
    for row in rows:
        groups.setdefault((row.workload, row.device), []).append(row)
    return groups


def _machine(device: str | None) -> str:
    """"cpu: AMD EPYC" (device_with_hardware's naming) -> "cpu"."""
    return (device or "").split(":")[0].strip()


def on_study_data(run: Mapping) -> bool:
    """Whether the store records the workload's study dataset for this run (a stand-in is not it)."""
    workload = WORKLOADS.get(run.get("workload") or "")
    return workload is not None and run.get("dataset") == workload.study_dataset


def _study_runs(runs: Sequence[Mapping]) -> dict[tuple[str, str], list[Mapping]]:
    """The successful runs on the study's data, by workload and device."""
    groups: dict[tuple[str, str], list[Mapping]] = {}
    for run in runs:
        if run.get("status") == "ok" and on_study_data(run):
            groups.setdefault((run["workload"], run.get("device") or "?"), []).append(run)
    return groups


def _comparison(rows: list[StudyRow], runs: list[Mapping], device: str, data: StudyData) -> Comparison:
    by_framework = {row.framework: row for row in rows}
    runs, version_notes = _newest_versions(runs)
    why = ReasonFinder(data, rows[0].workload, rows[0].device, by_framework)
    time = ranking("time", {f: r.time_per_epoch_s for f, r in by_framework.items()},
                   _medians(runs, lambda run: run.get("steady_epoch_s")), why)
    comparable = {f: r.accuracy_percent for f, r in by_framework.items() if r.accuracy_comparable}
    accuracy = ranking("accuracy", comparable, _medians(runs, _accuracy_percent), why) if comparable else None
    notes = _epoch_notes(rows, runs) + _single_run_note(runs, time.common) + version_notes
    return Comparison(rows[0].workload, rows[0].dataset, device, rows[0].device, len(runs), time, accuracy, notes)


def _medians(runs: Sequence[Mapping], value) -> dict[str, float]:
    """Framework -> the median of value(run) over its runs that have one."""
    values: dict[str, list[float]] = {}
    for run in runs:
        figure = value(run)
        if figure is not None:
            values.setdefault(run["framework"], []).append(float(figure))
    return {framework: median(figures) for framework, figures in values.items()}


def _accuracy_percent(run: Mapping) -> float | None:
    """The test accuracy after the run's last epoch, in %: its metric, or for a workload whose metric is
    another (lstm-ptb's perplexity) the word accuracy its last epoch recorded beside it."""
    if run.get("metric_name") == "accuracy" and run.get("metric_value") is not None:
        return 100 * run["metric_value"]
    epochs = run.get("epochs") or []
    value = (epochs[-1].get("metrics") or {}).get("accuracy") if epochs else None
    return None if value is None else 100 * value


def _newest_versions(runs: list[Mapping]) -> tuple[list[Mapping], tuple[str, ...]]:
    """The runs of each framework's newest version where the store holds several (the study had one each)."""
    versions: dict[str, set[str]] = {}
    for run in runs:
        versions.setdefault(run["framework"], set()).add(str(run.get("framework_version")))
    newest = {f: max(v, key=_version_key) for f, v in versions.items()}
    notes = tuple(f"{f}: its newest version here, {newest[f]}, of {', '.join(sorted(v, key=_version_key))}."
                  for f, v in sorted(versions.items()) if len(v) > 1)
    return [run for run in runs if str(run.get("framework_version")) == newest[run["framework"]]], notes


def _version_key(text: str) -> tuple[int, Version | str]:
    try:
        return 1, Version(text)
    except InvalidVersion:
        return 0, text


def _epoch_notes(rows: list[StudyRow], runs: Sequence[Mapping]) -> tuple[str, ...]:
    """A note where dlbench's runs trained for other epochs than the study's, so accuracies are at other points."""
    planned = {((run.get("config") or {}).get("recipe") or {}).get("epochs") for run in runs} - {None}
    study = {row.epochs for row in rows}
    if not planned or planned == study:
        return ()
    return (f"dlbench's runs trained {', '.join(map(str, sorted(planned)))} epochs, the study's "
            f"{', '.join(map(str, sorted(study)))}: the accuracies are from other points of training.",)


def _single_run_note(runs: Sequence[Mapping], frameworks: Sequence[str]) -> tuple[str, ...]:
    """A note where dlbench ranks a framework from one run, as the study ranked all of its own."""
    counts = {f: sum(1 for run in runs if run["framework"] == f) for f in frameworks}
    single = sorted(f for f, n in counts.items() if n == 1)
    if not single:
        return ()
    return (f"dlbench ran {', '.join(single)} once here: like the study's, their ranks rest on one measurement "
            "each (`dlbench run --repeat N` gives intervals and tests in the findings).",)
