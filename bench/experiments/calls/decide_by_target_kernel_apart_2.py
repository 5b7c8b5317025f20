#!/usr/bin/env python3
"""The second rule for by-target-kernel-apart.patch, written after its first run (which the first
rule left not resolved: two builds of the tree came out up to 8 % apart at 8 ranks and 64 KiB)
and before this run; this run alone decides. Reads var/host-{base,base2,apart}-R.json and
var/check-host-*.json. Per (ranks, backend, size), each tree's median over its rounds, out of
place and in place; ratios per direction. The patch changes the device code of one kernel only
(every other kernel's PTX is the tree's), which runs in the rows of the two-shot pull from 96 KiB
(4 ranks with the pull forced, 8 ranks auto and forced: 12 rows); the other rows run the tree's
device code and decide nothing (printed). Decision, with d the largest distance from 1 of
base2/base (two builds of the tree) in those 12 rows, either direction (the run's own
resolution there):
- merge, where every tree has 20 rows in every round and 0 wrong elements in its checked run; no
  row of the 12 of apart/base is above max(1.03, 1 + d); auto at 8 ranks and 384 KiB is at most
  min(0.96, 1 - d) of base in both directions;
- not merged, otherwise."""
import glob, json, statistics as st
t, n = {}, {}
for tree in ("base", "base2", "apart"):
    for f in sorted(glob.glob(f"var/host-{tree}-*.json")):
        rows = json.load(open(f))["rows"]
        n.setdefault(tree, []).append(len(rows))
        for r in rows:
            t.setdefault((tree, r["ranks"], r["backend"], r["bytes"]), []).append(r)
wrong = 0
for f in glob.glob("var/check-host-*.json"):
    for r in json.load(open(f))["rows"]:
        wrong += sum(max(0, r.get(k, -1)) + (r.get(k, -1) < 0) for k in ("wrong_out_of_place", "wrong_in_place"))
print("GPU:", open("gpu.txt").read().strip().splitlines()[-1], "; rounds:", {k: len(v) for k, v in n.items()},
      "; wrong or unchecked in the checked runs:", wrong)
keys = sorted({k[1:] for k in t})
ok = len(keys) == 20 and all(set(v) == {20} for v in n.values()) and len(set(map(len, n.values()))) == 1 \
    and len(n) == 3 and wrong == 0
def med(x, k):
    return (st.median(r["us_out_of_place"] for r in t[(x,) + k]), st.median(r["us_in_place"] for r in t[(x,) + k]))
def compare(new, old, label):
    out = {}
    for k in keys:
        a, b = med(new, k), med(old, k)
        out[k] = (a[0] / b[0], a[1] / b[1])
        algos = {x: sorted({r["chosen"] for r in t[(x,) + k]}) for x in (old, new)}
        print(f"{label}: {k[0]} {k[1]:<18} {k[2] // 1024:>5} KiB  {old} {b[0]:7.2f} / {b[1]:7.2f} {algos[old]}  "
              f"{new} {a[0]:7.2f} / {a[1]:7.2f} {algos[new]}  {new}/{old} {out[k][0]:.3f} / {out[k][1]:.3f}")
    return out
KiB = 1024
same = compare("base2", "base", "builds")
g = compare("apart", "base", "rule")
KERNEL = [k for k in keys if k[2] >= 96 * KiB and (k[0] == 8 or k[1] == "tpar:twoshot-pull")]
far = max(abs(x - 1) for k in KERNEL for x in same[k])
far_all = max(abs(x - 1) for v in same.values() for x in v)
worst = max(max(g[k]) for k in KERNEL)
other = [x for k in keys if k not in KERNEL for x in g[k]]
gain = max(g[(8, "tpar", 384 * KiB)])
print(f"two builds of the tree: largest distance from 1 in the kernel's {len(KERNEL)} rows {far:.3f}, in all rows {far_all:.3f}")
print(f"rule: complete {ok}; kernel's rows worst {worst:.3f}; 8 ranks auto 384 KiB {gain:.3f}; "
      f"(the tree's device code: {min(other):.3f} to {max(other):.3f}, decides nothing)")
lim, need = max(1.03, 1 + far), min(0.96, 1 - far)
print(f"limits from this run: no row above {lim:.3f}; 8 ranks auto 384 KiB at most {need:.3f}")
if ok and len(KERNEL) == 12 and worst <= lim and gain <= need:
    print("decision: merge by-target-kernel-apart.patch")
else:
    print("decision: not merged")
