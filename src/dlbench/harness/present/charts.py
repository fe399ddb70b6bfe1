"""The report's figures: matplotlib (Agg) rendered to SVG strings that the HTML page inlines.

Text stays text (svg.fonttype none) so the page stays small and searchable; each chart gets its own
hash salt, so the ids matplotlib generates (clip paths, markers) never collide between charts of one page.
"""
import io
import math
import re
from collections.abc import Collection, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen before pyplot is imported)
from matplotlib.colors import LogNorm, to_hex, to_rgb  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from dlbench.harness.environments.envs import RECIPES  # noqa: E402
from dlbench.harness.plan.workloads import metric_label  # noqa: E402

STYLE = {
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],  # matplotlib writes the whole fallback list into every text element
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.dpi": 72,
}
WIDE = 10.0  # a panel whose values span more than this factor gets a logarithmic axis
SMALL_MULTIPLES = 5  # from this many frameworks on, convergence is drawn as one small panel per framework
CONTEXT_POINTS = 12  # per other framework's grey line in a small panel
MAX_POINTS = 120  # per timeline series: enough for the eye at this width, keeps one chart near 10 kB
PALETTE = plt.get_cmap("tab10").colors
# one colour per known framework, the same in every figure of every report, whichever frameworks it holds
FRAMEWORK_COLOURS = {name: PALETTE[i] for i, name in enumerate(sorted(RECIPES))}
OTHER_COLOURS = plt.get_cmap("Dark2").colors  # for frameworks dlbench does not know (a test's fake one)
# the ratio scale of the overview and the relative-speed tables: 1 (the lowest median) to 4x and beyond,
# logarithmic, green to red; the ends of RdYlGn are cut so that dark text stays readable on every colour
RATIO_SCALE = (1.0, 4.0)
RATIO_CMAP = plt.get_cmap("RdYlGn_r")
RATIO_RANGE = (0.12, 0.88)
_RATIO_NORM = LogNorm(*RATIO_SCALE, clip=True)  # built once: a page colours hundreds of cells


def colours(labels: Sequence[str]) -> dict[str, tuple[float, float, float]]:
    """Each label's framework colour (FRAMEWORK_COLOURS); a second version of one framework ("jax 0.4.30"
    beside "jax 0.6.2") gets its framework's colour lightened, unknown frameworks colours of their own."""
    result: dict[str, tuple[float, float, float]] = {}
    unknown = 0
    for label in labels:
        base = FRAMEWORK_COLOURS.get(label.split(" ")[0])
        if base is None:
            base, unknown = OTHER_COLOURS[unknown % len(OTHER_COLOURS)], unknown + 1
        repeats = sum(1 for seen in result if seen.split(" ")[0] == label.split(" ")[0])
        result[label] = tuple(c + (1 - c) * min(0.35 * repeats, 0.7) for c in to_rgb(base))
    return result


def ratio_colour(ratio: float) -> str:
    """The colour of a ratio to the lowest median on the report's scale (RATIO_SCALE), as #rrggbb."""
    share = float(_RATIO_NORM(ratio))
    low, high = RATIO_RANGE
    return to_hex(RATIO_CMAP(low + (high - low) * share))


def to_svg(fig: plt.Figure, chart_id: str) -> str:
    out = io.StringIO()
    with plt.rc_context({"svg.hashsalt": chart_id}):
        fig.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = out.getvalue()
    text = text[text.index("<svg"):]  # drop the XML declaration and DOCTYPE: the SVG sits inside HTML
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    return _compact(text).replace("<svg ", f'<svg role="img" aria-label="{chart_id}" ', 1)


