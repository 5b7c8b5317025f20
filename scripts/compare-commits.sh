#!/usr/bin/env bash
# Old against new on one GPU machine, in one run: builds both commits, then times `tpar bench`
# of both, interleaved (old, new, new, old, ... so that a drift of the machine cancels), for
# every algorithm and both transports (GPU memory and --transport host): 2, 4 and 8 virtual ranks
# on GPU 0, and real ranks (one per GPU) when there are 2 or more GPUs; hier runs on a
# two-socket fixture topology (4 and 8 virtual ranks), since a flat machine runs it as two-shot.
# CUDA-graph timing (sizes <= 4 MB, eager above: bench's default, which means the same before
# and after bench took nccl-tests' flags, where `-G N` became "graphs for every size"), results
# unchecked (the GPU tests check them).
# Prints old us / new us / ratio per (transport, ranks, algorithm, size), medians over the
# rounds, with FAIL where the new commit is more than 3 % slower (out of place or in place);
# exits 1 if any row fails.
#   scripts/compare-commits.sh OLD NEW OUTDIR     (OLD, NEW: commits, or source folders)
# Knobs (environment): ROUNDS (2: old new new old), SIZES (4K,32K,256K,2M,16M), ITERS (20),
# WARMUP (3), LIMIT (1.03), BACKENDS (every forced algorithm and auto), ISLANDS (1; 0 skips the
# hier runs on the fixture), CONFIRM (0). With CONFIRM=N the rows above LIMIT run again, N more
# runs in the same alternating order, each of only its config, ranks, algorithm and sizes (into
# OUTDIR/confirm, the table in OUTDIR/confirm.txt); a row fails only when the medians of those
# runs are above LIMIT too. A sweep of a few hundred rows with a few rounds finds rows of
# identical code several per cent apart (scripts/rounds-noise.py OUTDIR/runs says how far; docs/
# PERFORMANCE.md, "How far apart identical code comes out with 3 rounds"), so the sweep alone
# flags rows by chance and the second look decides them. About 5-6 minutes on one
# H200 with the defaults; each run's output is in OUTDIR/runs, the table in OUTDIR/compare.txt.
# The copies of both commits come from this repository's git objects (`git archive`), so the
# machine needs the .git directory, not a checkout of either commit.
set -uo pipefail
old=${1:?usage: scripts/compare-commits.sh OLD NEW OUTDIR}
new=${2:?usage: scripts/compare-commits.sh OLD NEW OUTDIR}
out=${3:?usage: scripts/compare-commits.sh OLD NEW OUTDIR}
mkdir -p "$out/runs" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
rounds=${ROUNDS:-2}
sizes=${SIZES:-4K,32K,256K,2M,16M}
iters=${ITERS:-20}
warmup=${WARMUP:-3}
limit=${LIMIT:-1.03}
confirm=${CONFIRM:-0}
# One run would time only the old build: 0 (no second look) or 2 and more.
[[ $confirm =~ ^[0-9]+$ ]] && [ "$confirm" != 1 ] ||
  { echo "CONFIRM must be 0 or a whole number of runs of 2 or more, not '$confirm'" >&2; exit 2; }
backends=${BACKENDS:-tpar,tpar:oneshot,tpar:twoshot,tpar:staged,tpar:oneshot-pull,tpar:twoshot-pull,tpar:pipelined,tpar:twoshot-ll}
fixture=tests/fixtures/topology/rootport_2socket_8gpu.xml
t0=$(date +%s)

