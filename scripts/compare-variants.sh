#!/usr/bin/env bash
# Experiments with variants of the code (docs/PERFORMANCE.md keeps them): builds the tpar CLI of
# several source trees in parallel, then runs every config with every tree's CLI, ROUNDS times
# (3), in alternating tree order so that a drift of the machine cancels, and prints per (config,
# ranks, backend, size) each tree's median of (out-of-place + in-place) / 2 in us, with the
# range over the rounds. Results unchecked (-c 0: the GPU tests check them).
#   scripts/compare-variants.sh OUT "tag=DIR[+PATCH] ..." "name|ENV|TPAR BENCH ARGS" ...
# A tree is a source folder, optionally with a patch applied to a copy of it; DIR and PATCH are
# relative to this repository's root (bench/experiments/variants/README.md names the commit each
# patch there is made for), e.g.
#   scripts/compare-variants.sh /tmp/v "base=. va=.+bench/experiments/variants/va.patch" \
#     "gpu|CUDA_VISIBLE_DEVICES=0|--transport auto --ranks 8 --backends tpar --sizes 12K,1M"
set -u
out=$1; shift; trees=$1; shift
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
for td in $trees; do
  tag=${td%%=*}; spec=${td#*=}
  dir=${spec%%+*}; patch=""
  [[ $spec == *+* ]] && patch=$(pwd)/${spec#*+}
  ( rm -rf /tmp/exp-src-$tag && mkdir -p /tmp/exp-src-$tag &&
    tar -C "$dir" --exclude='./build*' --exclude=./.git --exclude='./.devcarry' -cf - . | tar -x -C /tmp/exp-src-$tag &&
    { [ -z "$patch" ] || (cd /tmp/exp-src-$tag && git apply "$patch"); } &&
    cmake -S /tmp/exp-src-$tag -B /tmp/exp-build-$tag -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPAR_CUDA_ARCHS=90 \
      -DTPAR_GIT_COMMIT=$tag -DTPAR_BUILD_TESTS=OFF -DTPAR_BUILD_EXAMPLES=OFF >"$out/build-$tag.log" 2>&1 &&
    cmake --build /tmp/exp-build-$tag --target tpar_cli -j 4 >>"$out/build-$tag.log" 2>&1 || echo "build $tag failed" ) &
done
wait
echo "built in $(( $(date +%s) - t0 )) s"
rounds=${ROUNDS:-3}
for ((r = 0; r < rounds; ++r)); do
  for c in "$@"; do
    IFS='|' read -r name envs args <<<"$c"
    tags=""; for td in $trees; do tags="$tags ${td%%=*}"; done
    [ $((r % 2)) = 1 ] && tags=$(echo $tags | tr ' ' '\n' | tac | tr '\n' ' ')
    for tag in $tags; do
      env $envs /tmp/exp-build-$tag/tools/tpar/tpar bench $args -c 0 --json "$out/$name-$tag-$r.json" >"$out/$name-$tag-$r.txt" 2>&1 || echo "run $name $tag failed"
    done
  done
done
echo "ran in $(( $(date +%s) - t0 )) s"
python3 - "$out" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
t = {}
for p in sorted(glob.glob(os.path.join(out, "*.json"))):
    m = re.match(r"(.*)-([^-]+)-(\d+)\.json$", os.path.basename(p))
    for row in json.load(open(p)).get("rows", []):
        k = (m.group(1), row["ranks"], row["backend"], row["bytes"])
        t.setdefault(k, {}).setdefault(m.group(2), []).append((row["us_out_of_place"] + row["us_in_place"]) / 2)
for k in sorted(t):
    cells = "  ".join(f"{tag}={statistics.median(v):8.2f} [{min(v):.2f}-{max(v):.2f}]" for tag, v in t[k].items())
    print(f"{k[0]:14} {k[1]:>2} {k[2]:18} {k[3]:>8}  {cells}")
PY
