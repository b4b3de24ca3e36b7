#!/usr/bin/env python3
"""Generate prox's frozen proximity-map fixtures from the shared executable
model of proximity-format.md (sections 11 and 12).

  python3 conformance/gen/proximity_maps.py [--shared ../shared]

Writes conformance/fixtures/proximity-maps.v2.json: a list of scenarios, each
with the full build configuration, the raw input records (key hex, value hex,
raw f32 bit patterns hex, *before* preparation, so -0.0 and unnormalised
cosine inputs exercise section 11.1) and either

  * the expected descriptor CID, PRXN root CID, and every object the model
    wrote (CID -> bytes hex), or
  * "error": "node_too_large" for inputs the reference refuses (12.8).

Scenarios cover the three metrics, SQ8, external vectors, leaf- and
route-level overflow pages, multi-level overflow directories, the empty key,
duplicate vectors, -0.0 inputs and the empty map. Inputs are seeded
(xorshift64*) and small so the model's quadratic build stays fast.
"""
import argparse
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rng(seed):
    x = seed or 0x9E3779B97F4A7C15
    while True:
        x ^= (x >> 12) & 0xFFFFFFFFFFFFFFFF
        x ^= (x << 25) & 0xFFFFFFFFFFFFFFFF
        x ^= (x >> 27) & 0xFFFFFFFFFFFFFFFF
        yield ((x * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF) / 2.0 ** 64


def gen_records(model, n, dims, seed, clusters=4, empty_key=False, dup_every=0, neg_zero=False,
                key_style="name"):
    g = rng(seed)
    centers = [[next(g) * 4 - 2 for _ in range(dims)] for _ in range(clusters)]
    out = []
    for i in range(n):
        c = centers[i % clusters]
        v = [model.to_f32(c[j] + (next(g) - 0.5) * 0.8) for j in range(dims)]
        if dup_every and i % dup_every == dup_every - 1 and out:
            v = list(out[-1][1])
        if neg_zero and i % 5 == 0:
            v[i % dims] = -0.0
        if key_style == "name":
            key = b"k%04d" % (i * 37 % 1009)
        else:
            key = struct.pack(">Q", i)
        out.append([key, v, b"v%d" % i])
    if empty_key:
        out[0][0] = b""
    seen, uniq = set(), []
    for r in out:
        if r[0] not in seen:
            seen.add(r[0])
            uniq.append(tuple(r))
    # Deliberately not sorted: the builder must sort.
    return uniq


def scenario(model, name, cfg_over, n, dims, seed, **kw):
    cfg = model.default_config(dims)
    cfg.update(cfg_over)
    recs = gen_records(model, n, dims, seed, **kw)
    entry = {
        "name": name,
        "config": {
            "dims": cfg["dims"], "metric": cfg["metric"], "log_chunk_size": cfg["log_chunk"],
            "level_hash_seed": cfg["level_seed"], "min_page_bytes": cfg["min_page"],
            "target_page_bytes": cfg["target_page"], "max_page_bytes": cfg["max_page"],
            "overflow_hash_seed": cfg["overflow_seed"],
            "inline_threshold_bytes": cfg["inline_threshold"], "sq8_group_size": cfg["sq_group"],
        },
        "records": [{"key": k.hex(), "value": v.hex(),
                     "vector": ["%08x" % model.f32_bits(c) for c in vec]} for k, vec, v in recs],
    }
    try:
        dc, rc, objs, _ = model.build_map(cfg, list(recs))
    except ValueError as err:
        if "node too large" not in str(err):
            raise
        entry["error"] = "node_too_large"
        return entry
    kinds = {}
    for data in objs.values():
        kinds[data[:4].decode()] = kinds.get(data[:4].decode(), 0) + 1
    entry.update({
        "descriptor": dc.hex(), "root": rc.hex(), "object_count": len(objs), "kinds": kinds,
        "objects": {c.hex(): data.hex() for c, data in sorted(objs.items())},
    })
    return entry


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.environ.get("PROX_SHARED",
                                                       os.path.join(ROOT, "..", "..", "shared")))
    ap.add_argument("--out", default=os.path.join(ROOT, "fixtures", "proximity-maps.v2.json"))
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.shared, "tools"))
    import prox_fixture_check as model  # noqa: E402  (the shared executable spec)

    L2, COS, IP = model.METRIC_L2, model.METRIC_COS, model.METRIC_IP
    small = {"min_page": 64, "target_page": 256, "max_page": 1024, "inline_threshold": 1024}
    scenarios = [
        scenario(model, "empty-l2", {}, 0, 3, 1),
        scenario(model, "empty-sq8", {"sq_group": 2}, 0, 3, 1),
        scenario(model, "single", {}, 1, 2, 2),
        scenario(model, "l2-levels", {"log_chunk": 2, "level_seed": 7}, 150, 4, 3,
                 empty_key=True, dup_every=9, neg_zero=True),
        scenario(model, "cosine", {"metric": COS, "log_chunk": 2, "level_seed": 3}, 120, 3, 4,
                 neg_zero=True, dup_every=11),
        scenario(model, "inner-product", {"metric": IP, "log_chunk": 3, "level_seed": 11}, 100, 5, 5,
                 empty_key=True),
        scenario(model, "sq8", {"log_chunk": 2, "sq_group": 4}, 120, 6, 6, neg_zero=True),
        scenario(model, "cosine-sq8-external", {"metric": COS, "log_chunk": 2, "sq_group": 2,
                                                "inline_threshold": 8}, 70, 3, 7, dup_every=7),
        scenario(model, "external", {"log_chunk": 2, "inline_threshold": 4}, 60, 2, 8),
        scenario(model, "leaf-overflow-directories", dict(small, log_chunk=8), 220, 2, 9,
                 key_style="u64"),
        scenario(model, "route-overflow", dict(small, log_chunk=1, level_seed=5), 160, 2, 10,
                 dup_every=13),
        scenario(model, "overflow-sq8-seeded", dict(small, log_chunk=3, sq_group=1,
                                                   overflow_seed=99), 150, 3, 11),
        scenario(model, "external-400-byte-pages", {"min_page": 64, "target_page": 256,
                                                    "max_page": 400, "inline_threshold": 4,
                                                    "log_chunk": 8}, 60, 2, 12),
        scenario(model, "too-large-external", {"min_page": 64, "target_page": 64,
                                               "max_page": 400, "inline_threshold": 4,
                                               "log_chunk": 8}, 60, 2, 12),
        scenario(model, "too-large-routes", {"min_page": 64, "target_page": 128,
                                             "max_page": 400, "inline_threshold": 4,
                                             "log_chunk": 2}, 60, 2, 12),
    ]
    doc = {
        "format_version": 2,
        "description": "prox frozen proximity-map builds generated by conformance/gen/proximity_maps.py "
                       "from the shared executable model; vectors are raw f32 bit patterns before "
                       "preparation; metric ids 1 l2, 2 cosine, 3 inner product",
        "scenarios": scenarios,
    }
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")
    for s in scenarios:
        print(s["name"], s.get("error") or "%s %d objects %s" % (s["descriptor"][:12], s["object_count"], s["kinds"]))


if __name__ == "__main__":
    main()