def _compact(text: str) -> str:
    """A smaller SVG that draws the same: numbers inside tags to 2 decimals (matplotlib writes 6), no
    indentation, and only the ids that something references (clip paths, markers, hatches)."""
    text = re.sub(r"<[^>]+>", lambda tag: re.sub(r"(\.\d\d)\d+", r"\1", tag.group(0)), text)
    text = re.sub(r'(?<= d=")[^"]*', lambda d: re.sub(r"(\.\d)\d+", r"\1", d.group(0)).replace(" \n", " "),
                  text)  # 0.1 pt will do
    text = re.sub(r' transform="rotate\(-0 [\d.]+ [\d.]+\)"', "", text)  # matplotlib's no-op rotation
    used = set(re.findall(r'(?:url\(#|href="#)([^)"]+)', text))
    text = re.sub(r' id="([^"]*)"', lambda m: m.group(0) if m.group(1) in used else "", text)
    return re.sub(r">\s+<", "><", text)


def epoch_times(rows: Sequence[tuple[str, tuple, tuple]], palette: Mapping[str, tuple], chart_id: str,
                warm: Collection[str] = ()) -> str:
    """epoch_time_figure drawn as SVG (in STYLE, whose text stays text)."""
    with plt.rc_context(STYLE):
        return to_svg(epoch_time_figure(rows, palette, warm), chart_id)


def epoch_time_figure(rows: Sequence[tuple[str, tuple, tuple]], palette: Mapping[str, tuple],
                      warm: Collection[str] = ()) -> plt.Figure:
    """Steady epoch time per framework as a dot with its interval's whisker, the first epoch in its own panel
    beside it. Dots, not bars: a panel whose values span more than WIDE gets a logarithmic axis, where a bar's
    length would depend on where the axis starts.

    rows: (label, steady (median, low, high), first (median, low, high)); None where unknown; drawn top
    down in the order given (the caller sorts them by speed).
    warm: the labels whose first epoch comes from runs with a warm compile cache, marked so beside their dot.
    """
    with plt.rc_context(STYLE):
        fig, (steady_ax, first_ax) = plt.subplots(
            1, 2, figsize=(8.5, 0.3 * len(rows) + 1.0), sharey=True, gridspec_kw={"width_ratios": [3, 2]})
        labels = [label for label, _, _ in rows]
        for ax, index, title, marker in ((steady_ax, 1, "steady epoch (median, interval)", "o"),
                                         (first_ax, 2, "first epoch (compilation, warm-up)", "D")):
            _dots(ax, labels, [row[index] for row in rows], palette, marker)
            ax.set_title(title, loc="left", fontsize=9)
            ax.set_xlabel("epoch time (s)")
            values = [v for row in rows for v in row[index] if v is not None]
            _log_if_wide(ax, "x", values)
            _seconds_axis(ax, values)
        for y, (label, _, first) in enumerate(rows):
            if label in warm and first[0] is not None:
                first_ax.text(first[0], y, " warm compile cache", va="center", fontsize=8, color="0.3")
        steady_ax.set_ylim(len(rows) - 0.5, -0.5)  # the first row on top
        fig.tight_layout()
        return fig


def _log_if_wide(ax: plt.Axes, axis: str, values: Sequence[float]) -> None:
    """A logarithmic axis where the positive values span more than WIDE (a linear one would flatten the
    small ones); never where a value is 0 or below (an mAP of 0 has no place on a log axis)."""
    if values and min(values) > 0 and max(values) > WIDE * min(values):
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")


def _dots(ax: plt.Axes, labels: list[str], estimates: list[tuple], palette: Mapping[str, tuple], marker: str) -> None:
    """A dot per median with its interval as a whisker; " no value" at the axis's start where there is none."""
    ax.set_yticks(range(len(labels)), labels)
    for y, (label, (median, low, high)) in enumerate(zip(labels, estimates, strict=True)):
        if median is None:
            ax.text(0.0, y, " no value", va="center", fontsize=8, color="0.4", transform=ax.get_yaxis_transform())
            continue
        if low is not None and high is not None:
            ax.plot([low, high], [y, y], color="0.15", lw=1)
        ax.plot([median], [y], marker, ms=6, color=palette[label], mec="0.15", mew=0.6)
    ax.grid(axis="y", visible=False)


