"""Reading the runs of a results folder or store file, with errors that name the path."""
from pathlib import Path

from dlbench.store import FILENAME, Store


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
    """Every run of the store, as Store.runs() gives them (an older store is migrated on opening)."""
    with Store(store_path(path)) as store:
        return store.runs()
