"""Writes llama-text.npz beside this file: a character-level language-modelling set from the dataset descriptions
scikit-learn ships in its wheel (sklearn/datasets/descr/*.rst, read with importlib.resources; no download).

The files are joined in name order into one stream of characters; every character seen is a token (ids in order of
the characters' code points), so the vocabulary is the text's own. The stream is cut into windows of 64 tokens,
stride 64: x is a window, y the same window one character ahead. The first 85 % of the windows train, the rest test
(no shuffling: the test windows are the last descriptions' text)."""
from importlib import resources
from pathlib import Path

import numpy as np

WINDOW = 64
TRAIN_SHARE = 0.85

files = sorted(f for f in resources.files("sklearn.datasets.descr").iterdir() if f.name.endswith(".rst"))
text = "\n".join(f.read_text(encoding="utf-8") for f in files)
characters = sorted(set(text))
ids = np.array([characters.index(c) for c in text], dtype=np.int32)
windows = (len(ids) - 1) // WINDOW
x = ids[:windows * WINDOW].reshape(windows, WINDOW)
y = ids[1:windows * WINDOW + 1].reshape(windows, WINDOW)
train = int(windows * TRAIN_SHARE)
out = Path(__file__).resolve().parent / "llama-text.npz"
np.savez(out, x_train=x[:train], y_train=y[:train], x_test=x[train:], y_test=y[train:])
print(f"wrote {out}: {len(text):,} characters of {len(files)} files, a vocabulary of {len(characters)}, "
      f"{train} training and {windows - train} test windows of {WINDOW}")
