#!/usr/bin/env bash
# `prox query --recall` as a user runs it, against the best swept setting
# of the same map and against FAISS IVF-PQ4fs+refine, on one dataset: two
# alternated rounds (a: FAISS, prox --recall, prox --sweep; b: the reverse),
# one search thread. Prints, per round and target, the setting the recall
# profile chose, the recall it reached and its QPS, the QPS of the fastest
# swept prox setting that reaches the target, and FAISS's QPS interpolated
# at the target (benches/scripts/qps_at.py).
#
#   benches/scripts/recall_rounds.sh DATASET_DIR OUT_PREFIX STORE NAME [PATHS]
#
# The map must have a recall profile (`prox build` measures one; `prox
# accel build --name NAME --profile 500` adds it). PATHS (default pq,hnsw)
# are the sidecar paths swept. Env: P (prox binary), PY (python with
# ../shared/bench/requirements.txt), SHARED (../shared). Run it on an idle
# machine; the load average is printed before each engine.
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,16p "$0"; exit 2; }
data=$1 out=$2 store=$3 name=$4 paths=${5:-pq,hnsw}
here=$(cd "$(dirname "$0")" && pwd)
P=${P:-target/release/prox}
PY=${PY:-.venv/bin/python}
SHARED=${SHARED:-../shared}
targets=0.9,0.95,0.99
load() { cut -d' ' -f1 /proc/loadavg; }
bench() {
  "$P" bench --store "$store" --name "$name" --queries "$data/query.fvecs" \
    --gt "$data/gt.ivecs" --k 10 --threads 1 "$@" 2>>"$out.log"
}
faiss() {
  echo "  faiss-ivfpq-fs (load $(load))" >&2
  "$PY" "$SHARED/bench/peer_bench.py" run --threads 1 --passes 1 --reps 2 \
    --data "$data" --peers faiss-ivfpq-fs --out "$1" 2>>"$out.log"
}
recall() {
  echo "  prox --recall (load $(load))" >&2
  bench --recall "$targets" >"$1"
}
sweep() {
  echo "  prox --sweep $paths (load $(load))" >&2
  bench --path "$paths" --sweep >"$1"
}
echo "round a" >&2
faiss "$out-a-faiss.json"
recall "$out-a-recall.jsonl"
sweep "$out-a-sweep.jsonl"
echo "round b" >&2
sweep "$out-b-sweep.jsonl"
recall "$out-b-recall.jsonl"
faiss "$out-b-faiss.json"
echo "end (load $(load))" >&2
for r in a b; do
  echo "round $r"
  python3 - "$out-$r-recall.jsonl" "$out-$r-sweep.jsonl" "$out-$r-faiss.json" "$here" <<'EOF'
import json, sys
sys.path.insert(0, sys.argv[4])
from qps_at import load, qps_at  # noqa: E402
chosen = [json.loads(l) for l in open(sys.argv[1])]
swept = [json.loads(l) for l in open(sys.argv[2])]
curves = {}
load(sys.argv[3], curves)
faiss = [p for (engine, _t), pts in curves.items() if engine.startswith("faiss") for p in pts]
print(f"{'target':>6} {'chosen setting':>32} {'recall':>7} {'QPS':>8} {'best swept':>10} {'ratio':>6} {'FAISS':>8} {'ratio':>6}")
for c in chosen:
    t = float(c["mode"].split(":")[0].split("=")[1])
    best = max((s["qps"] for s in swept if s["recall"] >= t), default=None)
    f = qps_at(faiss, t)
    print(f"{t:>6} {c['mode'].split(': ')[1]:>32} {c['recall']:>7.4f} {c['qps']:>8.0f} "
          f"{best or 0:>10.0f} {c['qps'] / best if best else 0:>6.2f} {f or 0:>8.0f} "
          f"{c['qps'] / f if f else 0:>6.2f}")
EOF
done
