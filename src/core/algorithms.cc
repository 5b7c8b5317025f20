#include "core/algorithms.h"

namespace tpar {
namespace kernels {
// Defined by the schedule files (src/kernels/*.cu).
extern const KernelSet oneShotKernels, oneShotPullKernels, twoShotKernels, twoShotLLKernels,
    twoShotPullKernels, pipelinedKernels, stagedKernels, hierKernels;
}  // namespace kernels

namespace {

using kernels::Algo;
using kernels::kVecBytes;
using kernels::WorkspaceLayout;

// Largest pieces, multiples of 16 bytes. Sentinel area: one-shot needs n slots of the message;
// two-shot a reduce-scatter and an all-gather area of n chunks each.
uint64_t oneShotMax(const WorkspaceLayout& l, const AlgoShape& s) {
  return (l.data_bytes / s.nranks / kVecBytes - 1) * kVecBytes;
}
uint64_t twoShotMax(const WorkspaceLayout& l, const AlgoShape& s) {
  return ((l.data_bytes / 2 - uint64_t(s.nranks) * kVecBytes) / kVecBytes) * kVecBytes;
}
// Hierarchical over k islands of m ranks: reduce-scatter and all-gather areas of m chunks,
// plus k fp32 partial-sum slots of one chunk (2x the bytes of 16-bit data).
uint64_t hierMax(const WorkspaceLayout& l, const AlgoShape& s) {
  const uint64_t m = s.hier_m, k = s.hier_k;
  const uint64_t cross = s.elem_bytes == 4 ? 1 : 2;  // fp32 partial bytes per input byte
  const uint64_t slack = (2 * m + k * cross) * kVecBytes;
  if (l.data_bytes <= slack) return 0;
  // 2 m Cv 16 + k Cv 16 cross <= data_bytes with Cv = ceil(V / m) <= V / m + 1.
  return (l.data_bytes - slack) * m / (2 * m + k * cross) / kVecBytes * kVecBytes;
}
// Pull area: one-shot pull's two lines per vector in groups of 32 vectors fill the payload.
uint64_t oneShotPullMax(const WorkspaceLayout& l, const AlgoShape&) {
  return (WorkspaceLayout::pullHalf(l.pull_bytes) / kVecBytes / 32 * 32 - 32) * kVecBytes;
}
// Each half holds two 16-byte lines per vector of n chunks, in groups of 32 vectors.
uint64_t twoShotLLMax(const WorkspaceLayout& l, const AlgoShape& s) {
  const uint64_t lines = WorkspaceLayout::pullHalf(l.pull_bytes) / kVecBytes / 2;
  return lines > uint64_t(s.nranks) + 64 ? (lines - s.nranks - 64) * kVecBytes : 0;
}
// Each half holds one chunk of ceil(vecs / n) vectors per rank.
uint64_t flagLinesMax(const WorkspaceLayout& l, const AlgoShape& s) {
  return (WorkspaceLayout::pullHalf(l.pull_bytes) / kVecBytes - uint64_t(s.nranks)) * kVecBytes;
}

uint64_t allVecs(uint64_t vecs, const AlgoShape&) { return vecs; }
// A chunk per rank, one (peer, position) pair per thread: (n - 1) chunks.
uint64_t peerChunks(uint64_t vecs, const AlgoShape& s) {
  return (vecs + s.nranks - 1) / s.nranks * (s.nranks > 1 ? s.nranks - 1 : 1);
}
uint64_t oneChunk(uint64_t vecs, const AlgoShape& s) { return (vecs + s.nranks - 1) / s.nranks; }
// Hierarchical's chunks are per island position.
uint64_t islandPeerChunks(uint64_t vecs, const AlgoShape& s) {
  return (vecs + s.hier_m - 1) / s.hier_m * (s.hier_m > 1 ? s.hier_m - 1 : 1);
}

const std::vector<Algorithm>& table() {
  // Write/read models, in units of the message M over all ranks (docs/PERFORMANCE.md).
  static const std::vector<Algorithm> rows = {
      {Algo::kOneShot, tparAlgoOneShot, kAlgoNames[tparAlgoOneShot], "one-shot", "sentinel", "push",
       &kernels::oneShotKernels,
       oneShotMax,
       allVecs, 0, 0, 1, false,
       {[](double n) { return 2 * n * (n - 1); }, [](double n) { return n * (n - 1); }, 1}},
      {Algo::kTwoShot, tparAlgoTwoShot, kAlgoNames[tparAlgoTwoShot], "two-shot", "sentinel", "push",
       &kernels::twoShotKernels,
       twoShotMax,
       peerChunks, 0, 0, 1, false,
       {[](double n) { return 4 * (n - 1); }, [](double n) { return 2 * (n - 1); }, 2}},
      // With 2 ranks it is two-shot.
      {Algo::kStaged, tparAlgoStaged, kAlgoNames[tparAlgoStaged], "staged", "sentinel", "push",
       &kernels::stagedKernels,
       twoShotMax,
       oneChunk, 0, 0, 3, false,
       {[](double n) { return 4 * (n - 1); }, [](double n) { return 2 * (n - 1); }, 2}},
      {Algo::kHier, tparAlgoHierarchical, kAlgoNames[tparAlgoHierarchical], "hierarchical", "sentinel", "push",
       &kernels::hierKernels,
       hierMax,
       islandPeerChunks, 0, 0, 1, true,
       {[](double n) { return 4 * (n - 1); }, [](double n) { return 2 * (n - 1); }, 2}},
      {Algo::kOneShotPull, tparAlgoOneShotPull, kAlgoNames[tparAlgoOneShotPull], "one-shot", "ll", "pull",
       &kernels::oneShotPullKernels,
       oneShotPullMax,
       allVecs, 0, 0, 1, false,
       {[](double n) { return 2 * n; }, [](double n) { return 2 * n * (n - 1); }, 1}},
      // Flag lines exist for the first kLineBlocks blocks (NOTE [flag lines]); the three
      // groups of warps need at least 4 warps.
      {Algo::kTwoShotPull, tparAlgoTwoShotPull, kAlgoNames[tparAlgoTwoShotPull], "two-shot", "flags", "pull",
       &kernels::twoShotPullKernels,
       flagLinesMax,
       peerChunks, kernels::kMinPipelinedThreads, WorkspaceLayout::kLineBlocks, 1, false,
       {[](double n) { return n; }, [](double n) { return 2 * (n - 1); }, 2}},
      {Algo::kTwoShotLL, tparAlgoTwoShotLL, kAlgoNames[tparAlgoTwoShotLL], "two-shot", "ll", "push",
       &kernels::twoShotLLKernels,
       twoShotLLMax,
       peerChunks, 0, WorkspaceLayout::kLineBlocks, 1, false,
       {[](double n) { return 4 * (n - 1); }, [](double n) { return 4 * (n - 1); }, 2}},
      // Its host plans publish once (pull): the bytes of two-shot pull. Pushing instead writes
      // 2(n-1) M, which the read side, the larger, already bounds when the link is symmetric.
      {Algo::kPipelined, tparAlgoPipelined, kAlgoNames[tparAlgoPipelined], "two-shot", "flags", "plan",
       &kernels::pipelinedKernels,
       flagLinesMax,
       peerChunks, kernels::kMinPipelinedThreads, WorkspaceLayout::kLineBlocks, 1, false,
       {[](double n) { return n; }, [](double n) { return 2 * (n - 1); }, 2}},
  };
  return rows;
}

}  // namespace

const std::vector<Algorithm>& algorithms() { return table(); }

namespace {

// Rows by kernel id and by public value: every call looks its algorithm up, so in O(1).
// (Ids stay below 8: the call header carries them in 3 bits.)
struct RowIndex {
  const Algorithm* by_id[8] = {};
  const Algorithm* by_pub[tparNumAlgos] = {};
  RowIndex() {
    for (const Algorithm& a : table()) {
      by_id[static_cast<int>(a.id)] = &a;
      by_pub[a.pub] = &a;
    }
  }
};
const RowIndex& rowIndex() {
  static const RowIndex index;
  return index;
}

}  // namespace

const Algorithm& algorithm(Algo id) {
  const int i = static_cast<int>(id);
  const Algorithm* a = i >= 0 && i < 8 ? rowIndex().by_id[i] : nullptr;
  return a != nullptr ? *a : table()[1];  // unreachable for a valid id: two-shot runs every group
}

const Algorithm* findAlgorithm(tparAlgo_t pub) {
  return pub >= 0 && pub < tparNumAlgos ? rowIndex().by_pub[pub] : nullptr;
}

const Algorithm* findAlgorithm(const std::string& name) {
  for (const Algorithm& a : table())
    if (name == a.name) return &a;
  return nullptr;
}

const std::vector<const kernels::KernelSet*>& allKernelSets() {
  static const std::vector<const kernels::KernelSet*> sets = [] {
    std::vector<const kernels::KernelSet*> v;
    for (const Algorithm& a : table()) v.push_back(a.kernels);
    return v;
  }();
  return sets;
}

}  // namespace tpar
