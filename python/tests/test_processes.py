"""prox.Client against a running `prox serve`, and prox.sync.pull from a
running `prox daemon`, both on loopback. The `prox` binary comes from
PROX_BIN (set by .ci/run); without it these tests are skipped locally and
fail under CI=true."""

import gc
import json
import os
import queue
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import prox

D = 16


def prox_bin():
    b = os.environ.get("PROX_BIN")
    if b and os.path.exists(b):
        return b
    if os.environ.get("CI") == "true":
        pytest.fail("PROX_BIN must name the prox binary under CI")
    pytest.skip("PROX_BIN is not set")


class Running:
    """A prox subprocess, stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, *args):
        self.proc = subprocess.Popen(
            [prox_bin(), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )

    def lines(self, want, timeout=60):
        """Stdout lines until one starting with each prefix in `want` was seen
        (read by a thread: a buffered pipe and select() do not mix)."""
        found, lines = {}, queue.Queue()

        def pump():
            for line in self.proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while set(want) - set(found):
            left = deadline - time.monotonic()
            assert left > 0, f"no {want} line within {timeout} s (got {found})"
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                continue
            assert line is not None, f"prox exited early (code {self.proc.poll()})"
            word, _, rest = line.strip().partition(" ")
            found.setdefault(word, rest)
        return found

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)


@pytest.fixture
def store(tmp_path, rng):
    x = rng.standard_normal((300, D)).astype(np.float32)
    values = [b"v%d" % i for i in range(300)]
    index = prox.Index.build(x, values=values, store=tmp_path / "a", name="m", hnsw=True)
    desc = index.descriptor
    del index  # releases the store's write lock
    gc.collect()
    return tmp_path / "a", x, desc


def test_client_matches_the_local_index(store, rng):
    path, x, desc = store
    local = prox.Index.open(path, "m")
    with Running("serve", "--store", path, "--http", "127.0.0.1:0") as s:
        url = s.lines(["http"])["http"]
        with prox.Client(url) as c:
            assert c.health()["status"] == "ok"
            assert [m["name"] for m in c.maps()] == ["m"]
            assert c.map("m")["descriptor"] == desc
            q = rng.standard_normal((5, D)).astype(np.float32)
            for opts in [dict(), dict(mode="exact"), dict(path="hnsw", ef=32), dict(filter={"range": (10, 100)})]:
                rs, rk = c.search("m", q, k=7, **opts)
                ls, lk = local.search(q, k=7, **opts)
                np.testing.assert_array_equal(rk, lk)
                np.testing.assert_array_equal(rs, ls)
            s1, k1, v1 = c.search("m", q[0], k=3, with_values=True)
            assert k1.shape == (3,) and v1.tolist() == [b"v%d" % k for k in k1]
            vec, val = c.get("m", 42)
            assert val == b"v42"
            np.testing.assert_array_equal(vec, local.get(42)[0])
            assert c.get("m", 10**9) is None
            with pytest.raises(prox.ClientError) as e:
                c.search("m", np.zeros(D + 1, np.float32))
            assert (e.value.status, e.value.code) == (400, "wrong_dimension")
            with pytest.raises(prox.ClientError) as e:
                c.search("nope", q[0])
            assert (e.value.status, e.value.code) == (404, "unknown_map")
            with pytest.raises(prox.ClientError) as e:
                c.upsert("m", [1], q[:1])
            assert (e.value.status, e.value.code) == (403, "writes_disabled")


def test_client_writes_through_a_server_with_a_write_token(store, rng, tmp_path):
    path, x, desc = store
    token = tmp_path / "write-token"
    token.write_text("w-secret")
    args = ("serve", "--store", path, "--http", "127.0.0.1:0", "--write-token-file", token)
    with Running(*args) as s:
        url = s.lines(["http"])["http"]
        with prox.Client(url) as ro:
            with pytest.raises(prox.ClientError) as e:
                ro.upsert("m", [5000], x[:1])
            assert e.value.status == 401
        with prox.Client(url, token="w-secret") as c:
            v = rng.standard_normal((3, D)).astype(np.float32)
            r = c.upsert("m", [5000, 5001, 5002], v, values=[b"a", b"b", b"c"])
            assert r["inserted"] == 3 and r["hnsw"] == "updated"
            _, keys = c.search("m", v[1], k=1, mode="exact")
            assert keys[0] == 5001
            assert c.get("m", 5002)[1] == b"c"
            with pytest.raises(prox.ClientError) as e:
                c.delete("m", [5000], if_match=desc)
            assert e.value.status == 412
            r = c.delete("m", [5000], if_match=r["descriptor"])
            assert r["deleted"] == 1 and c.get("m", 5000) is None
            with pytest.raises(ValueError):
                c.upsert("m", [1], np.full((1, D), np.inf, np.float32))


def test_pull_from_a_daemon(store, tmp_path):
    path, x, desc = store
    with Running("daemon", "--store", path, "--open", "--serve", "m") as d:
        seen = d.lines(["peer_id", "listen"])
        peer = seen["listen"]
        if "/p2p/" not in peer:
            peer += f"/p2p/{seen['peer_id']}"
        report = prox.sync.pull(tmp_path / "b", peer, "m", local="copy")
        assert report["blocks_fetched"] > 0 and not report["up_to_date"]
        again = prox.sync.pull(tmp_path / "b", peer, "m", local="copy")
        assert again["up_to_date"]
        with pytest.raises(prox.SyncError):
            prox.sync.pull(tmp_path / "b", peer, "absent")
    copy = prox.Index.open(tmp_path / "b", "copy")
    assert copy.descriptor == desc and copy.sidecars["hnsw"] is not None
    np.testing.assert_array_equal(copy.search(x[:4], k=3)[1][:, 0], [0, 1, 2, 3])
    assert copy.verify()["records"] == 300


def test_payload_field_filters_on_a_map_built_with_indexes(tmp_path):
    """A map built by the CLI with payload indexes, opened in Python: field
    filters (match, range, must/must_not) give the exact filtered top k, and
    a filter on a field without an index is an input error, not an empty
    result."""
    rng = np.random.default_rng(5)
    n = 300
    x = rng.standard_normal((n, D)).astype(np.float32)
    langs = ["en", "de", "fr"]
    rows = tmp_path / "rows.jsonl"
    with rows.open("w") as f:
        for i in range(n):
            payload = {"lang": langs[i % 3], "year": 2000 + i % 30}
            f.write(json.dumps({"vector": x[i].tolist(), "payload": payload}) + "\n")
    store = tmp_path / "store"
    subprocess.run(
        [prox_bin(), "build", "--store", store, "--name", "m", "--input", rows,
         "--index", "lang:keyword", "--index", "year:integer", "--quiet"],
        check=True, capture_output=True,
    )
    index = prox.Index.open(str(store), "m")
    q = rng.standard_normal((4, D)).astype(np.float32)
    flt = {"must": [{"key": "lang", "match": {"value": "en"}}, {"key": "year", "range": {"gte": 2020}}],
           "must_not": {"key": "year", "match": {"any": [2024, 2025]}}}
    eligible = np.array([i for i in range(n) if i % 3 == 0 and 2020 <= 2000 + i % 30 and 2000 + i % 30 not in (2024, 2025)])
    _, keys = index.search(q, k=5, mode="exact", filter=flt)
    for row, qi in zip(keys, q):
        d = ((x[eligible] - qi) ** 2).sum(axis=1)
        want = eligible[np.argsort(d, kind="stable")[:5]]
        np.testing.assert_array_equal(row, want.astype(np.uint64))
    with pytest.raises(prox.InvalidInputError) as e:
        index.search(q[0], k=3, filter={"key": "colour", "match": {"value": "red"}})
    assert e.value.field == "filter"
    with pytest.raises(prox.InvalidInputError):
        index.search(q[0], k=3, filter={"key": "year", "match": {"value": "recent"}})
