"""The report's figures, drawn without a browser: one colour per framework, log axes where a panel spans
more than 10x (never for a metric that can be 0), small multiples for many frameworks, shared timeline axes,
and the certificate grid's stable order."""
import re
from itertools import pairwise

import matplotlib.pyplot as plt

from dlbench.harness.present import charts, tables

FRAMEWORKS = ["chainer", "jax", "keras-jax", "keras-tensorflow", "keras-torch", "mxnet", "pytorch", "tensorflow",
              "theano"]


def test_a_framework_keeps_its_colour_whichever_frameworks_a_report_holds() -> None:
    every = charts.colours(FRAMEWORKS)
    assert len(set(every.values())) == 9
    alone, beside = charts.colours(["pytorch"]), charts.colours(["theano", "pytorch"])
    assert alone["pytorch"] == every["pytorch"] == beside["pytorch"]
    versions = charts.colours(["jax 0.4.30", "jax 0.6.2", "fake"])
    assert versions["jax 0.4.30"] == every["jax"] != versions["jax 0.6.2"]  # a second version: lighter
    assert versions["fake"] not in every.values()


def test_a_panel_spanning_more_than_ten_times_gets_a_log_axis_unless_a_value_is_zero() -> None:
    fig, ax = plt.subplots()
    charts._log_if_wide(ax, "x", [0.5, 2.0, 4.9])
    assert ax.get_xscale() == "linear"
    charts._log_if_wide(ax, "x", [0.3, 2.0, 30.0])
    assert ax.get_xscale() == "log"
    charts._metric_axis(ax, "map", [0.0, 0.01, 0.6])  # an mAP of 0: linear
    charts._metric_axis(ax, "accuracy", [0.01, 0.9])
    assert ax.get_yscale() == "linear"
    charts._metric_axis(ax, "perplexity", [150.0, 4000.0])
    assert ax.get_yscale() == "log"
    plt.close(fig)


def curves(names: list[str]) -> dict[str, list[list[tuple[float, float]]]]:
    return {name: [[(1.0 * k * (i + 1), 0.2 * k) for k in range(1, 4)]] for i, name in enumerate(names)}


def test_many_frameworks_converge_in_small_multiples_and_few_share_one_plot_with_an_outside_legend() -> None:
    palette = charts.colours(FRAMEWORKS)
    many = charts.convergence(curves(FRAMEWORKS), palette, "accuracy", "many", target=0.5)
    assert all(many.count(f">{name}</text>") == 1 for name in FRAMEWORKS)  # one panel title each, no legend
    assert ">epoch</text>" not in many and ">cumulative training time (s)</text>" in many
    few = charts.convergence(curves(["jax", "pytorch"]), palette, "accuracy", "few", target=0.5)
    assert ">epoch</text>" in few and few.count(">jax</text>") == 1 and ">target</text>" in few
    # the legend stands right of both panels: its text starts beyond every axis tick label
    legend_x = float(re.search(r'<text [^>]*x="([\d.]+)"[^>]*>jax</text>', few).group(1))
    ticks = [float(x) for x in re.findall(r'<text [^>]*x="([\d.]+)"[^>]*>\d+(?:\.\d+)?</text>', few)]
    assert legend_x > max(ticks)


def test_a_workloads_timelines_share_their_axes() -> None:
    short = [{"t_s": t, "cpu_percent": 50.0, "system_cpu_percent": 60.0, "rss_mb": 100.0} for t in range(10)]
    long = [{"t_s": t, "cpu_percent": 150.0, "system_cpu_percent": 190.0, "rss_mb": 900.0} for t in range(40)]
    limits = charts.timeline_limits([short, long])
    assert limits == {"t_s": 39, "CPU %": 190.0, "RSS (MiB)": 900.0}
    # the short run drawn on the long one's axes reaches the same tick labels
    assert ">30</text>" in charts.timeline(short, "short", limits)
    assert ">30</text>" not in charts.timeline(short, "alone")


