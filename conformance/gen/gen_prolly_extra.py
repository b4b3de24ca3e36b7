#!/usr/bin/env python3
"""Generate conformance/fixtures/prolly-extra.v1.json (frozen; commit the output).

The vectors come from the executable spec model, loaded at generation time
from the shared folder ($PROX_SHARED, default ../shared next to the
workspace): its SUPPLEMENTARY reference vectors (prolly-core.md section 12)
and canonical builds of seeded random entry sets under several configs.
Nothing from the shared folder is copied into the repository; only the
generated vectors are.

Usage: python3 conformance/gen/gen_prolly_extra.py [--check]
"""

import importlib.util
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "conformance", "fixtures", "prolly-extra.v1.json")


def load_model():
    shared = os.environ.get("PROX_SHARED") or os.path.join(ROOT, "..", "shared")
    path = os.path.join(shared, "tools", "crab_fixture_check.py")
    spec = importlib.util.spec_from_file_location("crab_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cfg_json(cfg):
    kind, custom = cfg["encoding"]
    return {
        "min_chunk_size": cfg["min_chunk_size"],
        "max_chunk_size": cfg["max_chunk_size"],
        "chunking_factor": cfg["chunking_factor"],
        "hash_seed": cfg["hash_seed"],
        "encoding": {"kind": kind, "custom_name": custom},
        "node_cache_max_nodes": cfg["node_cache_max_nodes"],
        "node_cache_max_bytes": cfg["node_cache_max_bytes"],
    }


def main(argv):
    m = load_model()
    sup = m.SUPPLEMENTARY
    out = {"schema": "prox-prolly-extra-v1",
           "generated_by": "conformance/gen/gen_prolly_extra.py (spec model crab_fixture_check.py)",
           "legacy_nodes": [], "manifests": [], "history": None, "builds": []}
    for name in ("legacy_custom_leaf", "legacy_json_internal"):
        v = sup[name]
        out["legacy_nodes"].append({"name": name, "crab": v["crab"], "packed": v["packed"], "named": v["named"]})
    for root, over, created, updated, hx in sup["manifests"]:
        cfg = dict(m.DEFAULT_CONFIG)
        cfg.update(over)
        assert m.b2h(m.manifest_encode(root, cfg, created, updated)) == hx
        out["manifests"].append({"root": None if root is None else root.hex(), "config": cfg_json(cfg),
                                 "created_at_millis": created, "updated_at_millis": updated, "bytes": hx})
    h = sup["history"]
    out["history"] = {"config": cfg_json(dict(m.DEFAULT_CONFIG, min_chunk_size=2, max_chunk_size=4,
                                              chunking_factor=2, hash_seed=0)),
                      "puts": [[k.hex(), v.hex()] for k, v in h["puts"]],
                      "reference_put_root": h["put_root"], "canonical_root": h["canonical_root"]}
    rng = random.Random(20261201)
    configs = [(2, 4, 2, 0, ("raw", None)), (2, 16, 4, 7, ("cbor", None)), (3, 64, 8, 1 << 40, ("json", None)),
               (1, 8, 3, 99, ("custom", "x/prox")), (4, 1024 * 1024, 128, 0, ("raw", None))]
    for i, (mn, mx, f, seed, enc) in enumerate(configs):
        cfg = dict(m.DEFAULT_CONFIG, min_chunk_size=mn, max_chunk_size=mx, chunking_factor=f,
                   hash_seed=seed, encoding=enc)
        n = rng.choice([1, 7, 150, 900])
        entries = {}
        while len(entries) < n:
            k = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 6)))
            entries[k] = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12)))
        items = sorted(entries.items())
        root, nodes = m.build_canonical(cfg, items)
        out["builds"].append({"name": "random_%d" % i, "config": cfg_json(cfg),
                              "entries": [[k.hex(), v.hex()] for k, v in items],
                              "root": root.hex(), "node_count": len(nodes)})
    text = json.dumps(out, indent=1, sort_keys=True) + "\n"
    if "--check" in argv:
        with open(OUT) as f:
            if f.read() != text:
                print("prolly-extra.v1.json differs from the generator output")
                return 1
        print("up to date")
        return 0
    with open(OUT, "w") as f:
        f.write(text)
    print("wrote", OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
