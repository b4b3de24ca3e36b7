#!/usr/bin/env bash
# No import cycles between modules: at every level of each crate's module
# tree, the child modules of one parent (each with its whole subtree) must
# form an acyclic graph. Edges come from `use` paths and inline
# `crate::`/`super::` paths, followed through `pub use` re-exports to the
# module that defines the item; test code is ignored, a module may use its
# ancestors' items and a mod.rs's own re-exports are not dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v python3 >/dev/null 2>&1; then
  echo "NOTICE: python3 not found; skipping the module cycle check"
  exit 0
fi
status=0
for src in kernels/src engine/src sync/src serve/src python/src tools/src; do
  [ -d "$src" ] || continue
  python3 - "$src" <<'PY' || status=1
import os, re, sys
from collections import defaultdict

root = sys.argv[1] if len(sys.argv) > 1 else "engine/src"
files = {}  # module path tuple -> file path
for d, _, fs in os.walk(root):
    for f in fs:
        if not f.endswith(".rs") or f == "tests.rs":
            continue
        p = os.path.join(d, f)
        rel = os.path.relpath(p, root)[:-3].split(os.sep)
        if rel[-1] == "mod" or rel == ["lib"] or rel == ["main"]:
            rel = rel[:-1]
        files[tuple(rel)] = p

def strip(src):
    src = re.sub(r"//[^\n]*", "", src)
    m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", src)
    return src[: m.start()] if m else src

def expand(s):
    s = s.strip()
    i = s.find("{")
    if i < 0:
        return [s]
    prefix, body = s[:i], s[i + 1 : s.rindex("}")]
    parts, depth, cur = [], 0, ""
    for c in body:
        if c == "," and depth == 0:
            parts.append(cur); cur = ""; continue
        depth += c == "{"; depth -= c == "}"
        cur += c
    parts.append(cur)
    out = []
    for p in parts:
        if p.strip():
            out += [prefix + q for q in expand(p)]
    return out

src = {m: strip(open(p).read()) for m, p in files.items()}
reexp = defaultdict(dict)  # module -> name -> absolute path
uses = defaultdict(list)
for m, s in src.items():
    for pub, body in re.findall(r"(pub(?:\([^)]*\))?\s+)?\buse\s+([^;]+);", s):
        body = re.sub(r"\s+as\s+\w+", "", body)  # a rename keeps the target
        for path in expand(re.sub(r"\s+", "", body)):
            name = path.split("::")[-1]
            if pub:
                reexp[m][name] = path
            uses[m].append((path, bool(pub)))
    code = re.sub(r"\buse\s+[^;]+;", "", s)
    for path in re.findall(r"\b(?:crate|super)(?:::\w+)+", code):
        uses[m].append((path, False))

def absolute(m, path):
    segs = [x for x in path.split("::") if x]
    cur = list(m)
    if segs[0] == "crate":
        cur, segs = [], segs[1:]
    elif segs[0] in ("super", "self"):
        while segs and segs[0] in ("super", "self"):
            if segs.pop(0) == "super":
                cur = cur[:-1]
    elif tuple(cur + [segs[0]]) not in files:
        return None  # external crate or std
    return cur, segs

def resolve(m, path, depth=0):
    r = absolute(m, path)
    if r is None:
        return None
    cur, segs = r
    while segs:
        s = segs[0]
        if tuple(cur + [s]) in files:
            cur.append(s); segs.pop(0); continue
        tgt = reexp.get(tuple(cur), {}).get(s)
        if tgt and depth < 10 and tgt.split("::")[-1] == s:
            t = resolve(tuple(cur), tgt, depth + 1)
            if t is not None:
                return t
        break
    return tuple(cur)

edges = set()
for m, us in uses.items():
    is_mod = files[m].endswith(("mod.rs", "lib.rs", "main.rs"))
    for path, pub in us:
        if is_mod and pub:
            continue  # a mod.rs re-export is the table of contents, not a dependency
        t = resolve(m, path)
        if t is not None and t != m and t != ():
            edges.add((m, t))

def sccs(nodes, es):
    adj = defaultdict(set)
    for a, b in es:
        adj[a].add(b)
    idx, low, st, on, out, n = {}, {}, [], set(), [], [0]
    def go(v):
        idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); on.add(v)
        for w in adj[v]:
            if w not in idx:
                go(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(comp)
    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in idx: go(v)
    return out

name = lambda m: "::".join(m) or "crate"
# At every level of the module tree, the child modules of one parent (each
# with its whole subtree) must form an acyclic graph. A module using its own
# ancestors' items, or a mod.rs using its children, is not a sibling edge.
levels = defaultdict(lambda: defaultdict(set))
for a, b in edges:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    if n < len(a) and n < len(b):
        levels[a[:n]][(a[: n + 1], b[: n + 1])].add((a, b))
bad = 0
for parent, es in sorted(levels.items()):
    for comp in sccs({x for e in es for x in e}, es):
        bad += 1
        print("cycle under %s: %s" % (name(parent), ", ".join(sorted(name(c) for c in comp))))
        for (x, y), via in sorted(es.items()):
            if x in comp and y in comp:
                print("    %s -> %s (%s)" % (name(x), name(y), ", ".join(sorted(name(p) + " -> " + name(q) for p, q in via)[:3])))
if "-v" in sys.argv:
    for parent, es in sorted(levels.items()):
        for x, y in sorted(es): print(name(x), "->", name(y))
if not bad:
    print("no module import cycles in", root)
sys.exit(1 if bad else 0)
PY
done
exit "$status"
