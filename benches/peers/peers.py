#!/usr/bin/env python3
"""Run peer ANN engines on a TEXMEX dataset directory and emit JSON lines
in the schema of `prox bench` (docs/cli.md, "Benchmark records"), so that
`prox bench --peers results.jsonl --plot out.svg` draws them beside prox.

Dataset directory (as written by `prox datagen`):
  base.fvecs   base vectors, row i has id i
  query.fvecs  queries
  gt.ivecs     exact neighbour ids per query (at least k per row)
  meta.json    optional; its "metric" ("l2", "ip" or "cosine") is used
               unless --metric is given

Peers (select with --peers, comma-separated):
  hnswlib         hnswlib HNSW, M=16, ef_construction=200; sweep ef
  faiss-hnsw      FAISS IndexHNSWFlat, M=32; sweep efSearch
  faiss-hnsw-sq8  FAISS IndexHNSWSQ (8-bit scalar quantizer), M=32; sweep
                  efSearch (a quantized graph, beside prox's SQ8 and PQ paths)
  faiss-ivfpq-fs  FAISS IVF + 4-bit PQ fast-scan + exact refine (RFlat);
                  sweep nprobe x refine factor 4, 16 (the "ef" field holds
                  nprobe, "mode" both)
  usearch         USearch HNSW, f32, connectivity=16, expansion_add=128;
                  sweep expansion_search
  usearch-i8      the same with i8 vectors: on ip data USearch's own cast
                  (it scales each vector by its norm); on l2 data the int8
                  rows come from one global scale 127 / max|x| (a per-vector
                  scale would change L2 distances), queries scaled alike
  brute           FAISS IndexFlat (exact; one point)
  prox            prox's Python package (benches/peers/prox_py.py), HNSW
                  sidecar M=16, ef_construction=200; sweep ef (engine
                  "prox-python": the same call overhead as the peers)

Measurement: each setting runs the whole query set in one batch call
(after one untimed warm-up call), once per thread count in --threads; QPS
= queries / wall seconds; recall@k = mean |found ∩ gt[:k]| / k.

Example:
  python3 benches/peers/peers.py --data data/gmm-100k --out peers.jsonl
  python3 benches/peers/peers.py --data DIR --peers prox,hnswlib,faiss-hnsw,usearch  (one process)
"""
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

EF_SWEEP = [10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 800]
NPROBE_SWEEP = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128]


