"""The framework environments as `dlbench env list` and `env prune` show them."""
import time

from dlbench.harness.environments import disk, envs
from dlbench.harness.present import listing


def mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB"


def days_ago(when: float | None) -> str:
    if when is None:
        return "never"
    hours = (time.time() - when) / 3600
    return f"{hours:.0f} h ago" if hours < 48 else f"{hours / 24:.0f} days ago"


def table() -> str:
    """`dlbench env list`: the built environments, their sizes and use, then the recipes not built."""
    rows = [["environment", "framework", "version", "device", "size", "own", "built", "last run", "status"]]
    for built in disk.built():
        size, own = disk.disk_usage(built.folder)
        rows.append([built.folder.name, built.framework, built.version or "?", built.device, mib(size), mib(own),
                     built.created[:10], days_ago(built.last_used), built.status])
    present = {row[0] for row in rows}
    missing = [name for name in envs.RECIPES if name not in present]
    rows += [[name, name, envs.RECIPES[name].default_version, "-", "-", "-", "-", "-", "missing"] for name in missing]
    create = f"\ncreate the missing ones with:\n  dlbench env create {' '.join(missing)}" if missing else ""
    # the folder on a line of its own, as `list frameworks` gives it: a long one (a test's) pushed the sentence
    # after it past 120 columns
    return listing.aligned(rows) + (f"\nenvironments in {envs.env_root()}\nown: what removing it frees (the rest is "
                                    "hard-linked from uv's cache or another environment)") + create
