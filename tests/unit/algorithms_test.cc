// The algorithm registry (src/registry/algorithms.h): one row per public algorithm, names that
// round-trip, and rows complete enough for every user of the registry.
#include <random>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "registry/algorithms.h"
#include "registry/launcher.h"
#include "tuner/tuner.h"

namespace tpar {
namespace {

TEST(AlgorithmRegistry, EveryPublicAlgorithmHasExactlyOneRowAndItsName) {
  std::set<tparAlgo_t> pubs;
  std::set<std::string> names;
  std::set<int> ids;
  for (const Algorithm& a : algorithms()) {
    EXPECT_TRUE(pubs.insert(a.pub).second) << a.name;
    EXPECT_TRUE(names.insert(a.name).second) << a.name;
    EXPECT_TRUE(ids.insert(static_cast<int>(a.id)).second) << a.name;
    // The call header carries the key in kCallHeaderAlgoBits bits (makeCallMeta).
    EXPECT_LT(static_cast<int>(a.id), kNumKernelAlgos) << a.name;
    EXPECT_LT(static_cast<int>(a.id), 1 << kCallHeaderAlgoBits) << a.name;
    EXPECT_STREQ(a.name, tparAlgoName(a.pub));
    EXPECT_EQ(&a, findAlgorithm(a.pub));
    EXPECT_EQ(&a, findAlgorithm(std::string(a.name)));
    EXPECT_EQ(&a, &algorithm(a.id));
  }
  for (int p = 0; p < tparNumAlgos; ++p) {
    const tparAlgo_t pub = static_cast<tparAlgo_t>(p);
    if (pub == tparAlgoAuto || pub == tparAlgoNccl) {
      EXPECT_EQ(nullptr, findAlgorithm(pub));
    } else {
      EXPECT_EQ(1u, pubs.count(pub)) << "tparAlgo_t " << p << " has no registry row";
    }
  }
  EXPECT_EQ(nullptr, findAlgorithm(std::string("two-shot")));
  EXPECT_STREQ("unknown", tparAlgoName(static_cast<tparAlgo_t>(tparNumAlgos)));
}

TEST(AlgorithmRegistry, PublicNamesStayAsTheyWere) {
  // TPAR_ALGO's choices, in tparAlgo_t order: scripts and tuning tables use these strings.
  EXPECT_STREQ(
      "auto|oneshot|twoshot|staged|hier|oneshot-pull|twoshot-pull|nccl|pipelined|twoshot-ll",
      publicAlgoChoices());
  kernels::Algo id;
  ASSERT_TRUE(algoFromName("twoshot-ll", &id));
  EXPECT_EQ(kernels::Algo::kTwoShotLL, id);
  ASSERT_TRUE(algoFromName("oneshot-pull", &id));
  EXPECT_EQ(kernels::Algo::kOneShotPull, id);
  EXPECT_FALSE(algoFromName("nccl", &id));
  // One name per algorithm; the public enum's word for hier is accepted as an alias, and
  // names never leave the list in its place.
  ASSERT_TRUE(algoFromName("hierarchical", &id));
  EXPECT_EQ(kernels::Algo::kHier, id);
  EXPECT_STREQ("hier", tparAlgoName(tparAlgoHierarchical));
  Plan p;
  ASSERT_TRUE(planAlgoFromName("hierarchical", &p));
  EXPECT_EQ(kernels::Algo::kHier, p.algo);
  EXPECT_STREQ("hier", planAlgoName(p));
}

TEST(AlgorithmRegistry, EveryKeyHasItsOwnCallHeaderWord) {
  // Two algorithms must never send the same header: a peer running the other one would
  // accept it and reduce data laid out differently.
  std::set<uint32_t> metas;
  const uint64_t count = 1000 + std::random_device{}() % 100000;
  for (const Algorithm& a : algorithms()) {
    const uint32_t m = makeCallMeta(tparBfloat16, tparSum, a.id, count);
    EXPECT_TRUE(metas.insert(m).second) << a.name;
    EXPECT_EQ(static_cast<uint32_t>(a.id),
              (m >> CallMetaBits::kAlgoShift) & ((1u << kCallHeaderAlgoBits) - 1))
        << a.name;
  }
  EXPECT_EQ(static_cast<size_t>(kNumKernelAlgos), metas.size());
}

TEST(AlgorithmRegistry, RowsNameScheduleProtocolDirectionAndEveryKernel) {
  const std::set<std::string> schedules = {"one-shot", "two-shot", "staged", "hierarchical"};
  const std::set<std::string> protocols = {"sentinel", "ll", "flags"};
  const std::set<std::string> directions = {"push", "pull", "plan"};
  std::set<const kernels::KernelSet*> sets;
  for (const Algorithm& a : algorithms()) {
    EXPECT_EQ(1u, schedules.count(a.schedule)) << a.name;
    EXPECT_EQ(1u, protocols.count(a.protocol)) << a.name;
    EXPECT_EQ(1u, directions.count(a.direction)) << a.name;
    ASSERT_NE(nullptr, a.kernels) << a.name;
    EXPECT_TRUE(sets.insert(a.kernels).second) << a.name << " shares another row's kernels";
    // Every group size picks a kernel: 2, 3-4, 5-8 and 9-16 ranks have their own variants.
    for (int d = 0; d < tparNumDataTypes; ++d)
      for (int n : {1, 2, 3, 4, 5, 8, 9, 16})
        EXPECT_NE(nullptr, a.kernels->get(static_cast<tparDataType_t>(d), n)) << a.name << " " << n;
    EXPECT_EQ(nullptr, a.kernels->get(static_cast<tparDataType_t>(tparNumDataTypes), 2));
    // Other kernels for host regions, where a row has them: their own set, every group size.
    EXPECT_EQ(a.kernels, kernelsFor(a, false)) << a.name;
    EXPECT_EQ(a.max_blocks, maxBlocksFor(a, false)) << a.name;
    if (a.host_kernels == nullptr) {
      EXPECT_EQ(a.kernels, kernelsFor(a, true)) << a.name;
      EXPECT_EQ(a.max_blocks, maxBlocksFor(a, true)) << a.name;
      continue;
    }
    EXPECT_EQ(a.host_kernels, kernelsFor(a, true)) << a.name;
    EXPECT_EQ(a.host_max_blocks, maxBlocksFor(a, true)) << a.name;
    EXPECT_TRUE(sets.insert(a.host_kernels).second) << a.name << "'s host kernels are shared";
    for (int d = 0; d < tparNumDataTypes; ++d)
      for (int n : {1, 2, 3, 4, 5, 8, 9, 16})
        EXPECT_NE(nullptr, a.host_kernels->get(static_cast<tparDataType_t>(d), n)) << a.name << " " << n;
  }
  // One-shot pull reads flag lines in host memory from 3 ranks on (NOTE [one-shot pull over
  // flag lines in host memory]): other kernels there than in GPU memory, but the same 2-rank
  // kernel, and at most the flag lines' blocks.
  const Algorithm& pull = algorithm(kernels::Algo::kOneShotPull);
  ASSERT_NE(nullptr, pull.host_kernels);
  EXPECT_EQ(kernels::WorkspaceLayout::kLineBlocks, maxBlocksFor(pull, true));
  EXPECT_EQ(0, maxBlocksFor(pull, false));
  for (int d = 0; d < tparNumDataTypes; ++d) {
    const auto dt = static_cast<tparDataType_t>(d);
    EXPECT_EQ(pull.kernels->get(dt, 2), pull.host_kernels->get(dt, 2)) << d;
    for (int n : {3, 4, 8, 16}) EXPECT_NE(pull.kernels->get(dt, n), pull.host_kernels->get(dt, n)) << d << " " << n;
  }
  // And the fused variants' (base/algorithm_list.h), each behind its plain algorithm.
  size_t fused = 0;
  for (const Algorithm& a : algorithms()) {
    const FusedAlgorithm* f = fusedAlgorithmOf(a.id);
    if (f == nullptr) continue;
    ++fused;
    EXPECT_EQ(a.id, f->plain) << f->name;
    EXPECT_GE(static_cast<int>(f->id), kNumKernelAlgos) << f->name;
    ASSERT_NE(nullptr, f->kernels) << f->name;
    EXPECT_TRUE(sets.insert(f->kernels).second) << f->name << " shares another's kernels";
  }
  EXPECT_EQ(static_cast<size_t>(kNumFusedAlgos), fused);
  // And the wire variants' (docs/WIRE.md): each behind its plain algorithm, one per format.
  std::set<std::pair<int, int>> plain_and_format;
  for (const WireAlgorithm& w : wireAlgorithms()) {
    EXPECT_GE(static_cast<int>(w.id), kNumKernelAlgos + kNumFusedAlgos) << w.name;
    EXPECT_LT(static_cast<int>(w.id), 1 << kCallHeaderAlgoBits) << w.name;
    EXPECT_GT(w.wire, tparWireNone) << w.name;
    EXPECT_LT(w.wire, tparNumWires) << w.name;
    EXPECT_TRUE(plain_and_format.insert({static_cast<int>(w.plain), w.wire}).second) << w.name;
    EXPECT_EQ(&w, wireAlgorithmOf(w.plain, w.wire)) << w.name;
    EXPECT_EQ(nullptr, wireAlgorithmOf(w.plain, tparWireNone)) << w.name;
    ASSERT_NE(nullptr, w.kernels) << w.name;
    for (int d = 0; d < tparNumDataTypes; ++d)
      for (int n : {1, 2, 3, 4, 5, 8, 9, 16})
        EXPECT_NE(nullptr, w.kernels->get(static_cast<tparDataType_t>(d), n)) << w.name << " " << n;
    EXPECT_TRUE(sets.insert(w.kernels).second) << w.name << " shares another's kernels";
  }
  EXPECT_EQ(static_cast<size_t>(kNumWireAlgos), wireAlgorithms().size());
  // And the norm kernel of the fused call's composite path: every set once, nothing else.
  EXPECT_TRUE(sets.insert(&kernels::addRmsNormKernels).second);
  EXPECT_EQ(sets, std::set<const kernels::KernelSet*>(allKernelSets().begin(),
                                                      allKernelSets().end()));
  EXPECT_EQ(sets.size(), allKernelSets().size());
}

TEST(AlgorithmRegistry, LimitsAndModelsAreUsableForEveryGroupSize) {
  const auto dev = kernels::WorkspaceLayout::forMaxBytes(8u << 20, false);
  const auto host = kernels::WorkspaceLayout::forMaxBytes(8u << 20, true);
  for (const Algorithm& a : algorithms()) {
    for (int n = 2; n <= kernels::kMaxRanks; ++n) {
      AlgoShape s;
      s.nranks = n;
      s.hier_m = n % 2 == 0 ? n / 2 : n;
      s.hier_k = n % 2 == 0 ? 2 : 1;
      for (const auto& l : {dev, host}) {
        const uint64_t max = a.max_bytes(l, s);
        EXPECT_GT(max, 0u) << a.name << " n " << n;
        EXPECT_EQ(0u, max % 16) << a.name;
      }
      EXPECT_GE(a.work_vectors(1000, s), 1u) << a.name;
      EXPECT_GT(a.bytes.write(n), 0) << a.name;
      EXPECT_GT(a.bytes.read(n), 0) << a.name;
      EXPECT_GE(a.bytes.rounds(n), 1) << a.name;
    }
    if (a.max_blocks > 0) EXPECT_LE(a.max_blocks, kernels::WorkspaceLayout::kLineBlocks);
    if (maxBlocksFor(a, true) > 0) EXPECT_LE(maxBlocksFor(a, true), kernels::WorkspaceLayout::kLineBlocks);
    if (a.min_threads > 0) EXPECT_GE(a.min_threads, 128) << "groups of whole warps";
  }
  EXPECT_EQ(4u, elementBytes(tparFloat32));
  EXPECT_EQ(2u, elementBytes(tparBfloat16));
  EXPECT_EQ(2u, elementBytes(tparFloat16));
  EXPECT_EQ(0u, elementBytes(static_cast<tparDataType_t>(tparNumDataTypes)));
}

}  // namespace
}  // namespace tpar
