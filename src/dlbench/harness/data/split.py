"""Deterministic stratified train/test split shared by the labelled datasets."""

from __future__ import annotations

import numpy as np

SEED = 0
TEST_FRACTION = 0.2


def stratified_split(labels: np.ndarray, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Return (train_idx, test_idx): round(20%) of each class to test, both sets shuffled.

    Uses the legacy RandomState because NumPy freezes its stream across versions (NEP 19);
    the Generator API does not promise that, and the split feeds the dataset hash.
    """
    rng = np.random.RandomState(seed)
    train, test = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_test = int(round(len(members) * TEST_FRACTION))
        test.append(members[:n_test])
        train.append(members[n_test:])
    # Shuffle across classes so the stored order is not sorted by label.
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))
