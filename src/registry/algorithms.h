// The one registry of all-reduce algorithms. A row says everything the host side needs about
// an algorithm: its names, its kernels, the largest piece one launch can carry, the work that
// sizes its threads, its launch limits, what topology it needs, and the bytes and hand-offs it
// costs (the floor `tpar bench` prints). Selection, tparCommSelectAlgorithm, TPAR_ALGO,
// tuning tables, `tpar tune`, reports and the CLI all read it, so a new algorithm is one
// schedule file in src/kernels, one line in the list (base/algorithm_list.h) and one row
// here (docs/ALGORITHMS.md).
#ifndef TPAR_REGISTRY_ALGORITHMS_H_
#define TPAR_REGISTRY_ALGORITHMS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/algorithm_list.h"
#include "kernels/launch.h"
#include "tpar/tpar.h"

namespace tpar {

// What a limit or a work count depends on besides the workspace.
struct AlgoShape {
  int nranks = 1;
  int hier_m = 1;  // ranks per island (hierarchical)
  int hier_k = 1;  // islands
  size_t elem_bytes = 2;
};

// Bytes per call through the busiest link, in units of the message, for n ranks; and the
// dependent hand-offs (docs/PERFORMANCE.md, "Host-staged transport"). The model of the host
// link: where a row has other kernels for host regions (Algorithm::host_kernels), theirs.
struct ByteModel {
  double (*write)(double n);
  double (*read)(double n);
  int (*rounds)(int n);
};

struct Algorithm {
  // From the algorithm's line in the list (NOTE [algorithm descriptor]):
  kernels::Algo id;       // the key; also the call header's algorithm field
  tparAlgo_t pub;         // the public value (tpar.h)
  const char* name;       // its one name (tparAlgoName)
  // How NCCL would name it: the schedule, the protocol (how a vector says it arrived) and
  // the direction (push: into the reader's region; pull: the reader fetches it).
  const char* schedule;   // "one-shot", "two-shot", "staged", "hierarchical"
  const char* protocol;   // "sentinel", "ll" (epoch-tagged lines), "flags" (fenced flag lines)
  const char* direction;  // "push", "pull", "plan" (the plan chooses)
  const kernels::KernelSet* kernels;  // from the list too
  // The largest piece (bytes, a multiple of 16) one launch carries in this workspace.
  uint64_t (*max_bytes)(const kernels::WorkspaceLayout& l, const AlgoShape& s);
  // Vectors of work per rank for a piece of `vecs` vectors (sizes the blocks' threads).
  uint64_t (*work_vectors)(uint64_t vecs, const AlgoShape& s);
  int min_threads;     // threads per block at least (0: any)
  int max_blocks;      // active blocks at most (0: the communicator's grid)
  int min_ranks;       // fewer ranks: not worth measuring (`tpar tune`)
  bool needs_islands;  // equal-sized islands, more than one (else two-shot runs instead)
  ByteModel bytes;
  // With the regions in pinned host memory (the host transport), when not null: other kernels
  // of the same schedule and key, and their block limit (kernelsFor, maxBlocksFor;
  // NOTE [one-shot pull over flag lines in host memory]). Groups all on one GPU may take them
  // in its memory too (NOTE [one-shot pull over flag lines on one GPU] in comm/comm.cc).
  const kernels::KernelSet* host_kernels;
  int host_max_blocks;
};

// The kernels row `a` launches, and its most active blocks (0: the communicator's grid): its
// host kernels (`host`: regions in host memory, or a group that takes them in GPU memory) or
// its own.
inline const kernels::KernelSet* kernelsFor(const Algorithm& a, bool host) {
  return host && a.host_kernels != nullptr ? a.host_kernels : a.kernels;
}
inline int maxBlocksFor(const Algorithm& a, bool host) {
  return host && a.host_kernels != nullptr ? a.host_max_blocks : a.max_blocks;
}

// Every algorithm, in the order `tpar tune` measures them.
const std::vector<Algorithm>& algorithms();
const Algorithm& algorithm(kernels::Algo id);
const Algorithm* findAlgorithm(tparAlgo_t pub);
const Algorithm* findAlgorithm(const std::string& name);  // its name or an alias

// The largest piece of algorithm `id` in workspace `l` (Algorithm::max_bytes).
inline uint64_t maxPieceBytes(kernels::Algo id, const kernels::WorkspaceLayout& l, int nranks,
                              int hier_m = 1, int hier_k = 1, size_t elem_bytes = 2) {
  AlgoShape s;
  s.nranks = nranks;
  s.hier_m = hier_m;
  s.hier_k = hier_k;
  s.elem_bytes = elem_bytes;
  return algorithm(id).max_bytes(l, s);
}

// The kernel key of a public value, or of a name (aliases too); false for auto, nccl and
// unknown ones.
bool kernelAlgoOf(tparAlgo_t pub, kernels::Algo* out);
bool algoFromName(const std::string& name, kernels::Algo* out);
// The one name of a kernel key and the public value it has.
inline const char* algoName(kernels::Algo a) { return algorithm(a).name; }
inline tparAlgo_t publicAlgoOf(kernels::Algo a) { return algorithm(a).pub; }

// A fused variant (base/algorithm_list.h, docs/FUSED.md): its key and kernels, and the plain
// algorithm whose row (limits, work) it shares.
struct FusedAlgorithm {
  kernels::Algo id;
  kernels::Algo plain;
  const char* name;
  const kernels::KernelSet* kernels;
};
// The fused variant of plain algorithm `plain`, or null.
const FusedAlgorithm* fusedAlgorithmOf(kernels::Algo plain);

// A wire variant (base/algorithm_list.h, docs/WIRE.md): its key and kernels, the plain
// algorithm whose schedule and limits it shares, and its format.
struct WireAlgorithm {
  kernels::Algo id;
  kernels::Algo plain;
  const char* name;
  tparWire_t wire;
  const kernels::KernelSet* kernels;
  double bytes_per_value;  // on the wire: codes and scales (kernels/prims/wire.h)
  int block_values;        // values per block, each with its scale (kernels::wireKernelBlock)
};
// The variant of plain algorithm `plain` with format `wire`, or null (none, or tparWireNone).
const WireAlgorithm* wireAlgorithmOf(kernels::Algo plain, tparWire_t wire);
// Every wire variant, in list order.
const std::vector<WireAlgorithm>& wireAlgorithms();

// The kernel sets of every algorithm and fused variant (preload, occupancy).
const std::vector<const kernels::KernelSet*>& allKernelSets();

// Bytes per element of a datatype; 0 for an unknown one. The one such helper (host and device).
TPAR_HOST_DEVICE constexpr size_t elementBytes(tparDataType_t dtype) {
  return dtype == tparFloat32 ? 4 : dtype == tparFloat16 || dtype == tparBfloat16 ? 2 : 0;
}

}  // namespace tpar

#endif  // TPAR_REGISTRY_ALGORITHMS_H_
