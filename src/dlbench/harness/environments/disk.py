"""The framework environments on disk: what is built, how much it holds, when a run last used it, and
pruning the ones no run used lately.

uv installs a package into an environment by hard-linking its files from uv's cache (on one file
system), so an environment's files are often shared with the cache and with other environments:
`size` counts every file once per environment, `own` only the files no other link shares, which is
what removing the environment frees. The same links make rebuilding a removed environment cheap: uv
takes the packages from its cache instead of the registry.
"""
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from dlbench.harness import folders
from dlbench.harness.environments import envs

USED_STAMP = "dlbench-last-used"  # in the environment's folder; its mtime is the last run's start


@dataclass(frozen=True)
class Built:
    folder: Path
    framework: str  # the recipe's name
    version: str | None  # of the recipe's version package, as installed
    device: str  # "cpu", or "gpu" for a CUDA build
    created: str
    last_used: float | None  # seconds since the epoch, None when no run used it
    status: str  # "ok", or why the environment cannot be used as it is


def mark_used(env: envs.Environment) -> None:
    # os.utime on the descriptor: Path.touch would follow a link planted at the stamp's name
    with os.fdopen(folders.open_no_follow(env.path / USED_STAMP, os.O_WRONLY | os.O_CREAT), "wb") as stamp:
        os.utime(stamp.fileno())


def last_used(folder: Path) -> float | None:
    stamp = folder / USED_STAMP
    return stamp.stat().st_mtime if stamp.is_file() else None


def disk_usage(folder: Path) -> tuple[int, int]:
    """(bytes of every file, bytes of the files no other hard link shares), symbolic links not followed."""
    total = own = 0
    for root, _, files in os.walk(folder):
        for name in files:
            stat = os.lstat(os.path.join(root, name))
            total += stat.st_size
            own += stat.st_size if stat.st_nlink == 1 else 0
    return total, own


def _status(folder: Path, info: dict) -> str:
    spec, device = envs.parse_folder(folder.name)
    try:
        recipe = envs.get_recipe(spec, device)
    except envs.EnvError as error:
        return f"unusable: {error}"
    if info.get("recipe") != recipe.digest():
        return f"stale: built from an older recipe ({envs.create_command(spec, device)})"
    if "from_run" in info:
        return f"ok: the packages of run {info['from_run'].get('run_id')} (env create --from-run)"
    return "ok"


def built() -> list[Built]:
    """Every environment folder under env_root() that holds a finished build, in recipe order."""
    found = []
    root = envs.env_root()
    for folder in sorted(root.iterdir()) if root.is_dir() else ():
        info_file = folder / "dlbench-env.json"
        if not folder.is_dir() or not info_file.is_file():
            continue
        info = envs.Environment(folder.name, folder).info()
        spec, device = envs.parse_folder(folder.name)
        name = info.get("framework", spec.partition("@")[0])
        recipe = envs.RECIPES.get(name)
        if recipe and device == "gpu" and recipe.cuda_packages:
            recipe = recipe.for_device("gpu")  # its version is another distribution's (tensorflow, mxnet-cu117)
        version = info.get("packages", {}).get(recipe.version_package) if recipe else None
        found.append(Built(folder, name, version, device, info.get("created", "?"),
                           last_used(folder), _status(folder, info)))
    order = {name: index for index, name in enumerate(envs.RECIPES)}
    return sorted(found, key=lambda b: (order.get(b.framework, len(order)), b.folder.name))


def remove_folder(spec: str, device: str = "cpu") -> Path | None:
    """Removes the environment of a framework or name@version on a device, even one whose version is no
    longer supported; returns its folder, or None when there was none."""
    envs.split_spec(spec)  # an unknown name is refused
    try:
        folder = envs.environment(spec, device).path
    except envs.EnvError:  # a version the recipe no longer supports: its folder is named as asked
        folder = envs.env_root() / (spec + ("+gpu" if device == "gpu" else ""))
    if not folder.is_dir():
        return None
    shutil.rmtree(folder)
    return folder


def delete(environment: Built) -> None:
    shutil.rmtree(environment.folder)


def stale(older_than_days: float, now: float | None = None) -> list[Built]:
    """The environments no run used in the last `older_than_days` days (an environment no run ever
    used counts from when it was built)."""
    cutoff = (now if now is not None else time.time()) - older_than_days * 86400
    chosen = []
    for environment in built():
        used = environment.last_used
        if used is None:
            used = (environment.folder / "dlbench-env.json").stat().st_mtime
        if used < cutoff:
            chosen.append(environment)
    return chosen
