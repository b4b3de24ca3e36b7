"""A small client for the HTTP API of ``prox serve`` (docs/api.md).

>>> c = prox.Client("http://127.0.0.1:7700")           # doctest: +SKIP
>>> scores, keys = c.search("docs", queries, k=10)     # doctest: +SKIP

Answers have the shapes of :meth:`prox.Index.search`. The server runs the
same engine ``Index`` as the local package, so the same request gives the
same hits; this module only encodes requests (search vectors as binary f32
rows, everything else JSON) and decodes answers. One keep-alive connection per
client; a client is not meant to be shared between threads.
"""

import http.client
import json
import urllib.parse

import numpy as np

from ._prox import NO_KEY
from .errors import ClientError

#: Rows per ``search:batch`` request (the server's limit).
BATCH_ROWS = 4096


def _key_hex(key):
    if isinstance(key, (bytes, bytearray)):
        return bytes(key).hex()
    k = int(key)
    if k < 0 or k >= 1 << 64:
        raise ValueError(f"a key is bytes or an integer in 0..2**64, got {key!r}")
    return k.to_bytes(8, "big").hex()


def _filter_json(f):
    if f is None:
        return None
    if not isinstance(f, dict) or len(f) != 1:
        raise ValueError("filter must be a dict with exactly one of prefix, range, keys")
    ((kind, arg),) = f.items()
    if kind == "prefix":
        return {"prefix": _key_hex(arg)}
    if kind == "range":
        start, end = arg
        return {"range": [_key_hex(start), None if end is None else _key_hex(end)]}
    if kind == "keys":
        return {"keys": [_key_hex(k) for k in arg]}
    raise ValueError(f"unknown filter {kind!r} (prefix, range or keys)")


