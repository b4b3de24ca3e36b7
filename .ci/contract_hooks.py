"""schemathesis hooks of .ci/contract.

A binary (application/octet-stream) search or upsert body is rows of
little-endian f32, each finite, dims x 4 bytes a row. The document bounds
the body's length but JSON Schema cannot say "finite floats" or "a whole
number of rows", so random bytes that are schema-valid would be refused
with 400. For positive cases this hook makes such a body what the
description says: cut to whole rows and every non-finite component
replaced by 0. A binary upsert's keys come from the query string, one per
row (`keys`) or counted from `start_key`, which JSON Schema cannot tie to
the body either: positive binary upserts get a `start_key` that leaves room
for their rows, and positive JSON upserts lose the binary-only options.
A search's `recall` picks path, mode and knobs itself; the document states
the combinations it refuses within the body (`not`), but a query-string
option overrides the body's member of the same name, which JSON Schema
cannot tie to the body: positive searches with a `recall` anywhere lose the
valid knobs (`ef`, `nprobe`, `rerank`, `budget`) and valid non-`auto` paths
and modes, in either place (an invalid value is kept: the stateful phase
can hand a case with an invalid component to this hook as positive).
Negative cases are left as generated.
"""

import math
import os
import struct

import schemathesis
from schemathesis.transport.serialization import Binary

ROW = int(os.environ["PROX_CONTRACT_ROW_BYTES"])


def _finite_rows(data: bytes) -> bytes:
    data = data[: len(data) - len(data) % ROW] or bytes(ROW)
    out = bytearray()
    for (x,) in struct.iter_unpack("<f", data):
        out += struct.pack("<f", x if math.isfinite(x) else 0.0)
    return bytes(out)


@schemathesis.hook
def map_case(context, case):
    meta = case.meta
    positive = meta is None or meta.generation.mode.is_positive
    if not positive:
        return case
    if case.path.endswith("/search") or case.path.endswith("/search:batch"):
        _recall_alone(case)
    upsert = case.path.endswith("points:upsert")
    if case.media_type == "application/octet-stream":
        body = case.body
        raw = body.data if isinstance(body, Binary) else body
        if isinstance(raw, (bytes, bytearray)):
            case.body = _finite_rows(bytes(raw))
        if upsert:
            query = dict(case.query or {})
            query.pop("keys", None)
            start = query.get("start_key")
            if not isinstance(start, int) or start < 0 or start > 2**63:
                query["start_key"] = 0
            case.query = query
    elif upsert and case.query:
        case.query = {
            k: v
            for k, v in case.query.items()
            if k not in ("keys", "start_key", "canonical_hnsw")
        }
    return case


KNOBS = ("ef", "nprobe", "rerank", "budget")
REFUSED = {
    "path": ("native", "hnsw", "pq"),
    "mode": ("exact", "fast", "balanced", "high"),
}


def _valid_knob(v):
    if isinstance(v, str) and v.isdigit():
        v = int(v)
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _recall_alone(case):
    """A positive search with `recall` in the body or the query string
    keeps no valid knob, path or mode that `recall` refuses, in either
    place."""
    query = dict(case.query or {})
    body = case.body if isinstance(case.body, dict) else None
    if query.get("recall") is None and (body is None or body.get("recall") is None):
        return
    for name in KNOBS:
        if _valid_knob(query.get(name)):
            query.pop(name)
        if body is not None and _valid_knob(body.get(name)):
            body[name] = None
    for name, refused in REFUSED.items():
        if query.get(name) in refused:
            query.pop(name)
        if body is not None and body.get(name) in refused:
            body[name] = "auto"
    case.query = query
