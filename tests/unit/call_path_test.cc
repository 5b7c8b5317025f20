// What each tparAllReduce call reuses instead of recomputing (NOTE [call template], NOTE [live
// handle cache], the trace gate) follows every change it depends on, and
// tparCommSelectAlgorithmForType answers the plan a call takes. No GPU: communicator objects
// that never saw one.
#include <memory>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "comm/comm.h"
#include "comm/comm_access.h"
#include "kernels/prims/schedule.h"
#include "kernels/prims/wire.h"
#include "registry/launcher.h"
#include "base/log.h"
#include "tuner/tuner.h"

namespace tpar {
namespace {

using kernels::Algo;

struct Fake {
  std::unique_ptr<tparComm> comm = std::make_unique<tparComm>();
  kernels::HostState host{};
  alignas(256) char ws[4][256] = {};
  explicit Fake(int nranks, int rank = 0) {
    tparComm* c = comm.get();
    c->rank = rank;
    c->nranks = nranks;
    c->layout = kernels::WorkspaceLayout::forMaxBytes(c->cfg.max_bytes_per_call);
    c->host_state = &host;
    c->host_state_dev = &host;
    c->max_blocks = 16;
    for (int r = 0; r < nranks; ++r) c->peer_ws[r] = ws[r];
    EXPECT_EQ(tparSuccess, applyTopology(c, flatTopology(nranks, LinkClass::kSameSwitch)));
  }
  CallLaunch call(size_t count, tparRedOp_t op = tparSum) {
    CallLaunch out;
    prepareAllReduce(comm.get(), count, tparBfloat16, op, &out);
    return out;
  }
};

// Two islands of two: ranks {0, 2} and {1, 3}.
Topology twoIslands() {
  Topology t = flatTopology(4, LinkClass::kSameSwitch);
  t.islands = {{0, 2}, {1, 3}};
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      if (a != b && (a % 2) != (b % 2)) t.links[a][b] = LinkClass::kAcrossNuma;
  return t;
}

TEST(CallTemplate, ArgumentsCarryTheCommunicatorsFieldsAndTheCallsOwn) {
  Fake f(4, 2);
  f.comm->cfg.timeout_ms = 1234;
  prepareCalls(f.comm.get());
  const CallLaunch a = f.call(6000, tparMax);
  EXPECT_EQ(2, a.args.rank);
  EXPECT_EQ(4, a.args.nranks);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(f.ws[r], a.args.peer_ws[r]);
  EXPECT_EQ(nullptr, a.args.peer_ws[4]);
  EXPECT_EQ(1234000000ull, a.args.timeout_ns);
  EXPECT_EQ(&f.host, a.args.host_state);
  EXPECT_EQ(f.comm->layout.pullBase(), a.args.pull_base);
  EXPECT_EQ(static_cast<int>(tparMax), a.args.op);
  EXPECT_EQ(makeCallMeta(tparBfloat16, tparMax, a.algo->id, 6000), a.args.meta);
  // Another call of another size and op on the same communicator: its own fields.
  const CallLaunch b = f.call(7000, tparSum);
  EXPECT_EQ(static_cast<int>(tparSum), b.args.op);
  EXPECT_NE(a.args.meta, b.args.meta);
}

TEST(CallTemplate, NewTopologyReachesTheNextCall) {
  Fake f(4, 2);
  const CallLaunch before = f.call(4096);
  EXPECT_EQ(1, before.args.hier_k);
  EXPECT_EQ(4, before.args.hier_m);
  EXPECT_EQ(2, before.args.hier_pos);
  ASSERT_EQ(tparSuccess, applyTopology(f.comm.get(), twoIslands()));
  const CallLaunch after = f.call(4096);
  EXPECT_EQ(2, after.args.hier_k);
  EXPECT_EQ(2, after.args.hier_m);
  EXPECT_EQ(0, after.args.hier_island);  // rank 2 is the second of island 0
  EXPECT_EQ(1, after.args.hier_pos);
  EXPECT_EQ(0, after.args.hier_rank[0]);
  EXPECT_EQ(2, after.args.hier_rank[1]);
  EXPECT_EQ(1, after.args.hier_rank[2]);
}

TEST(CallTemplate, AttachingOrDetachingNcclChangesTheNextCallsHeader) {
  Fake f(2);
  const uint32_t kNcclBit = 1u << CallMetaBits::kNcclShift;
  EXPECT_EQ(0u, f.call(4096).args.meta & kNcclBit);
  int stand_in = 0;  // attachNcclComm's checks need a real NCCL: set what it sets
  f.comm->nccl.comm = reinterpret_cast<NcclComm>(&stand_in);
  f.comm->tuner_ctx.nccl = true;
  EXPECT_EQ(kNcclBit, f.call(4096).args.meta & kNcclBit);
  ASSERT_EQ(tparSuccess, attachNcclComm(f.comm.get(), nullptr));
  EXPECT_EQ(0u, f.call(4096).args.meta & kNcclBit);
}

TEST(CallTemplate, PlanFollowsATuningTableOrForcedAlgorithmSetAfterInit) {
  Fake f(2);
  const size_t count = 2048;  // 4 KiB of bf16: one-shot by default
  EXPECT_EQ(Algo::kOneShot, f.call(count).plan.algo);
  Plan two;
  two.algo = Algo::kTwoShot;
  two.active_blocks = 3;
  f.comm->tuning = singlePlanTable(f.comm->tuner_ctx, two);
  f.comm->has_tuning = true;
  CallLaunch c = f.call(count);
  EXPECT_EQ(Algo::kTwoShot, c.plan.algo);
  EXPECT_EQ(3, c.args.active_blocks);
  f.comm->has_tuning = false;
  f.comm->cfg.forced_algo = tparAlgoNccl;
  EXPECT_TRUE(f.call(count).plan.nccl);
  f.comm->cfg.forced_algo = tparAlgoAuto;
  EXPECT_EQ(Algo::kOneShot, f.call(count).plan.algo);
}

// NOTE [one-shot pull over flag lines in host memory]: a one-shot pull call launches the row's
// host kernels when the regions are in host memory, from 3 ranks on with at most the flag
// lines' blocks whatever its plan asks; in GPU memory, and at 2 ranks, the epoch-line kernels,
// except (NOTE [one-shot pull over flag lines on one GPU]) groups of kOneGpuFlagPullMinRanks
// or more all on this GPU in this process, which take the host kernels in GPU memory too.
// The flag lines fence at GPU scope exactly where every rank is here and the regions are in
// GPU memory (NOTE [hand-offs at GPU scope]).
TEST(CallTemplate, OneShotPullTakesTheHostKernelsInHostMemory) {
  std::mt19937 rng(std::random_device{}());
  for (int n : {2, 3, 4, 7, 8, 9, 16}) {
    for (int where = 0; where < 3; ++where) {
      // 0: GPU memory, ranks on several GPUs; 1: host memory; 2: GPU memory, every rank here.
      const bool host = where == 1;
      const bool one_gpu = where == 2;
      Fake f(n);
      tparComm* c = f.comm.get();
      c->host_transport = host;
      c->ranks_on_device = one_gpu ? n : 1;
      c->layout = kernels::WorkspaceLayout::forMaxBytes(c->cfg.max_bytes_per_call, host);
      c->max_blocks = 128;
      ASSERT_EQ(tparSuccess, applyTopology(c, flatTopology(n, LinkClass::kSameSwitch)));
      const int asked = 65 + static_cast<int>(rng() % 60);  // above the flag lines' 64
      Plan pull;
      pull.algo = Algo::kOneShotPull;
      pull.active_blocks = asked;
      TuningTable t;
      t.signature = c->tuner_ctx.signature;
      t.nranks = n;
      t.entries = {{1u << 30, tparBfloat16, pull, 0}};
      c->tuning = t;
      c->has_tuning = true;
      prepareCalls(c);
      const CallLaunch call = f.call(1000 + rng() % 5000);
      ASSERT_EQ(Algo::kOneShotPull, call.plan.algo) << n << " " << host;
      const Algorithm& row = algorithm(Algo::kOneShotPull);
      const bool flags = host || (one_gpu && n >= kOneGpuFlagPullMinRanks);
      const kernels::KernelSet* want = flags ? row.host_kernels : row.kernels;
      EXPECT_EQ(want->get(tparBfloat16, n), call.fn) << n << " ranks, where " << where;
      EXPECT_EQ(n == 2 || !flags, call.fn == row.kernels->get(tparBfloat16, n)) << n << " " << where;
      EXPECT_EQ(flags ? kernels::WorkspaceLayout::kLineBlocks : asked, call.args.active_blocks)
          << n << " ranks, where " << where;
      EXPECT_EQ(one_gpu ? 1 : 0, call.args.gpu_scope) << n << " ranks, where " << where;
    }
  }
}

// On the host transport a call of a multiple of maxBytesPerCall is whole pieces at every group
// size (the pull area holds the chunks' rounding: forMaxBytes), and with a wire format every
// piece of a large call runs the plan a call of one piece runs (NOTE [wire shape per piece]).
// A format's call whose codes and scales fit the bytes of a lossless piece runs as one launch
// (NOTE [wire pieces by the bytes that travel]); a longer one in pieces of that longest length
// where it holds two lossless pieces or more (INT4), else of the lossless length (FP8, INT8).
TEST(CallPieces, HostCallsAreWholePiecesAndAFormatRunsEachAsACallOfOnePiece) {
  for (LinkClass link : {LinkClass::kSameSwitch, LinkClass::kSameDevice}) {
    for (int n : {2, 3, 4, 8}) {
      for (int wire : {int(tparWireNone), int(tparWireFp8), int(tparWireInt4)}) {
        Fake f(n);
        tparComm* c = f.comm.get();
        c->host_transport = true;
        c->cfg.wire = wire;
        c->layout = kernels::WorkspaceLayout::forMaxBytes(c->cfg.max_bytes_per_call, true);
        ASSERT_EQ(tparSuccess, applyTopology(c, flatTopology(n, link)));
        prepareCalls(c);
        const size_t piece = c->cfg.max_bytes_per_call / 2;  // bfloat16 elements
        const bool formatted = wire != tparWireNone;
        EXPECT_EQ(formatted, wireVariantName(c, piece * 2, tparBfloat16) != nullptr) << n;
        // The longest call of the format whose kernel chunks (whole runs of a warp), codes and
        // scales, fit the lossless piece's bytes: it and every shorter one is one launch, one
        // block more is cut into as few pieces as the lossless piece allows.
        size_t longest = 0;
        if (formatted) {
          const auto wf = static_cast<kernels::WireFormat>(wire);
          const uint64_t kB = kernels::wireKernelBlock(wf);
          const uint64_t align = kernels::wireBlockAlign(int(kB));
          const uint64_t per = kB * (wire == tparWireInt4 ? 4 : 8) / 8 + 2;
          for (uint64_t chunk = align; n * chunk * per <= c->cfg.max_bytes_per_call; chunk += align)
            longest = n * chunk * kB;
          const auto s = kernels::alignedBlockSlice(longest / kB, n, 64, 0, align);
          ASSERT_EQ(longest / kB / n, s.chunk) << n;
          // FP8 and INT8 send about half the bytes (a longest call under two lossless pieces),
          // INT4 about 0.28 of them (over three).
          if (wire == tparWireInt4) EXPECT_GT(longest, 3 * piece) << n;
          else EXPECT_TRUE(longest > piece * 3 / 2 && longest < 2 * piece) << n << " " << wire;
          for (size_t count : {longest, longest - kB - 3, piece + 8}) {
            const CallLaunch call = f.call(count);
            EXPECT_EQ(count, call.piece_elems) << n << " ranks, wire " << wire;
          }
        }
        // The most elements of a piece of a call longer than one launch.
        const size_t cut_at = formatted && longest >= 2 * piece ? longest : piece;
        if (formatted) {
          const size_t over = longest + kernels::wireKernelBlock(
                                            static_cast<kernels::WireFormat>(wire));
          const size_t cut = f.call(over).piece_elems;
          EXPECT_LE(cut, cut_at) << n << " ranks, wire " << wire;
          EXPECT_EQ((over + cut_at - 1) / cut_at, (over + cut - 1) / cut) << n << " " << wire;
        }
        const CallLaunch one = f.call(piece);
        for (size_t pieces : {size_t{1}, size_t{2}, size_t{8}, size_t{32}}) {
          if (pieces > 1 && pieces * piece <= longest) continue;  // one launch, above
          const CallLaunch call = f.call(pieces * piece);
          EXPECT_EQ(Algo::kPipelined, call.plan.algo) << n << " ranks, wire " << wire;
          if (cut_at == piece) {
            EXPECT_EQ(piece, call.piece_elems) << n << " ranks, wire " << wire;
            if (formatted) {
              EXPECT_EQ(one.args.steps, call.args.steps) << n << " ranks, " << pieces << " pieces";
              EXPECT_EQ(one.args.active_blocks, call.args.active_blocks) << n << " ranks";
              EXPECT_EQ(one.fn, call.fn) << n << " ranks";
            }
          } else {
            // As few pieces of at most the longest length as it takes, each run as one call.
            const size_t fewest = (pieces * piece + cut_at - 1) / cut_at;
            EXPECT_LE(call.piece_elems, cut_at) << n << " ranks, " << pieces << " pieces";
            EXPECT_EQ(fewest, (pieces * piece + call.piece_elems - 1) / call.piece_elems)
                << n << " ranks, " << pieces << " pieces";
            const CallLaunch each = f.call(call.piece_elems);
            EXPECT_EQ(call.piece_elems, each.piece_elems) << n << " ranks";
            EXPECT_EQ(each.args.steps, call.args.steps) << n << " ranks, " << pieces << " pieces";
            EXPECT_EQ(each.args.active_blocks, call.args.active_blocks) << n << " ranks";
            EXPECT_EQ(each.fn, call.fn) << n << " ranks";
          }
        }
        // A call a little over a multiple of the piece: a format's pieces are of one length,
        // whole blocks, as few as the limit allows, and run the plan of a call of that length;
        // lossless pieces are cut at the limit.
        for (size_t count : {piece + 8, 2 * piece + 1000, 5 * piece + piece / 3, 3 * piece - 8,
                             9 * piece + 8}) {
          if (count <= longest) continue;  // one launch, above
          const CallLaunch call = f.call(count);
          const size_t fewest = (count + cut_at - 1) / cut_at;
          EXPECT_LE(call.piece_elems, cut_at) << n << " ranks, " << count;
          EXPECT_EQ(fewest, (count + call.piece_elems - 1) / call.piece_elems) << count;
          if (!formatted) {
            EXPECT_EQ(piece, call.piece_elems) << n << " ranks, " << count;
            continue;
          }
          const size_t block = static_cast<size_t>(
              kernels::wireKernelBlock(static_cast<kernels::WireFormat>(wire)));
          EXPECT_EQ(0u, call.piece_elems % block) << n << " ranks, " << count;
          EXPECT_LT(call.piece_elems, (count + fewest - 1) / fewest + block) << count;
          const CallLaunch each = f.call(call.piece_elems);
          EXPECT_EQ(each.args.steps, call.args.steps) << n << " ranks, " << count;
          EXPECT_EQ(each.args.active_blocks, call.args.active_blocks) << n << " ranks, " << count;
        }
      }
    }
  }
}

// tparCommSelectAlgorithmForType, on a registered communicator that never saw a GPU: the
// answer is the plan of the datatype asked about (a tuning table's entries are per datatype),
// the bfloat16 one is tparCommSelectAlgorithm's, and bad arguments are named.
TEST(SelectAlgorithmForType, AnswersThePlanOfTheDatatypeAsked) {
  Fake f(2);
  tparComm* c = f.comm.get();
  const size_t bytes = 4096;  // one-shot by default, for every datatype
  Plan two;
  two.algo = Algo::kTwoShot;
  Plan pull;
  pull.algo = Algo::kOneShotPull;
  TuningTable t;
  t.signature = c->tuner_ctx.signature;
  t.nranks = c->nranks;
  t.entries = {{1u << 30, tparBfloat16, two, 0}, {1u << 30, tparFloat32, pull, 0}};
  c->tuning = t;
  c->has_tuning = true;
  registerComm(c);
  auto select = [&](tparDataType_t dtype) {
    tparAlgo_t a = tparAlgoAuto;
    EXPECT_EQ(tparSuccess, tparCommSelectAlgorithmForType(c, bytes, dtype, &a))
        << tparGetLastError(c);
    return a;
  };
  EXPECT_EQ(tparAlgoTwoShot, select(tparBfloat16));
  EXPECT_EQ(tparAlgoOneShotPull, select(tparFloat32));
  EXPECT_EQ(tparAlgoOneShot, select(tparFloat16));  // no entries: the defaults
  tparAlgo_t bf16 = tparAlgoAuto;
  EXPECT_EQ(tparSuccess, tparCommSelectAlgorithm(c, bytes, &bf16));
  EXPECT_EQ(tparAlgoTwoShot, bf16);
  // Each answer is the plan a call of that datatype takes.
  for (tparDataType_t dtype : {tparBfloat16, tparFloat32, tparFloat16}) {
    CallLaunch call;
    prepareAllReduce(c, bytes / elementBytes(dtype), dtype, tparSum, &call);
    EXPECT_EQ(publicAlgoOf(call.plan.algo), select(dtype)) << tparDataTypeName(dtype);
  }
  c->cfg.forced_algo = tparAlgoNccl;  // forced NCCL: every datatype says so
  EXPECT_EQ(tparAlgoNccl, select(tparFloat32));
  EXPECT_EQ(tparAlgoNccl, select(tparFloat16));
  c->cfg.forced_algo = tparAlgoAuto;

  tparAlgo_t untouched = tparAlgoStaged;
  for (int bad : {-1, static_cast<int>(tparNumDataTypes)}) {
    EXPECT_EQ(tparInvalidArgument, tparCommSelectAlgorithmForType(
                                       c, bytes, static_cast<tparDataType_t>(bad), &untouched));
    const std::string err = tparGetLastError(c);  // the communicator keeps it too
    EXPECT_NE(std::string::npos, err.find("datatype " + std::to_string(bad))) << err;
  }
  EXPECT_EQ(tparAlgoStaged, untouched);
  EXPECT_EQ(tparInvalidArgument, tparCommSelectAlgorithmForType(c, bytes, tparFloat32, nullptr));
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(c)).find("algo is NULL"));
  unregisterComm(c);
  EXPECT_EQ(tparInvalidArgument, tparCommSelectAlgorithmForType(c, bytes, tparFloat32, &untouched));
  EXPECT_NE(std::string::npos,
            std::string(tparGetLastError(nullptr)).find("not a live communicator"));
  EXPECT_EQ(tparAlgoStaged, untouched);
}

