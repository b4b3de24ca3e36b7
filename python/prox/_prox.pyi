"""Type stubs of the native module (prox._prox)."""

from os import PathLike
from pathlib import Path
from typing import Any, Dict, Literal, Mapping, Optional, Sequence, Tuple, Union, overload

import numpy as np
import numpy.typing as npt

__version__: str
NO_KEY: int

Key = Union[int, bytes]
Keys = Union[Sequence[int], Sequence[bytes], npt.NDArray[np.integer]]
Filter = Mapping[str, Any]
Params = Union[bool, str, Mapping[str, Union[int, str]], None]
StorePath = Union[str, "PathLike[str]"]

class Index:
    """A proximity map opened for search."""

    @staticmethod
    def build(
        vectors: npt.ArrayLike,
        keys: Optional[Keys] = None,
        values: Optional[Sequence[Union[bytes, str]]] = None,
        *,
        metric: Literal["l2", "cosine", "ip"] = "l2",
        sq8: Union[bool, int, None] = None,
        hnsw: Params = None,
        pq: Params = None,
        store: Optional[StorePath] = None,
        name: Optional[str] = None,
        threads: Optional[int] = None,
        warm: bool = False,
        layouts: bool = False,
        profile: int = 500,
    ) -> "Index": ...
    @staticmethod
    def open(
        store: StorePath,
        name: Optional[str] = None,
        *,
        descriptor: Optional[str] = None,
        keys: Literal["auto", "int", "bytes"] = "auto",
        warm: bool = True,
        writable: bool = False,
    ) -> "Index": ...
    def search(
        self,
        queries: npt.ArrayLike,
        k: int = 10,
        *,
        mode: Literal["auto", "exact", "fast", "balanced", "high"] = "auto",
        path: Literal["auto", "native", "hnsw", "pq"] = "auto",
        ef: Optional[int] = None,
        nprobe: Optional[int] = None,
        rerank: Optional[int] = None,
        budget: Optional[int] = None,
        recall: Optional[float] = None,
        filter: Optional[Filter] = None,
        with_values: bool = False,
        timeout: Optional[float] = None,
        threads: Optional[int] = None,
    ) -> Tuple[npt.NDArray[Any], ...]:
        """``(scores, keys)`` or ``(scores, keys, values)``."""
    def get(self, key: Key) -> Optional[Tuple[npt.NDArray[np.float32], bytes]]: ...
    def verify(self) -> Dict[str, int]: ...
    def warm(self) -> int: ...
    def upsert(
        self,
        keys: Keys,
        vectors: npt.ArrayLike,
        values: Optional[Sequence[Union[bytes, str]]] = None,
        *,
        canonical_hnsw: str = "refuse",
    ) -> Dict[str, Any]:
        """One atomic batch of inserts/replacements; the write report."""
    def delete(self, keys: Keys) -> Dict[str, Any]:
        """One atomic batch of deletes; the write report."""
    def __len__(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def metric(self) -> str: ...
    @property
    def descriptor(self) -> str: ...
    @property
    def sidecars(self) -> Dict[str, Optional[str]]: ...
    @property
    def layouts(self) -> Dict[str, Optional[str]]: ...
    @property
    def profile(self) -> Optional[Dict[str, Any]]: ...
    def choose(self, target: float) -> Dict[str, Any]: ...
    def measure_profile(self, queries: int = 500) -> Optional[Dict[str, Any]]: ...
    @property
    def key_type(self) -> Literal["int", "bytes"]: ...
    @property
    def store(self) -> Optional[Path]: ...
    @property
    def name(self) -> Optional[str]: ...

def pull(
    store: StorePath,
    peer: str,
    name: str,
    *,
    local: Optional[str] = None,
    insecure_any_peer: bool = False,
) -> Dict[str, Any]: ...