def test_the_certificate_grid_has_a_stable_order() -> None:
    runs = [{"framework": f, "workload": w, "certificate": "reference" if f == "pytorch" else "none"}
            for f in ("tensorflow", "pytorch", "jax") for w in ("lstm-ptb", "cnn-mnist")]
    grid = tables.certificate_grid([], runs)
    assert grid.header == ["framework", "cnn-mnist", "lstm-ptb"]
    assert [row[0] for row in grid.rows] == ["pytorch", "jax", "tensorflow"]


# nine frameworks as a real quick run spreads them: steady epochs 1.3-11 s, first epochs 1.6-171 s
SPREAD = [(name, (steady, steady * 0.97, steady * 1.03), (first, first * 0.95, first * 1.05))
          for name, steady, first in zip(FRAMEWORKS, (1.3, 1.5, 1.8, 2.0, 2.4, 3.1, 4.2, 6.0, 11.0),
                                         (171.0, 12.3, 25.7, 39.5, 12.5, 6.1, 1.6, 15.2, 18.7), strict=True)]
NARROW = [(name, (1.0 + k / 10, None, None), (1.5 + k * 2.0, None, None)) for k, name in enumerate(FRAMEWORKS)]


def tick_label_boxes(fig: plt.Figure) -> list[list]:
    """Per axes, the window extents of its x tick labels that hold text, as matplotlib's renderer lays them
    out at the figure's real size."""
    renderer = fig.canvas.get_renderer()
    fig.canvas.draw()
    return [[label.get_window_extent(renderer) for label in ax.get_xticklabels(minor=True) + ax.get_xticklabels()
             if label.get_visible() and label.get_text()] for ax in fig.axes]


def test_the_epoch_time_panels_draw_dots_with_tick_labels_that_never_overlap() -> None:
    palette = charts.colours(FRAMEWORKS)
    for rows in (SPREAD, NARROW):
        fig = charts.epoch_time_figure(rows, palette)
        steady_ax, first_ax = fig.axes
        assert first_ax.get_xscale() == "log"  # 1.6 to 171 s, and 1.5 to 17.5 s: both wider than 10x
        for ax, boxes in zip(fig.axes, tick_label_boxes(fig), strict=True):
            assert len(boxes) >= 2, ax.get_title()  # a reader can tell the scale from two labels
            ordered = sorted(boxes, key=lambda box: box.x0)
            assert all(left.x1 < right.x0 for left, right in pairwise(ordered)), ax.get_title()
            # dots and whiskers, no bar: the only rectangle of an axes is its own background
            assert not [p for p in ax.patches if p is not ax.patch], ax.get_title()
            assert ax.get_xlabel() == "epoch time (s)"
        plt.close(fig)


def test_matplotlibs_own_log_ticks_label_the_minor_ticks_of_a_narrow_span() -> None:
    """Why the panels choose their log ticks: matplotlib's default labels the minor ticks of a span near a
    decade, which at a panel's width run into each other (the illegible first-epoch axis of issue 41)."""
    fig, ax = plt.subplots(figsize=(3.4, 1.0))
    ax.set_xscale("log")
    ax.set_xlim(1.5, 17.5)
    boxes = sorted(tick_label_boxes(fig)[0], key=lambda box: box.x0)
    assert any(left.x1 >= right.x0 for left, right in pairwise(boxes))
    plt.close(fig)


def test_log_ticks_label_at_most_five_values_of_the_one_two_five_series() -> None:
    assert charts.log_ticks(1.3, 14.0) == [2.0, 5.0, 10.0]
    assert charts.log_ticks(1.2, 220.0) == [3.0, 10.0, 30.0, 100.0]
    assert charts.log_ticks(0.02, 900.0) == [0.1, 1.0, 10.0, 100.0]
    assert charts.log_ticks(1e-3, 1e6) == [1e-3, 0.1, 10.0, 1e3, 1e5]  # every other decade


def test_metric_names_read_as_people_write_them() -> None:
    palette = charts.colours(["jax", "pytorch"])
    few = charts.convergence(curves(["jax", "pytorch"]), palette, "map", "few")
    many = charts.convergence(curves(FRAMEWORKS), charts.colours(FRAMEWORKS), "map", "many")
    assert ">mAP</text>" in few and ">map</text>" not in few and ">mAP</text>" in many
    assert ">perplexity</text>" in charts.convergence(curves(["jax"]), palette, "perplexity", "ppl")
