"""NVML's Python bindings, looked up once per harness process for the monitor, the energy meter and the
machine's description."""
import sys
import warnings
from types import ModuleType

_missing = False  # a failed import searches the whole path again each time: 60 ms of CPU here


def bindings() -> ModuleType | None:
    """The pynvml module, or None where it is not installed (remembered after the first failure)."""
    global _missing
    if _missing and "pynvml" not in sys.modules:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the deprecated `pynvml` wrapper package warns on import
            import pynvml
    except ImportError:
        _missing = True
        return None
    return pynvml
