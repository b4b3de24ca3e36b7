"""Shared fixtures: seeded data and numpy brute force (the reference every
search result is checked against)."""

import os

import numpy as np
import pytest


def seed():
    """The run's seed (PROX_SEED, default fixed): printed in failures."""
    return int(os.environ.get("PROX_SEED", "20261205"))


@pytest.fixture
def rng():
    return np.random.default_rng(seed())


def brute_force(base, queries, k, metric):
    """Exact top-k row ids and scores with the engine's score forms: squared
    L2, ``1 - cos`` for cosine, ``-dot`` for inner product (lower is nearer).
    Ties are broken by key order, as the engine does."""
    b = base.astype(np.float64)
    q = np.atleast_2d(queries).astype(np.float64)
    if metric == "l2":
        s = ((q[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    elif metric == "ip":
        s = -(q @ b.T)
    elif metric == "cosine":
        bn = b / np.linalg.norm(b, axis=1, keepdims=True)
        qn = q / np.linalg.norm(q, axis=1, keepdims=True)
        s = 1.0 - qn @ bn.T
    else:
        raise ValueError(metric)
    ids = np.lexsort((np.broadcast_to(np.arange(b.shape[0]), s.shape), s), axis=1)[:, :k]
    return ids, np.take_along_axis(s, ids, 1)


def recall(found, truth):
    """Mean |found ∩ truth| / k over rows."""
    k = truth.shape[1]
    return float(np.mean([len(set(f.tolist()) & set(t.tolist())) / k for f, t in zip(found, truth)]))
