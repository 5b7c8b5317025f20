#include "registry/algorithms.h"

#include <iterator>

#include "kernels/prims/wire.h"

namespace tpar {
namespace kernels {
// Defined by the schedule files (src/kernels/*.cu), one per line of the list.
#define TPAR_DECLARE_KERNEL_SET_(Key, pub, name, alias, set) extern const KernelSet set;
#define TPAR_DECLARE_FUSED_SET_(Key, plain, name, set) extern const KernelSet set;
#define TPAR_DECLARE_WIRE_SET_(Key, plain, name, wire, set) extern const KernelSet set;
TPAR_KERNEL_ALGORITHMS(TPAR_DECLARE_KERNEL_SET_)
TPAR_FUSED_ALGORITHMS(TPAR_DECLARE_FUSED_SET_)
TPAR_WIRE_ALGORITHMS(TPAR_DECLARE_WIRE_SET_)
#undef TPAR_DECLARE_KERNEL_SET_
#undef TPAR_DECLARE_FUSED_SET_
#undef TPAR_DECLARE_WIRE_SET_
#define TPAR_DECLARE_HOST_SET_(plain, set) extern const KernelSet set;
TPAR_HOST_KERNEL_SETS(TPAR_DECLARE_HOST_SET_)
#undef TPAR_DECLARE_HOST_SET_
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

// The row of key `id`: its public value, name and kernels come from its line in the list
// (NOTE [algorithm descriptor]), the rest is the row's.
#define TPAR_ALGO_PUB_(Key, pub, name, alias, set) pub,
#define TPAR_ALGO_NAME_(Key, pub, name, alias, set) name,
#define TPAR_ALGO_SET_(Key, pub, name, alias, set) &kernels::set,
constexpr tparAlgo_t kPubOf[] = {TPAR_KERNEL_ALGORITHMS(TPAR_ALGO_PUB_)};
constexpr const char* kNameOf[] = {TPAR_KERNEL_ALGORITHMS(TPAR_ALGO_NAME_)};
constexpr const kernels::KernelSet* kSetOf[] = {TPAR_KERNEL_ALGORITHMS(TPAR_ALGO_SET_)};
#undef TPAR_ALGO_PUB_
#undef TPAR_ALGO_NAME_
#undef TPAR_ALGO_SET_

// Host-memory kernels by key: the list's H lines (NOTE [algorithm descriptor]).
struct HostSet {
  Algo key;
  const kernels::KernelSet* set;
};
#define TPAR_ALGO_HOST_SET_(plain, set) HostSet{Algo::k##plain, &kernels::set},
constexpr HostSet kHostSets[] = {TPAR_HOST_KERNEL_SETS(TPAR_ALGO_HOST_SET_)};
#undef TPAR_ALGO_HOST_SET_
constexpr const kernels::KernelSet* hostSetOf(Algo id) {
  for (const HostSet& h : kHostSets)
    if (h.key == id) return h.set;
  return nullptr;
}
// By key, not by comparing the set's address: an extern object's address against null is not
// a constant expression under every build (GCC's sanitizers).
constexpr bool hasHostSet(Algo id) {
  for (const HostSet& h : kHostSets)
    if (h.key == id) return true;
  return false;
}

constexpr Algorithm row(Algo id, const char* schedule, const char* protocol,
                        const char* direction,
                        uint64_t (*max_bytes)(const WorkspaceLayout&, const AlgoShape&),
                        uint64_t (*work_vectors)(uint64_t, const AlgoShape&), int min_threads,
                        int max_blocks, int min_ranks, bool needs_islands, ByteModel bytes) {
  const int k = static_cast<int>(id);
  return Algorithm{id,          kPubOf[k],    kNameOf[k], schedule,   protocol,
                   direction,   kSetOf[k],    max_bytes,  work_vectors, min_threads,
                   max_blocks,  min_ranks,    needs_islands, bytes, hostSetOf(id), 0};
}
// Row `a` with the block limit of its host-memory kernels (the list names those kernels).
constexpr Algorithm withHostBlocks(Algorithm a, int max_blocks) {
  a.host_max_blocks = max_blocks;
  return a;
}

// Write/read models, in units of the message M over all ranks (docs/PERFORMANCE.md). In the
// order `tpar tune` measures them.
constexpr Algorithm kTable[] = {
      row(Algo::kOneShot, "one-shot", "sentinel", "push",
       oneShotMax,
       allVecs, 0, 0, 1, false,
       {[](double n) { return 2 * n * (n - 1); }, [](double n) { return n * (n - 1); }, [](int) { return 1; }}),
      row(Algo::kTwoShot, "two-shot", "sentinel", "push",
       twoShotMax,
       peerChunks, 0, 0, 1, false,
       {[](double n) { return 4 * (n - 1); }, [](double n) { return 2 * (n - 1); }, [](int) { return 2; }}),
      // With 2 ranks it is two-shot.
      row(Algo::kStaged, "staged", "sentinel", "push",
       twoShotMax,
       oneChunk, 0, 0, 3, false,
       {[](double n) { return 4 * (n - 1); }, [](double n) { return 2 * (n - 1); }, [](int) { return 2; }}),
      row(Algo::kHier, "hierarchical", "sentinel", "push",
       hierMax,
       islandPeerChunks, 0, 0, 1, true,
       {[](double n) { return 4 * (n - 1); }, [](double n) { return 2 * (n - 1); }, [](int) { return 2; }}),
      // In host memory, from 3 ranks on, its input is published over flag lines, which exist
      // for the first kLineBlocks blocks (NOTE [one-shot pull over flag lines in host memory]).
      withHostBlocks(row(Algo::kOneShotPull, "one-shot", "ll", "pull",
       oneShotPullMax,
       allVecs, 0, 0, 1, false,
       // Host regions: epoch lines (2x the bytes, one hand-off) at 2 ranks; from 3 ranks the
       // flag lines (the input once, a flag's hand-off before the data's).
       {[](double n) { return n < 3 ? 2 * n : n; },
        [](double n) { return n < 3 ? 2 * n * (n - 1) : n * (n - 1); },
        [](int n) { return n < 3 ? 1 : 2; }}),
       WorkspaceLayout::kLineBlocks),
      // Flag lines exist for the first kLineBlocks blocks (NOTE [flag lines]); the three
      // groups of warps need at least 4 warps.
      row(Algo::kTwoShotPull, "two-shot", "flags", "pull",
       flagLinesMax,
       peerChunks, kernels::kMinPipelinedThreads, WorkspaceLayout::kLineBlocks, 1, false,
       {[](double n) { return n; }, [](double n) { return 2 * (n - 1); }, [](int) { return 2; }}),
      row(Algo::kTwoShotLL, "two-shot", "ll", "push",
       twoShotLLMax,
       peerChunks, 0, WorkspaceLayout::kLineBlocks, 1, false,
       {[](double n) { return 4 * (n - 1); }, [](double n) { return 4 * (n - 1); }, [](int) { return 2; }}),
      // Its host plans publish once (pull): the bytes of two-shot pull. Pushing instead writes
      // 2(n-1) M, which the read side, the larger, already bounds when the link is symmetric.
      row(Algo::kPipelined, "two-shot", "flags", "plan",
       flagLinesMax,
       peerChunks, kernels::kMinPipelinedThreads, WorkspaceLayout::kLineBlocks, 1, false,
       {[](double n) { return n; }, [](double n) { return 2 * (n - 1); }, [](int) { return 2; }}),
};
constexpr int kNumRows = sizeof(kTable) / sizeof(kTable[0]);

// Each key has one row, and each line of the list has a row.
constexpr bool everyKeyOnce() {
  if (kNumRows != kNumKernelAlgos) return false;
  for (int i = 0; i < kNumRows; ++i) {
    const int k = static_cast<int>(kTable[i].id);
    if (k < 0 || k >= kNumKernelAlgos) return false;
    for (int j = i + 1; j < kNumRows; ++j)
      if (kTable[j].id == kTable[i].id) return false;
  }
  return true;
}
static_assert(everyKeyOnce(),
              "every line of TPAR_KERNEL_ALGORITHMS needs exactly one registry row");

// A row has a host block limit exactly when the list gives it host kernels, and no key has two
// host sets.
constexpr bool hostRowsMatchList() {
  for (const Algorithm& a : kTable)
    if (hasHostSet(a.id) != (a.host_max_blocks > 0)) return false;
  constexpr int n = sizeof(kHostSets) / sizeof(kHostSets[0]);
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      if (kHostSets[i].key == kHostSets[j].key) return false;
  return true;
}
static_assert(hostRowsMatchList(),
              "a row with TPAR_HOST_KERNEL_SETS kernels needs withHostBlocks, and only it");

const std::vector<Algorithm>& table() {
  static const std::vector<Algorithm> rows(std::begin(kTable), std::end(kTable));
  return rows;
}

// Rows by kernel key and by public value: every call looks its algorithm up, so in O(1).
struct RowIndex {
  const Algorithm* by_id[kNumKernelAlgos] = {};
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

const std::vector<Algorithm>& algorithms() { return table(); }

const Algorithm& algorithm(Algo id) {
  // Every key has a row (everyKeyOnce); a value outside the list is a caller's bug, and
  // two-shot runs on every group.
  const int i = static_cast<int>(id);
  return i >= 0 && i < kNumKernelAlgos ? *rowIndex().by_id[i] : algorithm(Algo::kTwoShot);
}

const Algorithm* findAlgorithm(tparAlgo_t pub) {
  return pub >= 0 && pub < tparNumAlgos ? rowIndex().by_pub[pub] : nullptr;
}

const Algorithm* findAlgorithm(const std::string& name) {
  tparAlgo_t pub;
  return publicAlgoFromName(name.c_str(), &pub) ? findAlgorithm(pub) : nullptr;
}

bool kernelAlgoOf(tparAlgo_t pub, kernels::Algo* out) {
  const Algorithm* a = findAlgorithm(pub);
  if (a != nullptr) *out = a->id;
  return a != nullptr;
}

bool algoFromName(const std::string& name, kernels::Algo* out) {
  const Algorithm* a = findAlgorithm(name);
  if (a != nullptr) *out = a->id;
  return a != nullptr;
}

namespace {
#define TPAR_FUSED_ROW_(Key, plain, name, set) {Algo::k##Key, Algo::k##plain, name, &kernels::set},
constexpr FusedAlgorithm kFused[] = {TPAR_FUSED_ALGORITHMS(TPAR_FUSED_ROW_)};
#undef TPAR_FUSED_ROW_
}  // namespace

const FusedAlgorithm* fusedAlgorithmOf(Algo plain) {
  for (const FusedAlgorithm& f : kFused)
    if (f.plain == plain) return &f;
  return nullptr;
}

namespace {
// tparWire_t's values are kernels::WireFormat's.
static_assert(static_cast<int>(kernels::WireFormat::kFp8) == tparWireFp8 &&
                  static_cast<int>(kernels::WireFormat::kInt8) == tparWireInt8 &&
                  static_cast<int>(kernels::WireFormat::kInt4) == tparWireInt4,
              "tparWire_t and kernels::WireFormat number the formats alike");
#define TPAR_WIRE_ROW_(Key, plain, name, wire, set)                 \
  {Algo::k##Key, Algo::k##plain, name, wire, &kernels::set,         \
   kernels::wireBytesPerValue<static_cast<kernels::WireFormat>(wire)>(), \
   kernels::wireKernelBlock(static_cast<kernels::WireFormat>(wire))},
const std::vector<WireAlgorithm>& wireTable() {
  static const std::vector<WireAlgorithm> rows = {TPAR_WIRE_ALGORITHMS(TPAR_WIRE_ROW_)};
  return rows;
}
#undef TPAR_WIRE_ROW_
}  // namespace

const std::vector<WireAlgorithm>& wireAlgorithms() { return wireTable(); }

const WireAlgorithm* wireAlgorithmOf(Algo plain, tparWire_t wire) {
  for (const WireAlgorithm& w : wireTable())
    if (w.plain == plain && w.wire == wire) return &w;
  return nullptr;
}

const std::vector<const kernels::KernelSet*>& allKernelSets() {
  static const std::vector<const kernels::KernelSet*> sets = [] {
    std::vector<const kernels::KernelSet*> v;
    for (const Algorithm& a : table()) {
      v.push_back(a.kernels);
      if (a.host_kernels != nullptr) v.push_back(a.host_kernels);
    }
    for (const FusedAlgorithm& f : kFused) v.push_back(f.kernels);
    for (const WireAlgorithm& w : wireTable()) v.push_back(w.kernels);
    v.push_back(&kernels::addRmsNormKernels);  // the fused call's composite path
    return v;
  }();
  return sets;
}

}  // namespace tpar
