"""schemathesis hooks of .ci/contract.

A binary (application/octet-stream) search body is rows of little-endian
f32, each finite, dims x 4 bytes a row. The document bounds the body's
length but JSON Schema cannot say "finite floats" or "a whole number of
rows", so random bytes that are schema-valid would be refused with 400.
For positive cases this hook makes such a body what the description says:
cut to whole rows and every non-finite component replaced by 0.
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
    if positive and case.media_type == "application/octet-stream":
        body = case.body
        raw = body.data if isinstance(body, Binary) else body
        if isinstance(raw, (bytes, bytearray)):
            case.body = _finite_rows(bytes(raw))
    return case
