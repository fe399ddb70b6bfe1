"""The recipe's learning-rate schedule (shared/schedule.py): its values, its validation, and the harness's
resolution of total_steps "auto" into the cell's configuration (run/cell_config.py)."""
import dataclasses
import math

import pytest

from dlbench.harness.plan.workloads import WorkloadError, get_workload
from dlbench.harness.run.cell_config import cell_recipe
from dlbench.shared import schedule as schedules
from dlbench.worker.base import BaseAdapter
from dlbench.worker.detector import DetectorAdapter

WARMUP_COSINE = {"name": "warmup_cosine", "warmup_steps": 4, "total_steps": 12, "final_lr_fraction": 0.1}


def test_warmup_starts_at_zero_and_cosine_ends_at_the_final_fraction():
    factors = [schedules.factor(WARMUP_COSINE, k) for k in range(15)]
    assert factors[:5] == [0.0, 0.25, 0.5, 0.75, 1.0]  # the very first update has lr 0
    assert factors[8] == pytest.approx(0.1 + 0.9 * 0.5)  # half way through the decay
    assert factors[12:] == [pytest.approx(0.1)] * 3  # constant after total_steps
    assert all(a > b for a, b in zip(factors[4:12], factors[5:13], strict=True))
    assert schedules.factor(None, 7) == 1.0
    no_warmup = dict(WARMUP_COSINE, warmup_steps=0)
    assert schedules.factor(no_warmup, 0) == 1.0 and schedules.factor(no_warmup, 6) == pytest.approx(0.55)


@pytest.mark.parametrize("change, message", [
    ({"name": "step"}, "schedule 'step': unknown; known: warmup_cosine"),
    ({"warmup_steps": -1}, "warmup_steps: expected a whole number >= 0, got -1"),
    ({"warmup_steps": 2.5}, "warmup_steps: expected a whole number >= 0, got 2.5"),
    ({"total_steps": 4}, r"total_steps: expected a whole number above warmup_steps \(4\), got 4"),
    ({"total_steps": "auto"}, "total_steps: expected a whole number above warmup_steps \\(4\\), got 'auto'"),
    ({"final_lr_fraction": 1.5}, r"final_lr_fraction: expected a number in \[0, 1\], got 1.5"),
    ({"cycles": 2}, "unknown setting\\(s\\) cycles; accepted: warmup_steps, total_steps, final_lr_fraction"),
])
def test_a_bad_schedule_is_refused_naming_the_field(change, message):
    with pytest.raises(schedules.ScheduleError, match=message):
        schedules.validate(dict(WARMUP_COSINE, **change))
    with pytest.raises(schedules.ScheduleError, match="schedule warmup_cosine: missing final_lr_fraction"):
        schedules.validate({k: v for k, v in WARMUP_COSINE.items() if k != "final_lr_fraction"})


def test_total_steps_auto_becomes_the_cells_updates():
    """epochs x batches of the training samples the cell trains on (the last batch may be short): a number in
    the cell's configuration, so its hash holds it."""
    workload = dataclasses.replace(get_workload("lstm-imdb"),
                                   recipe=dict(get_workload("lstm-imdb").recipe,
                                               schedule=dict(WARMUP_COSINE, total_steps="auto")))
    recipe = cell_recipe(workload, 3, 64, 1000)
    assert recipe["schedule"]["total_steps"] == 3 * math.ceil(1000 / 64) == 48
    assert (recipe["epochs"], recipe["batch_size"]) == (3, 64)
    assert workload.recipe["schedule"]["total_steps"] == "auto"  # the workload's own stays as declared
    assert "schedule" not in cell_recipe(get_workload("lstm-imdb"), 3, 64, 1000)
    with pytest.raises(WorkloadError, match="workload lstm-imdb: recipe: schedule warmup_cosine: total_steps: "
                                            r"expected a whole number above warmup_steps \(4\), got 1"):
        cell_recipe(workload, 1, 1000, 1000)  # one update, fewer than the warm-up
    assert "schedule" not in cell_recipe(workload, 0, 64, 1000)  # an inference cell trains nothing


def test_a_warmup_fraction_becomes_the_cells_warmup_steps():
    """The Transformers declare their warm-up as 5 % of the updates: a quick cell of 20 updates warms up over 1,
    a study-length one over 5 %; the worker sees warmup_steps alone."""
    workload = get_workload("transformer-lm")
    recipe = cell_recipe(workload, 2, 32, 320)
    assert recipe["schedule"] == {"name": "warmup_cosine", "warmup_steps": 1, "total_steps": 20,
                                  "final_lr_fraction": 0.1}
    assert cell_recipe(workload, 20, 32, 100_000)["schedule"]["warmup_steps"] == round(0.05 * 20 * 3125) == 3125
    assert cell_recipe(workload, 1, 32, 32)["schedule"]["warmup_steps"] == 0  # one update: kept below it
    for bad in (1.0, -0.1, "5%", True):
        broken = dataclasses.replace(workload, recipe=dict(workload.recipe, schedule=dict(
            workload.recipe["schedule"], warmup_fraction=bad)))
        with pytest.raises(WorkloadError, match=f"workload transformer-lm: recipe: schedule warmup_fraction "
                                                f"{bad!r}; a number in \\[0, 1\\) is needed"):
            cell_recipe(broken, 2, 32, 320)


def test_the_worker_refuses_a_bad_schedule_and_a_detector_any_schedule():
    """Every adapter's contract (worker/base.py) validates the recipe's schedule before building anything;
    the detectors step their optimisers at a constant rate and refuse one by name."""
    lstm = get_workload("lstm-imdb")
    with pytest.raises(schedules.ScheduleError, match="final_lr_fraction: expected a number in"):
        BaseAdapter(lstm.model(), dict(lstm.recipe, schedule=dict(WARMUP_COSINE, final_lr_fraction=-0.1)),
                    "binary", "cpu", 1, 0)
    frcnn = get_workload("frcnn-voc")
    with pytest.raises(NotImplementedError, match="learning-rate schedule 'warmup_cosine': this adapter does not"):
        DetectorAdapter(frcnn.model(), dict(frcnn.recipe, schedule=WARMUP_COSINE), "detection", "cpu", 1, 0)


@pytest.mark.parametrize("name, settings", [
    ("adam", {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7}),
    ("adadelta", {"lr": 1.0, "rho": 0.95, "epsilon": 1e-7}),
])
def test_the_rule_refuses_a_weight_decay_no_adapter_reads(name, settings):
    """adam's and adadelta's adapters read no weight_decay: the certificate's rule refuses one rather than
    certify a term no framework trains with (AdamW's decoupled decay is the one Adam takes)."""
    from dlbench.harness.certification import optimizer
    optimizer.validate(dict(settings, name=name))
    with pytest.raises(optimizer.OptimizerError, match="unknown setting.s. weight_decay"):
        optimizer.validate(dict(settings, name=name, weight_decay=1e-4))
