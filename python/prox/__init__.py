"""prox: content-addressed vector search, from Python.

The same engine as the ``prox`` CLI and ``prox serve``: a map is built once
into a store (in memory, or a directory other tools and peers can read),
opened as an :class:`Index`, and searched with numpy arrays in and out.

>>> import numpy as np, prox
>>> x = np.random.default_rng(0).random((1000, 16), dtype=np.float32)
>>> index = prox.Index.build(x, metric="l2")
>>> scores, keys = index.search(x[:3], k=5)
>>> keys[:, 0].tolist()
[0, 1, 2]

* :class:`Index`: ``Index.build`` / ``Index.open``, ``search``, ``get``,
  ``verify``, ``len(index)``, ``dim``, ``metric``, ``descriptor``.
* :mod:`prox.sync`: ``pull`` a map from a peer into a local store.
* :class:`Client`: the HTTP API of a running ``prox serve``.
* :mod:`prox.errors`: the exceptions (``ProxError`` and its subclasses).

See docs/python.md in the repository for the whole API.
"""

from . import errors, sync
from ._prox import NO_KEY, Index, __version__
from .client import Client
from .errors import (
    ClientError,
    ConflictError,
    CorruptError,
    DeadlineExceededError,
    InvalidInputError,
    ProxError,
    StoreError,
    SyncError,
    UnknownMapError,
    UnsupportedError,
)

__all__ = [
    "Index",
    "Client",
    "NO_KEY",
    "sync",
    "errors",
    "ProxError",
    "InvalidInputError",
    "UnknownMapError",
    "CorruptError",
    "StoreError",
    "DeadlineExceededError",
    "UnsupportedError",
    "ConflictError",
    "SyncError",
    "ClientError",
    "__version__",
]
