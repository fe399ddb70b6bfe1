"""The report's figures, drawn without a browser: one colour per framework, log axes where a panel spans
more than 10x (never for a metric that can be 0), small multiples for many frameworks, shared timeline axes,
and the certificate grid's stable order."""
import re

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
