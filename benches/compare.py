#!/usr/bin/env python3
"""Every engine on one dataset, in alternated rounds, written into docs/.

prox (every path of a built map, through `prox bench --sweep`, the CLI a
user runs) against the peers of benches/peers/peers.py (hnswlib; FAISS
HNSW, HNSW-SQ8 and IVF-PQ 4-bit fast-scan with exact refine; USearch f32
and i8), each peer built once, then every engine's whole sweep once per
round: round a runs the peers first, round b prox first, and so on, so
drift on a shared machine shows as a difference between rounds instead of
a bias for one engine. The load average is recorded before each engine.

  python3 benches/compare.py --data DIR --store STORE --name NAME [--out docs/bench]
         [--threads 1,2] [--rounds 2] [--peers hnswlib,...] [--prox target/release/prox]

Writes, for the dataset's name D:
  OUT/D.md      the setup, QPS at recall@10 0.90 / 0.95 / 0.99 of every
                engine and path per round and thread count (the Pareto
                frontier, log-QPS interpolated in recall: scripts/qps_at.py),
                and prox's best path against the best peer at each target
  OUT/D.svg     recall vs QPS of every engine, first thread count, round a
  OUT/D.jsonl   every measured point (prox bench / peers.py records plus
                "round" and "load")

Build the map first with the parameters you want measured, e.g. the
defaults: `prox build --store db/g200k --name g200k --input DIR/base.fvecs
--hnsw --pq`. Run on an otherwise idle machine.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))
sys.path.insert(0, str(HERE / "scripts"))

import peers  # noqa: E402
from qps_at import qps_at  # noqa: E402

TARGETS = (0.90, 0.95, 0.99)
DEFAULT_PEERS = "hnswlib,faiss-hnsw,faiss-hnsw-sq8,faiss-ivfpq-fs,usearch,usearch-i8"


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run_prox(args, threads):
    """`prox bench --sweep` records at `threads` search threads."""
    cmd = [str(args.prox), "bench", "--store", str(args.store), "--name", args.name,
           "--queries", str(args.data / "query.fvecs"), "--gt", str(args.data / "gt.ivecs"),
           "--k", str(args.k), "--threads", str(threads), "--sweep"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def curve_name(rec):
    return f"{rec.get('engine', 'prox')}-{rec['path']}"


def frontier_qps(records):
    """{(curve, threads, round): [qps at each target]}, plus "prox-best":
    at each target the fastest prox path."""
    curves = {}
    for r in records:
        curves.setdefault((curve_name(r), r["threads"], r["round"]), []).append(
            (r["recall"], r["qps"]))
    out = {key: [qps_at(pts, t) for t in TARGETS] for key, pts in curves.items()}
    for (name, t, rnd), vals in list(out.items()):
        if not name.startswith("prox-") or name == "prox-best":
            continue
        best = out.setdefault(("prox-best", t, rnd), [None] * len(TARGETS))
        for i, v in enumerate(vals):
            if v is not None and (best[i] is None or v > best[i]):
                best[i] = v
    return out


def cell(v):
    return "-" if v is None else f"{v:,.0f}"


def versions():
    out = []
    for mod in ("faiss", "hnswlib", "usearch", "numpy"):
        try:
            from importlib.metadata import version
            out.append(f"{mod} {version(mod if mod != 'faiss' else 'faiss-cpu')}")
        except Exception:  # not installed: the engine was skipped
            pass
    return ", ".join(out)


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def report(args, dataset, records):
    """The markdown page, from the records alone (each carries its round,
    load, commit and start time)."""
    q = frontier_qps(records)
    started, made_at = records[0]["started"], records[0]["commit"]
    builds, loads = {}, {}
    for r in records:
        name = curve_name(r)
        if not name.startswith("prox"):
            builds.setdefault(name, (r.get("build_seconds"), r.get("index_bytes")))
            who = name
        else:
            who = f"prox t={r['threads']}"
        seen = loads.setdefault(r["round"], [])
        if who not in [w for w, _ in seen]:
            seen.append((who, r["load"]))
    rounds = sorted({r["round"] for r in records})
    threads = sorted({r["threads"] for r in records})
    names = sorted({k[0] for k in q}, key=lambda n: (not n.startswith("prox"), n))
    rl = "; ".join(chr(ord("a") + r) for r in rounds)
    lines = [
        f"# {dataset}: prox against the peers",
        "",
        f"Generated by `benches/compare.py` on {started} UTC, commit {made_at}, "
        f"{cpu_model()} ({os.cpu_count()} logical CPUs), {versions()}. "
        f"Map `{args.name}` in `{args.store}`; {len(rounds)} alternated rounds "
        "(a: peers first, b: prox first, ...); recall@10 over the dataset's "
        "queries; QPS interpolated on each curve's Pareto frontier "
        "(`benches/scripts/qps_at.py`; `-`: the target is not reached).",
        "",
        "Load average before each engine, by round: "
        + "; ".join(f"{chr(ord('a') + r)}: " + ", ".join(f"{n} {v:.2f}" for n, v in loads[r])
                    for r in rounds) + ".",
        "",
        "Peer builds (seconds, index bytes): "
        + ", ".join(f"{n} {b:.1f} s, {s if s is not None else '?'}" for n, (b, s) in builds.items())
        + ".",
        "",
        "prox-best is, at each target, the fastest prox path.",
        "",
        "Reproduce:",
        "",
        "```",
        " ".join(["python3 benches/compare.py"] + records[0].get("argv", args.argv)),
        "```",
        "",
    ]
    for t in threads:
        lines += [f"## {t} thread{'s' if t > 1 else ''}: QPS at recall 0.90 / 0.95 / 0.99, rounds {rl}",
                  "", "| engine-path | " + " | ".join(f"{x:.2f}" for x in TARGETS) + " |",
                  "|---|" + "---:|" * len(TARGETS)]
        for n in names:
            if not any((n, t, r) in q for r in rounds):
                continue
            row = []
            for i in range(len(TARGETS)):
                vals = [cell(q.get((n, t, r), [None] * 3)[i]) for r in rounds]
                row.append("; ".join(vals))
            label = f"**{n}**" if n == "prox-best" else n
            lines.append(f"| {label} | " + " | ".join(row) + " |")
        lines += ["", "prox's best path against the fastest peer at each target, by round:", "",
                  "| target | " + " | ".join(f"round {chr(ord('a') + r)}" for r in rounds) + " |",
                  "|---|" + "---|" * len(rounds)]
        for i, target in enumerate(TARGETS):
            row = []
            for r in rounds:
                mine = q.get(("prox-best", t, r), [None] * 3)[i]
                rivals = [(v[i], k[0]) for k, v in q.items()
                          if k[1] == t and k[2] == r and not k[0].startswith("prox")
                          and v[i] is not None]
                if mine is None or not rivals:
                    row.append("-")
                    continue
                best, who = max(rivals)
                row.append(f"{mine / best:.2f}x ({who} {best:,.0f})")
            lines.append(f"| {target:.2f} | " + " | ".join(row) + " |")
        lines.append("")
    lines += [f"![recall vs QPS]({dataset}.svg)", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--data", required=True, type=Path, help="TEXMEX dataset directory")
    ap.add_argument("--store", required=True, type=Path, help="prox store holding the map")
    ap.add_argument("--name", required=True, help="the map's named root")
    ap.add_argument("--out", type=Path, default=Path("docs/bench"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--peers", default=DEFAULT_PEERS,
                    help="comma-separated: " + ",".join(peers.PEERS))
    ap.add_argument("--prox", type=Path, default=Path("target/release/prox"))
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--build-threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite OUT/D.md and OUT/D.svg from OUT/D.jsonl without measuring")
    args = ap.parse_args()
    args.argv = [a for a in sys.argv[1:] if a != "--report-only"]
    if args.rounds < 1:
        sys.exit("--rounds must be at least 1")
    if not args.prox.exists():
        sys.exit(f"{args.prox} not found: cargo build --release -p prox-tools")
    threads = [int(t) for t in args.threads.split(",") if t]
    if args.report_only:
        dataset = peers.load_dataset(args.data, k=args.k)[4]
        with open(args.out / f"{dataset}.jsonl") as f:
            records = [json.loads(line) for line in f if line.strip()]
        write_outputs(args, dataset, records, threads)
        return 0
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    made_at = commit()
    x, q, gt, metric, dataset = peers.load_dataset(args.data, k=args.k)
    engines = []
    for name in [p for p in args.peers.split(",") if p]:
        built = peers.build_peer(name, x, metric, args.build_threads)
        if built is not None:
            engines.append((name, built))
    records = []
    stamp = {"started": started, "commit": made_at, "argv": args.argv}
    for r in range(args.rounds):
        parts = ["peers", "prox"] if r % 2 == 0 else ["prox", "peers"]
        for part in parts:
            if part == "prox":
                for t in threads:
                    load = load_average()
                    peers.eprint(f"round {r}: prox, {t} thread(s), load {load:.2f}")
                    for rec in run_prox(args, t):
                        records.append({**rec, "round": r, "load": load, **stamp})
                continue
            for name, (eng, build_s, size) in engines:
                load = load_average()
                peers.eprint(f"round {r}: {name}, load {load:.2f}")
                for rec in peers.sweep(eng, q, gt, args.k, threads, dataset, build_s, size):
                    records.append({**rec, "round": r, "load": load, **stamp})
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / f"{dataset}.jsonl", "w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    write_outputs(args, dataset, records, threads)
    return 0


def write_outputs(args, dataset, records, threads):
    """OUT/D.svg and OUT/D.md from the records."""
    first = [r for r in records if r["round"] == 0 and r["threads"] == threads[0]]
    with tempfile.TemporaryDirectory() as d:
        pts = Path(d) / "points.jsonl"
        pts.write_text("".join(json.dumps(r) + "\n" for r in first))
        subprocess.run([str(args.prox), "bench", "plot", "--results", str(pts), "--plot",
                        str(args.out / f"{dataset}.svg"), "--title",
                        f"{dataset}, recall@{args.k}, {threads[0]} thread(s), round a"],
                       check=True, capture_output=True)
    (args.out / f"{dataset}.md").write_text(report(args, dataset, records))
    print(args.out / f"{dataset}.md")


if __name__ == "__main__":
    sys.exit(main())
