"""pang-lee-polarity: 200 real movie-review sentences from gensim, encoded like Keras's IMDB."""

from __future__ import annotations

import numpy as np

from dlbench.shared.protocol import PAD_ID

from .prepared import Built, DatasetError, base_meta
from .split import stratified_split
from .text import gensim_test_file, ranked_words, read_text

NAME = "pang-lee-polarity"
FILENAME = "pang_lee_polarity.cor"
LABELS = {"__label__neg": 0, "__label__pos": 1}
# Keras IMDB's index scheme: 0 padding, 1 start of sequence, 2 out of vocabulary, words from 3.
START_ID, OOV_ID, INDEX_FROM = 1, 2, 3  # PAD_ID 0, shared.protocol's
RESERVED = ["<pad>", "<start>", "<oov>"]
MAX_WORDS = 5000  # the study's IMDB vocabulary cap
SEQ_LEN = 50
INFO = {
    "name": NAME,
    "task": "binary",
    "description": (
        "200 real movie-review sentences (100 positive, 100 negative) from Pang and Lee's sentence "
        "polarity data, as shipped in gensim's test data (already lower-cased and tokenised by "
        "spaces; read as utf-8, falling back to cp1252). Label pos=1, neg=0. Split 80/20 per class "
        "with a seed-0 stratified permutation. Vocabulary from the train split only, words ranked by "
        "frequency with ties broken alphabetically, capped at 5,000 words. Encoded like Keras's "
        "IMDB: 0 padding, 1 start, 2 out-of-vocabulary, words from 3; each sequence is [1] + ids, "
        "cut or padded to 50 tokens at the front (Keras pad_sequences defaults padding='pre', "
        "truncating='pre') so a recurrent model's last step sees the last real token. vocab.json "
        "lists the token for each id. A tiny offline stand-in for quick runs: this is NOT the IMDB "
        "reviews dataset the study uses, and its accuracies are not comparable with IMDB's."
    ),
    "source": (
        "gensim/test/test_data/pang_lee_polarity.cor from the installed gensim package "
        "(sentence polarity dataset v1.0, B. Pang and L. Lee, 2005)"
    ),
    "licence": (
        "no explicit licence; released by the authors for research use and redistributed in "
        "gensim's test data (gensim: LGPL-2.1)"
    ),
}


def build() -> Built:
    sentences, labels = read_corpus()
    train, test = stratified_split(labels)
    return encode_labelled(INFO, ([sentences[i] for i in train], labels[train]),
                           ([sentences[i] for i in test], labels[test]), ["neg", "pos"], MAX_WORDS, MAX_WORDS)


def encode_labelled(info: dict, train: tuple[list[list[str]], np.ndarray], test: tuple[list[list[str]], np.ndarray],
                    class_names: list[str], n_words: int, max_words: int, seq_len: int = SEQ_LEN) -> Built:
    """Labelled token lists as Keras's IMDB arrays: the vocabulary is the train split's `n_words` most
    frequent words (ties alphabetical), ids from INDEX_FROM; `max_words` is the cap the meta reports."""
    words = ranked_words((w for tokens in train[0] for w in tokens), n_words)
    ids = {word: INDEX_FROM + rank for rank, word in enumerate(words)}
    arrays = {"x_train": encode(train[0], ids, seq_len), "y_train": train[1],
              "x_test": encode(test[0], ids, seq_len), "y_test": test[1]}
    meta = base_meta(info, arrays, input_scale=None)
    meta.update(
        num_classes=2, class_names=class_names, vocab_size=INDEX_FROM + len(words), seq_len=seq_len,
        pad_id=PAD_ID, start_id=START_ID, oov_id=OOV_ID, index_from=INDEX_FROM, max_words=max_words,
    )
    return Built(arrays=arrays, meta=meta, vocab=RESERVED + words)


def read_corpus() -> tuple[list[list[str]], np.ndarray]:
    """Token lists and int32 labels, one per line `__label__pos word word ...`."""
    path = gensim_test_file(FILENAME)
    sentences, labels = [], []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        label, *tokens = line.split()
        if label not in LABELS:
            raise DatasetError(f"{path}:{number}: unexpected label {label!r}")
        sentences.append(tokens)
        labels.append(LABELS[label])
    return sentences, np.asarray(labels, dtype=np.int32)


def encode(sentences: list[list[str]], ids: dict[str, int], seq_len: int = SEQ_LEN) -> np.ndarray:
    out = np.full((len(sentences), seq_len), PAD_ID, dtype=np.int32)
    for row, tokens in enumerate(sentences):
        seq = [START_ID] + [ids.get(word, OOV_ID) for word in tokens]
        seq = seq[-seq_len:]  # truncating='pre' keeps the end of the sentence
        out[row, seq_len - len(seq):] = seq  # padding='pre'
    return out
