#!/usr/bin/env python3
"""Filtered search: prox against FAISS, hnswlib and USearch, in alternated rounds.

Every record of the dataset gets a generated payload (seeded): `cat`, a
keyword with 100 values of Zipf frequencies (value c001 the most common),
`year`, an integer uniform in 1990..2024, and `price`, a log-normal float
with two decimals. Five filters admit about 50%, 10%, 1%, 0.1% and 0.01% of
the records (a price range, a `should` of two keywords, one keyword, a
keyword and a price range, a keyword and a year). The ground truth of each
is the exact top k of the eligible records (FAISS flat search over them).

The engines, one search thread, the whole query set per setting:
  prox            `prox bench --filter` on a map built with the payloads and
                  field indexes (`--build` builds it: `prox build --index
                  cat:keyword --index year:integer --index price:float --hnsw
                  --pq`); HNSW ef 10..512, PQ nprobe 1..256 x rerank (the
                  long sweep), plus the request a user sends without knobs
                  ("auto/default"); the filter is resolved once
  faiss-hnsw      IndexHNSWFlat M=32 with an IDSelectorBitmap
  faiss-ivfpq-fs  IVF-PQ 4-bit fast-scan + exact refine with the bitmap
  hnswlib         M=16, ef_construction=200, a Python filter callable
  usearch         HNSW M=16 through its Rust crate's predicate search
                  (benches/peers/usearch-filtered, built here with cargo:
                  the Python package has no predicate)
Peers are built once; round a runs the peers first, round b prox first.
A setting whose first queries predict more than --cap seconds for the whole
set runs on those queries only (marked "partial").

  python3 benches/filtered.py --data DIR --store STORE --name NAME [--build]
         [--queries 1000] [--rounds 2] [--out docs/bench]

Writes OUT/filtered-D.md (per filter: the eligible count, every engine's
best QPS at recall@10 >= 0.95 and its highest recall, under-filled answers,
prox's best against the best peer) and OUT/filtered-D.jsonl (every point).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))
sys.path.insert(0, str(HERE))

import peers  # noqa: E402
from compare import commit, cpu_model, load_average, versions  # noqa: E402

TARGET = 0.95
EF = [10, 16, 32, 64, 128, 256, 512]
PROX_EF = ",".join(map(str, EF))
IVF_SWEEP = [(p, rf) for rf in (4, 16) for p in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
DEFAULT_PEERS = "faiss-hnsw,faiss-ivfpq-fs,hnswlib,usearch"


# ------------------------------------------------------------ data

def payloads(n, seed):
    """(cat index 0..99, year, price) arrays of n records."""
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, 101)
    cat = rng.choice(100, size=n, p=w / w.sum())
    year = rng.integers(1990, 2025, size=n)
    price = np.round(np.exp(rng.normal(3.0, 1.0, size=n)), 2)
    return cat, year, price


def cat_name(i):
    return f"c{i + 1:03d}"


def filters(cat, year, price):
    """[(label, prox filter JSON, eligibility mask)], thresholds set from
    the data so the selectivities land near their labels."""
    p50 = float(np.round(np.quantile(price, 0.5), 2))
    c9 = cat == 8
    q = float(np.round(np.quantile(price[c9], 1 - 0.001 / c9.mean()), 2))
    m = lambda v: {"key": "cat", "match": {"value": cat_name(v)}}  # noqa: E731
    return [
        ("50%", {"key": "price", "range": {"lt": p50}}, price < p50),
        ("10%", {"should": [m(1), m(29)]}, (cat == 1) | (cat == 29)),
        ("1%", m(18), cat == 18),
        ("0.1%", {"must": [{"key": "cat", "match": {"any": [cat_name(8)]}},
                           {"key": "price", "range": {"gte": q}}]}, c9 & (price >= q)),
        ("0.01%", {"must": [m(49), {"key": "year", "match": {"value": 2001}}]},
         (cat == 49) & (year == 2001)),
    ]


def build_map(args, x, cat, year, price):
    """`prox build` of the vectors with their payloads, as JSON lines on stdin."""
    cmd = [str(args.prox), "build", "--store", str(args.store), "--name", args.name,
           "--input", "-", "--input-format", "jsonl", "--index", "cat:keyword",
           "--index", "year:integer", "--index", "price:float", "--hnsw", "--pq"]
    peers.eprint("building:", " ".join(cmd))
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, text=True)
    for i in range(len(x)):
        proc.stdin.write(json.dumps({
            "vector": x[i].tolist(),
            "payload": {"cat": cat_name(int(cat[i])), "year": int(year[i]),
                        "price": float(price[i])}}) + "\n")
    proc.stdin.close()
    if proc.wait() != 0:
        sys.exit("prox build failed")


def ground_truth(x, q, mask, k):
    """Exact top k of the eligible rows (row numbers), -1 padded."""
    import faiss
    ids = np.flatnonzero(mask)
    flat = faiss.IndexFlatL2(x.shape[1])
    flat.add(x[ids])
    _, found = flat.search(q, min(k, len(ids)))
    out = np.full((len(q), k), -1, dtype=np.int64)
    out[:, :found.shape[1]] = ids[found]
    return out


def write_ivecs(path, rows):
    with open(path, "wb") as f:
        for r in rows:
            r = r[r >= 0].astype(np.int32)
            np.array([len(r)], dtype=np.int32).tofile(f)
            r.tofile(f)


def recall(found, gt, k):
    """Mean over queries of |found ∩ truth| / |truth| (truth: up to k ids)."""
    total = 0.0
    for f, g in zip(found, gt):
        g = g[g >= 0][:k]
        f = np.asarray(f)
        total += len(np.intersect1d(f[f >= 0][:k], g)) / max(len(g), 1)
    return total / len(gt)


# ------------------------------------------------------------ peers

class Peer:
    """A built peer searched with a filter: `search(q, k, setting, f)` gives
    (ids, seconds) for one query batch on one thread."""

    def __init__(self, name, eng):
        self.name, self.eng = name, eng


class FaissHnswF(Peer):
    path, settings = "hnsw-m32", [e for e in EF]

    def prepare(self, mask):
        import faiss
        self.bits = np.packbits(mask, bitorder="little")
        self.sel = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(self.bits))

    def search(self, q, k, ef):
        import faiss
        faiss.omp_set_num_threads(1)
        p = faiss.SearchParametersHNSW(sel=self.sel, efSearch=ef)
        return self.eng.idx.search(q, k, params=p)[1]

    def describe(self, s):
        return f"ef={s}", s


class FaissIvfF(FaissHnswF):
    path, settings = "ivfpq-fs", IVF_SWEEP

    def search(self, q, k, setting):
        import faiss
        faiss.omp_set_num_threads(1)
        nprobe, rf = setting
        ivf = faiss.SearchParametersIVF(sel=self.sel, nprobe=nprobe)
        p = faiss.IndexRefineSearchParameters(k_factor=rf, base_index_params=ivf)
        p.sel = self.sel
        return self.eng.idx.search(q, k, params=p)[1]

    def describe(self, s):
        return f"nprobe={s[0]},rf={s[1]}", s[0]


class HnswlibF(Peer):
    path, settings = "hnsw", [e for e in EF]

    def prepare(self, mask):
        self.mask = mask

    def search(self, q, k, ef):
        self.eng.idx.set_ef(ef)
        m = self.mask
        keep = lambda i: bool(m[i])  # noqa: E731
        try:
            return self.eng.idx.knn_query(q, k=k, num_threads=1, filter=keep)[0]
        except RuntimeError:
            # Fewer than k found for some query: one call per query, asking
            # for fewer until hnswlib can answer.
            out = np.full((len(q), k), -1, dtype=np.int64)
            for i, v in enumerate(q):
                for kk in range(k, 0, -1):
                    try:
                        ids = self.eng.idx.knn_query(v[None], k=kk, num_threads=1,
                                                     filter=keep)[0][0]
                        out[i, :len(ids)] = ids
                        break
                    except RuntimeError:
                        continue
            return out

    def describe(self, s):
        return f"ef={s}", s


PEERS = {"faiss-hnsw": FaissHnswF, "faiss-ivfpq-fs": FaissIvfF, "hnswlib": HnswlibF}


def sweep_peer(peer, q, gts, k, cap, label, mask):
    """Records of every setting of `peer` on one filter, until a setting
    reaches recall 0.99."""
    peer.prepare(mask)
    eligible = int(mask.sum())
    for s in peer.settings:
        mode, ef = peer.describe(s)
        if isinstance(s, int) and s < k:
            continue
        peer.search(q[:10], k, s)  # warm-up
        probe = min(len(q), 20)
        t0 = time.perf_counter()
        head = peer.search(q[:probe], k, s)
        per = (time.perf_counter() - t0) / probe
        if per * len(q) > cap:
            ids, secs, n = head, per * probe, probe
        else:
            t0 = time.perf_counter()
            ids = peer.search(q, k, s)
            secs, n = time.perf_counter() - t0, len(q)
        want = min(k, eligible)
        rec = {"engine": "usearch" if peer.name == "usearch" else peer.name.split("-")[0],
               "path": peer.path, "mode": mode, "ef": ef,
               "recall": recall(ids, gts[:n], k), "qps": n / secs, "threads": 1, "k": k,
               "filter": label, "eligible": eligible,
               "underfilled": int(sum((np.asarray(r) >= 0).sum() < want for r in ids)),
               "queries": n}
        if n < len(q):
            rec["partial"] = True
        peers.eprint(f"  {rec['engine']}-{peer.path} {label:>6} {mode:>16} "
                     f"recall={rec['recall']:.4f} qps={rec['qps']:.0f}"
                     + (f" (first {n} queries)" if n < len(q) else ""))
        yield rec
        if rec["recall"] >= 0.99 and not isinstance(s, tuple):
            break


def usearch_bin(args):
    crate = HERE / "peers" / "usearch-filtered"
    binary = crate / "target" / "release" / "usearch-filtered"
    if not binary.exists():
        subprocess.run(["cargo", "build", "--release", "--manifest-path",
                        str(crate / "Cargo.toml")], check=True)
    return binary


def run_usearch(args, work, flist, qpath):
    plan = {"ef": EF, "filters": [{"label": label, "mask": str(work / f"mask-{i}.bin"),
                                   "gt": str(work / f"gt-{i}.ivecs")}
                                  for i, (label, _, _) in enumerate(flist)]}
    (work / "plan.json").write_text(json.dumps(plan))
    cmd = [str(usearch_bin(args)), "--base", str(args.data / "base.fvecs"), "--queries",
           str(qpath), "--plan", str(work / "plan.json"), "--k", str(args.k),
           "--cap", str(int(args.cap))]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


# ------------------------------------------------------------ prox

def run_prox(args, work, i, label, f, qpath):
    cmd = [str(args.prox), "bench", "--store", str(args.store), "--name", args.name,
           "--queries", str(qpath), "--gt", str(work / f"gt-{i}.ivecs"), "--k", str(args.k),
           "--threads", "1", "--reps", "2", "--path", "auto,hnsw,pq", "--sweep", "--ef", PROX_EF,
           "--filter", json.dumps(f)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    recs = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    resolved = [ln for ln in out.stderr.splitlines() if ln.startswith("filter:")]
    for r in recs:
        r["filter"] = label
        if resolved:
            r["resolve"] = resolved[0]
        if r["mode"] == "default":
            r["path"] = "auto/default (" + r["path"] + ")"
    for r in recs:
        peers.eprint(f"  prox-{r['path']} {label:>6} {r['mode']:>16} "
                     f"recall={r['recall']:.4f} qps={r['qps']:.0f}")
    return recs


# ------------------------------------------------------------ report

def best_at(recs, target):
    ok = [r["qps"] for r in recs if r["recall"] >= target]
    return max(ok) if ok else None


def report(args, dataset, flist, records):
    meta = records[0] if records else {}
    lines = [f"# Filtered search: {dataset}", "",
             f"Measured {meta.get('started', '?')} at commit {meta.get('commit', '?')} on "
             f"{cpu_model()}, {os.cpu_count()} CPUs; {versions()}. One search thread, "
             f"{args.queries} queries, k = {args.k}, {args.rounds} alternated rounds "
             "(a: peers first; b: prox first); the load average before each engine is in "
             "the .jsonl. Reproduce: `python3 benches/filtered.py --data DIR --store STORE "
             "--name NAME --build` (benches/README.md).", "",
             f"QPS is the best setting reaching recall@10 >= {TARGET} (`-`: none did); "
             "`max` the highest recall reached; `short` the answers with fewer than "
             "min(k, eligible) hits at that setting. prox runs every path of the map "
             "(`auto/default` is a request without knobs); a setting marked * ran on its "
             "first queries only (it would have taken over the time cap).", ""]
    for label, f, mask in flist:
        eligible = int(mask.sum())
        lines += [f"## {label}: {eligible:,} eligible", "", f"`{json.dumps(f)}`", "",
                  "| engine/path | round | QPS @ 0.95 | max recall | short |",
                  "|---|---|---|---|---|"]
        curves = {}
        for r in records:
            if r["filter"] == label:
                curves.setdefault((f"{r['engine']}/{r['path']}", r["round"]), []).append(r)
        best = {}
        for (name, rnd), recs in sorted(curves.items()):
            q = best_at(recs, TARGET)
            top = max(recs, key=lambda r: (r["recall"], r["qps"]))
            at = max((r for r in recs if r["recall"] >= TARGET), key=lambda r: r["qps"],
                     default=top)
            star = "*" if at.get("partial") else ""
            lines.append(f"| {name} | {rnd} | {'-' if q is None else f'{q:,.0f}'}{star} | "
                         f"{top['recall']:.4f} | {at.get('underfilled', '-')} |")
            side = "prox" if name.startswith("prox/") else "peer"
            if q is not None:
                b = best.setdefault((side, rnd), (0, ""))
                if q > b[0]:
                    best[(side, rnd)] = (q, name)
        lines.append("")
        for rnd in sorted({r for (_, r) in best}):
            p, o = best.get(("prox", rnd)), best.get(("peer", rnd))
            if p and o:
                lines.append(f"Round {rnd}: prox best {p[0]:,.0f} ({p[1]}) against "
                             f"{o[0]:,.0f} ({o[1]}): **{p[0] / o[0]:.2f}x**.")
            elif p:
                lines.append(f"Round {rnd}: prox best {p[0]:,.0f} ({p[1]}); no peer "
                             f"reached {TARGET}.")
        lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--store", required=True, type=Path)
    ap.add_argument("--name", required=True)
    ap.add_argument("--build", action="store_true", help="build the map with the payloads first")
    ap.add_argument("--prox", type=Path, default=HERE.parent / "target" / "release" / "prox")
    ap.add_argument("--peers", default=DEFAULT_PEERS)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--cap", type=float, default=20.0,
                    help="seconds a setting may take before it runs on its first queries only")
    ap.add_argument("--build-threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, default=HERE.parent / "docs" / "bench")
    ap.add_argument("--report-only", action="store_true", help="redraw from the .jsonl")
    a = ap.parse_args()

    x = peers.read_fvecs(a.data / "base.fvecs")
    q = np.ascontiguousarray(peers.read_fvecs(a.data / "query.fvecs")[: a.queries])
    a.queries = len(q)
    dataset = a.data.resolve().name
    cat, year, price = payloads(len(x), a.seed)
    flist = filters(cat, year, price)
    a.out.mkdir(parents=True, exist_ok=True)
    jsonl = a.out / f"filtered-{dataset}.jsonl"
    if a.report_only:
        records = [json.loads(line) for line in open(jsonl) if line.strip()]
        (a.out / f"filtered-{dataset}.md").write_text(report(a, dataset, flist, records))
        return
    if a.build:
        build_map(a, x, cat, year, price)

    work = Path(tempfile.mkdtemp(prefix="prox-filtered-"))
    qpath = work / "query.fvecs"
    with open(qpath, "wb") as f:
        for v in q:
            np.array([q.shape[1]], dtype=np.int32).tofile(f)
            v.astype(np.float32).tofile(f)
    gts = []
    for i, (label, f, mask) in enumerate(flist):
        gt = ground_truth(x, q, mask, a.k)
        gts.append(gt)
        write_ivecs(work / f"gt-{i}.ivecs", gt)
        np.packbits(mask, bitorder="little").tofile(work / f"mask-{i}.bin")
        peers.eprint(f"filter {label}: {int(mask.sum()):,} eligible ({mask.mean():.4%})")

    names = [p for p in a.peers.split(",") if p]
    built = {}
    for name in names:
        if name in PEERS:
            eng = peers.build_peer(name, x, "l2", a.build_threads)
            if eng is not None:
                built[name] = PEERS[name](name, eng[0])

    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    stamp = {"commit": commit(), "started": started, "argv": sys.argv[1:], "dataset": dataset}
    records = []

    def save():
        with open(jsonl, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        (a.out / f"filtered-{dataset}.md").write_text(report(a, dataset, flist, records))

    def run_peers(rnd):
        for name in names:
            load = load_average()
            if name == "usearch":
                recs = run_usearch(a, work, flist, qpath)
            elif name in built:
                recs = [r for i, (label, _, mask) in enumerate(flist)
                        for r in sweep_peer(built[name], q, gts[i], a.k, a.cap, label, mask)]
            else:
                continue
            for r in recs:
                records.append({**r, **stamp, "round": rnd, "load": load})
            save()

    def run_all_prox(rnd):
        for i, (label, f, _) in enumerate(flist):
            load = load_average()
            for r in run_prox(a, work, i, label, f, qpath):
                records.append({**r, **stamp, "round": rnd, "load": load, "dataset": dataset})
            save()

    for n in range(a.rounds):
        rnd = "ab"[n % 2] + (str(n // 2 + 1) if n >= 2 else "")
        order = (run_peers, run_all_prox) if n % 2 == 0 else (run_all_prox, run_peers)
        for step in order:
            step(rnd)
    print(a.out / f"filtered-{dataset}.md")


if __name__ == "__main__":
    main()
