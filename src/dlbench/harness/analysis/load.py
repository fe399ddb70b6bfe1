"""Reading the runs of a results folder or store file, with errors that name the path, and the test sets
of the datasets they used."""
import json
from pathlib import Path

from dlbench.harness.analysis.findings import HeldOutSet
from dlbench.harness.certification import machine_store
from dlbench.harness.measure.machine import hardware
from dlbench.harness.store import FILENAME, Store
from dlbench.shared.protocol import META_FILE


class AnalysisError(ValueError):
    """Bad input to an analysis: the message names the value and what is accepted."""


def store_path(path: Path | str) -> Path:
    """The store of a results folder (its dlbench.sqlite) or a store file itself; never creates one."""
    path = Path(path)
    if path.is_dir():
        if not (path / FILENAME).is_file():
            raise AnalysisError(f"no results store in {path} (expected {path / FILENAME}); give a results folder "
                                "or a dlbench.sqlite file")
        return path / FILENAME
    if not path.is_file():
        raise AnalysisError(f"{path} does not exist; give a results folder or a dlbench.sqlite file")
    return path


def read_runs(path: Path | str) -> list[dict]:
    """Every run of the store, as Store.runs() gives them (an older store is migrated on opening), each with
    its certificate's verdict in the machine's store now (machine_store.with_current_verdicts)."""
    with Store(store_path(path), for_reading=True) as store:
        runs = store.runs()
    return machine_store.with_current_verdicts(runs)


def device_with_hardware(runs: list[dict]) -> list[dict]:
    """The runs as given when they all ran on one hardware model. When they span several (a Ray cluster
    of mixed nodes, or stores from two machines), each run's device names its model, "cpu: AMD EPYC
    7B13": summaries, statistics, findings, the report and compare group by device, so runs on different
    hardware are never pooled, ranked or matched together, and every title and label says which it is."""
    if len({hardware(run) for run in runs} - {None}) <= 1:  # runs stored before machines were recorded do not count
        return runs
    return [dict(run, device=f"{run.get('device') or '?'}: {hardware(run) or 'not recorded'}") for run in runs]


def held_out_sets(runs: list[dict], data_dir: Path) -> dict[str, HeldOutSet]:
    """Dataset name -> its test set's size and classes, read from the prepared dataset under data_dir
    whose content hash is the one the runs recorded; a dataset not prepared there, or prepared from other
    content, is left out (its accuracy then gets no sampling error)."""
    found = {}
    for name, digest in {(r.get("dataset"), r.get("dataset_hash")) for r in runs}:
        meta_path = Path(data_dir) / "prepared" / str(name) / META_FILE
        if not name or not digest or not meta_path.is_file():
            continue
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError) as error:
            raise AnalysisError(f"{meta_path} is not readable JSON ({error}); prepare {name} again "
                                f"(dlbench data fetch {name}) or remove it") from None
        if meta.get("hash") == digest and isinstance(meta.get("n_test"), int) and meta["n_test"] > 0:
            found[name] = HeldOutSet(meta["n_test"], meta.get("num_classes"))
    return found
