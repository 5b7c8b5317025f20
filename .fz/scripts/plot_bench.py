#!/usr/bin/env python3
"""Draws latency against message size, one line per backend and rank count, from the JSON of
`tpar bench --json FILE`. Rows that carry a host-link floor (`--transport host`) get it as a
dashed line of the same colour. Several files draw into one plot; rows of
scripts/torch_symm_bench.py (one time per row) count as both out of place and in place, and a
line that two files share is labelled with the file's name.

    scripts/plot_bench.py bench.json [torch-symm.json ...] -o bench.png

Needs matplotlib (python3 -m pip install matplotlib, or the python3-matplotlib package).
"""
import argparse
import json
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+", help="output of tpar bench --json (or torch_symm_bench.py)")
    ap.add_argument("-o", "--output", default="bench.png", help="PNG to write")
    ap.add_argument("--in-place", action="store_true", help="plot in-place times")
    args = ap.parse_args()

    try:
        import matplotlib
    except ImportError:
        print("plot_bench.py needs matplotlib: python3 -m pip install matplotlib "
              "(or apt-get install python3-matplotlib)", file=sys.stderr)
        return 2

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = []
    for path in args.json:
        with open(path) as f:
            runs.append(json.load(f))
    run = runs[0]
    key = "us_in_place" if args.in_place else "us_out_of_place"
    rows = []
    for i, r_run in enumerate(runs):
        for r in r_run.get("rows", []):
            us = r.get(key, r.get("us"))
            if us is not None:  # torch_symm_bench.py leaves out the time of a skipped size
                rows.append(dict(r, file=i, us_plot=us,
                                 dtype=r.get("dtype", r_run.get("dtype", "bfloat16")),
                                 op=r.get("op", "sum")))
    if not rows:
        print(f"{', '.join(args.json)}: no rows to plot", file=sys.stderr)
        return 1
    # One line per file, backend and rank count, and per datatype and op when the run had
    # several (-d all, -o all).
    kinds = {(r["dtype"], r["op"]) for r in rows}
    lines = {}
    floors = {}
    for r in rows:
        k = (r["ranks"], r["backend"], r["dtype"], r["op"], r["file"])
        lines.setdefault(k, []).append((r["bytes"], r["us_plot"]))
        if "floor_us" in r:
            floors.setdefault(k, []).append((r["bytes"], r["floor_us"]))
    shared = {k[:4] for k in lines if any(j[:4] == k[:4] and j[4] != k[4] for j in lines)}

    fig, ax = plt.subplots(figsize=(9, 5.5))
    any_floor = False
    for k, pts in sorted(lines.items()):
        ranks, backend, dtype, op, i = k
        pts.sort()
        virtual = any(r.get("virtual") for r in rows if r["ranks"] == ranks)
        label = f"{backend}, {ranks} {'virtual ' if virtual else ''}ranks"
        if len(kinds) > 1:
            label += f", {dtype} {op}"
        if k[:4] in shared:
            label += f" ({os.path.basename(args.json[i])})"
        (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=label)
        fl = sorted(floors.get(k, []))
        if fl:
            ax.plot([p[0] for p in fl], [p[1] for p in fl], ls="--", lw=1, color=line.get_color())
            any_floor = True
    if any_floor:
        ax.plot([], [], ls="--", lw=1, color="gray",
                label="host-link floor (dashed, colour of its line)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    xmin = min(r["bytes"] for r in rows)
    for ranks, us in run.get("launch_floor_us", {}).items():
        ax.axhline(us, ls=":", lw=1, color="gray")
        ax.annotate(f"launch floor, {ranks} ranks", (xmin, us), fontsize=7, color="gray",
                    va="bottom")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(("in-place" if args.in_place else "out-of-place") + " time per all-reduce (us)")
    gpus = (", ".join(sorted({g["name"] for g in run.get("gpus", [])})) or run.get("gpu")
            or "no GPU")
    transport = run.get("transport", "env")
    where = "" if transport == "env" else f", transport {transport}"
    what = (f"{kinds.copy().pop()[0]} {kinds.copy().pop()[1]}" if len(kinds) == 1
            else "several datatypes and ops")
    ax.set_title(f"tpar bench: {what} on {gpus}{where}, "
                 f"commit {run.get('commit', '?')}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
