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
