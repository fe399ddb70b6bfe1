"""Writes digits.npz beside this file: scikit-learn's bundled 8x8 handwritten digits (1,797 images, values
0..16), as x (N, 8, 8, 1) uint8 and y int64 labels 0..9, split 80/20 by a seeded permutation."""
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

digits = load_digits()
x = digits.images.astype(np.uint8)[..., None]  # (1797, 8, 8, 1), values 0..16
y = digits.target  # int64, 0..9
order = np.random.RandomState(0).permutation(len(x))
test, train = order[:360], order[360:]
out = Path(__file__).resolve().parent / "digits.npz"
np.savez(out, x_train=x[train], y_train=y[train], x_test=x[test], y_test=y[test])
print(f"wrote {out}: {len(train)} training and {len(test)} test images of {x.shape[1:]}")
