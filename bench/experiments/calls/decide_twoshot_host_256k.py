#!/usr/bin/env python3
"""The rule for twoshot-host-256k.sh, written before its run: which change, if either, explains
the two-shot push forced on the host at 256 KiB running slower than 1407f0e's. Reads
var/{forced,auto}-{base,old,k8,narrow}-R.json and var/check-*.json (run from the call's folder).
Per (config, ranks, size), each tree's median over its rounds, out of place and in place.
- The run reproduces the loss where, at 4 ranks and 256 KiB, base is above 1.03 of old in
  either direction (the no-regression check's bound; at 23175ee the confirmation had 1.080 out of
  place and 1.030 in place); otherwise it decides nothing (printed "not reproduced").
- A variant explains it where, at 4 ranks and 256 KiB, it runs below base and within 1.02 of
  old, in both directions.
- A variant is harmless where none of its other rows (the forced rows at 32 KiB to 512 KiB, 2 and
  4 ranks, and auto's two-shot rows at 4 ranks, 64 and 96 KiB) is above 1.03 of base.
A variant that explains it and is harmless is the next change to make into code (with its GPU
tests, then timed against the tree); every tree's checked run must be complete with 0 wrong
elements for any verdict."""
import glob, json, statistics as st
TREES = ("base", "old", "k8", "narrow")
t, n = {}, {}
for cfg in ("forced", "auto"):
    for tree in TREES:
        for f in sorted(glob.glob(f"var/{cfg}-{tree}-*.json")):
            rows = json.load(open(f))["rows"]
            n.setdefault((cfg, tree), []).append(len(rows))
            for r in rows:
                t.setdefault((tree, cfg, r["ranks"], r["bytes"]), []).append(r)
wrong, checked = 0, 0
for f in glob.glob("var/check-*.json"):
    for r in json.load(open(f))["rows"]:
        checked += 1
        wrong += sum(max(0, r.get(k, -1)) + (r.get(k, -1) < 0) for k in ("wrong_out_of_place", "wrong_in_place"))
keys = sorted({k[1:] for k in t})
complete = wrong == 0 and checked == 4 * 10 and all(
    len(set(v)) == 1 for v in n.values()) and len({len(v) for v in n.values()}) == 1 and len(n) == 8
print("GPU:", open("gpu.txt").read().strip().splitlines()[-1], "; rounds:", {f"{c}-{x}": len(v) for (c, x), v in n.items()},
      f"; checked rows {checked}, wrong or unchecked {wrong}")
def med(x, k):
    return (st.median(r["us_out_of_place"] for r in t[(x,) + k]), st.median(r["us_in_place"] for r in t[(x,) + k]))
ratio = {}
for k in keys:
    b = med("base", k)
    cells = []
    for x in TREES:
        if (x,) + k not in t:
            continue
        m = med(x, k)
        ratio[(x, k)] = (m[0] / b[0], m[1] / b[1])
        cells.append(f"{x} {m[0]:8.2f} / {m[1]:8.2f} ({ratio[(x, k)][0]:.3f} / {ratio[(x, k)][1]:.3f})")
    print(f"{k[0]:6} {k[1]} {k[2] // 1024:>4} KiB  " + "  ".join(cells))
K = ("forced", 4, 256 * 1024)
old = ratio.get(("old", K), (9, 9))
reproduced = min(old) < 1 / 1.03
print(f"old / base at 4 ranks, 256 KiB: {old[0]:.3f} / {old[1]:.3f}; reproduced {reproduced}; complete {complete}")
for v in ("k8", "narrow"):
    vb = ratio.get((v, K), (9, 9))
    vo = tuple(a / b for a, b in zip(med(v, K), med("old", K))) if (v,) + K in t and ("old",) + K in t else (9, 9)
    explains = max(vb) < 1.0 and max(vo) <= 1.02
    others = [x for (tree, k), r in ratio.items() if tree == v and k != K for x in r]
    harmless = bool(others) and max(others) <= 1.03
    verdict = ("not decided (not reproduced or incomplete)" if not (reproduced and complete)
               else "explains it, harmless" if explains and harmless
               else "explains it, but slower elsewhere" if explains
               else "does not explain it")
    print(f"{v}: /base {vb[0]:.3f} / {vb[1]:.3f}, /old {vo[0]:.3f} / {vo[1]:.3f}; its other rows up to "
          f"{max(others) if others else float('nan'):.3f}; decision {v}: {verdict}")
