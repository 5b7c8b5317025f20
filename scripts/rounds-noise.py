#!/usr/bin/env python3
"""What a run of scripts/compare-variants.sh can resolve: how far apart two trees of identical
code come out with R rounds, estimated from the rounds of a run (docs/PERFORMANCE.md, "How far
apart identical code comes out with 3 rounds").

    scripts/rounds-noise.py SOURCE [--under DIR] [--rows N] [--group G] [--rounds 3,6,9,12]
                                   [--samples S] [--direction out|in] [--seed K]

SOURCE is a compare-variants (or compare-commits) output folder or a .tgz holding one, its
files CONFIG-TAG-R.json (the checked runs, check-*, are left out); --under keeps the archive's
members under DIR only. A group is the rows one communicator timed in one
round: one config, tree, round, backend and rank count, its sizes the rows. A row's deviation
is the log of its time over the median of its rounds (out of place by default). Groups with a
row more than a fifth off are left out as outliers and counted. The rows scatter about their
group's mean (the residual); the group means would scatter by the residual over the square
root of the group size if groups had no effect of their own, and their excess scatter is that
effect. A simulation with both: two trees of identical code, R rounds each, N rows in groups of
G sharing one effect per round; per row the ratio of the two trees' medians; the largest
distance from 1.0 over the N rows, its median and 95th percentile over S simulated runs. Both
scatters are taken about medians of the rounds, which absorb part of them: the distances are
on the low side. A rule's no-loss limit over N rows should not be below the 95th percentile
for its rounds.

Exit status: 0, or 2 on bad arguments or a source with fewer than 3 rounds of any group."""
import argparse
import io
import json
import math
import os
import random
import re
import statistics as st
import sys
import tarfile

NAME = re.compile(r"(?:.*/)?([^/]*)-([A-Za-z0-9_.]+)-(\d+)\.json$")


def read_runs(source, under=""):
    """{(config, tag, round): rows} from a folder or a .tgz (its members under `under`)."""
    runs = {}

    def add(name, text):
        m = NAME.match(name)
        if not m or os.path.basename(name).startswith("check-"):
            return
        try:
            rows = json.loads(text).get("rows", [])
        except ValueError:
            return
        runs[(m.group(1), m.group(2), int(m.group(3)))] = rows

    if os.path.isdir(source):
        for f in sorted(os.listdir(source)):
            if f.endswith(".json"):
                with open(os.path.join(source, f)) as fh:
                    add(f, fh.read())
    else:
        with tarfile.open(source) as tf:
            for m in tf.getmembers():
                if m.isfile() and m.name.endswith(".json") and m.name.startswith(under):
                    add(m.name, tf.extractfile(m).read().decode())
    return runs


def estimate(runs, direction):
    """(residual scatter, group-mean scatter, group effect, groups kept, left out, rows, size)."""
    key = "us_out_of_place" if direction == "out" else "us_in_place"
    t = {}
    for (cfg, tag, rnd), rows in runs.items():
        for r in rows:
            t.setdefault((cfg, tag, r["backend"], r["ranks"]), {}).setdefault(rnd, {})[r["bytes"]] = r[key]
    means, res, left, sizes = [], [], 0, []
    row_keys = set()
    for (cfg, tag, be, rk), by_round in t.items():
        rounds = sorted(by_round)
        if len(rounds) < 3:
            raise ValueError(f"{cfg} {tag} {be} {rk}: {len(rounds)} rounds, at least 3 needed")
        common = sorted(set.intersection(*(set(v) for v in by_round.values())))
        if len(common) < 2:
            continue
        row_keys.update((cfg, be, rk, b) for b in common)
        med = {b: st.median(by_round[r][b] for r in rounds) for b in common}
        for r in rounds:
            lr = [math.log(by_round[r][b] / med[b]) for b in common]
            if max(abs(x) for x in lr) > math.log(1.2):
                left += 1
                continue
            m = st.mean(lr)
            means.append(m)
            res += [x - m for x in lr]
            sizes.append(len(common))
    if len(means) < 2:
        raise ValueError("fewer than 2 groups of 2 or more rows")
    k = st.mean(sizes)
    sd_r, sd_m = st.pstdev(res), st.pstdev(means)
    without = sd_r * math.sqrt(k / (k - 1)) / math.sqrt(k)
    sd_g = math.sqrt(max(sd_m ** 2 - without ** 2, 0.0))
    return sd_r, sd_m, without, sd_g, len(means), left, len(row_keys), round(k)


def simulate(sd_r, sd_g, rows, group, rounds, samples, rng):
    """Median and 95th percentile of the largest |ratio - 1| over `rows` rows of identical code."""
    groups = max(1, math.ceil(rows / group))
    worst = []
    for _ in range(samples):
        w, left = 0.0, rows
        for _ in range(groups):
            n = min(group, left)
            left -= n
            meds = []
            for _tree in range(2):
                effect = [rng.gauss(0, sd_g) for _ in range(rounds)]
                meds.append([st.median(effect[r] + rng.gauss(0, sd_r) for r in range(rounds))
                             for _ in range(n)])
            w = max(w, max(abs(math.exp(a - b) - 1) for a, b in zip(*meds)))
        worst.append(w)
    worst.sort()
    return worst[len(worst) // 2], worst[min(len(worst) - 1, int(0.95 * len(worst)))]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("--under", default="", help="an archive's members under this folder only")
    ap.add_argument("--rows", type=int, default=0, help="rows a rule looks at (default: the run's)")
    ap.add_argument("--group", type=int, default=0, help="rows per group (default: the run's)")
    ap.add_argument("--rounds", default="3,6,9,12")
    ap.add_argument("--samples", type=int, default=5000)
    ap.add_argument("--direction", choices=["out", "in"], default="out")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    try:
        rounds = [int(x) for x in a.rounds.split(",")]
    except ValueError:
        ap.error(f"--rounds: a comma-separated list of whole numbers, not '{a.rounds}'")
    if any(r < 1 for r in rounds) or a.rows < 0 or a.group < 0 or a.samples < 1:
        ap.error("--rounds, --rows, --group and --samples must be positive")
    if not os.path.exists(a.source):
        ap.error(f"no such folder or archive: {a.source}")
    try:
        runs = read_runs(a.source, a.under)
        if not runs:
            raise ValueError("no CONFIG-TAG-R.json runs in it")
        sd_r, sd_m, without, sd_g, kept, left, nrows, k = estimate(runs, a.direction)
    except (ValueError, tarfile.TarError) as e:
        print(f"rounds-noise: {a.source}: {e}", file=sys.stderr)
        return 2
    rows = a.rows or nrows
    group = a.group or k
    print(f"groups {kept} (left out: {left}), rows per group {k}, rows {nrows}, {a.direction} of place")
    print(f"scatter of the rows about their group's mean: {100 * sd_r:.2f} %")
    print(f"scatter of the group means: {100 * sd_m:.2f} %, without an effect of the group: {100 * without:.2f} %")
    print(f"a group's own effect: {100 * sd_g:.2f} %")
    rng = random.Random(a.seed)
    for r in rounds:
        med, p95 = simulate(sd_r, sd_g, rows, group, r, a.samples, rng)
        print(f"rounds {r:2}: largest distance from 1.0 over {rows} rows of identical code "
              f"(groups of {group}): median {100 * med:.1f} %, 95th percentile {100 * p95:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
