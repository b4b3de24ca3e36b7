#!/usr/bin/env python3
"""Recall@k vs QPS plot (SVG, stdlib only) from peer_bench.py result files.

  python3 benches/scripts/plot_recall_qps.py OUT.svg RESULTS.json [...] [--threads 1]

One line per peer (every peer of every file), QPS on a log axis, recall on a
linear axis from the lowest plotted recall to 1.0.
"""
import json
import math
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def main():
    args = sys.argv[1:]
    threads = "1"
    if "--threads" in args:
        i = args.index("--threads")
        threads = args[i + 1]
        del args[i:i + 2]
    out, files = args[0], args[1:]
    series = []
    for f in files:
        d = json.load(open(f))
        for run in d["runs"]:
            pts = [(p["recall"], p["qps"]) for p in run["curves"].get(threads, []) if p["qps"] > 0]
            if pts:
                series.append((run["peer"], sorted(pts)))
    W, H, L, R, T, B = 720, 460, 70, 20, 30, 50
    rmin = min(r for _, pts in series for r, _ in pts)
    rmin = math.floor(rmin * 20) / 20
    qs = [q for _, pts in series for _, q in pts]
    qlo, qhi = math.log10(min(qs)) - 0.05, math.log10(max(qs)) + 0.05

    def x(r):
        return L + (r - rmin) / (1.0 - rmin) * (W - L - R)

    def y(q):
        return T + (qhi - math.log10(q)) / (qhi - qlo) * (H - T - B)

    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W/2}" y="18" text-anchor="middle">recall@10 vs QPS, {threads} thread(s), all queries in one batch</text>']
    r = rmin
    while r <= 1.0001:
        s.append(f'<line x1="{x(r):.1f}" y1="{T}" x2="{x(r):.1f}" y2="{H-B}" stroke="#ddd"/>')
        s.append(f'<text x="{x(r):.1f}" y="{H-B+16}" text-anchor="middle">{r:.2f}</text>')
        r += 0.01 if 1.0 - rmin <= 0.15 else 0.05
    for e in range(int(math.floor(qlo)), int(math.ceil(qhi)) + 1):
        for m in (1, 2, 5):
            q = m * 10 ** e
            if qlo <= math.log10(q) <= qhi:
                s.append(f'<line x1="{L}" y1="{y(q):.1f}" x2="{W-R}" y2="{y(q):.1f}" stroke="#ddd"/>')
                s.append(f'<text x="{L-6}" y="{y(q)+4:.1f}" text-anchor="end">{q:g}</text>')
    s.append(f'<text x="{W/2}" y="{H-12}" text-anchor="middle">recall@10</text>')
    s.append(f'<text x="16" y="{H/2}" text-anchor="middle" transform="rotate(-90 16 {H/2})">QPS (log)</text>')
    for i, (name, pts) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        path = " ".join(f"{x(r):.1f},{y(q):.1f}" for r, q in pts if r >= rmin)
        s.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        for r, q in pts:
            if r >= rmin:
                s.append(f'<circle cx="{x(r):.1f}" cy="{y(q):.1f}" r="3" fill="{c}"/>')
        s.append(f'<text x="{L+10}" y="{T+18+16*i}" fill="{c}">{name}</text>')
    s.append("</svg>")
    open(out, "w").write("\n".join(s) + "\n")


if __name__ == "__main__":
    main()
