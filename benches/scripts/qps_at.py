#!/usr/bin/env python3
"""QPS at fixed recall@k from benchmark results, per engine, path and threads.

Reads `prox bench` JSON lines (docs/cli.md, "Benchmark records") and the
JSON files `../shared/bench/peer_bench.py run` writes, and prints one row
per (engine or path, threads) with the QPS interpolated at each target
recall: the Pareto frontier of the points (no other point has both higher
recall and higher QPS), log-QPS linear in recall between the two frontier
points that bracket the target; "-" when no point reaches it. A
"prox-best" row takes every prox path together.

  python3 benches/scripts/qps_at.py prox.jsonl faiss.json [--targets 0.9,0.95,0.99]
"""
import argparse
import json
import math
import sys


def frontier(points):
    """(recall, qps) points no other point dominates, ascending recall."""
    best = []
    top_qps = -1.0
    for r, q in sorted(points, key=lambda p: (-p[0], -p[1])):
        if q > top_qps:
            best.append((r, q))
            top_qps = q
    return sorted(best)


def qps_at(points, target):
    f = frontier(points)
    above = [p for p in f if p[0] >= target]
    if not above:
        return None
    hi = above[0]
    below = [p for p in f if p[0] < target]
    if not below:
        return hi[1]
    lo = below[-1]
    if hi[0] == lo[0]:
        return hi[1]
    w = (target - lo[0]) / (hi[0] - lo[0])
    return math.exp(math.log(lo[1]) + w * (math.log(hi[1]) - math.log(lo[1])))


def load(path, curves):
    with open(path) as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and "runs" in doc:  # peer_bench.py run
        for run in doc["runs"]:
            for threads, pts in run.get("curves", {}).items():
                key = (run["peer"], int(threads))
                curves.setdefault(key, []).extend((p["recall"], p["qps"]) for p in pts)
        return
    for line in text.splitlines():  # prox bench / peers.py JSON lines
        if not line.strip():
            continue
        rec = json.loads(line)
        if "recall" not in rec or "qps" not in rec:
            continue
        threads = int(rec.get("threads") or 1)
        engine = rec.get("engine", "prox")
        name = f"{engine}-{rec['path']}" if engine == "prox" else f"{engine}-{rec.get('path', '')}".rstrip("-")
        curves.setdefault((name, threads), []).append((rec["recall"], rec["qps"]))
        if engine == "prox":
            curves.setdefault(("prox-best", threads), []).append((rec["recall"], rec["qps"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--targets", default="0.90,0.95,0.99")
    args = ap.parse_args()
    targets = [float(t) for t in args.targets.split(",")]
    curves = {}
    for f in args.files:
        load(f, curves)
    print(f"{'engine/path':28} {'threads':>7} " + " ".join(f"{t:>9.2f}" for t in targets))
    for (name, threads), pts in sorted(curves.items()):
        vals = [qps_at(pts, t) for t in targets]
        cells = " ".join(f"{v:9.0f}" if v is not None else f"{'-':>9}" for v in vals)
        print(f"{name:28} {threads:7d} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
