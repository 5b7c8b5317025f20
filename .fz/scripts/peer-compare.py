#!/usr/bin/env python3
"""Pairs a peer's rows (tpar_peer_flashinfer --json) with tpar's (tpar bench --json) of the same
device session: same memory (the peer's slabs in host memory against tpar's host transport,
in GPU memory against tpar in GPU memory), ranks and bytes; writes each pair with
tpar / peer.

  scripts/peer-compare.py PEER.json [PEER.json ...] --tpar TPAR.json [TPAR.json ...] -o OUT.json
"""
import argparse
import json
import sys


def tpar_rows(path):
    data = json.load(open(path))
    rows = {}
    for r in data["rows"]:
        if r.get("backend") != "tpar" or r.get("dtype") != "bfloat16" or r.get("op") != "sum":
            continue
        memory = "host" if r.get("transport") == "host" else "device"
        rows[(memory, r["ranks"], r["bytes"])] = {
            "us": r["us_out_of_place"], "algorithm": r.get("chosen"), "record": path}
    return rows


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("peer", nargs="+")
    ap.add_argument("--tpar", nargs="+", required=True)
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args(argv)
    tpar = {}
    for p in a.tpar:
        tpar.update(tpar_rows(p))
    pairs = []
    for p in a.peer:
        data = json.load(open(p))
        for r in data["rows"]:
            key = (r["memory"], r["ranks"], r["bytes"])
            if key not in tpar or r.get("us") is None:
                continue
            t = tpar[key]
            pairs.append({
                "memory": r["memory"], "ranks": r["ranks"], "bytes": r["bytes"],
                "peer": r["backend"], "peer_us": r["us"], "peer_best": r["best"],
                "peer_record": p, "tpar_us": t["us"], "tpar_algorithm": t["algorithm"],
                "tpar_record": t["record"], "tpar_over_peer": round(t["us"] / r["us"], 4)})
    if not pairs:
        print("peer-compare: no row of the peer has a tpar row of the same memory, ranks and "
              "bytes", file=sys.stderr)
        return 1
    pairs.sort(key=lambda x: (x["memory"], x["ranks"], x["bytes"]))
    json.dump({"tool": "scripts/peer-compare.py", "command": " ".join(["scripts/peer-compare.py"] + argv),
               "pairs": pairs}, open(a.out, "w"), indent=1)
    for x in pairs:
        print("%-6s %d ranks %9d B: tpar %.2f us, %s %.2f us, tpar/peer %.2f" % (
            x["memory"], x["ranks"], x["bytes"], x["tpar_us"], x["peer"], x["peer_us"],
            x["tpar_over_peer"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