def eprint(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- TEXMEX io

def _read_texmex(path, dtype):
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size == 0:
        sys.exit(f"{path}: empty file")
    if raw.size < 4:
        sys.exit(f"{path}: truncated header")
    dim = int(raw[:4].view("<i4")[0])
    if dim <= 0:
        sys.exit(f"{path}: row 0 has dimension {dim}")
    row_bytes = 4 + 4 * dim
    if raw.size % row_bytes:
        sys.exit(f"{path}: size {raw.size} is not a multiple of the row size {row_bytes} "
                 f"(row {raw.size // row_bytes} truncated or dimensions differ)")
    rows = raw.reshape(-1, row_bytes)
    dims = rows[:, :4].copy().view("<i4").ravel()
    bad = np.nonzero(dims != dim)[0]
    if bad.size:
        sys.exit(f"{path}: row {bad[0]} has dimension {dims[bad[0]]}, expected {dim}")
    return np.ascontiguousarray(rows[:, 4:].copy().view(dtype))


def read_fvecs(path):
    x = _read_texmex(path, "<f4").astype(np.float32, copy=False)
    bad = np.nonzero(~np.isfinite(x).all(axis=1))[0]
    if bad.size:
        sys.exit(f"{path}: row {bad[0]} has a non-finite component")
    return x


def read_ivecs(path):
    return _read_texmex(path, "<i4").astype(np.int64, copy=False)


# ---------------------------------------------------------------- engines

class Engine:
    """One peer: build once, then search at several settings."""
    engine = "?"
    path = "?"
    knob = "ef"

    def __init__(self, dim, metric):
        self.dim = dim
        self.metric = metric  # "l2" or "ip" (cosine data is normalised first)

    def sweep(self, k):
        return [e for e in EF_SWEEP if e >= k]

    def describe(self, setting):
        """(mode string, value of the "ef" field) for a sweep setting."""
        if setting is None:
            return "exact", None
        return f"{self.knob}={setting}", setting

    def index_bytes(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "index")
            self.save(p)
            return os.path.getsize(p)


class Hnswlib(Engine):
    engine, path = "hnswlib", "hnsw"

    def build(self, x, threads):
        import hnswlib
        self.idx = hnswlib.Index(space="l2" if self.metric == "l2" else "ip", dim=self.dim)
        self.idx.init_index(max_elements=len(x), M=16, ef_construction=200, random_seed=100)
        self.idx.add_items(x, np.arange(len(x)), num_threads=threads)

    def set(self, ef):
        self.idx.set_ef(ef)

    def search(self, q, k, threads):
        ids, _ = self.idx.knn_query(q, k=k, num_threads=threads)
        return ids

    def save(self, p):
        self.idx.save_index(p)


class Faiss(Engine):
    engine = "faiss"

    def _faiss(self):
        import faiss
        return faiss

    def mt(self):
        f = self._faiss()
        return f.METRIC_L2 if self.metric == "l2" else f.METRIC_INNER_PRODUCT

    def search(self, q, k, threads):
        self._faiss().omp_set_num_threads(threads)
        _, ids = self.idx.search(q, k)
        return ids

    def save(self, p):
        self._faiss().write_index(self.idx, p)


class FaissHnsw(Faiss):
    path = "hnsw-m32"

    def build(self, x, threads):
        f = self._faiss()
        f.omp_set_num_threads(threads)
        self.idx = f.IndexHNSWFlat(self.dim, 32, self.mt())
        self.idx.hnsw.efConstruction = 40
        self.idx.add(x)

    def set(self, ef):
        self.idx.hnsw.efSearch = ef


class FaissHnswSq8(FaissHnsw):
    path = "hnsw-sq8-m32"

    def build(self, x, threads):
        f = self._faiss()
        f.omp_set_num_threads(threads)
        self.idx = f.IndexHNSWSQ(self.dim, f.ScalarQuantizer.QT_8bit, 32, self.mt())
        self.idx.hnsw.efConstruction = 40
        self.idx.train(x)
        self.idx.add(x)


class FaissIvfPqFs(Faiss):
    path, knob = "ivfpq-fs", "nprobe"

    def build(self, x, threads):
        f = self._faiss()
        f.omp_set_num_threads(threads)
        n = len(x)
        self.nlist = max(16, min(65536, int(4 * np.sqrt(n))))
        m = self.dim // 2 if self.dim % 2 == 0 else self.dim
        self.idx = f.index_factory(self.dim, f"IVF{self.nlist},PQ{m}x4fs,RFlat", self.mt())
        rng = np.random.default_rng(0)
        train = x if n <= 100 * self.nlist else x[rng.choice(n, 100 * self.nlist, replace=False)]
        self.idx.train(train)
        self.idx.add(x)
        self.ps = f.ParameterSpace()

    def sweep(self, k):
        # (nprobe, refine factor): the refine stage rescans k * factor
        # candidates exactly, which bounds recall for small factors.
        return [(p, rf) for rf in (4, 16) for p in NPROBE_SWEEP if p <= self.nlist]

    def set(self, setting):
        nprobe, rf = setting
        self.ps.set_index_parameter(self.idx, "k_factor_rf", rf)
        self.ps.set_index_parameter(self.idx, "nprobe", nprobe)

    def describe(self, setting):
        return f"nprobe={setting[0]},rf={setting[1]}", setting[0]


class FaissFlat(Faiss):
    path, knob = "brute", None

    def build(self, x, threads):
        self.idx = self._faiss().IndexFlat(self.dim, self.mt())
        self.idx.add(x)

    def sweep(self, k):
        return [None]

    def set(self, _):
        pass


class Usearch(Engine):
    engine, path = "usearch", "hnsw"
    dtype = "f32"

    def build(self, x, threads):
        from usearch.index import Index
        self.idx = Index(ndim=self.dim, metric="l2sq" if self.metric == "l2" else "ip",
                         dtype=self.dtype, connectivity=16, expansion_add=128)
        self.idx.add(np.arange(len(x), dtype=np.uint64), x, threads=threads)

    def set(self, ef):
        self.idx.expansion_search = ef

    def search(self, q, k, threads):
        return self.idx.search(q, k, threads=threads).keys

    def save(self, p):
        self.idx.save(p)


class UsearchI8(Usearch):
    path, dtype = "hnsw-i8", "i8"
    scale = None

    def _to_i8(self, v):
        return np.clip(np.rint(v * self.scale), -127, 127).astype(np.int8)

    def build(self, x, threads):
        if self.metric == "l2":
            # One scale for every row keeps L2 order; USearch's cast would
            # normalise each row.
            self.scale = 127.0 / max(float(np.abs(x).max()), 1e-30)
            x = self._to_i8(x)
        super().build(x, threads)

    def search(self, q, k, threads):
        return super().search(q if self.scale is None else self._to_i8(q), k, threads)


class ProxPython(Engine):
    """prox through its Python package (prox_py.ProxAnn: HNSW sidecar, M16 efC200),
    in this process like the other peers."""
    engine, path = "prox-python", "hnsw"

    def build(self, x, threads):
        from prox_py import ProxAnn
        self.ann = ProxAnn(self.metric, threads=1)
        self.ann.fit(x, threads=threads)

    def set(self, ef):
        self.ann.set_query_arguments(ef)

    def search(self, q, k, threads):
        self.ann.threads = threads
        self.ann.batch_query(q, k)
        return self.ann.get_batch_results()

    def index_bytes(self):
        return None  # an in-memory store: no file to measure


PEERS = {
    "prox": ProxPython,
    "hnswlib": Hnswlib,
    "faiss-hnsw": FaissHnsw,
    "faiss-hnsw-sq8": FaissHnswSq8,
    "faiss-ivfpq-fs": FaissIvfPqFs,
    "usearch": Usearch,
    "usearch-i8": UsearchI8,
    "brute": FaissFlat,
}


# ---------------------------------------------------------------- driver

def recall(found, gt, k):
    found = np.asarray(found)[:, :k]
    hits = sum(len(np.intersect1d(f, g[:k], assume_unique=False)) for f, g in zip(found, gt))
    return hits / (k * len(gt))


def load_dataset(data, metric=None, k=10):
    """(base, queries, gt, metric, dataset name) of a TEXMEX directory;
    cosine data is normalised and measured as inner product."""
    meta = {}
    if (data / "meta.json").exists():
        meta = json.loads((data / "meta.json").read_text())
    metric = metric or meta.get("metric", "l2")
    x = read_fvecs(data / "base.fvecs")
    q = read_fvecs(data / "query.fvecs")
    gt = read_ivecs(data / "gt.ivecs")
    if x.shape[1] != q.shape[1]:
        sys.exit(f"base dim {x.shape[1]} != query dim {q.shape[1]}")
    if len(gt) != len(q) or gt.shape[1] < k:
        sys.exit(f"gt.ivecs has {gt.shape} ids; need {len(q)} rows of at least k={k}")
    if metric == "cosine":
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-30)
        metric = "ip"
    x = np.ascontiguousarray(x, dtype=np.float32)
    q = np.ascontiguousarray(q, dtype=np.float32)
    return x, q, gt, metric, meta.get("name") or data.resolve().name


