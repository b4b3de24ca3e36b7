"""The exceptions prox raises.

Every error derives from :class:`ProxError`; each subclass also derives from
the built-in exception a Python caller would expect (``ValueError`` for bad
input, ``LookupError`` for an unknown map, ``OSError`` for the store,
``TimeoutError`` for a deadline, ``NotImplementedError`` for what the engine
cannot do yet), so ``except ValueError`` keeps working.

Attributes carried when the engine knows them (else absent):

* ``field``: the request field at fault (``"k"``, ``"filter"``, ``"vectors"``...)
* ``expected`` / ``got``: dimensions of a wrong-dimension vector
* ``key``: the record key at fault (bytes)
* ``cid``: the block at fault (hex)
"""


class ProxError(Exception):
    """Base class of every prox error."""


class InvalidInputError(ProxError, ValueError):
    """A wrong shape, dtype, dimension, NaN or infinity, duplicate key, bad
    parameter or request field. Raised before anything is written."""


class UnknownMapError(ProxError, LookupError):
    """No map is published under the root name."""


class CorruptError(ProxError):
    """A block does not hash to its CID, does not decode, or is missing from
    the store."""


class StoreError(ProxError, OSError):
    """The store cannot be used: locked by another process, read-only,
    poisoned by an earlier I/O error, or an I/O failure."""


class DeadlineExceededError(ProxError, TimeoutError):
    """The search passed its ``timeout`` and was stopped."""


class UnsupportedError(ProxError, NotImplementedError):
    """The operation is not available in this build of prox (the message
    says why)."""


class ConflictError(ProxError):
    """A write lost a race: another writer moved the map's root since this
    index was opened (reopen it and retry). Nothing was published."""


class SyncError(ProxError):
    """A pull failed: the peer is unreachable, misbehaved, refused, or has no
    such root."""


class ClientError(ProxError):
    """An error answer of ``prox serve`` (:class:`prox.Client`).

    ``status`` is the HTTP status, ``code`` the API's stable error code
    (``"wrong_dimension"``, ``"unknown_map"``, ...; ``None`` when the answer
    was not a prox error body) and ``field`` the request field at fault."""

    def __init__(self, message, status=None, code=None, field=None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field


__all__ = [
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
]
