#!/usr/bin/env bash
# Experiments with variants of the code (docs/PERFORMANCE.md keeps them): builds the tpar CLI of
# several source trees in parallel, then runs every config with every tree's CLI, ROUNDS times
# (3), the tree order rotated by one each round so that a drift of the machine or an advantage
# of a position cancels (use a multiple of the number of trees), and prints per (config,
# ranks, backend, size) each tree's median of (out-of-place + in-place) / 2 in us, with the
# range over the rounds. The timed runs are unchecked (-c 0: the GPU tests check them); with
# CHECK=1 every config first runs once per tree with its results checked (-c 1), each tree's
# wrong elements are printed, and a wrong element fails the run (a variant tree's results
# checked without a build of its tests). Exits 1 when a build or a run failed or a checked
# result was wrong (the table then has what did run), 2 on bad arguments. Knobs (environment):
# ROUNDS (3), JOBS (build jobs per tree, 4), WORK (where the trees are copied and built, /tmp),
# CHECK (0). What a run's rounds can resolve: scripts/rounds-noise.py OUT (how far apart rows of
# identical code come out with R rounds; docs/PERFORMANCE.md, "How far apart identical code
# comes out with 3 rounds").
#   scripts/compare-variants.sh OUT "tag=DIR[+PATCH] ..." "name|ENV|TPAR BENCH ARGS" ...
# A tree is a source folder, optionally with a patch applied to a copy of it; DIR and PATCH are
# relative to this repository's root (bench/experiments/variants/README.md names the commit each
# patch there is made for), e.g.
#   scripts/compare-variants.sh /tmp/v "base=. va=.+bench/experiments/variants/va.patch" \
#     "gpu|CUDA_VISIBLE_DEVICES=0|--transport auto --ranks 8 --backends tpar --sizes 12K,1M"
set -u
usage() { echo "usage: scripts/compare-variants.sh OUT \"tag=DIR[+PATCH] ...\" \"name|ENV|ARGS\" ..." >&2; exit 2; }
[ $# -ge 3 ] || usage
out=$1; shift; trees=$1; shift
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.." || exit 2
work=${WORK:-/tmp}
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
tags=""
for td in $trees; do
  tag=${td%%=*}; spec=${td#*=}
  [[ $td == *=* && $tag =~ ^[A-Za-z0-9_.]+$ && -n $spec ]] || { echo "bad tree '$td': want tag=DIR[+PATCH]" >&2; exit 2; }
  dir=${spec%%+*}
  [ -d "$dir" ] || { echo "tree $tag: no folder $dir" >&2; exit 2; }
  if [[ $spec == *+* ]]; then
    [ -f "${spec#*+}" ] || { echo "tree $tag: no patch ${spec#*+}" >&2; exit 2; }
  fi
  tags="$tags $tag"
done
status=0
pids=()
for td in $trees; do
  tag=${td%%=*}; spec=${td#*=}
  dir=${spec%%+*}; patch=""
  if [[ $spec == *+* ]]; then
    patch=${spec#*+}
    [[ $patch == /* ]] || patch=$(pwd)/$patch
  fi
  src=$work/exp-src-$tag build=$work/exp-build-$tag
  ( rm -rf "$src" && mkdir -p "$src" &&
    tar -C "$dir" --exclude='./build*' --exclude=./.git --exclude='./.devcarry' -cf - . | tar -x -C "$src" &&
    { [ -z "$patch" ] || (cd "$src" && git apply "$patch"); } &&
    cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPAR_CUDA_ARCHS=90 \
      -DTPAR_GIT_COMMIT="$tag" -DTPAR_BUILD_TESTS=OFF -DTPAR_BUILD_EXAMPLES=OFF >"$out/build-$tag.log" 2>&1 &&
    cmake --build "$build" --target tpar_cli -j "${JOBS:-4}" >>"$out/build-$tag.log" 2>&1 ) ||
    { echo "build $tag failed: $(tail -3 "$out/build-$tag.log" 2>/dev/null)"; exit 1; } &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
echo "built in $(( $(date +%s) - t0 )) s"
rounds=${ROUNDS:-3}
if [ "${CHECK:-0}" = 1 ]; then
  for c in "$@"; do
    IFS='|' read -r name envs args <<<"$c"
    # One checked call per row: the config's own iteration counts give way (tpar bench takes
    # each option once).
    checked=$(sed -E 's/(^| )(-n|-w|--iters|--warmup_iters)( +[^ ]+)/ /g' <<<"$args")
    for tag in $tags; do
      # shellcheck disable=SC2086  # envs and args are word lists
      env $envs "$work/exp-build-$tag/tools/tpar/tpar" bench $checked -c 1 -n 1 -w 1 \
        --json "$out/check-$name-$tag.json" >"$out/check-$name-$tag.txt" 2>&1 ||
        { echo "checked run $name $tag failed"; status=1; }
    done
  done
  # shellcheck disable=SC2086  # tags is a word list
  python3 - "$out" $tags <<'PY' || status=1
import glob, json, os, sys
out, tags = sys.argv[1], sys.argv[2:]
bad = 0
for tag in tags:
    rows = wrong = unchecked = 0
    for p in sorted(glob.glob(os.path.join(out, f"check-*-{tag}.json"))):
        for row in json.load(open(p)).get("rows", []):
            rows += 1
            w = [row.get("wrong_out_of_place", -1), row.get("wrong_in_place", -1)]
            wrong += sum(x for x in w if x > 0)
            unchecked += sum(1 for x in w if x < 0)
    bad += wrong + unchecked + (rows == 0)
    print(f"checked {tag}: {rows} rows, {wrong} wrong elements, {unchecked} results not checked")
sys.exit(1 if bad else 0)
PY
fi
for ((r = 0; r < rounds; ++r)); do
  for c in "$@"; do
    IFS='|' read -r name envs args <<<"$c"
    # Round r starts at tree r mod n and wraps: over n rounds each tree runs once in each
    # position (first, second, ...), so an advantage of a position (the first run after another
    # config's, a warmer GPU) falls on every tree alike. With two trees: a b, b a, a b, ...
    read -r -a tl <<<"$tags"
    order=()
    for ((k = 0; k < ${#tl[@]}; ++k)); do order+=("${tl[(r + k) % ${#tl[@]}]}"); done
    for tag in "${order[@]}"; do
      # shellcheck disable=SC2086  # envs and args are word lists
      env $envs "$work/exp-build-$tag/tools/tpar/tpar" bench $args -c 0 --json "$out/$name-$tag-$r.json" \
        >"$out/$name-$tag-$r.txt" 2>&1 || { echo "run $name $tag failed"; status=1; }
    done
  done
done
echo "ran in $(( $(date +%s) - t0 )) s"
# shellcheck disable=SC2086  # tags is a word list
python3 - "$out" $tags <<'PY' || status=1
import glob, json, os, re, statistics, sys
out, tags = sys.argv[1], sys.argv[2:]
t = {}
for p in sorted(glob.glob(os.path.join(out, "*.json"))):
    m = re.match(r"(.*)-([^-]+)-(\d+)\.json$", os.path.basename(p))
    if not m or m.group(2) not in tags:
        continue
    for row in json.load(open(p)).get("rows", []):
        k = (m.group(1), row["ranks"], row["backend"], row["bytes"])
        t.setdefault(k, {}).setdefault(m.group(2), []).append(
            (row["us_out_of_place"] + row["us_in_place"]) / 2)
for k in sorted(t):
    cells = "  ".join(f"{tag}={statistics.median(t[k][tag]):8.2f} "
                      f"[{min(t[k][tag]):.2f}-{max(t[k][tag]):.2f}]" for tag in tags if tag in t[k])
    print(f"{k[0]:14} {k[1]:>2} {k[2]:18} {k[3]:>8}  {cells}")
PY
# What these rounds resolve: how far apart rows of identical code would come out of this run.
if [ "$rounds" -ge 3 ]; then
  echo "what $rounds rounds resolve here (scripts/rounds-noise.py):"
  python3 scripts/rounds-noise.py "$out" --rounds "$rounds" --samples 2000 2>&1 | sed 's/^/  /'
fi
exit $status
