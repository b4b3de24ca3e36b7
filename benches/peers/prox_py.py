#!/usr/bin/env python3
"""prox from Python for the benchmarks (needs the `prox` package: `pip install ./python`,
or `maturin develop --release -m python/Cargo.toml` in the venv).

Three uses:

* `ProxAnn`: the ann-benchmarks algorithm interface (`fit`,
  `set_query_arguments`, `query`, `batch_query`, `get_batch_results`), also
  the `prox` peer of `peers.py`, so prox runs in the same Python process as
  hnswlib, FAISS and USearch and pays the same call overhead.
* `engine-cmd`: the external-engine protocol of the shared peer script
  (`peer_bench.py run --engine-cmd '... prox_py.py engine-cmd --base {base}
  --query {query} --metric {metric} --k {k} --threads {threads}
  --build-threads {build_threads} --params {params} --out {outdir}'`).
* `overhead`: the Python call overhead on one map: Rust `prox bench` and
  Python `Index.search` (batch, and one query per call) alternated on the
  same store and settings, QPS with recall and the load average; `--build`
  also times `prox build` of base.fvecs against `Index.build` of the same
  rows.

  python benches/peers/prox_py.py overhead --prox target/release/prox --data DATA \\
      --store db/minilm --name minilm --ef 32,64,128 --reps 3 [--build] \\
      [--rust-call target/release/examples/index_call]

  `--rust-call` adds the bare engine call one query at a time
  (benches/examples/index_call.rs) as the floor of the per-call overhead.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import read_fvecs, read_ivecs  # noqa: E402

import prox  # noqa: E402

# Build parameters of the comparison (hnswlib's M16 efC200).
HNSW = {"max_connections": 16, "ef_construction": 200}


class ProxAnn:
    """ann-benchmarks' BaseANN interface over `prox.Index` (HNSW path)."""

    def __init__(self, metric, hnsw=None, threads=1):
        self.metric = {"angular": "cosine", "euclidean": "l2"}.get(metric, metric)
        self.hnsw = dict(HNSW if hnsw is None else hnsw)
        self.threads = threads
        self.ef = None
        self.index = None
        self.res = None

    def fit(self, X, threads=None):
        self.index = prox.Index.build(
            np.ascontiguousarray(X, dtype=np.float32), metric=self.metric, hnsw=self.hnsw, threads=threads
        )

    def set_query_arguments(self, ef):
        self.ef = ef

    def query(self, v, n):
        return self.index.search(v, k=n, path="hnsw", ef=self.ef)[1].astype(np.int64)

    def batch_query(self, X, n):
        self.res = self.index.search(X, k=n, path="hnsw", ef=self.ef, threads=self.threads)[1]

    def get_batch_results(self):
        return self.res.astype(np.int64)

    def __str__(self):
        return f"prox(hnsw={self.hnsw}, ef={self.ef})"


def recall(found, gt, k):
    found = np.asarray(found)[:, :k].astype(np.int64)
    return float(np.mean([len(np.intersect1d(f, g[:k])) / k for f, g in zip(found, gt)]))


def loadavg():
    return round(os.getloadavg()[0], 2)


def engine_cmd(a):
    """peer_bench.py's --engine-cmd protocol: build, then one search line per param."""
    x = read_fvecs(a.base)
    q = np.ascontiguousarray(read_fvecs(a.query))
    ann = ProxAnn(a.metric, threads=a.threads)
    t = time.perf_counter()
    ann.fit(x, threads=a.build_threads)
    print(json.dumps({"event": "build", "seconds": time.perf_counter() - t}), flush=True)
    for p in a.params.split(","):
        ann.set_query_arguments(int(p))
        ann.batch_query(q[: min(100, len(q))], a.k)  # warm-up
        best = None
        for _ in range(2):
            t = time.perf_counter()
            ann.batch_query(q, a.k)
            el = time.perf_counter() - t
            best = el if best is None else min(best, el)
        ids = ann.get_batch_results().astype(np.int32)
        f = Path(a.out) / f"ids_{p}.ivecs"
        with open(f, "wb") as fh:
            for row in ids:
                np.array([len(row)], np.int32).tofile(fh)
                row.tofile(fh)
        print(json.dumps({"event": "search", "param": p, "seconds": best, "ids": str(f)}), flush=True)


def rust_bench(a, ef):
    """One `prox bench` run at one ef (1 thread): (qps, recall)."""
    out = subprocess.run(
        [a.prox, "bench", "--store", a.store, "--name", a.name, "--queries", str(a.data / "query.fvecs"),
         "--gt", str(a.data / "gt.ivecs"), "--k", str(a.k), "--threads", "1", "--path", "hnsw", "--ef", str(ef)],
        check=True, capture_output=True, text=True,
    ).stdout
    rec = [json.loads(line) for line in out.splitlines() if line.startswith("{")][0]
    return rec["qps"], rec["recall"]


