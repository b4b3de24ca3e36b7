#!/usr/bin/env python3
"""Posts upserts to a prox server back to back, for measuring search
latency while writes run (docs/performance.md, "Search latency while writes
run").

usage: http_writer.py URL SECONDS BATCH [--map NAME] [--dim D] [--token T]

The batches (random Gaussian vectors, new keys) are built before the first
request so the client's own CPU does not compete with the run. Prints
"ready" when it starts posting and a JSON summary at the end.
"""
import argparse
import json
import random
import time
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("seconds", type=float)
    ap.add_argument("batch", type=int)
    ap.add_argument("--map", default="m")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--token", default="w-secret")
    ap.add_argument("--batches", type=int, default=80, help="batches built up front")
    a = ap.parse_args()
    rng = random.Random(7)
    key = 60_000_000
    bodies = []
    for _ in range(a.batches):
        pts = []
        for _ in range(a.batch):
            vec = [round(rng.gauss(0, 1), 4) for _ in range(a.dim)]
            pts.append({"key": key.to_bytes(8, "big").hex(), "vector": vec})
            key += 1
        bodies.append(json.dumps({"points": pts}).encode())
    print("ready", flush=True)
    end = time.time() + a.seconds
    lat = []
    while time.time() < end and len(lat) < len(bodies):
        req = urllib.request.Request(
            f"{a.url}/v1/maps/{a.map}/points:upsert",
            data=bodies[len(lat)],
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {a.token}"},
        )
        t = time.time()
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
        lat.append(time.time() - t)
    lat.sort()
    print(json.dumps({
        "batches": len(lat),
        "points": len(lat) * a.batch,
        "batch_seconds_median": lat[len(lat) // 2] if lat else None,
    }))


if __name__ == "__main__":
    main()