# ---- build both (in parallel: each build is mostly nvcc, one file per algorithm) ----------------
archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d . | sort -u | paste -sd';')
archs=${archs:-90}
jobs=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
build() {  # tag commit-or-directory
  local tag=$1 sha
  rm -rf "$out/src-$tag" && mkdir -p "$out/src-$tag"
  if [ -d "$2" ]; then
    # A source tree (a machine whose .git lacks the commit gets it as a folder): its commit id
    # comes from COMMIT_OLD / COMMIT_NEW, else the folder's name.
    sha=$([ "$tag" = old ] && echo "${COMMIT_OLD:-$(basename "$2")}" || echo "${COMMIT_NEW:-$(basename "$2")}")
    tar -C "$2" --exclude='./build*' --exclude=./.git --exclude='./.devcarry' -cf - . |
      tar -x -C "$out/src-$tag" || return 1
  else
    sha=$(git rev-parse --verify --quiet "$2^{commit}") || { echo "unknown commit $2" >&2; return 1; }
    git archive "$sha" | tar -x -C "$out/src-$tag" || return 1
  fi
  cmake -S "$out/src-$tag" -B "$out/build-$tag" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTPAR_CUDA_ARCHS="$archs" -DTPAR_GIT_COMMIT="${sha:0:12}" -DTPAR_BUILD_TESTS=OFF \
    -DTPAR_BUILD_EXAMPLES=OFF >"$out/build-$tag.log" 2>&1 &&
    cmake --build "$out/build-$tag" --target tpar_cli -j "$jobs" >>"$out/build-$tag.log" 2>&1
}
echo "== building $old and $new (archs $archs)"
build old "$old" & pid_old=$!
build new "$new" & pid_new=$!
fail_build=0
wait $pid_old || { echo "build of $old failed:"; tail -30 "$out/build-old.log"; fail_build=1; }
wait $pid_new || { echo "build of $new failed:"; tail -30 "$out/build-new.log"; fail_build=1; }
[ $fail_build = 0 ] || exit 2
echo "   built in $(( $(date +%s) - t0 )) s"

# ---- the runs ------------------------------------------------------------------------------------
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# name | environment | arguments
configs=()
for tr in auto host; do
  configs+=("virtual-$tr|CUDA_VISIBLE_DEVICES=0|--transport $tr --ranks 2,4,8 --backends $backends")
  [ "${ISLANDS:-1}" = 1 ] &&
    configs+=("virtual-$tr-islands|CUDA_VISIBLE_DEVICES=0 TPAR_TOPO_FILE=$fixture|--transport $tr --ranks 4,8 --backends tpar:hier")
  if [ "$ngpus" -ge 2 ]; then
    real=""
    for n in 2 4 8; do [ "$n" -le "$ngpus" ] && real="$real${real:+,}$n"; done
    configs+=("real-$tr||--transport $tr --ranks $real --backends $backends")
  fi
done
# run_config DIR NAME ENVS ARGS SIZES RUNS: RUNS runs alternating old new new old ..., each
# `tpar bench ARGS --sizes SIZES` of one build into DIR/NAME-TAG-I.json.
status=0
run_config() {
  local dir=$1 name=$2 envs=$3 args=$4 sz=$5 runs=$6 i tag json order=(old new new old)
  for ((i = 0; i < runs; ++i)); do
    tag=${order[i % 4]}
    json="$dir/$name-$tag-$i.json"
    echo "== $name $tag (run $((i + 1))/$runs, $(( $(date +%s) - t0 )) s so far)"
    # shellcheck disable=SC2086  # envs and args are word lists
    if ! env $envs "$out/build-$tag/tools/tpar/tpar" bench $args --sizes "$sz" -n "$iters" \
        -w "$warmup" -c 0 --json "$json" >"${json%.json}.txt" 2>&1 </dev/null; then
      echo "   failed: $(tail -3 "${json%.json}.txt")"
      status=1
    fi
  done
}
for c in "${configs[@]}"; do
  IFS='|' read -r name envs args <<<"$c"
  run_config "$out/runs" "$name" "$envs" "$args" "$sizes" $((2 * rounds))
done

