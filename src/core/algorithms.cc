#include "core/algorithms.h"

namespace tpar {
namespace kernels {
// Defined by the schedule files (src/kernels/*.cu).
extern const KernelSet oneShotKernels, oneShotPullKernels, twoShotKernels, twoShotLLKernels,
    twoShotPullKernels, pipelinedKernels, stagedKernels, hierKernels;
}  // namespace kernels

namespace {

using kernels::Algo;
using kernels::WorkspaceLayout;

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
      {Algo::kOneShot, tparAlgoOneShot, "oneshot", "one-shot", "sentinel", "push",
       &kernels::oneShotKernels,
       [](const WorkspaceLayout& l, const AlgoShape& s) { return l.oneShotMaxBytes(s.nranks); },
       allVecs, 0, 0, 1, false, false,
       {[](double n) { return 2 * n * (n - 1); }, [](double n) { return n * (n - 1); }, 1}},
      {Algo::kTwoShot, tparAlgoTwoShot, "twoshot", "two-shot", "sentinel", "push",
       &kernels::twoShotKernels,
       [](const WorkspaceLayout& l, const AlgoShape& s) { return l.twoShotMaxBytes(s.nranks); },
       peerChunks, 0, 0, 1, false, false,
       {[](double n) { return 4 * (n - 1); }, [](double n) { return 2 * (n - 1); }, 2}},
      // With 2 ranks it is two-shot.
      {Algo::kStaged, tparAlgoStaged, "staged", "staged", "sentinel", "push",
       &kernels::stagedKernels,
       [](const WorkspaceLayout& l, const AlgoShape& s) { return l.twoShotMaxBytes(s.nranks); },
       oneChunk, 0, 0, 3, false, false,
       {[](double n) { return 4 * (n - 1); }, [](double n) { return 2 * (n - 1); }, 2}},
      {Algo::kHier, tparAlgoHierarchical, "hier", "hierarchical", "sentinel", "push",
       &kernels::hierKernels,
       [](const WorkspaceLayout& l, const AlgoShape& s) {
         return l.hierMaxBytes(s.hier_m, s.hier_k, s.elem_bytes);
       },
       islandPeerChunks, 0, 0, 1, true, false,
       {[](double n) { return 4 * (n - 1); }, [](double n) { return 2 * (n - 1); }, 2}},
      {Algo::kOneShotPull, tparAlgoOneShotPull, "oneshot-pull", "one-shot", "ll", "pull",
       &kernels::oneShotPullKernels,
       [](const WorkspaceLayout& l, const AlgoShape&) { return l.oneShotPullMaxBytes(); },
       allVecs, 0, 0, 1, false, false,
       {[](double n) { return 2 * n; }, [](double n) { return 2 * n * (n - 1); }, 1}},
      // Flag lines exist for the first kLineBlocks blocks (NOTE [flag lines]); the three
      // groups of warps need at least 4 warps.
      {Algo::kTwoShotPull, tparAlgoTwoShotPull, "twoshot-pull", "two-shot", "flags", "pull",
       &kernels::twoShotPullKernels,
       [](const WorkspaceLayout& l, const AlgoShape& s) { return l.pipelinedMaxBytes(s.nranks); },
       peerChunks, kernels::kMinPipelinedThreads, WorkspaceLayout::kLineBlocks, 1, false, false,
       {[](double n) { return n; }, [](double n) { return 2 * (n - 1); }, 2}},
      {Algo::kTwoShotLL, tparAlgoTwoShotLL, "twoshot-ll", "two-shot", "ll", "push",
       &kernels::twoShotLLKernels,
       [](const WorkspaceLayout& l, const AlgoShape& s) { return l.twoShotLLMaxBytes(s.nranks); },
       peerChunks, 0, WorkspaceLayout::kLineBlocks, 1, false, false,
       {[](double n) { return 4 * (n - 1); }, [](double n) { return 4 * (n - 1); }, 2}},
      // Its host plans publish once (pull): the bytes of two-shot pull. Pushing instead writes
      // 2(n-1) M, which the read side, the larger, already bounds when the link is symmetric.
      {Algo::kPipelined, tparAlgoPipelined, "pipelined", "two-shot", "flags", "plan",
       &kernels::pipelinedKernels,
       [](const WorkspaceLayout& l, const AlgoShape& s) { return l.pipelinedMaxBytes(s.nranks); },
       peerChunks, kernels::kMinPipelinedThreads, WorkspaceLayout::kLineBlocks, 1, false, true,
       {[](double n) { return n; }, [](double n) { return 2 * (n - 1); }, 2}},
  };
  return rows;
}

}  // namespace

const std::vector<Algorithm>& algorithms() { return table(); }

const Algorithm& algorithm(Algo id) {
  for (const Algorithm& a : table())
    if (a.id == id) return a;
  return table()[1];  // unreachable for a valid id: two-shot runs every group
}

const Algorithm* findAlgorithm(tparAlgo_t pub) {
  for (const Algorithm& a : table())
    if (a.pub == pub) return &a;
  return nullptr;
}

const Algorithm* findAlgorithm(const std::string& name) {
  for (const Algorithm& a : table())
    if (name == a.name) return &a;
  return nullptr;
}

const char* publicAlgoName(tparAlgo_t pub) {
  if (pub == tparAlgoAuto) return "auto";
  if (pub == tparAlgoNccl) return "nccl";
  const Algorithm* a = findAlgorithm(pub);
  return a != nullptr ? a->name : "unknown";
}

const char* publicAlgoChoices() {
  static const std::string choices = [] {
    std::string s;
    for (int i = 0; i < tparNumAlgos; ++i)
      s += std::string(i ? "|" : "") + publicAlgoName(static_cast<tparAlgo_t>(i));
    return s;
  }();
  return choices.c_str();
}

const std::vector<const kernels::KernelSet*>& allKernelSets() {
  static const std::vector<const kernels::KernelSet*> sets = [] {
    std::vector<const kernels::KernelSet*> v;
    for (const Algorithm& a : table()) v.push_back(a.kernels);
    return v;
  }();
  return sets;
}

size_t elementBytes(tparDataType_t dtype) {
  switch (dtype) {
    case tparFloat32: return 4;
    case tparFloat16:
    case tparBfloat16: return 2;
    default: return 0;
  }
}

}  // namespace tpar
