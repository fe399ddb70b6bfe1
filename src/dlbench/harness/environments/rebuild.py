"""An environment rebuilt from a stored run: the exact packages the run recorded, checked against the hashes its
environment's build recorded where the store holds them (`dlbench env create --from-run RUN_ID`)."""
from pathlib import Path

from dlbench.harness.environments import envs
from dlbench.harness.store import FILENAME, Store, StoreError


def from_run(results_dir: Path, run_id: int) -> str:
    """Rebuilds the environment of run `run_id` of the store in `results_dir` with exactly its packages
    (`dlbench env create --from-run`); returns the line that says what was built. Raises StoreError naming
    the store and the runs it holds."""
    path = results_dir / FILENAME
    if not path.exists():
        raise StoreError(f"no results at {path}; pass the --results folder that holds run {run_id}")
    with Store(path, for_reading=True) as store:
        runs = {run["id"]: run for run in store.runs()}
        if run_id not in runs:
            known = f"{min(runs)} to {max(runs)}" if runs else "none"
            raise StoreError(f"no run {run_id} in {path} (its runs: {known})")
        run = runs[run_id]
        # the environment's freeze as the run resolved it: the run's own package list also holds what the
        # adapter reported importing, by module name ("tensorflow" for the tensorflow-cpu distribution)
        packages = run["config"]["env_packages"]
        recorded = store.environment(envs.digest_of(packages)) or {}
    origin = {"store": str(path.resolve()), "run_id": run_id, "cell_hash": run["cell_hash"],
              "started_at": run["started_at"]}
    hashes = recorded.get("hashes")
    env = envs.create_from_run(run["framework"], run["python"].split()[0], packages, origin,
                               run["config"]["device"], hashes)
    checked = env.info()["from_run"]["packages_checked_by_hash"]
    how = (f"{checked} of them checked against the registry's hashes recorded at its build" if hashes
           else "pinned by version only: the store recorded no hashes of that environment")
    return f"{env.path.name}: rebuilt with run {run_id}'s {len(packages)} packages at {env.path}; {how}"