def _seconds_axis(ax: plt.Axes, values: Sequence[float]) -> None:
    """Tick labels a reader can tell apart: on a log axis, at most MAX_LOG_TICKS labelled ticks from the
    1-2-5 series and no minor labels (matplotlib's own labels every minor tick of a span under 10x, into one
    illegible string); from 0 on a linear axis, whose dots' distance from 0 then means something."""
    if not values:
        return
    if ax.get_xscale() == "log":
        low, high = min(values) / 1.25, max(values) * 1.25
        ax.set_xlim(low, high)
        ticks = log_ticks(low, high)
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        ax.set_xlim(0, max(values) * 1.12)


MAX_LOG_TICKS = 5


def log_ticks(low: float, high: float) -> list[float]:
    """Labelled ticks of a log axis from low to high: 1-2-5 of each decade, then 1-3, then 1 alone, then
    every other decade, the first of these with at most MAX_LOG_TICKS ticks in range."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    for mantissas, every in (((1, 2, 5), 1), ((1, 3), 1), ((1,), 1), ((1,), 2), ((1,), 3)):
        ticks = [m * 10.0 ** k for k in range(first, last + 1, every) for m in mantissas]
        ticks = [t for t in ticks if low <= t <= high]
        if len(ticks) <= MAX_LOG_TICKS:
            return ticks
    return ticks


Curve = tuple[list[int], list[float], list[float], list[float], list[float]]  # epochs, times, median, low, high


def _curve(runs: Sequence[Sequence[tuple[float, float]]]) -> Curve:
    """Per epoch over a framework's runs: the median cumulative time, and the median, lowest and highest metric."""
    depth = max((len(run) for run in runs), default=0)
    epochs, times, mids, lows, highs = [], [], [], [], []
    for k in range(depth):
        points = [run[k] for run in runs if len(run) > k and run[k][1] is not None]
        if not points:
            continue
        values = sorted(p[1] for p in points)
        epochs.append(k + 1)
        times.append(_median(sorted(p[0] for p in points)))
        mids.append(_median(values))
        lows.append(values[0])
        highs.append(values[-1])
    return epochs, times, mids, lows, highs


def _metric_axis(ax: plt.Axes, metric: str | None, values: Sequence[float]) -> None:
    """Perplexities fall by orders of magnitude: a log axis past WIDE; an accuracy or mAP stays linear
    (it can be 0)."""
    if metric not in ("accuracy", "map"):  # stored names
        _log_if_wide(ax, "y", values)


def convergence(series: Mapping[str, Sequence[Sequence[tuple[float, float]]]], palette: Mapping[str, tuple],
                metric: str | None, chart_id: str, target: float | None = None) -> str:
    """Metric against epoch and against cumulative training time, per framework: the median over its
    repetitions with a min-max band, and the workload's target as a dashed line (where a curve crosses
    it, on the time axis, is its time to target). series: label -> runs -> [(cumulative train s, metric)].
    From SMALL_MULTIPLES frameworks on, whose lines would hide each other, one small panel each
    (small_multiples). The legend stands outside the axes, so it never covers a curve or the target."""
    curves = {label: _curve(runs) for label, runs in series.items()}
    if len(curves) >= SMALL_MULTIPLES:
        return small_multiples(curves, palette, metric, chart_id, target)
    with plt.rc_context(STYLE):
        fig, (by_epoch, by_time) = plt.subplots(1, 2, figsize=(8.5, 3.0), sharey=True, layout="constrained")
        for label, (epochs, times, mids, lows, highs) in curves.items():
            for ax, xs in ((by_epoch, epochs), (by_time, times)):
                # one legend entry per framework: the figure's legend collects every axes' labels
                ax.plot(xs, mids, marker="o", ms=3, color=palette[label], lw=1.5,
                        label=label if ax is by_epoch else None)
                if len(series[label]) > 1:
                    ax.fill_between(xs, lows, highs, color=palette[label], alpha=0.18, lw=0)
        if target is not None:
            for ax in (by_epoch, by_time):
                ax.axhline(target, color="#555555", lw=1, ls="--", label="target" if ax is by_epoch else None)
        _metric_axis(by_epoch, metric, [v for curve in curves.values() for v in curve[3] + curve[4]])
        _log_if_wide(by_time, "x", [t for curve in curves.values() for t in curve[1]])
        by_epoch.xaxis.get_major_locator().set_params(integer=True)
        by_epoch.set_xlabel("epoch")
        by_time.set_xlabel("cumulative training time (s)")
        by_epoch.set_ylabel(metric_label(metric))
        fig.legend(loc="outside right upper", fontsize=8, frameon=False)
        return to_svg(fig, chart_id)


