"""prox.Index against numpy brute force: build, search (one query, batches,
every path), filters, values, get, verify, reopen from a store."""

import threading
import time

import numpy as np
import pytest
from conftest import brute_force, recall, seed

import prox

N, D = 600, 12


def data(rng, n=N, d=D, metric="l2"):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x


@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_exact_search_is_brute_force(rng, metric):
    x = data(rng)
    q = rng.standard_normal((25, D)).astype(np.float32)
    index = prox.Index.build(x, metric=metric)
    assert len(index) == N and index.dim == D and index.metric == metric
    assert index.key_type == "int"
    scores, keys = index.search(q, k=10, mode="exact")
    assert scores.shape == (25, 10) and keys.shape == (25, 10)
    assert scores.dtype == np.float64 and keys.dtype == np.uint64
    ids, want = brute_force(x, q, 10, metric)
    np.testing.assert_array_equal(keys, ids.astype(np.uint64), err_msg=f"PROX_SEED={seed()}")
    np.testing.assert_allclose(scores, want, rtol=1e-4, atol=1e-4, err_msg=f"PROX_SEED={seed()}")


def test_one_query_matches_its_batch_row(rng):
    x = data(rng)
    q = rng.standard_normal((5, D)).astype(np.float32)
    index = prox.Index.build(x, hnsw=True)
    bs, bk = index.search(q, k=7)
    for i in range(5):
        s, k = index.search(q[i], k=7)
        assert s.shape == (7,) and k.shape == (7,)
        np.testing.assert_array_equal(k, bk[i])
        np.testing.assert_array_equal(s, bs[i])


@pytest.fixture(scope="module")
def approx():
    """One map with both sidecars, built once for the path tests."""
    rng = np.random.default_rng(seed())
    x = data(rng, n=2000, d=16)
    q = rng.standard_normal((40, 16)).astype(np.float32)
    return x, q, prox.Index.build(x, hnsw=True, pq={"subquantizers": 4, "centroids": 64})


@pytest.mark.parametrize(
    "opts",
    [
        dict(mode="fast"),
        dict(mode="balanced"),
        dict(mode="high"),
        dict(path="native"),
        dict(path="hnsw", ef=64),
        dict(path="pq", rerank=8),
        dict(path="pq", nprobe=16, ef=4),
        dict(),
    ],
)
def test_approximate_paths_have_recall(approx, opts):
    x, q, index = approx
    assert index.sidecars["hnsw"] and index.sidecars["pq"]
    _, keys = index.search(q, k=10, **opts)
    ids, _ = brute_force(x, q, 10, "l2")
    r = recall(keys, ids)
    assert r >= 0.6, f"recall {r} with {opts}, PROX_SEED={seed()}"


def test_threads_and_results_identical(rng):
    x = data(rng)
    q = rng.standard_normal((64, D)).astype(np.float32)
    index = prox.Index.build(x, threads=1)
    a = index.search(q, k=5, threads=1)
    b = index.search(q, k=5, threads=2)
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[0], b[0])


def test_build_is_deterministic_and_thread_independent(rng):
    x = data(rng)
    assert prox.Index.build(x, threads=1).descriptor == prox.Index.build(x, threads=2).descriptor


def test_padding_when_fewer_hits_than_k(rng):
    x = data(rng, n=5)
    scores, keys = prox.Index.build(x).search(x[0], k=8, mode="exact")
    assert sorted(keys[:5].tolist()) == [0, 1, 2, 3, 4] and keys[0] == 0
    assert (np.diff(scores[:5]) >= 0).all()
    assert (keys[5:] == prox.NO_KEY).all() and np.isnan(scores[5:]).all()
    assert not np.isnan(scores[:5]).any()


def test_filters(rng):
    x = data(rng)
    q = rng.standard_normal((6, D)).astype(np.float32)
    index = prox.Index.build(x)
    allowed = list(range(100, 200))
    for f in [{"range": (100, 200)}, {"keys": allowed[::-1]}, {"keys": np.arange(100, 200)}]:
        _, keys = index.search(q, k=5, mode="exact", filter=f)
        ids, _ = brute_force(x[100:200], q, 5, "l2")
        np.testing.assert_array_equal(keys, ids + 100)
    _, keys = index.search(q, k=5, filter={"range": (590, None)}, mode="exact")
    assert ((keys >= 590) & (keys < 600)).all()
    # A prefix over 8-byte keys: the first 7 bytes of 256..511 are equal.
    _, keys = index.search(q, k=3, mode="exact", filter={"prefix": (256).to_bytes(8, "big")[:7]})
    assert ((keys >= 256) & (keys < 512)).all()


