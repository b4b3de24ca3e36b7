"""Replication between prox peers: pull a map from a peer into a local store.

>>> import prox
>>> report = prox.sync.pull("db", "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooW...", "docs")  # doctest: +SKIP
>>> index = prox.Index.open("db", "docs")  # doctest: +SKIP

The work is the sync crate's (the same code as ``prox sync pull``): only the
blocks missing locally are fetched, each is checked against its CID, and the
local root moves only when the whole map is present.
"""

from ._prox import pull

__all__ = ["pull"]
