#!/usr/bin/env python3
"""Checks what a two-round run of benches/compare.py and of
benches/filtered.py wrote (used by .ci/benches):

  check_bench_runs.py COMPARE_PREFIX FILTERED_PREFIX

COMPARE_PREFIX.{md,jsonl,svg}: prox and every peer measured in both
rounds, recalls in [0, 1] and positive QPS, the report's prox-best row.
FILTERED_PREFIX.{md,jsonl}: all five filters in both rounds for prox and
the peers, prox's default request on each, no prox answer short of
min(k, eligible), a prox setting at recall@10 >= 0.95 on each filter, and
a report section per filter. Exits non-zero with the reasons otherwise.
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

FILTERS = ("50%", "10%", "1%", "0.1%", "0.01%")


def records(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def check_compare(prefix, fail):
    md = Path(f"{prefix}.md")
    for ext in ("md", "jsonl", "svg"):
        if not Path(f"{prefix}.{ext}").is_file():
            fail(f"compare: {prefix}.{ext} missing")
            return
    recs = records(f"{prefix}.jsonl")
    rounds = defaultdict(set)
    for r in recs:
        rounds[r["engine"]].add(r["round"])
        if not (0.0 <= r["recall"] <= 1.0) or not r["qps"] > 0:
            fail(f"compare: bad record {r['engine']} {r['mode']}: "
                 f"recall {r['recall']}, qps {r['qps']}")
    if len(rounds) < 2 or "prox" not in rounds:
        fail(f"compare: engines measured {sorted(rounds)}, want prox and a peer")
    for engine, seen in rounds.items():
        if len(seen) != 2:
            fail(f"compare: {engine} ran in rounds {sorted(seen)}, want 2")
    if "| **prox-best** |" not in md.read_text():
        fail("compare: the report has no prox-best row")


def check_filtered(prefix, fail):
    md, jsonl = Path(f"{prefix}.md"), Path(f"{prefix}.jsonl")
    if not md.is_file() or not jsonl.is_file():
        fail(f"filtered: {md} or {jsonl} missing")
        return
    recs = records(jsonl)
    seen = defaultdict(set)
    best = defaultdict(float)
    for r in recs:
        seen[(r["engine"], r["filter"])].add(r["round"])
        if r["engine"] == "prox":
            if r["underfilled"] != 0:
                fail(f"filtered: prox {r['path']} {r['mode']} at {r['filter']}: "
                     f"{r['underfilled']} short answers")
            best[r["filter"]] = max(best[r["filter"]], r["recall"])
            if r["path"].startswith("auto/default"):
                seen[("prox-default", r["filter"])].add(r["round"])
    engines = {e for e, _ in seen}
    if "prox" not in engines or len(engines - {"prox", "prox-default"}) < 1:
        fail(f"filtered: engines measured {sorted(engines)}, want prox and a peer")
    text = md.read_text()
    for f in FILTERS:
        for e in engines:
            if len(seen[(e, f)]) != 2:
                fail(f"filtered: {e} at {f} ran in rounds {sorted(seen[(e, f)])}, want a and b")
        if best[f] < 0.95:
            fail(f"filtered: prox's best recall at {f} is {best[f]:.4f} < 0.95")
        if f"## {f}:" not in text:
            fail(f"filtered: the report has no {f} section")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    errors = []
    check_compare(sys.argv[1], errors.append)
    check_filtered(sys.argv[2], errors.append)
    for e in errors:
        print("check_bench_runs:", e, file=sys.stderr)
    if errors:
        sys.exit(1)
    print("check_bench_runs: compare.py and filtered.py runs complete")


if __name__ == "__main__":
    main()