TEST(LiveHandleCache, UnregisteredHandleIsRefusedAtOnceEvenAfterManyChecks) {
  Fake a(1), b(1);
  registerComm(a.comm.get());
  registerComm(b.comm.get());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(isLiveComm(a.comm.get()));
    EXPECT_TRUE(isLiveComm(b.comm.get()));
  }
  unregisterComm(a.comm.get());
  EXPECT_FALSE(isLiveComm(a.comm.get()));
  EXPECT_TRUE(isLiveComm(b.comm.get()));
  // The same address registered again (a new communicator where a freed one was) is live.
  registerComm(a.comm.get());
  EXPECT_TRUE(isLiveComm(a.comm.get()));
  unregisterComm(a.comm.get());
  unregisterComm(b.comm.get());
  EXPECT_FALSE(isLiveComm(a.comm.get()));
  EXPECT_FALSE(isLiveComm(b.comm.get()));
  EXPECT_FALSE(isLiveComm(nullptr));
}

TEST(LiveHandleCache, ChangesByAnotherThreadAreSeenAfterItFinishes) {
  Fake a(1);
  registerComm(a.comm.get());
  EXPECT_TRUE(isLiveComm(a.comm.get()));  // remembered by this thread
  std::thread([&] {
    EXPECT_TRUE(isLiveComm(a.comm.get()));
    unregisterComm(a.comm.get());
  }).join();
  EXPECT_FALSE(isLiveComm(a.comm.get()));
  Fake b(1);
  std::thread([&] { registerComm(b.comm.get()); }).join();
  EXPECT_TRUE(isLiveComm(b.comm.get()));
  unregisterComm(b.comm.get());
}

