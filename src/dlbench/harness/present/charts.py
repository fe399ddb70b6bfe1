"""The report's figures: matplotlib (Agg) rendered to SVG strings that the HTML page inlines.

Text stays text (svg.fonttype none) so the page stays small and searchable; each chart gets its own
hash salt, so the ids matplotlib generates (clip paths, markers) never collide between charts of one page.
"""
import io
import re
from collections.abc import Collection, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen before pyplot is imported)
from matplotlib.colors import LogNorm, to_hex, to_rgb  # noqa: E402

from dlbench.harness.environments.envs import RECIPES  # noqa: E402

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
    share = float(LogNorm(*RATIO_SCALE, clip=True)(ratio))
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


def epoch_time_bars(rows: Sequence[tuple[str, tuple, tuple]], palette: Mapping[str, tuple], chart_id: str,
                    warm: Collection[str] = ()) -> str:
    """Steady epoch time per framework with CI whiskers, the first epoch in its own panel beside it.

    rows: (label, steady (median, low, high), first (median, low, high)); None where unknown.
    warm: the labels whose first epoch comes from runs with a warm compile cache, marked so on their bar.
    """
    with plt.rc_context(STYLE):
        fig, (steady_ax, first_ax) = plt.subplots(
            1, 2, figsize=(8.5, 0.45 * len(rows) + 1.2), sharey=True, gridspec_kw={"width_ratios": [3, 2]})
        labels = [label for label, _, _ in rows]
        for ax, index, title in ((steady_ax, 1, "steady epoch (median, interval)"),
                                 (first_ax, 2, "first epoch (compilation, warm-up)")):
            _bars(ax, labels, [row[index] for row in rows], palette, hatch="" if index == 1 else "//")
            ax.set_title(title, loc="left", fontsize=9)
            ax.set_xlabel("seconds")
        for y, (label, _, first) in enumerate(rows):
            if label in warm and first[0] is not None:
                first_ax.text(first[0], y, " warm compile cache", va="center", fontsize=8, color="0.3")
        steady_ax.invert_yaxis()
        return to_svg(fig, chart_id)


def _bars(ax: plt.Axes, labels: list[str], estimates: list[tuple], palette: Mapping[str, tuple], hatch: str) -> None:
    medians = [e[0] if e[0] is not None else 0.0 for e in estimates]
    ax.barh(labels, medians, color=[palette[label] for label in labels], alpha=0.85 if not hatch else 0.45,
            hatch=hatch, edgecolor="white")
    for y, (median, low, high) in enumerate(estimates):
        if median is None:
            ax.text(0, y, " no value", va="center", fontsize=8, color="0.4")
        elif low is not None and high is not None:
            ax.errorbar(median, y, xerr=[[median - low], [high - median]], color="0.15", capsize=3, lw=1)
    ax.grid(axis="y", visible=False)


def convergence(series: Mapping[str, Sequence[Sequence[tuple[float, float]]]], palette: Mapping[str, tuple],
                metric: str, chart_id: str, target: float | None = None) -> str:
    """Metric against epoch and against cumulative training time, per framework: the median over its
    repetitions with a min-max band, and the workload's target as a dashed line (where a curve crosses
    it, on the time axis, is its time to target). series: label -> runs -> [(cumulative train s, metric)]."""
    with plt.rc_context(STYLE):
        fig, (by_epoch, by_time) = plt.subplots(1, 2, figsize=(8.5, 3.0), sharey=True)
        for label, runs in series.items():
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
            colour = palette[label]
            for ax, xs in ((by_epoch, epochs), (by_time, times)):
                ax.plot(xs, mids, marker="o", ms=3, color=colour, label=label, lw=1.5)
                if len(runs) > 1:
                    ax.fill_between(xs, lows, highs, color=colour, alpha=0.18, lw=0)
        if target is not None:
            for ax in (by_epoch, by_time):
                ax.axhline(target, color="#555555", lw=1, ls="--", label="target" if ax is by_epoch else None)
        values = [p[1] for runs in series.values() for run in runs for p in run if p[1] is not None and p[1] > 0]
        if values and max(values) > 20 * min(values):  # perplexities fall by orders of magnitude
            by_epoch.set_yscale("log")
        by_epoch.xaxis.get_major_locator().set_params(integer=True)
        by_epoch.set_xlabel("epoch")
        by_time.set_xlabel("cumulative training time (s)")
        by_epoch.set_ylabel(metric)
        by_epoch.legend(fontsize=8, frameon=False)
        return to_svg(fig, chart_id)


def timeline(samples: Sequence[Mapping[str, float | None]], chart_id: str) -> str:
    """One run's resource use over time: CPU % (process tree and system), RSS, and GPU where sampled."""
    samples = _thin(samples)
    t = [s["t_s"] for s in samples]
    gpu = any(s.get("gpu_util_percent") is not None or s.get("gpu_mem_mb") is not None for s in samples)
    panels = [("CPU %", (("cpu_percent", "process tree"), ("system_cpu_percent", "system"))),
              ("RSS (MiB)", (("rss_mb", "process tree"),))]
    if gpu:
        panels += [("GPU util %", (("gpu_util_percent", "utilisation"),)),
                   ("GPU MiB", (("gpu_mem_mb", "process memory"),))]
    with plt.rc_context({**STYLE, "axes.grid": False}):
        fig, axes = plt.subplots(1, len(panels), figsize=(8.5 if not gpu else 11, 1.9))
        for ax, (title, keys) in zip(axes, panels, strict=True):
            for key, label in keys:
                ax.plot(t, [s.get(key) if s.get(key) is not None else float("nan") for s in samples],
                        lw=1, label=label)
            ax.set_title(title, loc="left", fontsize=9)
            ax.set_xlabel("s")
            if len(keys) > 1:
                ax.legend(fontsize=7, frameon=False)
        fig.tight_layout()
        return to_svg(fig, chart_id)


def _thin(samples: Sequence[Mapping]) -> list[Mapping]:
    step = max(1, -(-len(samples) // MAX_POINTS))
    return list(samples[::step])


def _median(values: list[float]) -> float:
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
