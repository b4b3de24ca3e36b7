"""Every bad input raises a typed exception (and nothing is written)."""

import numpy as np
import pytest

import prox
from prox.errors import (
    CorruptError,
    InvalidInputError,
    ProxError,
    StoreError,
    UnknownMapError,
)

D = 8


@pytest.fixture
def index(rng):
    return prox.Index.build(rng.standard_normal((100, D)).astype(np.float32))


def test_hierarchy():
    assert issubclass(InvalidInputError, ValueError)
    assert issubclass(UnknownMapError, LookupError)
    assert issubclass(StoreError, OSError)
    assert issubclass(prox.DeadlineExceededError, TimeoutError)
    assert issubclass(prox.UnsupportedError, NotImplementedError)
    for e in (InvalidInputError, UnknownMapError, StoreError, CorruptError, prox.SyncError, prox.ClientError):
        assert issubclass(e, ProxError)


@pytest.mark.parametrize(
    "query, expected, got",
    [(np.zeros(D + 1, np.float32), D, D + 1), (np.zeros((3, D - 1), np.float32), D, D - 1)],
)
def test_wrong_dimension(index, query, expected, got):
    with pytest.raises(InvalidInputError) as e:
        index.search(query)
    assert (e.value.expected, e.value.got) == (expected, got)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_query(index, bad):
    q = np.zeros(D, np.float32)
    q[3] = bad
    with pytest.raises(ValueError, match="non-finite"):
        index.search(q)
    with pytest.raises(ValueError):
        index.search(np.stack([np.zeros(D, np.float32), q]))


def test_bad_shapes_and_dtypes(index):
    with pytest.raises(InvalidInputError, match="shape"):
        index.search(np.zeros((2, 2, D), np.float32))
    with pytest.raises(ValueError):
        index.search(np.array(["a"] * D))
    with pytest.raises(ValueError):
        index.search("not a vector")
    with pytest.raises(InvalidInputError, match=r"\(n, d\)"):
        prox.Index.build(np.zeros(D, np.float32))


@pytest.mark.parametrize(
    "opts, field",
    [
        (dict(k=0), "k"),
        (dict(ef=0), "ef"),
        (dict(nprobe=0), "nprobe"),
        (dict(rerank=0), "rerank"),
        (dict(mode="fastest"), "mode"),
        (dict(path="ivf"), "path"),
        (dict(path="hnsw"), "path"),
        (dict(path="pq", mode="exact"), "path"),
        (dict(filter={"prefix": b"a", "keys": []}), "filter"),
        (dict(filter={"range": (1,)}), "filter.range"),
        (dict(filter={"suffix": b"a"}), "filter"),
        (dict(filter=[1, 2]), "filter"),
        (dict(filter={"keys": [-1]}), "filter.keys"),
        (dict(filter={"keys": np.array([0.5])}), "filter.keys"),
        (dict(threads=0), "threads"),
        (dict(timeout=-1.0), "timeout"),
    ],
)
def test_bad_request_fields(index, opts, field):
    with pytest.raises(InvalidInputError) as e:
        index.search(np.zeros(D, np.float32), **opts)
    if field is not None:
        assert e.value.field == field


def test_negative_k_and_budget_are_type_errors(index):
    with pytest.raises(OverflowError):
        index.search(np.zeros(D, np.float32), k=-1)


def test_deadline_already_passed(rng):
    index = prox.Index.build(rng.standard_normal((3000, D)).astype(np.float32))
    with pytest.raises(prox.DeadlineExceededError):
        index.search(rng.standard_normal((200, D)).astype(np.float32), k=10, mode="exact", timeout=0.0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(metric="manhattan"), "metric"),
        (dict(hnsw={"m": 0}), "max_connections"),
        (dict(hnsw={"bogus": 1}), "bogus"),
        (dict(hnsw=3.5), "hnsw"),
        (dict(pq={"subquantizers": D + 1}), "subquantizers"),
        (dict(sq8="yes"), "sq8"),
        (dict(threads=0), "threads"),
        (dict(keys=[1, 2]), "keys"),
        (dict(keys=[1] * 10), "duplicate"),
        (dict(keys=[-1] + list(range(9))), "keys"),
        (dict(keys=np.linspace(0, 1, 10)), "integer"),
        (dict(values=[b"x"]), "values"),
        (dict(values=[1] * 10), "value"),
        (dict(store="STORE"), "name"),
    ],
)
def test_bad_build_arguments(rng, tmp_path, kwargs, match):
    if kwargs.get("store") == "STORE":
        kwargs["store"] = tmp_path / "db"
    with pytest.raises(InvalidInputError, match=match):
        prox.Index.build(rng.standard_normal((10, D)).astype(np.float32), **kwargs)


def test_bad_vectors_are_rejected_before_anything_is_published(rng, tmp_path):
    x = rng.standard_normal((10, D)).astype(np.float32)
    x[7, 2] = np.nan
    with pytest.raises(InvalidInputError) as e:
        prox.Index.build(x, store=tmp_path / "db", name="m")
    assert e.value.key == (7).to_bytes(8, "big")
    with pytest.raises(UnknownMapError):
        prox.Index.open(tmp_path / "db", "m")
    zero = np.ones((4, D), np.float32)
    zero[2] = 0
    with pytest.raises(InvalidInputError, match="zero vector"):
        prox.Index.build(zero, metric="cosine")
    with pytest.raises(InvalidInputError, match="root name"):
        prox.Index.build(np.ones((4, D), np.float32), store=tmp_path / "db", name="")


def test_open_errors(rng, tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        prox.Index.open(tmp_path / "nowhere", "m")
    prox.Index.build(rng.standard_normal((10, D)).astype(np.float32), store=tmp_path / "db", name="m")
    with pytest.raises(UnknownMapError):
        prox.Index.open(tmp_path / "db", "other")
    with pytest.raises(InvalidInputError, match="exactly one"):
        prox.Index.open(tmp_path / "db")
    with pytest.raises(InvalidInputError, match="exactly one"):
        prox.Index.open(tmp_path / "db", "m", descriptor="00" * 32)
    with pytest.raises(InvalidInputError, match="CID"):
        prox.Index.open(tmp_path / "db", descriptor="xyz")
    with pytest.raises(CorruptError):
        prox.Index.open(tmp_path / "db", descriptor="ab" * 32)
    with pytest.raises(InvalidInputError, match="keys"):
        prox.Index.open(tmp_path / "db", "m", keys="strings")


def test_bad_keys_for_get(index):
    with pytest.raises(InvalidInputError):
        index.get(-5)
    with pytest.raises(InvalidInputError):
        index.get("text")
    assert index.get(10**6) is None


def test_int_results_from_a_bytes_keyed_map_name_the_fix(rng, tmp_path):
    x = rng.standard_normal((10, D)).astype(np.float32)
    prox.Index.build(x, [b"k%d" % i for i in range(10)], store=tmp_path / "db", name="m")
    index = prox.Index.open(tmp_path / "db", "m", keys="int")
    with pytest.raises(InvalidInputError, match='keys="bytes"'):
        index.search(x[0], k=1)
    assert prox.Index.open(tmp_path / "db", "m").key_type == "bytes"


def test_sync_pull_rejects_an_unauthenticated_peer_address(tmp_path):
    with pytest.raises(InvalidInputError, match="p2p"):
        prox.sync.pull(tmp_path / "db", "/ip4/127.0.0.1/tcp/9", "m")
    with pytest.raises(InvalidInputError):
        prox.sync.pull(tmp_path / "db", "not an address", "m")