TEST(LiveHandleCache, MoreHandlesThanSlotsAreAllAnsweredRight) {
  std::vector<std::unique_ptr<Fake>> fakes;
  for (int i = 0; i < 20; ++i) {
    fakes.push_back(std::make_unique<Fake>(1));
    registerComm(fakes.back()->comm.get());
  }
  for (int round = 0; round < 3; ++round)
    for (auto& f : fakes) EXPECT_TRUE(isLiveComm(f->comm.get()));
  for (size_t i = 0; i < fakes.size(); i += 2) unregisterComm(fakes[i]->comm.get());
  for (size_t i = 0; i < fakes.size(); ++i)
    EXPECT_EQ(i % 2 == 1, isLiveComm(fakes[i]->comm.get())) << i;
  for (size_t i = 1; i < fakes.size(); i += 2) unregisterComm(fakes[i]->comm.get());
}

TEST(TraceGate, FollowsLevelAndSubsystems) {
  resetLogSettingsForTest("TRACE", "COLL", "");
  EXPECT_TRUE(traceEnabled(kLogColl));
  EXPECT_FALSE(traceEnabled(kLogInit));
  resetLogSettingsForTest("INFO", "ALL", "");
  EXPECT_FALSE(traceEnabled(kLogColl));
  resetLogSettingsForTest("TRACE", "^COLL", "");
  EXPECT_FALSE(traceEnabled(kLogColl));
  EXPECT_TRUE(traceEnabled(kLogInit));
  resetLogSettingsForTest("warn", "ALL", "");
  EXPECT_FALSE(traceEnabled(kLogColl));
}