def rust_call(a, ef):
    """The bare engine call per query (benches/examples/index_call.rs): (qps, recall)."""
    out = subprocess.run(
        [a.rust_call, "--store", a.store, "--name", a.name, "--query", str(a.data / "query.fvecs"),
         "--gt", str(a.data / "gt.ivecs"), "--k", str(a.k), "--ef", str(ef), "--reps", "1"],
        check=True, capture_output=True, text=True,
    ).stdout
    rec = json.loads(out.splitlines()[-1])
    return rec["qps"], rec["recall"]


def overhead(a):
    q = np.ascontiguousarray(read_fvecs(a.data / "query.fvecs"))
    gt = read_ivecs(a.data / "gt.ivecs")
    index = prox.Index.open(a.store, a.name)
    rows = []
    for ef in [int(e) for e in a.ef.split(",") if e]:
        best = {"rust": 0.0, "call": 0.0, "batch": 0.0, "single": 0.0}
        rec = {}
        loads = []
        # Each repetition runs all four, so a change of load hits them alike.
        for _ in range(a.reps):
            qps, rec["rust"] = rust_bench(a, ef)
            best["rust"] = max(best["rust"], qps)
            if a.rust_call:
                qps, rec["call"] = rust_call(a, ef)
                best["call"] = max(best["call"], qps)
            index.search(q[:100], k=a.k, path="hnsw", ef=ef, threads=1)  # warm-up
            t = time.perf_counter()
            _, keys = index.search(q, k=a.k, path="hnsw", ef=ef, threads=1)
            best["batch"] = max(best["batch"], len(q) / (time.perf_counter() - t))
            rec["batch"] = recall(keys, gt, a.k)
            found = np.empty((len(q), a.k), np.uint64)
            t = time.perf_counter()
            for i in range(len(q)):
                found[i] = index.search(q[i], k=a.k, path="hnsw", ef=ef)[1]
            best["single"] = max(best["single"], len(q) / (time.perf_counter() - t))
            rec["single"] = recall(found, gt, a.k)
            loads.append(loadavg())
        row = {
            "ef": ef,
            "qps": {k: round(v) for k, v in best.items() if v},
            "recall": {k: round(v, 4) for k, v in rec.items()},
            "batch_vs_bench": round(best["batch"] / best["rust"], 3),
            "single_overhead_us": round(1e6 / best["single"] - 1e6 / (best["call"] or best["rust"]), 2),
            "load1": loads,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if a.build:
        x = read_fvecs(a.data / "base.fvecs")
        meta = json.loads((a.data / "meta.json").read_text()) if (a.data / "meta.json").exists() else {}
        metric = meta.get("metric", "l2")
        hnsw = ",".join(f"{k}={v}" for k, v in HNSW.items())
        for _ in range(a.reps):
            with tempfile.TemporaryDirectory(dir=a.tmp) as d:
                t = time.perf_counter()
                subprocess.run(
                    [a.prox, "build", "--store", f"{d}/cli", "--name", "m", "--input", str(a.data / "base.fvecs"),
                     "--metric", metric] + (["--hnsw", hnsw] if a.build_hnsw else []),
                    check=True, capture_output=True,
                )
                cli = time.perf_counter() - t
                t = time.perf_counter()
                py = prox.Index.build(x, metric=metric, hnsw=HNSW if a.build_hnsw else None, store=f"{d}/py", name="m")
                pys = time.perf_counter() - t
                same = py.descriptor == prox.Index.open(f"{d}/cli", "m").descriptor
                del py
                print(json.dumps({"build": "hnsw" if a.build_hnsw else "map", "cli_seconds": round(cli, 2),
                                  "python_seconds": round(pys, 2), "same_descriptor": same,
                                  "load1": loadavg()}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("engine-cmd", help="peer_bench.py --engine-cmd protocol")
    e.add_argument("--base", required=True)
    e.add_argument("--query", required=True)
    e.add_argument("--metric", default="l2")
    e.add_argument("--k", type=int, default=10)
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--build-threads", type=int, default=None)
    e.add_argument("--params", default="16,32,64,128,256")
    e.add_argument("--out", required=True)
    o = sub.add_parser("overhead", help="Python vs Rust on one map")
    o.add_argument("--prox", required=True, help="the prox binary (release)")
    o.add_argument("--data", required=True, type=Path, help="dataset dir (query.fvecs, gt.ivecs)")
    o.add_argument("--store", required=True)
    o.add_argument("--name", required=True)
    o.add_argument("--k", type=int, default=10)
    o.add_argument("--ef", default="32,64,128")
    o.add_argument("--reps", type=int, default=3)
    o.add_argument("--rust-call", help="the index_call example binary: per-call floor of the engine")
    o.add_argument("--build", action="store_true", help="also compare build times")
    o.add_argument("--build-hnsw", action="store_true", help="builds include the HNSW sidecar")
    o.add_argument("--tmp", default=None, help="directory for the build comparison's stores")
    a = ap.parse_args()
    engine_cmd(a) if a.cmd == "engine-cmd" else overhead(a)


if __name__ == "__main__":
    main()
