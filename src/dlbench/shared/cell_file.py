"""The cell file: everything the worker is told about its cell, as one typed record. The harness builds a
CellFile and writes it (harness/run/one_cell.py, as CELL_FILE in the run's folder); the worker reads it
back with CellFile.read (worker/train.py) and uses its attributes. Shared by both sides: Python 3.8, the
standard library alone.

The file is one JSON object holding every field below, no other: a field the reader does not know, one
missing, or one of the wrong type is refused with the file, the field and what is accepted. The model,
recipe and serve settings stay plain JSON objects here (the IR's and the recipe's own checks are theirs;
worker/serve.py checks the serve settings).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Optional

CELL_FILE = "cell.json"
# A cell's mode: an inference cell is served (worker/serve.py); a training cell has no mode (None).
INFERENCE = "inference"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional(check):
    return lambda value: value is None or check(value)


# per field: its check and what it accepts, in the refusal's words
_ACCEPTED = {
    "adapter": (lambda v: isinstance(v, str) and ":" in v, "a string module:Class, the framework's adapter"),
    "model": (lambda v: isinstance(v, dict), "a JSON object, the model's IR"),
    "recipe": (lambda v: isinstance(v, dict), "a JSON object, the recipe"),
    "data_path": (lambda v: isinstance(v, str) and v != "", "a string, the prepared dataset's folder"),
    "seed": (_is_int, "a whole number"),
    "epochs": (_is_int, "a whole number"),
    "device": (lambda v: isinstance(v, str) and v != "", "a string, the cell's device (cpu or gpu)"),
    "threads": (lambda v: _is_int(v) and v >= 1, "a whole number, at least 1"),
    "train_samples": (_optional(_is_int), "a whole number, or null for the whole training split"),
    "weights": (_optional(lambda v: isinstance(v, str) and v != ""),
                "a string, the starting weights' .npz file, or null for the canonical initialisation"),
    "mode": (lambda v: v is None or v == INFERENCE, "%r, or null for a training cell" % INFERENCE),
    "serve": (_optional(lambda v: isinstance(v, dict)), "a JSON object, an inference cell's settings, or null"),
}


class CellFileError(ValueError):
    """A cell file or record the worker cannot take: its message names the file, the field and what is
    accepted."""


@dataclass(frozen=True)
class CellFile:
    adapter: str  # module:Class of the framework's adapter (its recipe's)
    model: dict  # the model's IR (shared/ir.py)
    recipe: dict  # the cell's recipe: optimiser, batch size, epochs, loss, ...
    data_path: str  # the prepared dataset's folder (shared/protocol.py names its files)
    seed: int
    epochs: int
    device: str
    threads: int
    train_samples: Optional[int] = None  # the first N training samples; None: the whole split
    weights: Optional[str] = None  # the suite entry's starting weights (.npz); None: canonical_init
    mode: Optional[str] = None  # INFERENCE, or None for a training cell
    serve: Optional[dict] = None  # an inference cell's settings (worker/serve.SETTINGS)

    def __post_init__(self):
        for name, value in self.to_dict().items():
            _check(name, value, "the cell record")

    @property
    def inference(self) -> bool:
        return self.mode == INFERENCE

    def to_dict(self) -> dict:
        return {field.name: getattr(self, field.name) for field in fields(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def write(self, path) -> None:
        with open(str(path), "w") as handle:
            handle.write(self.to_json())

    @classmethod
    def from_dict(cls, data, source: str = "the cell record") -> CellFile:
        """The record of a parsed cell file; refuses a missing, unknown or mistyped field, naming `source`."""
        if not isinstance(data, dict):
            raise CellFileError("%s: a JSON object of the fields %s; got %s"
                                % (source, ", ".join(_ACCEPTED), type(data).__name__))
        missing = [name for name in _ACCEPTED if name not in data]
        if missing:
            raise CellFileError("%s: field %s missing; a cell file holds every one of %s"
                                % (source, ", ".join(missing), ", ".join(_ACCEPTED)))
        unknown = sorted(str(name) for name in data if name not in _ACCEPTED)
        if unknown:
            raise CellFileError("%s: unknown field %s; accepted: %s" % (source, ", ".join(unknown),
                                                                        ", ".join(_ACCEPTED)))
        for name in _ACCEPTED:
            _check(name, data[name], source)
        return cls(**data)

    @classmethod
    def read(cls, path) -> CellFile:
        """The cell file at `path`, checked field by field (from_dict)."""
        source = "cell file %s" % (path,)
        with open(str(path)) as handle:
            text = handle.read()
        try:
            data = json.loads(text)
        except ValueError as error:
            raise CellFileError("%s: not JSON (%s)" % (source, error)) from None
        return cls.from_dict(data, source)


def _check(name: str, value, source: str) -> None:
    check, accepted = _ACCEPTED[name]
    if not check(value):
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise CellFileError("%s: field %s is %s; accepted: %s" % (source, name, shown, accepted))


# the checks name every field of the record, in its order
assert tuple(_ACCEPTED) == tuple(field.name for field in fields(CellFile))