def small_multiples(curves: Mapping[str, Curve], palette: Mapping[str, tuple], metric: str | None, chart_id: str,
                    target: float | None = None) -> str:
    """One panel per framework on shared axes, metric against cumulative training time: its own median
    curve and band in its colour, the others' medians in light grey behind it, the target dashed."""
    columns = 3
    rows = -(-len(curves) // columns)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, columns, figsize=(8.5, 1.9 * rows + 0.4), sharex=True, sharey=True,
                                 layout="constrained", squeeze=False)
        # the grid's last row may hold fewer frameworks than panels: those panels are hidden below
        for ax, (label, (_, times, mids, lows, highs)) in zip(axes.flat, curves.items(), strict=False):
            for other, curve in curves.items():
                if other != label:  # context only: a thinned line keeps 9 panels x 8 others small
                    step = max(1, -(-len(curve[1]) // CONTEXT_POINTS))
                    ax.plot(curve[1][::step], curve[2][::step], color="0.82", lw=1)
            ax.fill_between(times, lows, highs, color=palette[label], alpha=0.2, lw=0)
            ax.plot(times, mids, marker="o" if len(times) <= CONTEXT_POINTS else "", ms=2.5, color=palette[label],
                    lw=1.6)
            if target is not None:
                ax.axhline(target, color="#555555", lw=1, ls="--")
            ax.set_title(label, loc="left", fontsize=9, color=palette[label])
        for ax in axes.flat[len(curves):]:
            ax.set_visible(False)
        first = axes.flat[0]
        _metric_axis(first, metric, [v for curve in curves.values() for v in curve[3] + curve[4]])
        _log_if_wide(first, "x", [t for curve in curves.values() for t in curve[1]])
        for ax in axes.flat:  # a log axis's minor ticks, in every small panel, would double the figure's size
            ax.minorticks_off()
        fig.supxlabel("cumulative training time (s)", fontsize=9)
        fig.supylabel(metric_label(metric) + ("" if target is None else " (dashed: target)"), fontsize=9)
        return to_svg(fig, chart_id)


def _panels(gpu: bool) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """A timeline's panels: title and (sample key, line label) of each line."""
    panels = [("CPU %", (("cpu_percent", "process tree"), ("system_cpu_percent", "system"))),
              ("RSS (MiB)", (("rss_mb", "process tree"),))]
    if gpu:
        panels += [("GPU util %", (("gpu_util_percent", "utilisation"),)),
                   ("GPU MiB", (("gpu_mem_mb", "process memory"),))]
    return panels


def _has_gpu(samples: Sequence[Mapping[str, float | None]]) -> bool:
    return any(s.get("gpu_util_percent") is not None or s.get("gpu_mem_mb") is not None for s in samples)


def timeline_limits(sample_sets: Sequence[Sequence[Mapping[str, float | None]]]) -> dict[str, float]:
    """The largest time and the largest value of each panel over several runs' samples: the runs of one
    workload are drawn on these shared axes, so their timelines compare at a glance."""
    samples = [s for samples in sample_sets for s in samples]
    limits = {"t_s": max((s["t_s"] for s in samples), default=0.0)}
    for title, keys in _panels(_has_gpu(samples)):
        limits[title] = max((s[key] for s in samples for key, _ in keys if s.get(key) is not None), default=0.0)
    return limits


def timeline(samples: Sequence[Mapping[str, float | None]], chart_id: str,
             limits: Mapping[str, float] | None = None) -> str:
    """One run's resource use over time: CPU % (process tree and system), RSS, and GPU where sampled.
    limits (timeline_limits): shared axes' ends, where several runs are compared."""
    samples = _thin(samples)
    t = [s["t_s"] for s in samples]
    panels = _panels(_has_gpu(samples))
    with plt.rc_context({**STYLE, "axes.grid": False}):
        fig, axes = plt.subplots(1, len(panels), figsize=(8.5 if len(panels) == 2 else 11, 1.9))
        for ax, (title, keys) in zip(axes, panels, strict=True):
            for key, label in keys:
                ax.plot(t, [s.get(key) if s.get(key) is not None else float("nan") for s in samples],
                        lw=1, label=label)
            ax.set_title(title, loc="left", fontsize=9)
            ax.set_xlabel("s")
            if limits:
                ax.set_xlim(0, limits["t_s"] or 1)
                ax.set_ylim(0, (limits.get(title) or 1) * 1.05)
            if len(keys) > 1:
                # above the panel, right of its title: never over the lines
                ax.legend(fontsize=7, frameon=False, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=2,
                          borderaxespad=0.0)
        fig.tight_layout()
        return to_svg(fig, chart_id)


def _thin(samples: Sequence[Mapping]) -> list[Mapping]:
    step = max(1, -(-len(samples) // MAX_POINTS))
    return list(samples[::step])


def _median(values: list[float]) -> float:
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


ScalingPoint = tuple[float, float | None, float | None, float | None]  # axis value, median, low, high


def scaling_lines(lines: Mapping[str, Sequence[ScalingPoint]], palette: Mapping[str, tuple], chart_id: str,
                  xlabel: str, ylabel: str, ideal: Sequence[tuple[float, float]] = (),
                  marked: float | None = None, marked_label: str = "") -> str:
    """A sweep's figure: one line per framework over the axis's values (a log-2 axis: thread counts and
    batch sizes double), the median with whiskers for its interval where it has one; `ideal`, dashed grey
    (linear speed-up); `marked`, a dotted vertical line at that axis value (the recipe's batch size)."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.0, 3.0), layout="constrained")
        for label, points in lines.items():
            shown = [p for p in points if p[1] is not None]
            xs, mids = [p[0] for p in shown], [p[1] for p in shown]
            ax.plot(xs, mids, marker="o", ms=4, lw=1.5, color=palette[label], label=label)
            for x, mid, low, high in shown:
                if low is not None and high is not None:
                    ax.errorbar(x, mid, yerr=[[mid - low], [high - mid]], color=palette[label], capsize=3, lw=1)
        if ideal:
            ax.plot([x for x, _ in ideal], [y for _, y in ideal], color="0.55", lw=1, ls="--", label="linear")
        if marked is not None:
            ax.axvline(marked, color="0.4", lw=1, ls=":", label=marked_label)
        values = sorted({p[0] for points in lines.values() for p in points})
        ax.set_xscale("log", base=2)
        ax.set_xticks(values, [f"{v:g}" for v in values])
        ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        fig.legend(loc="outside right upper", fontsize=8, frameon=False)
        return to_svg(fig, chart_id)


def latency_ecdf(series: Mapping[str, Sequence[float]], palette: Mapping[str, tuple], chart_id: str) -> str:
    """The distribution of batch-1 call latencies per framework as an empirical CDF (the share of calls at or
    below each latency), every timed call of the framework's successful runs pooled; series: label -> latencies
    in milliseconds. Where a curve rises is the typical call, its tail to the right the slow calls that p99
    counts. A latency axis spanning more than WIDE is logarithmic."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(8.5, 2.8), layout="constrained")
        for label, values in series.items():
            ordered = sorted(values)
            shares = [(i + 1) / len(ordered) for i in range(len(ordered))]
            ax.step(ordered, shares, where="post", color=palette[label], lw=1.5, label=f"{label} ({len(ordered)})")
        _log_if_wide(ax, "x", [v for values in series.values() for v in values])
        ax.set_xlabel("latency of one call on one sample (ms)")
        ax.set_ylabel("share of calls")
        ax.set_ylim(0, 1.02)
        fig.legend(loc="outside right upper", fontsize=8, frameon=False)
        return to_svg(fig, chart_id)


RATIO_TICKS = (0.5, 0.8, 0.9, 1.0, 1.1, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0)
IntervalRow = tuple[str, float, float | None, float | None, bool, int]  # label, ratio, low, high, shown, runs


def ratio_intervals(rows: Sequence[IntervalRow], palette: Mapping[str, tuple], title: str, chart_id: str) -> str:
    """One workload's frameworks as ratios to the fastest with their intervals, on a logarithmic axis (a ratio
    of 2 and one of 1/2 stand as far from 1): a dot per framework, filled where the test shows its gap, hollow
    where it does not; whiskers where there is an interval (none for single runs); a line at 1. Dots, not bars:
    a bar's length on a log axis depends on where the axis starts, and means nothing."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(4.2, 0.32 * len(rows) + 0.9))
        for y, (label, ratio, low, high, shown, _) in enumerate(rows):
            colour = palette[label]
            if low is not None and high is not None:
                ax.plot([low, high], [y, y], color=colour, lw=1.6, solid_capstyle="butt")
            ax.plot([ratio], [y], "o", ms=6, color=colour, mfc=colour if shown else "white", mew=1.5)
        ax.axvline(1.0, color="0.4", lw=0.8)
        ax.set_xscale("log")
        ends = [v for _, ratio, low, high, _, _ in rows for v in (ratio, low, high) if v]
        left, right = min(ends + [1.0]) / 1.08, max(ends + [1.1]) * 1.08
        ax.set_xlim(left, right)
        # a log axis ticks only at powers of 10 by itself: these read as ratios at any span
        ticks = [t for t in RATIO_TICKS if left <= t <= right]
        ax.set_xticks(ticks, [f"{t:g}×" for t in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_yticks(range(len(rows)), [f"{label} ({n})" for label, *_, n in rows])
        ax.invert_yaxis()
        ax.grid(axis="y", visible=False)
        ax.set_title(title, loc="left", fontsize=9)
        ax.set_xlabel("steady epoch time ÷ the fastest's (runs in brackets)")
        return to_svg(fig, chart_id)


def release_history(releases: Sequence[str], panels: Sequence[tuple[str, Sequence[tuple]]],
                    steps: Sequence[tuple[int, int, str]], colour: tuple, chart_id: str) -> str:
    """A framework's history on one workload: one panel per figure (its y label, and per release its median with
    its interval: (median, low, high), None where it has none) over the releases in order; each shown step
    (panel, release i, label) a dotted line between releases i - 1 and i with its label (the ratio) above it."""
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 2.8), layout="constrained", squeeze=False)
        xs = list(range(len(releases)))
        for panel, (ax, (ylabel, values)) in enumerate(zip(axes[0], panels, strict=True)):
            shown = [(x, v) for x, v in zip(xs, values, strict=True) if v is not None and v[0] is not None]
            ax.plot([x for x, _ in shown], [v[0] for _, v in shown], marker="o", ms=4, lw=1.5, color=colour)
            for x, (mid, low, high) in shown:
                if low is not None and high is not None:
                    ax.errorbar(x, mid, yerr=[[mid - low], [high - mid]], color=colour, capsize=3, lw=1)
            for index, text in [(index, text) for on, index, text in steps if on == panel]:
                ax.axvline(index - 0.5, color="0.35", lw=1, ls=":")
                ax.annotate(text, (index - 0.5, 1), xycoords=("data", "axes fraction"), ha="center", va="bottom",
                            fontsize=7)
            ax.set_xticks(xs, list(releases), rotation=30, fontsize=8)
            ax.set_xlabel("release")
            ax.set_ylabel(ylabel)
        return to_svg(fig, chart_id)