// The fused call's paths by size (docs/FUSED.md, "Where the norm happens"): one kernel up to
// the measured limit, then two-shot with the owner's norm or the composite path in the windows
// the forced-path rows measured; TPAR_FUSED_ONESHOT_MAX_BYTES and TPAR_FUSED_TWOSHOT override.
TEST(FusedPaths, OneKernelLimitFollowsTheGroupSizeAndTheSetting) {
  for (int n : {2, 4, 8}) {
    Fake f(n);
    prepareCalls(f.comm.get());
    // Above the plain call's one-shot limits (256, 64 and 32 KiB) in GPU memory.
    const uint64_t limit = fusedOneShotLimit(f.comm.get(), tparBfloat16);
    EXPECT_EQ(n <= 4 ? 512u << 10 : 128u << 10, limit) << n << " ranks";
    f.comm->cfg.fused_one_shot_max_bytes = 12345;
    EXPECT_EQ(12345u, fusedOneShotLimit(f.comm.get(), tparBfloat16)) << n << " ranks";
  }
  Fake host(8);
  host.comm->host_transport = true;
  prepareCalls(host.comm.get());
  EXPECT_EQ(defaultOneShotMaxBytes(8), fusedOneShotLimit(host.comm.get(), tparBfloat16));
}

// Two ranks on one GPU: the plain call's push one-shot reaches 3 MiB (NOTE [small calls of ranks
// on one GPU]), with kernels sized for two ranks that the fused call does not have; its one
// kernel keeps the measured 512 KiB unless a table or TPAR_ONESHOT_MAX_BYTES says more.
TEST(FusedPaths, TwoRanksOnOneGpuKeepTheMeasuredOneKernelLimit) {
  Fake f(2);
  ASSERT_EQ(tparSuccess, applyTopology(f.comm.get(), flatTopology(2, LinkClass::kSameDevice)));
  ASSERT_EQ(2, f.comm->tuner_ctx.ranks_per_gpu);
  EXPECT_EQ(3u << 20, oneShotLimit(tparBfloat16, f.comm->tuner_ctx, nullptr, tparAlgoAuto, -1));
  EXPECT_EQ(512u << 10, fusedOneShotLimit(f.comm.get(), tparBfloat16));
  f.comm->cfg.one_shot_max_bytes = 4 << 20;
  EXPECT_EQ(4u << 20, fusedOneShotLimit(f.comm.get(), tparBfloat16));
}