# ---- the table -----------------------------------------------------------------------------------
# table RUNS-DIR OUT-FILE: old us / new us / ratio per row of the runs under RUNS-DIR (medians over
# its runs), FAIL above the limit; the failing rows go to OUT-FILE.fails (config|ranks|backend|size).
table() {
python3 - "$1" "$limit" "$old" "$new" "$2.fails" <<'EOF' | tee "$2"
import glob, json, os, re, statistics, sys
runs, limit, old, new, fails_out = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
times = {}  # (config, ranks, virtual, backend, bytes) -> {tag: {"out": [...], "in": [...]}}
for path in sorted(glob.glob(os.path.join(runs, "**", "*.json"), recursive=True)):
    m = re.match(r"(.*)-(old|new)-\d+\.json$", os.path.basename(path))
    if not m:
        continue
    try:
        rows = json.load(open(path)).get("rows", [])
    except ValueError:
        continue
    for r in rows:
        key = (m.group(1), r["ranks"], r.get("virtual", False), r["backend"], r["bytes"])
        t = times.setdefault(key, {}).setdefault(m.group(2), {"out": [], "in": []})
        t["out"].append(r["us_out_of_place"])
        t["in"].append(r["us_in_place"])

def size(b):
    for unit, k in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= k and b % k == 0:
            return f"{b // k}{unit}"
    return str(b)

print(f"# old {old}  new {new}: median us over the runs, ratio = new / old; FAIL above {limit:.2f}")
print(f"{'config':22} {'ranks':>5} {'backend':18} {'size':>6} {'old out':>9} {'new out':>9} "
      f"{'ratio':>6} {'old in':>9} {'new in':>9} {'ratio':>6}")
fails = 0
ratios, failed = [], []
for key in sorted(times):
    t = times[key]
    if "old" not in t or "new" not in t:
        print(f"{key[0]:22} {key[1]:>5} {key[3]:18} {size(key[4]):>6}  missing in one commit  FAIL")
        fails += 1
        continue
    cells, bad = [], False
    for mode in ("out", "in"):
        o, n = statistics.median(t["old"][mode]), statistics.median(t["new"][mode])
        ratio = n / o if o > 0 else float("inf")
        ratios.append(ratio)
        bad |= ratio > limit
        cells.append(f"{o:9.2f} {n:9.2f} {ratio:6.3f}")
    fails += bad
    if bad:
        failed.append(f"{key[0]}|{key[1]}|{key[3]}|{size(key[4])}")
    print(f"{key[0]:22} {key[1]:>5} {key[3]:18} {size(key[4]):>6} {cells[0]} {cells[1]}"
          f"{'  FAIL' if bad else ''}")
if ratios:
    geo = statistics.geometric_mean([r for r in ratios if r > 0 and r != float("inf")])
    print(f"# {len(times)} rows, {fails} FAIL; geometric mean of the ratios {geo:.3f}")
with open(fails_out, "w") as f:
    f.writelines(line + "\n" for line in failed)
sys.exit(1 if fails else 0)
EOF
}
table "$out/runs" "$out/compare.txt"
table=$?
if [ $table != 0 ] && [ "$confirm" -gt 0 ] && [ -s "$out/compare.txt.fails" ]; then
  # The second look: each (config, ranks, backend) with a failing row runs again at its failing
  # sizes only, CONFIRM runs, in a folder of its own.
  echo "== confirming $(wc -l < "$out/compare.txt.fails") row(s) with $confirm runs each"
  rm -rf "$out/confirm" && mkdir -p "$out/confirm"
  k=0
  while IFS='|' read -r name ranks backend sz; do
    cfg=""
    for c in "${configs[@]}"; do [ "${c%%|*}" = "$name" ] && cfg=$c; done
    IFS='|' read -r _ envs args <<<"$cfg"
    args=$(sed -E 's/--ranks [^ ]+//; s/--backends [^ ]+//' <<<"$args")
    mkdir -p "$out/confirm/$k"
    run_config "$out/confirm/$k" "$name" "$envs" "$args --ranks $ranks --backends $backend" "$sz" "$confirm"
    k=$((k + 1))
  done < <(awk -F'|' '{ k = $1 "|" $2 "|" $3; if (k in s) s[k] = s[k] "," $4; else s[k] = $4 }
                      END { for (k in s) print k "|" s[k] }' "$out/compare.txt.fails" | sort)
  table "$out/confirm" "$out/confirm.txt"
  table=$?
  echo "== the sweep's FAIL rows stand only where the confirmation above fails them too"
fi
if [ "$rounds" -ge 3 ]; then
  echo "== what $rounds runs per commit resolve here (scripts/rounds-noise.py):"
  python3 scripts/rounds-noise.py "$out/runs" --rounds "$rounds" --samples 1000 2>&1 | sed 's/^/   /'
fi
echo "== done in $(( $(date +%s) - t0 )) s"
[ $status = 0 ] && [ $table = 0 ]