def test_bytes_keys_values_and_get(rng):
    x = data(rng, n=50)
    keys = [f"doc-{i:03}".encode() for i in range(50)]
    values = [f"value {i}" for i in range(50)]
    index = prox.Index.build(x, keys, values, metric="cosine")
    assert index.key_type == "bytes"
    scores, ks, vs = index.search(x[:3], k=4, with_values=True, mode="exact")
    assert ks.dtype == object and ks.shape == (3, 4)
    assert ks[:, 0].tolist() == keys[:3]
    assert vs[:, 0].tolist() == [b"value 0", b"value 1", b"value 2"]
    vec, val = index.get(b"doc-007")
    assert val == b"value 7"
    np.testing.assert_allclose(vec, x[7] / np.linalg.norm(x[7]), rtol=1e-5, atol=1e-6)
    assert index.get(b"missing") is None
    _, ks = index.search(x[0], k=60, mode="exact")
    assert ks[50:].tolist() == [None] * 10
    _, ks = index.search(x[:2], k=3, filter={"prefix": b"doc-01"}, mode="exact")
    assert all(k.startswith(b"doc-01") for k in ks.ravel())


def test_integer_keys_from_numpy_and_values_by_key(rng):
    x = data(rng, n=30)
    ids = np.arange(1000, 1030, dtype=np.int64)
    index = prox.Index.build(x, ids, [b"%d" % i for i in ids])
    _, keys, values = index.search(x[3], k=1, with_values=True)
    assert keys.tolist() == [1003] and values.tolist() == [b"1003"]
    assert index.get(1003)[1] == b"1003"
    assert index.get(np.uint64(1004))[1] == b"1004"


def test_other_dtypes_and_layouts_are_converted(rng):
    x64 = rng.standard_normal((40, D))
    a = prox.Index.build(x64)
    b = prox.Index.build(x64.astype(np.float32))
    assert a.descriptor == b.descriptor
    fortran = np.asfortranarray(x64.astype(np.float32))
    assert prox.Index.build(fortran).descriptor == b.descriptor
    q = x64[:3]
    np.testing.assert_array_equal(a.search(q, k=3)[1], b.search(q[:, :].astype(np.float32), k=3)[1])
    np.testing.assert_array_equal(a.search(q.tolist(), k=3)[1], a.search(q, k=3)[1])
    strided = x64.astype(np.float32)[::2]
    np.testing.assert_array_equal(b.search(strided, k=2)[1][:, 0], np.arange(0, 40, 2))


def test_store_publish_reopen_and_verify(rng, tmp_path):
    x = data(rng)
    built = prox.Index.build(x, store=tmp_path / "db", name="vecs", hnsw=True)
    assert built.name == "vecs"
    desc = built.descriptor
    q = rng.standard_normal((8, D)).astype(np.float32)
    want = built.search(q, k=5)
    del built
    index = prox.Index.open(tmp_path / "db", "vecs")
    assert index.descriptor == desc and index.sidecars["hnsw"] is not None
    assert index.key_type == "int"
    got = index.search(q, k=5)
    np.testing.assert_array_equal(got[1], want[1])
    report = index.verify()
    assert report["records"] == N and report["nodes"] >= 1
    by_cid = prox.Index.open(str(tmp_path / "db"), descriptor=desc, keys="int", warm=False)
    assert by_cid.sidecars == {"hnsw": None, "pq": None}
    np.testing.assert_array_equal(by_cid.search(q, k=5, mode="exact")[1], index.search(q, k=5, mode="exact")[1])
    assert "vecs" in repr(index)