class Client:
    """A client of one ``prox serve`` (or ``prox daemon --http``) server.

    ``url``: ``http://host:port``; ``token``: the bearer token when the
    server has one (for :meth:`upsert` and :meth:`delete`, the server's
    write token, which also authorizes reads); ``timeout``: seconds per
    request.
    """

    def __init__(self, url, token=None, timeout=30.0):
        u = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        if u.scheme != "http":
            raise ValueError(f"only http:// URLs are supported, got {url!r}")
        self.url = url
        self._host = u.hostname
        self._port = u.port or 80
        self._token = token
        self._timeout = timeout
        self._conn = None

    def close(self):
        """Closes the connection (a later request opens a new one)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"prox.Client({self.url!r})"

    def _request(self, method, path, body=None, extra=None, rows=None):
        """One request: a JSON ``body``, or ``rows`` (a float32 matrix) sent
        as an ``application/octet-stream`` body of little-endian f32."""
        headers = {"accept": "application/json"}
        headers.update(extra or {})
        if self._token is not None:
            headers["authorization"] = f"Bearer {self._token}"
        data = None
        if rows is not None:
            data = np.ascontiguousarray(rows, dtype="<f4").tobytes()
            headers["content-type"] = "application/octet-stream"
        elif body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        for attempt in range(2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            try:
                self._conn.request(method, path, body=data, headers=headers)
                resp = self._conn.getresponse()
                raw = resp.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # A keep-alive connection the server closed: retry once on a new one.
                self.close()
                if attempt == 1:
                    raise
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = None
        if resp.status >= 400:
            err = (payload or {}).get("error") if isinstance(payload, dict) else None
            if isinstance(err, dict):
                raise ClientError(
                    f"{resp.status} {err.get('code')}: {err.get('message')}",
                    status=resp.status,
                    code=err.get("code"),
                    field=err.get("field"),
                )
            raise ClientError(f"{resp.status}: {raw[:200]!r}", status=resp.status)
        return payload

    def health(self):
        """``GET /healthz``: ``{"status": "ok", "maps": N}``."""
        return self._request("GET", "/healthz")

    def maps(self):
        """Every served map: a list of dicts (name, descriptor, count, dims, metric, sidecars)."""
        return self._request("GET", "/v1/maps")["maps"]

    def map(self, name):
        """One served map as a dict."""
        return self._request("GET", f"/v1/maps/{urllib.parse.quote(name, safe='')}")

    def get(self, name, key):
        """The record ``key`` (int or bytes) of map ``name`` as
        ``(vector, value)``, or ``None`` when there is no such record."""
        path = f"/v1/maps/{urllib.parse.quote(name, safe='')}/records/{_key_hex(key)}"
        try:
            r = self._request("GET", path)
        except ClientError as e:
            if e.code == "not_found":
                return None
            raise
        return np.asarray(r["vector"], dtype=np.float32), bytes.fromhex(r["value"])

    def search(
        self,
        name,
        queries,
        k=10,
        *,
        mode="auto",
        path="auto",
        ef=None,
        nprobe=None,
        rerank=None,
        budget=None,
        filter=None,
        with_values=False,
        keys="auto",
    ):
        """Searches map ``name``: the arguments and answer of
        :meth:`prox.Index.search` (``threads`` and ``timeout`` are the
        server's). ``keys``: ``"int"`` (uint64, padding ``prox.NO_KEY``),
        ``"bytes"`` (object array, padding ``None``) or ``"auto"`` (int
        when every returned key is 8 bytes)."""
        q = np.asarray(queries, dtype=np.float32)
        if q.ndim not in (1, 2):
            raise ValueError(f"queries must have shape (d,) or (n, d), got {q.ndim} dimensions")
        opts = {"k": k, "mode": mode, "path": path, "with_values": bool(with_values)}
        for field, v in (("ef", ef), ("nprobe", nprobe), ("rerank", rerank), ("budget", budget)):
            if v is not None:
                opts[field] = v
        f = _filter_json(filter)
        if f is not None:
            opts["filter"] = f
        # Vectors travel as binary f32 rows, the options in the query string.
        qs = urllib.parse.urlencode(
            {
                f: (json.dumps(v) if f == "filter" else str(v).lower() if isinstance(v, bool) else v)
                for f, v in opts.items()
            }
        )
        base = f"/v1/maps/{urllib.parse.quote(name, safe='')}"
        if q.ndim == 1:
            answers = [self._request("POST", f"{base}/search?{qs}", rows=q)]
        else:
            answers = []
            for i in range(0, len(q), BATCH_ROWS):
                answers += self._request("POST", f"{base}/search:batch?{qs}", rows=q[i : i + BATCH_ROWS])["results"]
        rows = len(answers)
        scores = np.full((rows, k), np.nan)
        hexkeys = [[h["key"] for h in a["results"][:k]] for a in answers]
        as_int = keys == "int" or (keys == "auto" and all(len(h) == 16 for r in hexkeys for h in r))
        if keys not in ("auto", "int", "bytes"):
            raise ValueError(f'keys must be "auto", "int" or "bytes", got {keys!r}')
        out_keys = np.full((rows, k), NO_KEY, dtype=np.uint64) if as_int else np.full((rows, k), None, dtype=object)
        values = np.full((rows, k), None, dtype=object)
        for i, a in enumerate(answers):
            for j, h in enumerate(a["results"][:k]):
                scores[i, j] = h["score"]
                kb = bytes.fromhex(h["key"])
                out_keys[i, j] = int.from_bytes(kb, "big") if as_int else kb
                if with_values:
                    values[i, j] = bytes.fromhex(h.get("value", ""))
        if q.ndim == 1:
            scores, out_keys, values = scores[0], out_keys[0], values[0]
        return (scores, out_keys, values) if with_values else (scores, out_keys)

    def upsert(self, name, keys, vectors, values=None, *, canonical_hnsw=None, if_match=None):
        """Inserts or replaces records in map ``name`` (the arguments of
        :meth:`prox.Index.upsert`), as one atomic write of at most 4096
        points. Needs a client made with the server's write token
        (``prox serve --write-token-file``). ``if_match``: a descriptor the
        map must be at (else ``ClientError`` with status 412). Returns the
        server's write report (``descriptor``, counts, bytes written)."""
        v = np.asarray(vectors, dtype=np.float32)
        if v.ndim == 1:
            v = v[None, :]
        if v.ndim != 2:
            raise ValueError(f"vectors must have shape (d,) or (n, d), got {v.ndim} dimensions")
        keys = list(keys)
        if len(keys) != v.shape[0]:
            raise ValueError(f"{len(keys)} keys for {v.shape[0]} vectors")
        if values is not None:
            values = list(values)
            if len(values) != len(keys):
                raise ValueError(f"{len(values)} values for {len(keys)} vectors")
        if not np.isfinite(v).all():
            raise ValueError("vectors must be finite (no NaN or inf)")
        points = []
        for i, key in enumerate(keys):
            p = {"key": _key_hex(key), "vector": v[i].tolist()}
            if values is not None:
                val = values[i]
                p["value"] = (val.encode() if isinstance(val, str) else bytes(val)).hex()
            points.append(p)
        body = {"points": points}
        if canonical_hnsw is not None:
            body["canonical_hnsw"] = canonical_hnsw
        return self._write(f"/v1/maps/{urllib.parse.quote(name, safe='')}/points:upsert", body, if_match)

    def delete(self, name, keys, *, if_match=None):
        """Deletes records of map ``name`` by key (one atomic write of at
        most 4096 keys; absent keys are counted, not an error). Needs the
        write token, as :meth:`upsert`. Returns the server's write report."""
        body = {"keys": [_key_hex(k) for k in keys]}
        return self._write(f"/v1/maps/{urllib.parse.quote(name, safe='')}/points:delete", body, if_match)

    def _write(self, path, body, if_match):
        extra = {} if if_match is None else {"if-match": f'"{if_match}"'}
        return self._request("POST", path, body, extra)
