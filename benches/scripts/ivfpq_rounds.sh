#!/usr/bin/env bash
# prox against FAISS IVF-PQ4fs+refine on one dataset, two alternated rounds
# (a: FAISS first, b: prox first), 1 and 2 search threads, then QPS at
# recall 0.90 / 0.95 / 0.99 per round (benches/scripts/qps_at.py).
#
#   benches/scripts/ivfpq_rounds.sh DATASET_DIR OUT_PREFIX STORE:NAME:PATHS...
#
# Each STORE:NAME:PATHS runs `prox bench --store STORE --name NAME --path
# PATHS --sweep` (e.g. db/minilm:minilm:pq,hnsw). FAISS runs through the
# shared peer script (`$SHARED/bench/peer_bench.py`, faiss-ivfpq-fs) with
# `$PY` (default .venv/bin/python, from ../shared/bench/requirements.txt).
# Writes OUT_PREFIX-{a,b}-faiss.json and OUT_PREFIX-{a,b}-prox.jsonl and
# prints the load average before each engine. Run it on an idle machine.
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,14p "$0"; exit 2; }
data=$1 out=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
P=${P:-target/release/prox}
PY=${PY:-.venv/bin/python}
SHARED=${SHARED:-../shared}
load() { cut -d' ' -f1 /proc/loadavg; }

faiss() {
  echo "  faiss-ivfpq-fs (load $(load))" >&2
  "$PY" "$SHARED/bench/peer_bench.py" run --threads 1,2 --passes 1 --reps 2 \
    --data "$data" --peers faiss-ivfpq-fs --out "$1" 2>>"$out.log"
}

prox() {
  local dest=$1 spec store name paths t
  : >"$dest"
  for spec in "${maps[@]}"; do
    IFS=: read -r store name paths <<<"$spec"
    for t in 1 2; do
      echo "  prox $name $paths, $t thread(s) (load $(load))" >&2
      "$P" bench --store "$store" --name "$name" --queries "$data/query.fvecs" \
        --gt "$data/gt.ivecs" --k 10 --threads "$t" --path "$paths" --sweep \
        >>"$dest" 2>>"$out.log"
    done
  done
}

maps=("$@")
echo "round a" >&2
faiss "$out-a-faiss.json"
prox "$out-a-prox.jsonl"
echo "round b" >&2
prox "$out-b-prox.jsonl"
faiss "$out-b-faiss.json"
echo "end (load $(load))" >&2
for r in a b; do
  echo "round $r"
  python3 "$here/qps_at.py" "$out-$r-faiss.json" "$out-$r-prox.jsonl"
done
