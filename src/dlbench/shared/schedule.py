"""A recipe's learning-rate schedule: its validation, and its factor for adapters that write it out.

Both sides: Python 3.8, stdlib alone. A recipe without "schedule" trains at a constant learning rate.
"warmup_cosine" ({"name", "warmup_steps": W, "total_steps": T, "final_lr_fraction": f}) makes the k-th
optimiser update (k = 0, 1, ...) use lr * factor(k):
    factor(k) = k / W                                                   for k < W
    factor(k) = f + (1 - f) * 0.5 * (1 + cos(pi * min(1, (k - W) / (T - W))))   otherwise
so the very first update has learning rate 0, as optax.warmup_cosine_decay_schedule (init_value 0: a
linear_schedule over warmup_steps joined to cosine_decay_schedule over decay_steps - warmup_steps, with
alpha = end_value / peak_value) and Hugging Face's get_cosine_schedule_with_warmup (its lr_lambda returns
current_step / num_warmup_steps in the warm-up) both do. After T updates the rate stays at f * lr.
"""
import math
from typing import Optional

SCHEDULES = {"warmup_cosine": ("warmup_steps", "total_steps", "final_lr_fraction")}
# what a recipe may give in place of a setting, which `resolved` turns into the setting for a cell's updates:
# total_steps "auto" (the cell's updates) and warmup_fraction (a share of them, in place of warmup_steps)
AUTO_TOTAL = "auto"
WARMUP_FRACTION = "warmup_fraction"


class ScheduleError(ValueError):
    pass


def validate(schedule: dict) -> None:
    """Raises ScheduleError naming the field and what is accepted; total_steps must be resolved (a number)."""
    if not isinstance(schedule, dict):
        raise ScheduleError("recipe field 'schedule': expected a mapping with a 'name', got %r" % (schedule,))
    name = schedule.get("name")
    if name not in SCHEDULES:
        raise ScheduleError("schedule %r: unknown; known: %s" % (name, ", ".join(SCHEDULES)))
    given, needed = set(schedule) - {"name"}, set(SCHEDULES[name])
    if needed - given:
        raise ScheduleError("schedule %s: missing %s" % (name, ", ".join(sorted(needed - given))))
    if given - needed:
        raise ScheduleError("schedule %s: unknown setting(s) %s; accepted: %s"
                            % (name, ", ".join(sorted(given - needed)), ", ".join(SCHEDULES[name])))
    if name == "warmup_cosine":
        _check_warmup_cosine(schedule)


def resolved(schedule: dict, updates: Optional[int]) -> dict:
    """The recipe's schedule for a cell of `updates` optimiser updates (None: unknown, where total_steps is a
    number): total_steps "auto" becomes `updates`, warmup_fraction becomes warmup_steps (round(fraction x
    total_steps), kept below total_steps: the schedule needs a decay after it); then validated. Raises
    ScheduleError naming the setting and what is accepted."""
    if not isinstance(schedule, dict):
        raise ScheduleError("recipe field 'schedule': expected a mapping with a 'name', got %r" % (schedule,))
    schedule = dict(schedule)
    if schedule.get("total_steps") == AUTO_TOTAL:
        schedule["total_steps"] = updates
    if WARMUP_FRACTION in schedule:
        if "warmup_steps" in schedule:
            raise ScheduleError("schedule %s: warmup_steps and warmup_fraction both given; give one"
                                % (schedule.get("name"),))
        schedule["warmup_steps"] = _warmup_steps(schedule.pop(WARMUP_FRACTION), schedule.get("total_steps"))
    validate(schedule)
    return schedule


def _warmup_steps(fraction, total_steps) -> int:
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        raise ScheduleError("schedule warmup_fraction %r; a number in [0, 1) is needed" % (fraction,))
    if not _whole(total_steps) or total_steps < 1:
        raise ScheduleError("schedule warmup_fraction needs total_steps as a whole number above 0 or %r, got %r"
                            % (AUTO_TOTAL, total_steps))
    return min(round(fraction * total_steps), total_steps - 1)


def _check_warmup_cosine(schedule: dict) -> None:
    name = schedule["name"]
    warmup, total, final = schedule["warmup_steps"], schedule["total_steps"], schedule["final_lr_fraction"]
    if not _whole(warmup) or warmup < 0:
        raise ScheduleError("schedule %s: warmup_steps: expected a whole number >= 0, got %r" % (name, warmup))
    if not _whole(total) or total <= warmup:
        raise ScheduleError("schedule %s: total_steps: expected a whole number above warmup_steps (%r), got %r"
                            % (name, warmup, total))
    if isinstance(final, bool) or not isinstance(final, (int, float)) or not 0.0 <= final <= 1.0:
        raise ScheduleError("schedule %s: final_lr_fraction: expected a number in [0, 1], got %r" % (name, final))


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def factor(schedule: dict, step: int) -> float:
    """The learning rate's multiplier for the update numbered `step` (from 0); 1 without a schedule."""
    if not schedule:
        return 1.0
    if schedule["name"] != "warmup_cosine":  # a schedule added to SCHEDULES must bring its own formula
        raise ScheduleError("schedule %r: no learning-rate factor for it" % (schedule["name"],))
    warmup, total = schedule["warmup_steps"], schedule["total_steps"]
    if step < warmup:
        return step / warmup
    final = schedule["final_lr_fraction"]
    return final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup) / (total - warmup))))