// NOTE [fused limits cached]: every change of what decides the plans refreshes the cached
// limits, per datatype, to what fusedOneShotLimit computes then.
TEST(FusedPaths, CachedLimitsFollowTopologyPlanAndSettings) {
  Fake f(4);
  auto expectCurrent = [&](const char* when) {
    for (int d = 0; d < tparNumDataTypes; ++d) {
      const auto dt = static_cast<tparDataType_t>(d);
      EXPECT_EQ(fusedOneShotLimit(f.comm.get(), dt), f.comm->fused_one_kernel_limit[d]) << when << d;
      EXPECT_NE(0u, f.comm->fused_one_kernel_limit[d]) << when << d;
    }
  };
  expectCurrent("after applyTopology ");
  const uint64_t before = f.comm->fused_one_kernel_limit[tparBfloat16];
  // A plan set by hand (tparCommSetPlan's path): one-shot everywhere moves the plain limit.
  Plan one_shot;
  one_shot.algo = kernels::Algo::kOneShot;
  usePlan(f.comm.get(), one_shot);
  expectCurrent("after usePlan ");
  EXPECT_NE(before, f.comm->fused_one_kernel_limit[tparBfloat16]);
  // A setting resolved before the topology is applied (as init does).
  f.comm->cfg.fused_one_shot_max_bytes = 4096 + 16 * static_cast<int64_t>(std::random_device{}() % 256);
  ASSERT_EQ(tparSuccess, applyTopology(f.comm.get(), flatTopology(4, LinkClass::kSameSwitch)));
  expectCurrent("after applyTopology again ");
  EXPECT_EQ(static_cast<uint64_t>(f.comm->cfg.fused_one_shot_max_bytes),
            f.comm->fused_one_kernel_limit[tparFloat16]);
}

