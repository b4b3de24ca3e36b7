#!/usr/bin/env python3
"""Generate conformance/fixtures/secondary-index-extra.v1.json (frozen; commit the output).

The vectors come from the executable spec model, loaded at generation time
from the shared folder ($PROX_SHARED, default ../shared next to the
workspace): its SI_SUPPLEMENTARY reference vectors (secondary-index.md
sections 12 and 13) and canonical builds of seeded multi-leaf indexed
sources (indexes, catalog, control) under a small-chunk config. Nothing
from the shared folder is copied into the repository; only the generated
vectors are.

Usage: python3 conformance/gen/gen_secondary_extra.py [--check]
"""

import importlib.util
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "conformance", "fixtures", "secondary-index-extra.v1.json")


def load_model():
    shared = os.environ.get("PROX_SHARED") or os.path.join(ROOT, "..", "shared")
    path = os.path.join(shared, "tools", "crab_fixture_check.py")
    spec = importlib.util.spec_from_file_location("crab_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def indexed_build(m, cfg, src, source, names):
    """Canonical indexes + catalog of `source` with the fixture extractors."""
    out = {"indexes": []}
    src_root, _ = m.build_canonical(cfg, source)
    sv = m.map_version_id(src_root, cfg)
    out["source_root"] = None if src_root is None else src_root.hex()
    out["source_version"] = sv.hex()
    descs, cps = [], []
    for name, proj in names:
        d = m.make_descriptor(src, name, 1, "fixtures.%s/v1" % name.decode(), proj)
        entries = m.index_entries(source, m.fixture_extractor(proj), proj)
        r, nodes = m.build_canonical(cfg, entries)
        c = {"source_map_id": src, "source_version": sv, "index_name": name, "generation": 1,
             "fingerprint": d["fingerprint"], "index_map_id": m.index_map_id(src, name, d["fingerprint"]),
             "index_version": m.map_version_id(r, cfg)}
        descs.append(d)
        cps.append(c)
        out["indexes"].append({"name": name.hex(), "projection": proj,
                               "entries": len(entries), "root": None if r is None else r.hex(),
                               "node_count": len(nodes), "version": c["index_version"].hex()})
    cat = m.catalog_entries(descs, cps, sv, cps)
    cr, _ = m.build_canonical(cfg, cat)
    out["catalog_root"] = cr.hex()
    out["catalog_version"] = m.map_version_id(cr, cfg).hex()
    ctl = m.control_encode({"source_map_id": src, "catalog_map_id": m.catalog_map_id(src),
                            "active": [(c["index_name"], c["fingerprint"]) for c in cps]})
    out["control_bytes"] = ctl.hex()
    ctl_root, _ = m.build_canonical(cfg, [(m.CONTROL_RECORD_KEY, ctl)])
    out["control_root"] = ctl_root.hex()
    return out


def main(argv):
    m = load_model()
    S = m.SI_SUPPLEMENTARY
    out = {"schema": "prox-secondary-index-extra-v1",
           "generated_by": "conformance/gen/gen_secondary_extra.py (spec model crab_fixture_check.py)"}
    sup = {k: S[k] for k in ("control_u_i", "descriptor_u_i", "physical_0a_u0ff", "descriptor_g300",
                             "descriptor_key_g300", "retired_key_g300", "head_empty",
                             "empty_tree_version", "control_tree_root")}
    v2 = S["v2"]
    sup["v2"] = {"record": [v2["record"][0].hex(), v2["record"][1].hex()],
                 "source_version": v2["source_version"], "catalog_root": v2["catalog_root"],
                 "catalog_version": v2["catalog_version"],
                 "index_roots": {k.hex(): v for k, v in v2["index_roots"].items()}}
    sup["term_bounds"] = {
        "exact_6100": [m.b2h(x) if x is not None else None for x in m.term_bounds_exact(b"a\x00")],
        "prefix_6100": [m.b2h(x) if x is not None else None for x in m.term_bounds_prefix(b"a\x00")],
        "prefix_empty": [m.b2h(x) if x is not None else None for x in m.term_bounds_prefix(b"")],
        "range_61_63": [m.b2h(x) if x is not None else None for x in m.term_bounds_range(b"a", b"c")],
    }
    out["supplementary"] = sup
    rng = random.Random(20261205)
    cfg = dict(m.DEFAULT_CONFIG, min_chunk_size=2, max_chunk_size=16, chunking_factor=4, hash_seed=5)
    src = b"multi-leaf"
    terms = [b"active", b"idle", b"gone", b"a\x00b", b""]
    records = {}
    while len(records) < 400:
        k = b"user-%d" % rng.randrange(100000)
        t = rng.choice(terms)
        records[k] = t + b"|" + bytes(rng.randrange(32, 127) for _ in range(rng.randrange(0, 8)))
    source = sorted(records.items())
    names = [(b"all", "all"), (b"include", "include"), (b"keys", "keys_only")]
    kc = m.DEFAULT_CONFIG
    out["multi_leaf"] = {
        "config": {"min_chunk_size": cfg["min_chunk_size"], "max_chunk_size": cfg["max_chunk_size"],
                   "chunking_factor": cfg["chunking_factor"], "hash_seed": cfg["hash_seed"]},
        "source_map_id": src.hex(),
        "records": [[k.hex(), v.hex()] for k, v in source],
        "expected": indexed_build(m, cfg, src, source, names),
    }
    assert kc is m.DEFAULT_CONFIG
    text = json.dumps(out, indent=1, sort_keys=True) + "\n"
    if "--check" in argv:
        with open(OUT) as f:
            if f.read() != text:
                print("secondary-index-extra.v1.json differs from the generator output")
                return 1
        print("up to date")
        return 0
    with open(OUT, "w") as f:
        f.write(text)
    print("wrote", OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
