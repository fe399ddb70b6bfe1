"""Anki Spanish-English sentence pairs (manythings.org), normalised as in the TensorFlow NMT tutorial."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import numpy as np

from dlbench.shared.protocol import PAD_ID

from .download import FileSpec, Source
from .prepared import Built, DatasetError
from .safe import safe_extract
from .text import ranked_words

N_PAIRS = 100_000
TRAIN_PERCENT = 80
SEED = 0
START, END = "<start>", "<end>"
MEMBER = "spa-eng/spa.txt"
# No checksum is published for this file: the first copy seen is pinned (size and sha256 recorded
# beside it in the data folder) and every later use is checked against that pin. Only the TensorFlow
# mirror is listed: manythings.org's own zip has a third column and so different bytes.
FILE = FileSpec("spa-eng.zip", ("http://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip",), None,
                note="no published checksum; pinned at first download")
SPACED = re.compile(r"([?.!,¿])")
NOT_KEPT = re.compile(r"[^a-z?.!,¿]+")


def normalise(sentence: str) -> list[str]:
    """Lower-cased, accents stripped, punctuation spaced, anything else dropped, <start>/<end> added."""
    text = "".join(c for c in unicodedata.normalize("NFD", sentence.lower().strip())
                   if unicodedata.category(c) != "Mn")
    text = NOT_KEPT.sub(" ", SPACED.sub(r" \1 ", text))
    return [START, *text.split(), END]


def read_pairs(path: Path) -> tuple[list[list[str]], list[list[str]]]:
    """(Spanish, English) token lists of the first 100,000 pairs; a third (attribution) column is dropped."""
    spanish, english = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines()[:N_PAIRS], start=1):
        columns = line.split("\t")
        if len(columns) < 2:
            raise DatasetError(f"{path}:{number}: expected English<TAB>Spanish")
        english.append(normalise(columns[0]))
        spanish.append(normalise(columns[1]))
    return spanish, english


def encode(sentences: list[list[str]], ids: dict[str, int]) -> np.ndarray:
    """Padded at the end ('post', as the tutorial does) to the longest sentence."""
    out = np.full((len(sentences), max(map(len, sentences))), PAD_ID, dtype=np.int32)
    for row, tokens in enumerate(sentences):
        out[row, :len(tokens)] = [ids[t] for t in tokens]
    return out


def build(paths: dict[str, Path], work: Path) -> Built:
    safe_extract(paths[FILE.name], work, wanted=lambda name: name == MEMBER)
    if not (work / MEMBER).is_file():
        raise DatasetError(f"{paths[FILE.name]}: no {MEMBER} inside")
    spanish, english = read_pairs(work / MEMBER)
    return encode_pairs(spanish, english, SPA_ENG.info)


def encode_pairs(spanish: list[list[str]], english: list[list[str]], info: dict) -> Built:
    """Spanish->English token lists as the arrays seq2seq-manythings trains on (see SPA_ENG's description)."""
    vocabs = {lang: ["<pad>", *ranked_words((t for s in sents for t in s), 10**9)]
              for lang, sents in (("source", spanish), ("target", english))}
    source = encode(spanish, {w: i for i, w in enumerate(vocabs["source"])})
    target = encode(english, {w: i for i, w in enumerate(vocabs["target"])})
    order = np.random.RandomState(SEED).permutation(len(source))
    n_train = len(order) * TRAIN_PERCENT // 100
    arrays = {}
    for part, rows in (("train", order[:n_train]), ("test", order[n_train:])):
        # One x per pair so the worker's (x, y) batching serves it: the source, then the decoder input
        # for teacher forcing (<start> w1 ...); y is the decoder target (w1 w2 ... <end>).
        arrays[f"x_{part}"] = np.concatenate([source[rows], target[rows, :-1]], axis=1)
        arrays[f"y_{part}"] = np.ascontiguousarray(target[rows, 1:])
    target_ids = {w: i for i, w in enumerate(vocabs["target"])}
    meta = {
        **info, "n_train": n_train, "n_test": len(order) - n_train,
        "input_shape": [source.shape[1] + target.shape[1] - 1], "input_dtype": "int32", "input_scale": None,
        "source_language": "spa", "target_language": "eng",
        "source_vocab_size": len(vocabs["source"]), "target_vocab_size": len(vocabs["target"]),
        "source_len": source.shape[1], "target_len": target.shape[1] - 1, "pad_id": PAD_ID,
        "start_id": target_ids[START], "end_id": target_ids[END],
    }
    return Built(arrays=arrays, meta=meta, vocab=vocabs)


SPA_ENG = Source(
    info={
        "name": "manythings", "task": "translation",
        "description": (
            "Anki Spanish->English sentence pairs, the first 100,000 lines of spa-eng/spa.txt "
            "(English<TAB>Spanish; a third attribution column is dropped). Each sentence: lower-cased, "
            "accents stripped (NFD, combining marks removed), ? . ! , and ¿ spaced out, any other "
            "character outside a-z turned into a space, split on spaces, wrapped in <start> ... <end>. "
            "Split 80/20 by a seed-0 permutation (80,000 train, 20,000 test). One vocabulary per language "
            "from all 100,000 pairs, as the TensorFlow tutorial the study followed does (so no "
            "out-of-vocabulary id): id 0 is padding, then words by frequency, ties alphabetical. Arrays "
            "(int32, padded with 0 at the end to the longest sentence): x (N, source_len + target_len) = the "
            "Spanish source in x[:, :source_len], then the English decoder input (the target without its "
            "last position, starting with <start>) in x[:, source_len:]; y (N, target_len) = the decoder "
            "target, the target shifted one ahead (ending with <end>). vocab.json holds "
            "{'source': [...], 'target': [...]}, a token per id."
        ),
        "source": "https://www.manythings.org/anki/ (Tatoeba sentences), via the TensorFlow tutorials' mirror",
        "licence": "CC BY 2.0 FR (Tatoeba); manythings.org asks for attribution",
    },
    files=(FILE,), build=build,
)