TEST(FusedPaths, TwoShotTakesTheMeasuredWindowsAndTheSettingOverrides) {
  const uint64_t KiB = 1024, MiB = 1024 * KiB;
  struct Want {
    int n;
    uint64_t bytes;
    bool two_shot;
  };
  // Above a one-kernel limit of 128 KiB: 2 ranks up to 1 MiB, 4 ranks always, 8 ranks above
  // 512 KiB, 16 ranks (not measured) never; at or below the limit never.
  const Want wants[] = {{2, 128 * KiB, false}, {2, 896 * KiB, true},  {2, 1 * MiB, true},
                        {2, 2 * MiB, false},   {4, 129 * KiB, true},  {4, 4 * MiB, true},
                        {8, 256 * KiB, false}, {8, 512 * KiB, false}, {8, 896 * KiB, true},
                        {8, 4 * MiB, true},    {16, 4 * MiB, false}};
  for (const Want& w : wants) {
    Fake f(w.n);
    EXPECT_EQ(w.two_shot, fusedTwoShotWanted(f.comm.get(), w.bytes, 128 * KiB))
        << w.n << " ranks, " << w.bytes << " bytes";
    // A forced algorithm other than two-shot keeps the composite path (its all-reduce).
    f.comm->cfg.forced_algo = tparAlgoOneShot;
    EXPECT_FALSE(fusedTwoShotWanted(f.comm.get(), w.bytes, 128 * KiB));
    f.comm->cfg.forced_algo = tparAlgoTwoShot;
    EXPECT_EQ(w.two_shot, fusedTwoShotWanted(f.comm.get(), w.bytes, 128 * KiB));
    f.comm->cfg.forced_algo = tparAlgoAuto;
    f.comm->cfg.fused_two_shot = static_cast<int>(FusedTwoShot::kOn);
    EXPECT_EQ(w.bytes > 128 * KiB, fusedTwoShotWanted(f.comm.get(), w.bytes, 128 * KiB));
    f.comm->cfg.fused_two_shot = static_cast<int>(FusedTwoShot::kOff);
    EXPECT_FALSE(fusedTwoShotWanted(f.comm.get(), w.bytes, 128 * KiB));
  }
}

}  // namespace
}  // namespace tpar