def test_persisted_layouts_are_read_at_open_and_answer_alike(rng, tmp_path):
    x = data(rng, n=3000)
    q = rng.standard_normal((8, D)).astype(np.float32)
    pq = {"subquantizers": 4, "centroids": 16}
    with_l = prox.Index.build(x, store=tmp_path / "a", name="m", pq=pq, layouts=True)
    without = prox.Index.build(x, store=tmp_path / "b", name="m", pq=pq)
    assert all(with_l.layouts[k] is not None for k in ("arena", "adaptive", "ivf"))
    assert without.layouts == {"arena": None, "adaptive": None, "ivf": None, "frames": None, "rotated": None}
    reopened = prox.Index.open(tmp_path / "a", "m", warm=False)
    assert reopened.layouts == with_l.layouts
    for kw in ({"mode": "exact"}, {"mode": "balanced"}, {"path": "pq"}):
        np.testing.assert_array_equal(reopened.search(q, k=5, **kw)[1], without.search(q, k=5, **kw)[1])


def test_bare_pq_builds_fast_scan_codes_and_preset_spec_does_not(rng, tmp_path):
    x = data(rng, n=2000)
    fast = prox.Index.build(x, pq=True, layouts=True, profile=0)
    assert fast.layouts["ivf"] is not None  # 4-bit codes have fast-scan lists
    spec = prox.Index.build(x, pq="preset=spec", layouts=True, profile=0)
    assert spec.layouts["ivf"] is None  # 8 x 256: 8-bit codes, no fast scan
    with pytest.raises(prox.InvalidInputError, match="preset"):
        prox.Index.build(x, pq="preset=fastest")
    with pytest.raises(prox.InvalidInputError, match="subquantizers"):
        prox.Index.build(x, pq={"subquantizers": D + 1})


def test_budget_and_timeout(rng):
    x = data(rng, n=2000)
    index = prox.Index.build(x)
    s, k = index.search(x[:2], k=5, budget=50)
    assert k.shape == (2, 5)
    s, k = index.search(x[:2], k=5, timeout=60.0)
    assert k[:, 0].tolist() == [0, 1]