def build_peer(name, x, metric, build_threads):
    """(engine, build seconds, index bytes) of peer `name`, or None when
    its package is missing (said on stderr)."""
    if name not in PEERS:
        sys.exit(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
    eng = PEERS[name](x.shape[1], metric)
    try:
        t0 = time.perf_counter()
        eng.build(x, build_threads)
        build_s = time.perf_counter() - t0
    except ImportError as e:
        eprint(f"{name}: skipped ({e}); pip install -r benches/peers/requirements.txt")
        return None
    size = eng.index_bytes()
    eprint(f"{name}: built {len(x)} x {x.shape[1]} in {build_s:.1f}s, {size} bytes")
    return eng, build_s, size


def sweep(eng, q, gt, k, threads, dataset, build_s, size):
    """Every setting of `eng` at every thread count: one record each (the
    whole query set in one batch call after a warm-up call)."""
    for setting in eng.sweep(k):
        eng.set(setting)
        mode, ef = eng.describe(setting)
        for t in threads:
            eng.search(q[: min(len(q), 100)], k, t)  # warm-up
            t0 = time.perf_counter()
            ids = eng.search(q, k, t)
            secs = time.perf_counter() - t0
            rec = {
                "engine": eng.engine,
                "path": eng.path,
                "dataset": dataset,
                "mode": mode,
                "ef": ef,
                "recall": recall(ids, gt, k),
                "qps": len(q) / secs,
                "threads": t,
                "build_seconds": build_s,
                "index_bytes": size,
                "k": k,
            }
            eprint(f"  {eng.engine}-{eng.path} {mode:>12} t={t} "
                   f"recall={rec['recall']:.4f} qps={rec['qps']:.0f}")
            yield rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Schema: docs/cli.md, 'Benchmark records'.")
    ap.add_argument("--data", required=True, type=Path, help="dataset directory")
    ap.add_argument("--peers", default="hnswlib,faiss-hnsw,faiss-ivfpq-fs,usearch",
                    help="comma-separated: " + ",".join(PEERS))
    ap.add_argument("--threads", default="1", help="search thread counts, e.g. 1,2")
    ap.add_argument("--build-threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--metric", choices=["l2", "ip", "cosine"])
    ap.add_argument("--out", type=Path, help="append JSON lines here (default: stdout)")
    a = ap.parse_args()

    x, q, gt, metric, dataset = load_dataset(a.data, a.metric, a.k)
    threads = [int(t) for t in a.threads.split(",") if t]
    out = open(a.out, "a") if a.out else sys.stdout
    for name in [p for p in a.peers.split(",") if p]:
        built = build_peer(name, x, metric, a.build_threads)
        if built is None:
            continue
        for rec in sweep(built[0], q, gt, a.k, threads, dataset, *built[1:]):
            out.write(json.dumps(rec) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
