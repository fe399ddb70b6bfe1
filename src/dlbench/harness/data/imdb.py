"""IMDB Large Movie Review Dataset (aclImdb v1): reviews tokenised and encoded like Keras's IMDB."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from .download import FileSpec, Source
from .polarity import INDEX_FROM, encode_labelled
from .prepared import Built, DatasetError
from .safe import safe_extract

VOCAB_SIZE = 5000  # ids 0..4999: the three reserved ids, then the 4,997 most frequent train words
SEQ_LEN = 500
SHUFFLE_SEED = 113  # Keras's imdb.load_data seed; the stored order is not sorted by label
TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)*")
BREAK = re.compile(r"<br\s*/?>")
FILE = FileSpec(
    "aclImdb_v1.tar.gz", ("https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",), 84125825,
    "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe", "7c2ac02c03563afcf9b574c7e56c153a",
)
SPLIT_FOLDER = re.compile(r"^aclImdb/(train|test)/(pos|neg)/[^/]+\.txt$")


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(BREAK.sub(" ", text.lower()))


def read_split(root: Path, split: str) -> tuple[list[list[str]], np.ndarray]:
    """Reviews of one split, neg then pos, each by numeric id, then shuffled with Keras's seed."""
    reviews, labels = [], []
    for label, folder in enumerate(("neg", "pos")):
        files = sorted((root / split / folder).glob("*.txt"), key=lambda p: int(p.name.split("_")[0]))
        reviews += [tokenize(p.read_text(encoding="utf-8")) for p in files]
        labels += [label] * len(files)
    if not reviews:
        raise DatasetError(f"{root}: no reviews in {split}/pos or {split}/neg")
    order = np.random.RandomState(SHUFFLE_SEED).permutation(len(reviews))
    return [reviews[i] for i in order], np.asarray(labels, dtype=np.int32)[order]


def build(paths: dict[str, Path], work: Path) -> Built:
    safe_extract(paths[FILE.name], work, wanted=lambda name: bool(SPLIT_FOLDER.match(name)))
    train, y_train = read_split(work / "aclImdb", "train")
    test, y_test = read_split(work / "aclImdb", "test")
    return encode_labelled(IMDB.info, (train, y_train), (test, y_test), ["neg", "pos"], VOCAB_SIZE - INDEX_FROM,
                           VOCAB_SIZE, SEQ_LEN)


IMDB = Source(
    info={
        "name": "imdb", "task": "binary",
        "description": (
            "IMDB Large Movie Review Dataset v1.0: 25,000 train and 25,000 test reviews (the 50,000 "
            "unlabelled ones are not used), label pos=1, neg=0, each split shuffled with seed 113. "
            "Tokenised: lower-cased, <br /> tags replaced by spaces, tokens matched by the regex "
            "[a-z0-9]+(?:'[a-z]+)* (punctuation dropped). Vocabulary from the train split only, ranked by "
            "frequency with ties alphabetical, keeping 4,997 words so ids span 0..4999 (the study's "
            "5,000). Encoded like Keras's IMDB: 0 padding, 1 start, 2 out-of-vocabulary, words from 3; "
            "each review is [1] + ids, cut or padded to 500 tokens at the front (truncating='pre', "
            "padding='pre'), so the last step sees the review's end. vocab.json gives each id's token."
        ),
        "source": "https://ai.stanford.edu/~amaas/data/sentiment/ (Maas et al., ACL 2011)",
        "licence": "no explicit licence; released for research by the authors; reviews from IMDb",
    },
    files=(FILE,), build=build,
)
