#!/usr/bin/env python3
"""Registers, spills and SASS instruction counts of every all-reduce kernel of a source tree.

Compiles each src/kernels/*.cu of TREE for one architecture (sm_90 by default) to a cubin with
`-Xptxas -v`, then reads the machine code back with nvdisasm. Per kernel it prints the
registers, spill stores/loads, stack frame, the total number of SASS instructions and the
instructions inside loops (every backward branch closes a loop; the body is the span from its
target to the branch, counted once where loops nest). Kernels are keyed by
(algorithm, element type, rank variant) so that two trees with different kernel names can be
compared:

  scripts/kernel-report.py TREE [--arch 90] [--only FILE.cu]... [--json OUT]
  scripts/kernel-report.py --compare OLD.json NEW.json     # table old / new / difference

An algorithm is the .cu file's name for the old layout (one_shot.cu ...) and the registry name
(tparAlgoName) for the new one; --alias maps one to the other.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

# Kernel file of the layout before the registry -> algorithm name.
FILE_ALIASES = {
    "one_shot": "oneshot",
    "two_shot": "twoshot",
    "staged": "staged",
    "hierarchical": "hier",
    "one_shot_pull": "oneshot-pull",
    "two_shot_pull": "twoshot-pull",
    "two_shot_pipelined": "pipelined",
    "two_shot_ll": "twoshot-ll",
}


def nvcc_cmd(tree, src, arch, out):
    return [
        os.environ.get("NVCC", "nvcc"), "-O2", "-DNDEBUG", "-std=c++17", "--expt-relaxed-constexpr",
        "-I", os.path.join(tree, "include"), "-I", os.path.join(tree, "src"),
        f"-arch=sm_{arch}", "-cubin", "-Xptxas", "-v", "-o", out, src,
    ]


def demangle(names):
    if not names:
        return {}
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return dict(zip(names, r.stdout.splitlines()))


# Schedule instantiation (allReduceKernel or normKernel<Schedule, T, kMax>) -> algorithm name.
SCHEDULES = [
    (r"CrossIslands", "hier"),
    (r"AllRanks, true", "staged"),
    (r"OneShotNorm<[^<>]*SentinelBox", "oneshot+norm"),
    (r"OneShotNorm<[^<>]*LineBox", "oneshot-pull+norm"),
    (r"OneShot<[^<>]*SentinelBox", "oneshot"),
    (r"OneShot<[^<>]*LineBox", "oneshot-pull"),
    (r"TwoShot<[^<>]*SentinelBox", "twoshot"),
    (r"TwoShot<[^<>]*LineBox", "twoshot-ll"),
    (r"TwoShot<[^<>]*FlagBox, \(tpar::kernels::Direction\)2", "pipelined"),
    (r"TwoShot<[^<>]*FlagBox, \(tpar::kernels::Direction\)1", "twoshot-pull"),
    (r"Staged\b", "staged"),
    (r"Hierarchical\b", "hier"),
]


def key_of(pretty, file_algo):
    """(algorithm, type, variant, function) from a demangled kernel name."""
    m = re.search(r"(float|F16Tag|Bf16Tag), (\d+)>\(", pretty)
    ty = {"float": "f32", "F16Tag": "f16", "Bf16Tag": "bf16"}[m.group(1)] if m else "?"
    variant = m.group(2) if m else "?"
    algo = file_algo
    if "allReduceKernel<" in pretty:
        for pat, name in SCHEDULES:
            if re.search(pat, pretty):
                algo = name
                break
    fn = re.sub(r"\(.*", "", pretty).split("::")[-1].split("<")[0]
    return algo, ty, variant, fn


def parse_sass(text):
    """Per function: total instructions, loop instructions (union of backward-branch spans)."""
    funcs = {}
    cur = None
    pending = []  # labels waiting for the address of the next instruction
    for line in text.splitlines():
        hdr = re.match(r"\s*\.section\s+\.text\.([^,]+),", line)
        if hdr:
            cur = hdr.group(1)
            funcs[cur] = {"ins": [], "labels": {}}
            pending = []
            continue
        lab = re.match(r"^(\.L_x_\d+):", line)
        if lab:
            pending.append(lab.group(1))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m and cur is not None:
            addr = int(m.group(1), 16)
            for l in pending:
                funcs[cur]["labels"][l] = addr
            pending = []
            funcs[cur]["ins"].append((addr, m.group(2).strip()))
    out = {}
    for name, f in funcs.items():
        body = [(a, i) for a, i in f["ins"] if not re.match(r"(@!?U?P\w+\s+)?NOP\b", i)]
        addrs = [a for a, _ in body]
        spans = []
        for a, i in body:
            t = re.search(r"\bBRA\b.*?(\.L_x_\d+)", i)
            if t and t.group(1) in f["labels"]:
                tgt = f["labels"][t.group(1)]
                if tgt <= a:
                    spans.append((tgt, a))
        in_loop = {x for lo, hi in spans for x in addrs if lo <= x <= hi}
        out[name] = {"sass": len(body), "loop_sass": len(in_loop), "loops": len(spans)}
    return out


def report(tree, arch, only=()):
    kdir = os.path.join(tree, "src", "kernels")
    files = sorted(f for f in os.listdir(kdir) if f.endswith(".cu") and f != "launch.cu")
    if only:
        missing = sorted(set(only) - set(files))
        if missing:
            sys.exit(f"--only: no {', '.join(missing)} in {kdir}")
        files = [f for f in files if f in only]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            src = os.path.join(kdir, f)
            cubin = os.path.join(tmp, f + ".cubin")
            r = subprocess.run(nvcc_cmd(tree, src, arch, cubin), capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"nvcc failed on {src}:\n{r.stderr}")
            props = {}
            cur = None
            for line in r.stderr.splitlines():
                m = re.search(r"Compiling entry function '(\S+)'", line)
                if m:
                    cur = m.group(1)
                    props[cur] = {}
                m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
                if m and cur:
                    props[cur].update(stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3)))
                m = re.search(r"Used (\d+) registers", line)
                if m and cur:
                    props[cur]["regs"] = int(m.group(1))
            d = subprocess.run(["nvdisasm", "-c", cubin], capture_output=True, text=True)
            sass = parse_sass(d.stdout)
            pretty = demangle(list(props))
            base = f[:-3]
            for mangled, p in props.items():
                algo, ty, variant, fn = key_of(pretty[mangled], FILE_ALIASES.get(base, base))
                s = sass.get(mangled, {"sass": 0, "loop_sass": 0, "loops": 0})
                rows[f"{algo}/{ty}/{variant}/{fn}"] = dict(p, **s, kernel=pretty[mangled], file=f)
    return rows


def compare(old, new, alias):
    def norm(rows):
        out = {}
        for k, v in rows.items():
            algo, ty, variant, _ = k.split("/", 3)
            out.setdefault((alias.get(algo, algo), ty, variant), []).append(v)
        return out

    o, n = norm(old), norm(new)
    keys = sorted(set(o) | set(n))
    hdr = f"{'algorithm':14} {'type':5} {'max':>3} | {'regs':>9} | {'spill st/ld':>15} | {'sass':>13} | {'in loops':>13} | kernel(s) new"
    lines = [hdr, "-" * len(hdr)]
    totals = [0, 0, 0, 0]
    for k in keys:
        ov, nv = o.get(k, []), n.get(k, [])
        def agg(vs, f):
            return sum(v.get(f, 0) for v in vs)
        def mx(vs, f):
            return max((v.get(f, 0) for v in vs), default=0)
        regs = f"{mx(ov,'regs'):>4}/{mx(nv,'regs'):<4}"
        spill = f"{agg(ov,'spill_st')}/{agg(ov,'spill_ld')} -> {agg(nv,'spill_st')}/{agg(nv,'spill_ld')}"
        sass = f"{agg(ov,'sass'):>6}/{agg(nv,'sass'):<6}"
        loop = f"{agg(ov,'loop_sass'):>6}/{agg(nv,'loop_sass'):<6}"
        totals[0] += agg(ov, 'sass'); totals[1] += agg(nv, 'sass')
        totals[2] += agg(ov, 'loop_sass'); totals[3] += agg(nv, 'loop_sass')
        names = ", ".join(v["kernel"].split("(")[0] for v in nv) or "-"
        lines.append(f"{k[0]:14} {k[1]:5} {k[2]:>3} | {regs:>9} | {spill:>15} | {sass:>13} | {loop:>13} | {names}")
    lines.append("-" * len(hdr))
    lines.append(f"{'total':24} | {'':9} | {'':15} | {totals[0]:>6}/{totals[1]:<6} | {totals[2]:>6}/{totals[3]:<6} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tree", nargs="?")
    ap.add_argument("--arch", default="90")
    ap.add_argument("--json")
    ap.add_argument("--only", action="append", default=[], help="this kernel file only (repeat)")
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--alias", action="append", default=[], help="NEW=OLD algorithm name")
    a = ap.parse_args()
    if a.compare:
        old = json.load(open(a.compare[0]))
        new = json.load(open(a.compare[1]))
        alias = dict(x.split("=", 1) for x in a.alias)
        print(compare(old, new, alias))
        return
    if not a.tree:
        ap.error("TREE or --compare")
    rows = report(a.tree, a.arch, a.only)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1, sort_keys=True)
    for k in sorted(rows):
        v = rows[k]
        print(f"{k:60} regs {v.get('regs',0):4} spill {v.get('spill_st',0)}/{v.get('spill_ld',0)} "
              f"stack {v.get('stack',0)} sass {v['sass']} loops {v['loops']} in-loops {v['loop_sass']}")


if __name__ == "__main__":
    main()
