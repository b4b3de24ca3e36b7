"""A small client for the HTTP API of ``prox serve`` (docs/api.md).

>>> c = prox.Client("http://127.0.0.1:7700")           # doctest: +SKIP
>>> scores, keys = c.search("docs", queries, k=10)     # doctest: +SKIP

Answers have the shapes of :meth:`prox.Index.search`. The server runs the
same engine ``Index`` as the local package, so the same request gives the
same hits; this module only encodes requests (JSON; the server accepts no
binary vector bodies) and decodes answers. One keep-alive connection per
client; a client is not meant to be shared between threads.
"""

import http.client
import json
import urllib.parse

import numpy as np

from ._prox import NO_KEY
from .errors import ClientError, UnsupportedError

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
    server has one; ``timeout``: seconds per request.
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

    def _request(self, method, path, body=None):
        headers = {"accept": "application/json"}
        if self._token is not None:
            headers["authorization"] = f"Bearer {self._token}"
        data = None
        if body is not None:
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
        base = f"/v1/maps/{urllib.parse.quote(name, safe='')}"
        if q.ndim == 1:
            answers = [self._request("POST", base + "/search", dict(opts, vector=q.tolist()))]
        else:
            answers = []
            for i in range(0, len(q), BATCH_ROWS):
                body = dict(opts, vectors=q[i : i + BATCH_ROWS].tolist())
                answers += self._request("POST", base + "/search:batch", body)["results"]
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

    def upsert(self, name, keys, vectors, values=None):
        """Not available: the HTTP API has no write endpoint yet."""
        raise UnsupportedError("Client.upsert is not available yet: prox serve has no write endpoint in this build")

    def delete(self, name, keys):
        """Not available: the HTTP API has no write endpoint yet."""
        raise UnsupportedError("Client.delete is not available yet: prox serve has no write endpoint in this build")
