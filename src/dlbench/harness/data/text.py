"""Helpers shared by the two text datasets read from gensim's bundled test corpora."""

from __future__ import annotations

import importlib.util
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from .prepared import DatasetError

# cp1252 before latin-1: pang_lee_polarity.cor has byte 0x97, an em dash in cp1252 but an
# invisible control character in latin-1. latin-1 decodes any byte, so it is the last resort.
ENCODINGS = ("utf-8", "cp1252", "latin-1")


def gensim_test_file(filename: str) -> Path:
    """Path of a corpus in gensim's test data, found without importing gensim (slow)."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError(
            f"{filename} comes from the 'gensim' package, which is not installed (pip install gensim)"
        )
    path = Path(spec.submodule_search_locations[0]) / "test" / "test_data" / filename
    if not path.is_file():
        raise DatasetError(f"{path}: not found; this gensim installation lacks its test data")
    return path


def read_text(path: Path) -> str:
    data = path.read_bytes()
    for encoding in ENCODINGS[:-1]:
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode(ENCODINGS[-1])


def ranked_words(tokens: Iterable[str], limit: int) -> list[str]:
    """The `limit` most frequent tokens, ties broken alphabetically so the order is reproducible."""
    counts = Counter(tokens)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [word for word, _ in ranked[:limit]]