def test_search_releases_the_gil(rng):
    x = data(rng, n=5000, d=32)
    index = prox.Index.build(x)
    q = rng.standard_normal((300, 32)).astype(np.float32)
    t0 = time.perf_counter()
    index.search(q, k=10, mode="exact", threads=1)
    alone = time.perf_counter() - t0
    ticks = 0
    done = threading.Event()

    def work():
        index.search(q, k=10, mode="exact", threads=1)
        done.set()

    t = threading.Thread(target=work)
    t.start()
    deadline = time.perf_counter() + 60
    while not done.is_set() and time.perf_counter() < deadline:
        ticks += 1
        time.sleep(0.001)
    t.join(timeout=60)
    # With the GIL held for the whole search the loop could not run at all.
    assert done.is_set()
    assert ticks >= max(3, int(alone / 0.001) // 10), (ticks, alone)


def test_concurrent_searches_from_python_threads(rng):
    x = data(rng)
    index = prox.Index.build(x, hnsw=True)
    q = rng.standard_normal((50, D)).astype(np.float32)
    want = [index.search(v, k=5)[1] for v in q]
    errors = []

    def run(part):
        for i in part:
            if not np.array_equal(index.search(q[i], k=5)[1], want[i]):
                errors.append(i)

    ts = [threading.Thread(target=run, args=(range(j, 50, 4),)) for j in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    assert errors == []


def test_upsert_and_delete_equal_a_fresh_build(rng):
    x = data(rng, n=200)
    index = prox.Index.build(x, values=[b"v%d" % i for i in range(200)], hnsw=True)
    new = data(rng, n=5)
    r = index.upsert([1000 + i for i in range(5)], new, values=[b"n"] * 5)
    assert (r["inserted"], r["deleted"]) == (5, 0)
    assert r["descriptor"] == index.descriptor
    r = index.delete([0, 1, 2, 10**9])
    assert (r["deleted"], r["absent_deletes"]) == (3, 1)
    assert len(index) == 202
    assert index.get(1) is None and index.get(1002)[1] == b"n"
    for opts in [dict(mode="exact"), dict(path="hnsw", ef=64)]:
        _, keys = index.search(new[2], k=1, **opts)
        assert keys[0] == 1002, opts
    keys = list(range(3, 200)) + [1000 + i for i in range(5)]
    vals = [b"v%d" % i for i in range(3, 200)] + [b"n"] * 5
    fresh = prox.Index.build(np.vstack([x[3:], new]), keys=keys, values=vals)
    assert fresh.descriptor == index.descriptor


def test_bad_writes_change_nothing(rng):
    index = prox.Index.build(data(rng, n=20))
    before = index.descriptor
    bad = [
        lambda: index.upsert([1], np.zeros((1, D + 1), np.float32)),
        lambda: index.upsert([1], np.full((1, D), np.nan, np.float32)),
        lambda: index.upsert([1, 1], np.zeros((2, D), np.float32)),
        lambda: index.upsert([1, 2], np.zeros((1, D), np.float32)),
        lambda: index.upsert([b"x" * 5000], np.zeros((1, D), np.float32)),
        lambda: index.upsert([1], np.zeros((1, D), np.float32), canonical_hnsw="maybe"),
    ]
    for f in bad:
        with pytest.raises(ValueError):
            f()
    assert index.descriptor == before and len(index) == 20


def test_writes_publish_to_the_store_and_reopen(rng, tmp_path):
    x = data(rng, n=50)
    index = prox.Index.build(x, store=tmp_path / "s", name="m")
    index.upsert([777], x[:1] + 1)
    desc = index.descriptor
    del index
    import gc

    gc.collect()
    ro = prox.Index.open(tmp_path / "s", "m")
    assert ro.descriptor == desc and len(ro) == 51
    with pytest.raises(prox.UnsupportedError, match="writable=True"):
        ro.delete([777])
    del ro
    gc.collect()
    rw = prox.Index.open(tmp_path / "s", "m", writable=True)
    assert rw.delete([777])["deleted"] == 1
    assert prox.Index.open(tmp_path / "s", "m").get(777) is None


def test_help_reads_well():
    doc = prox.Index.search.__doc__
    assert "scores" in doc and "filter" in doc
    assert "Index.build" in prox.__doc__ and prox.Index.build.__doc__
    assert prox.sync.pull.__doc__


def test_recall_targets_choose_from_the_measured_profile(rng, tmp_path):
    centres = rng.standard_normal((12, D)).astype(np.float32) * 3
    x = (centres[rng.integers(0, 12, 3000)] + rng.standard_normal((3000, D))).astype(np.float32)
    q = (centres[rng.integers(0, 12, 50)] + rng.standard_normal((50, D))).astype(np.float32)
    pq = {"subquantizers": 4, "centroids": 16}
    index = prox.Index.build(x, store=tmp_path / "db", name="m", hnsw=True, pq=pq, profile=200)
    p = index.profile
    assert p["k"] == 10 and p["queries"] == 200
    assert {e["path"] for e in p["entries"]} == {"native", "hnsw", "pq"}
    ids, _ = brute_force(x, q, 10, "l2")
    for target in (0.8, 0.95, 1.0):
        c = index.choose(target)
        assert c["reached"] and c["recall"] - 2 * c["stderr"] >= target, c
        _, keys = index.search(q, k=10, recall=target)
        assert recall(keys, ids) >= target - 0.06, (target, c, f"PROX_SEED={seed()}")
    # Published with the map: a reopened index chooses the same way.
    again = prox.Index.open(tmp_path / "db", "m")
    assert again.profile == p and again.choose(0.95) == index.choose(0.95)
    for bad in ({"recall": 1.5}, {"recall": 0.9, "path": "hnsw"}, {"recall": 0.9, "ef": 40}):
        with pytest.raises(prox.InvalidInputError, match="recall"):
            index.search(q, k=10, **bad)
    # Writes carry the profile; past a tenth of the map it is stale, still
    # answers, and measure_profile takes a new one (published in the store).
    more = (centres[rng.integers(0, 12, 400)] + rng.standard_normal((400, D))).astype(np.float32)
    report = index.upsert(np.arange(3000, 3400), more)
    assert report["profile_stale"] and index.profile["edits"] == 400
    index.search(q, k=10, recall=0.9)
    fresh = index.measure_profile(100)
    assert fresh["edits"] == 0 and fresh["queries"] == 100
    assert prox.Index.open(tmp_path / "db", "m").profile == fresh
    plain = prox.Index.build(x, profile=0)
    assert plain.profile is None
    with pytest.raises(prox.InvalidInputError, match="recall profile"):
        plain.search(q[0], k=10, recall=0.9)
