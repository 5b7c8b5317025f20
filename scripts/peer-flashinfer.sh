#!/usr/bin/env bash
# FlashInfer's PCIe all-reduce kernels next to tpar, on the GPUs of this machine.
#
#   scripts/peer-flashinfer.sh restore MIRROR [COMMIT]
#       copies include/flashinfer/comm/pcie_ipc_all_reduce.cuh of a FlashInfer git checkout or
#       mirror (at COMMIT, default the pinned one below) into .peers/flashinfer/ (ignored by git:
#       a peer's code is never part of this repository); no network needed where it runs.
#   scripts/peer-flashinfer.sh run BUILD_DIR OUT_JSON [peer_flashinfer options...]
#       builds tpar with tpar_peer_flashinfer (bench/experiments/peer_flashinfer.cu) against the
#       restored header in BUILD_DIR and runs it: every candidate of FlashInfer's tuning grid
#       checked and timed, the best re-timed (--ranks, --sizes, --memory device,host, -n, -w).
#   scripts/peer-flashinfer.sh table BUILD_DIR OUT_DIR [--ranks R] [--sizes S] [-n N] [-w W]
#                                   [--memory device,host]
#       the comparison in one session: the peer in both memories (or the ones --memory names),
#       `tpar bench` with the host transport and in GPU memory on the same ranks and sizes
#       (default 2,4,8 and 12K,112K,384K,1M,4M, 200 calls), and OUT_DIR/compare.json
#       (scripts/peer-compare.py).
#
# What it measures and how it is compared: docs/PERFORMANCE.md, "Against FlashInfer's PCIe
# kernels". Environment: TPAR_CUDA_ARCHS (default: the build's own choice), TPAR_COMMIT (the
# commit recorded; default git HEAD).
set -euo pipefail
cd "$(dirname "$0")/.."
# The FlashInfer commit the comparisons in docs/PERFORMANCE.md were built from.
pinned=fb28d7242
dest=.peers/flashinfer
header=include/flashinfer/comm/pcie_ipc_all_reduce.cuh

usage() {
  sed -n '2,17p' "$0" >&2
  exit 2
}

case "${1:-}" in
  restore)
    mirror=${2:?usage: scripts/peer-flashinfer.sh restore MIRROR [COMMIT]}
    commit=${3:-$pinned}
    full=$(git --git-dir="$mirror" rev-parse --verify "$commit^{commit}" 2>/dev/null ||
           git -C "$mirror" rev-parse --verify "$commit^{commit}") ||
      { echo "peer-flashinfer: $mirror has no commit $commit" >&2; exit 2; }
    rm -rf "$dest" && mkdir -p "$dest/$(dirname "$header")"
    { git --git-dir="$mirror" show "$full:$header" 2>/dev/null ||
      git -C "$mirror" show "$full:$header"; } > "$dest/$header"
    echo "$full" > "$dest/COMMIT"
    echo "peer-flashinfer: $dest/$header at ${full:0:12}"
    ;;
  run|table)
    what=$1
    build=${2:?usage: scripts/peer-flashinfer.sh $what BUILD_DIR OUT [options]}
    out=${3:?usage: scripts/peer-flashinfer.sh $what BUILD_DIR OUT [options]}
    shift 3
    [ -f "$dest/$header" ] && [ -f "$dest/COMMIT" ] ||
      { echo "peer-flashinfer: no $dest/$header: run 'scripts/peer-flashinfer.sh restore MIRROR' first" >&2; exit 2; }
    ranks=2,4,8 sizes=12K,112K,384K,1M,4M iters=200 warmup=20 memory=device,host
    if [ "$what" = table ]; then
      while [ $# -gt 0 ]; do
        case $1 in
          --ranks) ranks=${2:?--ranks needs a value}; shift ;;
          --sizes) sizes=${2:?--sizes needs a value}; shift ;;
          -n) iters=${2:?-n needs a value}; shift ;;
          -w) warmup=${2:?-w needs a value}; shift ;;
          --memory) memory=${2:?--memory needs a value}; shift ;;
          *) echo "peer-flashinfer: table takes --ranks, --sizes, -n, -w and --memory, not '$1'" >&2; exit 2 ;;
        esac
        shift
      done
      case $memory in
        device|host|device,host|host,device) ;;
        *) echo "peer-flashinfer: --memory is device, host or both (device,host), not '$memory'" >&2; exit 2 ;;
      esac
      mkdir -p "$out"
    fi
    commit=$(cat "$dest/COMMIT")
    archs=()
    [ -n "${TPAR_CUDA_ARCHS:-}" ] && archs=(-DTPAR_CUDA_ARCHS="$TPAR_CUDA_ARCHS")
    # The commit the records name (a copied tree's git metadata may be another's).
    tpar_commit=${TPAR_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${archs[@]}" \
      -DTPAR_GIT_COMMIT="$tpar_commit" \
      -DTPAR_BUILD_TESTS=ON -DTPAR_PEER_FLASHINFER_INCLUDE="$PWD/$dest/include" \
      -DTPAR_PEER_FLASHINFER_COMMIT="${commit:0:12}" > /dev/null
    cmake --build "$build" --target tpar_peer_flashinfer tpar_cli
    exe=$(find "$build" -name tpar_peer_flashinfer -type f -perm -u+x | head -1)
    tpar=$(find "$build" -path '*tools/tpar/tpar' -type f -perm -u+x | head -1)
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    if [ "$what" = run ]; then
      "$exe" --json "$out" "$@"
      exit
    fi
    # The whole comparison in one session: the peer over the memories asked for, tpar's default
    # with its host transport and in GPU memory (the same memories), the same ranks, sizes and
    # calls, then the pairs.
    "$exe" --ranks "$ranks" --sizes "$sizes" --memory "$memory" -n "$iters" -w "$warmup" \
      --json "$out/peer-flashinfer.json"
    mine=()
    if [[ ,$memory, == *,host,* ]]; then
      "$tpar" bench --transport host --ranks "$ranks" --sizes "$sizes" -n "$iters" -w "$warmup" \
        --json "$out/tpar-host.json"
      mine+=("$out/tpar-host.json")
    fi
    if [[ ,$memory, == *,device,* ]]; then
      "$tpar" bench --transport p2p --ranks "$ranks" --sizes "$sizes" -n "$iters" -w "$warmup" \
        --json "$out/tpar-device.json"
      mine+=("$out/tpar-device.json")
    fi
    python3 scripts/peer-compare.py "$out/peer-flashinfer.json" --tpar "${mine[@]}" \
      -o "$out/compare.json"
    ;;
  *) usage ;;
esac
