// The shim's pure parts, in this process: the routing rules, the enum translation, the setup
// agreement with ranks as threads, the NCCL search order, and the function list of nccl.h
// against the table the shim is generated from.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "api/internal.h"
#include "real_nccl.h"
#include "route.h"
#include "setup.h"

namespace tpar_shim_test {
namespace {

using tpar::shim::AllReduceCall;
using tpar::shim::decideRoute;
using tpar::shim::Route;
using tpar::shim::RoutePolicy;

// A call that passes every rule, with a plan that never names NCCL.
AllReduceCall tparCall() {
  AllReduceCall c;
  c.nccl_datatype = ncclBfloat16;
  c.nccl_op = ncclSum;
  c.count = 1024;
  c.has_tpar = true;
  return c;
}

Route route(const RoutePolicy& p, const AllReduceCall& c, bool plan_nccl = false) {
  return decideRoute(p, c, [&](uint64_t, tparDataType_t) { return plan_nccl; });
}

TEST(ShimRoute, TakesSupportedCallsWithinTheLimit) {
  EXPECT_EQ(Route::kTpar, route(RoutePolicy(), tparCall()));
}

TEST(ShimRoute, RulesApplyInOrder) {
  RoutePolicy off;
  off.disabled = true;
  AllReduceCall worst = tparCall();
  worst.in_group = true;
  worst.has_tpar = false;
  worst.nccl_datatype = ncclInt32;
  worst.nccl_op = ncclProd;
  worst.count = 0;
  EXPECT_EQ(Route::kDisabled, route(off, worst));
  EXPECT_EQ(Route::kInGroup, route(RoutePolicy(), worst));
  worst.in_group = false;
  EXPECT_EQ(Route::kNoTparComm, route(RoutePolicy(), worst));
  worst.has_tpar = true;
  EXPECT_EQ(Route::kDatatype, route(RoutePolicy(), worst));
  worst.nccl_datatype = ncclFloat16;
  EXPECT_EQ(Route::kOp, route(RoutePolicy(), worst));
  worst.nccl_op = ncclMin;
  EXPECT_EQ(Route::kEmpty, route(RoutePolicy(), worst));
  worst.count = SIZE_MAX;  // no overflow of count * element size
  EXPECT_EQ(Route::kTooLarge, route(RoutePolicy(), worst));
  worst.count = 7;
  EXPECT_EQ(Route::kTunedNccl, route(RoutePolicy(), worst, true));
  EXPECT_EQ(Route::kTpar, route(RoutePolicy(), worst, false));
}

TEST(ShimRoute, OnlyFloat16Bfloat16AndFloat32GoToTpar) {
  const std::set<int> tpar_types = {ncclFloat16, ncclBfloat16, ncclFloat32};
  for (int t = -1; t <= ncclNumTypes + 1; ++t) {
    AllReduceCall c = tparCall();
    c.nccl_datatype = t;
    EXPECT_EQ(tpar_types.count(t) ? Route::kTpar : Route::kDatatype, route(RoutePolicy(), c))
        << "ncclDataType_t " << t;
  }
}

TEST(ShimRoute, OnlySumMaxAndMinGoToTpar) {
  const std::set<int> tpar_ops = {ncclSum, ncclMax, ncclMin};
  // ncclNumOps and above are the operators ncclRedOpCreatePreMulSum makes.
  for (int op : {-1, 0, 1, 2, 3, 4, 5, 6, 100, INT_MAX}) {
    AllReduceCall c = tparCall();
    c.nccl_op = op;
    EXPECT_EQ(tpar_ops.count(op) ? Route::kTpar : Route::kOp, route(RoutePolicy(), c))
        << "ncclRedOp_t " << op;
  }
}

TEST(ShimRoute, LimitCountsBytesOfTheCallsDatatype) {
  RoutePolicy p;
  p.max_bytes = 4096;
  AllReduceCall c = tparCall();
  for (int t : {ncclFloat16, ncclBfloat16, ncclFloat32}) {
    const size_t esize = t == ncclFloat32 ? 4 : 2;
    c.nccl_datatype = t;
    c.count = 4096 / esize;
    EXPECT_EQ(Route::kTpar, route(p, c)) << t;
    c.count += 1;
    EXPECT_EQ(Route::kTooLarge, route(p, c)) << t;
  }
  p.max_bytes = 0;
  c.count = 1;
  EXPECT_EQ(Route::kTooLarge, route(p, c));
}

TEST(ShimRoute, AsksThePlanLastWithTheCallsBytesAndDatatype) {
  int asked = 0;
  uint64_t bytes = 0;
  tparDataType_t dtype = tparBfloat16;
  auto plan = [&](uint64_t b, tparDataType_t d) {
    ++asked;
    bytes = b;
    dtype = d;
    return true;
  };
  AllReduceCall c = tparCall();
  c.nccl_datatype = ncclFloat32;
  c.count = 300;
  EXPECT_EQ(Route::kTunedNccl, decideRoute(RoutePolicy(), c, plan));
  EXPECT_EQ(1, asked);
  EXPECT_EQ(1200u, bytes);
  EXPECT_EQ(tparFloat32, dtype);
  c.in_group = true;  // an earlier rule decides: the plan is not asked
  EXPECT_EQ(Route::kInGroup, decideRoute(RoutePolicy(), c, plan));
  EXPECT_EQ(1, asked);
}

TEST(ShimRoute, RouteNamesMatchThePublicEnum) {
  EXPECT_STREQ("tpar", tpar::shim::routeName(Route::kTpar));
  EXPECT_STREQ("in-group", tpar::shim::routeName(Route::kInGroup));
  EXPECT_STREQ("tuned-nccl", tpar::shim::routeName(Route::kTunedNccl));
  EXPECT_STREQ("unknown", tpar::shim::routeName(Route::kCount));
  std::set<std::string> names;
  for (int r = 0; r < static_cast<int>(Route::kCount); ++r)
    names.insert(tpar::shim::routeName(static_cast<Route>(r)));
  EXPECT_EQ(static_cast<size_t>(Route::kCount), names.size()) << "route names must differ";
}

// The shim's translation and tpar's own (comm/nccl_route.h, used when tpar calls NCCL) are
// inverse to each other, by nccl.h's names.
TEST(ShimEnums, TranslationMatchesNcclAndInvertsTparsOwn) {
  const struct {
    int nccl;
    tparDataType_t tpar;
  } types[] = {{ncclFloat16, tparFloat16}, {ncclBfloat16, tparBfloat16}, {ncclFloat32, tparFloat32}};
  for (const auto& t : types) {
    tparDataType_t out = tparNumDataTypes;
    ASSERT_TRUE(tpar::shim::tparDataTypeOfNccl(t.nccl, &out)) << t.nccl;
    EXPECT_EQ(t.tpar, out);
    EXPECT_EQ(t.nccl, tpar::ncclDataTypeOf(t.tpar));
  }
  for (int t : std::initializer_list<int>{ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64,
                                          ncclUint64, ncclFloat64, ncclFloat8e4m3, ncclFloat8e5m2,
                                          ncclNumTypes}) {
    tparDataType_t out = tparNumDataTypes;
    EXPECT_FALSE(tpar::shim::tparDataTypeOfNccl(t, &out)) << t;
    EXPECT_EQ(tparNumDataTypes, out) << "nothing written for " << t;
  }
  const struct {
    int nccl;
    tparRedOp_t tpar;
  } ops[] = {{ncclSum, tparSum}, {ncclMax, tparMax}, {ncclMin, tparMin}};
  for (const auto& o : ops) {
    tparRedOp_t out = tparNumOps;
    ASSERT_TRUE(tpar::shim::tparRedOpOfNccl(o.nccl, &out)) << o.nccl;
    EXPECT_EQ(o.tpar, out);
    EXPECT_EQ(o.nccl, tpar::ncclRedOpOf(o.tpar));
  }
  for (int op : std::initializer_list<int>{ncclProd, ncclAvg, ncclNumOps, ncclNumOps + 1}) {
    tparRedOp_t out = tparNumOps;
    EXPECT_FALSE(tpar::shim::tparRedOpOfNccl(op, &out)) << op;
  }
}

// --- The setup agreement, ranks as threads -------------------------------------------------

// Shared slots and a reusable barrier: each collective is a rendezvous of every rank.
class ThreadGroup {
 public:
  explicit ThreadGroup(int n) : n_(n), slots_(n) {}
  int size() const { return n_; }
  void put(int rank, const void* data, size_t bytes) {
    slots_[rank].assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  }
  const std::vector<char>& slot(int rank) const { return slots_[rank]; }
  void barrier() {
    std::unique_lock<std::mutex> lock(mu_);
    const int gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
  }
  int fail_at = 0;  // the collective (1, 2, 3) that fails on every rank; 0: none
  std::atomic<int> collectives{0};

 private:
  int n_;
  std::vector<std::vector<char>> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int generation_ = 0;
};

class ThreadChannel : public tpar::shim::SetupChannel {
 public:
  ThreadChannel(ThreadGroup* g, int rank) : g_(g), rank_(rank) {}
  bool allGather(const void* mine, void* all, size_t bytes, std::string* why) override {
    if (!begin(why)) return false;
    g_->put(rank_, mine, bytes);
    g_->barrier();
    for (int r = 0; r < g_->size(); ++r)
      std::memcpy(static_cast<char*>(all) + r * bytes, g_->slot(r).data(), bytes);
    g_->barrier();
    return true;
  }
  bool broadcast(void* buf, size_t bytes, int root, std::string* why) override {
    if (!begin(why)) return false;
    if (rank_ == root) g_->put(root, buf, bytes);
    g_->barrier();
    std::memcpy(buf, g_->slot(root).data(), bytes);
    g_->barrier();
    return true;
  }
  bool allMin(int32_t* value, std::string* why) override {
    if (!begin(why)) return false;
    g_->put(rank_, value, sizeof(*value));
    g_->barrier();
    int32_t m = INT32_MAX;
    for (int r = 0; r < g_->size(); ++r) {
      int32_t v;
      std::memcpy(&v, g_->slot(r).data(), sizeof(v));
      m = std::min(m, v);
    }
    g_->barrier();
    *value = m;
    return true;
  }

 private:
  bool begin(std::string* why) {
    g_->collectives.fetch_add(1);
    if (++step_ == g_->fail_at) {
      *why = "injected failure";
      return false;
    }
    return true;
  }
  ThreadGroup* g_;
  int rank_;
  int step_ = 0;
};

// What each rank's fake tpar did.
struct FakeRank {
  tparUniqueId received{};
  bool made = false;
  bool attached = false;
  bool destroyed = false;
};

struct Scenario {
  int nranks = 4;
  std::vector<uint64_t> host;  // per rank; empty: all 7
  int cannot_join = -1;
  bool fail_unique_id = false;
  int fail_init = -1;
  int fail_attach = -1;
  int fail_at = 0;
};

struct Outcome {
  std::vector<tpar::shim::SetupResult> results;
  std::vector<FakeRank> ranks;
  tparUniqueId id{};
  int id_calls = 0;
  int collectives = 0;
};

Outcome runScenario(const Scenario& s) {
  Outcome out;
  out.results.resize(s.nranks);
  out.ranks.resize(s.nranks);
  for (size_t i = 0; i < sizeof(out.id.internal); ++i)
    out.id.internal[i] = static_cast<char>(std::rand());
  ThreadGroup group(s.nranks);
  group.fail_at = s.fail_at;
  std::atomic<int> id_calls{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < s.nranks; ++r) {
    threads.emplace_back([&, r] {
      FakeRank& me = out.ranks[r];
      tpar::shim::TparOps ops;
      ops.getUniqueId = [&](tparUniqueId* id) {
        id_calls.fetch_add(1);
        if (s.fail_unique_id) return tparSystemError;
        *id = out.id;
        return tparSuccess;
      };
      ops.initRank = [&, r](tparComm_t* c, int n, const tparUniqueId& id, int rank) {
        me.received = id;
        if (r == s.fail_init || n != s.nranks || rank != r) return tparInvalidUsage;
        me.made = true;
        *c = reinterpret_cast<tparComm_t>(static_cast<uintptr_t>(0x1000 + r));
        return tparSuccess;
      };
      ops.attachNccl = [&, r](tparComm_t) {
        if (r == s.fail_attach) return tparInvalidArgument;
        me.attached = true;
        return tparSuccess;
      };
      ops.destroy = [&](tparComm_t) { me.destroyed = true; };
      ops.lastError = [] { return std::string("fake failure"); };
      tpar::shim::SetupInput in;
      in.rank = r;
      in.nranks = s.nranks;
      in.host_id = s.host.empty() ? 7 : s.host[r];
      in.can_join = r != s.cannot_join;
      in.why_not = "no GPU memory left";
      ThreadChannel ch(&group, r);
      out.results[r] = tpar::shim::runSetup(ch, ops, in);
    });
  }
  for (auto& t : threads) t.join();
  out.id_calls = id_calls.load();
  out.collectives = group.collectives.load();
  return out;
}

void expectAllPassThrough(const Outcome& o, const std::string& why_part) {
  for (size_t r = 0; r < o.results.size(); ++r) {
    EXPECT_EQ(nullptr, o.results[r].comm) << "rank " << r;
    EXPECT_FALSE(o.results[r].fatal) << "rank " << r;
    EXPECT_NE(std::string::npos, o.results[r].why.find(why_part))
        << "rank " << r << ": " << o.results[r].why;
    EXPECT_EQ(o.ranks[r].made, o.ranks[r].destroyed) << "rank " << r << " leaked its communicator";
  }
}

TEST(ShimSetup, EveryRankOfOneHostGetsACommunicatorOfTheSameId) {
  const Outcome o = runScenario(Scenario());
  EXPECT_EQ(1, o.id_calls) << "only rank 0 makes the id";
  EXPECT_EQ(4 * 3, o.collectives) << "vote, id, agreement on every rank";
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(reinterpret_cast<tparComm_t>(static_cast<uintptr_t>(0x1000 + r)), o.results[r].comm);
    EXPECT_FALSE(o.results[r].fatal);
    EXPECT_TRUE(o.ranks[r].attached) << r;
    EXPECT_FALSE(o.ranks[r].destroyed) << r;
    EXPECT_EQ(0, std::memcmp(&o.id, &o.ranks[r].received, sizeof(o.id))) << "rank " << r;
  }
}

TEST(ShimSetup, ARankOnAnotherHostMakesEveryRankPassThrough) {
  Scenario s;
  s.host = {7, 7, 9, 7};
  const Outcome o = runScenario(s);
  expectAllPassThrough(o, "rank 2 is on another host");
  EXPECT_EQ(0, o.id_calls);
  EXPECT_EQ(4, o.collectives) << "the vote alone";
}

TEST(ShimSetup, ARankThatCannotJoinMakesEveryRankPassThrough) {
  Scenario s;
  s.cannot_join = 1;
  const Outcome o = runScenario(s);
  expectAllPassThrough(o, "annot run tpar");
  EXPECT_NE(std::string::npos, o.results[1].why.find("no GPU memory left")) << o.results[1].why;
  EXPECT_NE(std::string::npos, o.results[0].why.find("rank 1")) << o.results[0].why;
}

TEST(ShimSetup, NoIdFromRankZeroMeansNoCommunicatorAnywhere) {
  Scenario s;
  s.fail_unique_id = true;
  const Outcome o = runScenario(s);
  expectAllPassThrough(o, "rank 0 could not make a tpar unique id");
  for (const FakeRank& r : o.ranks) EXPECT_FALSE(r.made);
  EXPECT_NE(std::string::npos, o.results[0].why.find("fake failure")) << o.results[0].why;
}

TEST(ShimSetup, OneFailedInitMakesEveryRankDestroyItsCommunicator) {
  Scenario s;
  s.fail_init = 3;
  const Outcome o = runScenario(s);
  expectAllPassThrough(o, "making the tpar communicator failed");
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(o.ranks[r].destroyed) << r;
  EXPECT_NE(std::string::npos, o.results[3].why.find("tparCommInitRank")) << o.results[3].why;
}

TEST(ShimSetup, OneFailedAttachMakesEveryRankDestroyItsCommunicator) {
  Scenario s;
  s.fail_attach = 1;
  const Outcome o = runScenario(s);
  expectAllPassThrough(o, "making the tpar communicator failed");
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(o.ranks[r].destroyed) << r;
  EXPECT_NE(std::string::npos, o.results[1].why.find("tparCommSetNcclComm")) << o.results[1].why;
}

TEST(ShimSetup, AFailedCollectiveIsFatalAndLeaksNothing) {
  for (int step = 1; step <= 3; ++step) {
    Scenario s;
    s.fail_at = step;
    const Outcome o = runScenario(s);
    for (int r = 0; r < 4; ++r) {
      EXPECT_TRUE(o.results[r].fatal) << "step " << step << " rank " << r;
      EXPECT_EQ(nullptr, o.results[r].comm);
      EXPECT_NE(std::string::npos, o.results[r].why.find("injected failure"));
      EXPECT_EQ(o.ranks[r].made, o.ranks[r].destroyed) << "step " << step << " rank " << r;
    }
  }
}

TEST(ShimSetup, GroupsOfOneOrOfTooManyRanksDecideWithoutACollective) {
  for (int n : {1, TPAR_MAX_RANKS + 1}) {
    Scenario s;
    s.nranks = n;
    const Outcome o = runScenario(s);
    EXPECT_EQ(0, o.collectives) << n << " ranks";
    for (const auto& r : o.results) {
      EXPECT_EQ(nullptr, r.comm);
      EXPECT_FALSE(r.fatal);
    }
  }
}

TEST(ShimSetup, HostIdentityIsStableInAProcess) {
  EXPECT_EQ(tpar::shim::hostIdentity(), tpar::shim::hostIdentity());
  EXPECT_NE(0u, tpar::shim::hostIdentity());
}

// --- Where the real NCCL is looked for ------------------------------------------------------

std::vector<std::string> paths(const std::vector<tpar::shim::Candidate>& cs) {
  std::vector<std::string> out;
  for (const auto& c : cs) out.push_back(c.path);
  return out;
}

TEST(ShimSearch, TheConfiguredLibraryIsTheOnlyCandidate) {
  const auto cs = tpar::shim::ncclCandidates("/opt/nccl/libnccl.so.2", {"/x/libnccl.so.2"},
                                             {"/ld"}, {"/usr/lib"});
  ASSERT_EQ(1u, cs.size());
  EXPECT_EQ("/opt/nccl/libnccl.so.2", cs[0].path);
  EXPECT_EQ("TPAR_NCCL_LIBRARY", cs[0].how);
}

TEST(ShimSearch, LoadedNcclThenWheelThenLoaderPathThenSystemThenName) {
  const std::vector<std::string> loaded = {
      "/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so",
      "/opt/app/libnccl.so.2.28.9", "/venv/lib/python3.12/site-packages/torch/lib/libc10.so"};
  const auto cs =
      tpar::shim::ncclCandidates("", loaded, {"/ld/a", "/ld/b"}, {"/usr/lib", "/ld/a"});
  const std::vector<std::string> want = {
      "/opt/app/libnccl.so.2.28.9",
      "/venv/lib/python3.12/site-packages/torch/lib/../../nvidia/nccl/lib/libnccl.so.2",
      "/opt/app/../../nvidia/nccl/lib/libnccl.so.2",
      "/ld/a/libnccl.so.2",
      "/ld/b/libnccl.so.2",
      "/usr/lib/libnccl.so.2",
      "libnccl.so.2"};
  EXPECT_EQ(want, paths(cs)) << "duplicates are dropped, the first place kept";
  EXPECT_EQ("already loaded", cs[0].how);
  EXPECT_NE(std::string::npos, cs[1].how.find("PyTorch wheel")) << cs[1].how;
}

// --- The function list of nccl.h against the table ------------------------------------------

TEST(ShimTable, EveryFunctionOfTheHeaderHasARow) {
  std::set<std::string> rows;
#define TPAR_NCCL_FORWARD(ret, name, params, args) rows.insert(#name);
#define TPAR_NCCL_OWN(ret, name, params, args) rows.insert(#name);
#include "nccl_api.def"
#undef TPAR_NCCL_FORWARD
#undef TPAR_NCCL_OWN
  std::ifstream f(TPAR_NCCL_API_NAMES);
  ASSERT_TRUE(f.good()) << TPAR_NCCL_API_NAMES;
  std::string name;
  int n = 0;
  while (std::getline(f, name)) {
    if (name.empty()) continue;
    ++n;
    const std::string base = name.rfind("pnccl", 0) == 0 ? name.substr(1) : name;
    EXPECT_TRUE(rows.count(base)) << name << " is declared by the NCCL headers but has no row";
  }
  EXPECT_GT(n, 40) << "the list of nccl.h's functions is implausibly short";
  EXPECT_EQ(static_cast<size_t>(tpar::shim::kApiCount), rows.size());
  EXPECT_STREQ("ncclAllReduce", tpar::shim::apiName(tpar::shim::Api::k_ncclAllReduce));
}


// --- The real NCCL's functions against the table (NOTE [unknown NCCL functions]) ------------

std::vector<std::string> rowNames() {
  std::vector<std::string> out;
  for (int i = 0; i < tpar::shim::kApiCount; ++i)
    out.push_back(tpar::shim::apiName(static_cast<tpar::shim::Api>(i)));
  std::sort(out.begin(), out.end());
  return out;
}

// A made-up function name, fresh per run, that no NCCL has.
std::string madeUpName(std::mt19937& rng, int i) {
  std::string s = "Zz" + std::to_string(i) + "_";
  for (int k = 0; k < 8; ++k) s += static_cast<char>('a' + rng() % 26);
  return s;
}

TEST(ShimUnknown, TheApiIsEveryNcclFunctionExportedWithItsProfilingAlias) {
  std::mt19937 rng(std::random_device{}());
  std::vector<std::string> exported, want;
  for (int i = 0; i < 64; ++i) {
    const std::string n = "nccl" + madeUpName(rng, i);
    switch (rng() % 4) {
      case 0:  // NCCL's API: the function and its alias
        exported.push_back(n);
        exported.push_back("p" + n);
        want.push_back(n);
        break;
      case 1:  // an internal function: no alias
        exported.push_back(n);
        break;
      case 2:  // an alias alone names no function of the API
        exported.push_back("p" + n);
        break;
      default:  // another library's pair
        exported.push_back("x" + n);
        exported.push_back("px" + n);
        break;
    }
  }
  std::shuffle(exported.begin(), exported.end(), rng);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(want, tpar::shim::ncclApiOf(exported));
}

TEST(ShimUnknown, OnlyFunctionsWithoutARowAreUnknown) {
  std::mt19937 rng(std::random_device{}());
  std::vector<std::string> api = rowNames(), want;
  const int extra = 1 + static_cast<int>(rng() % 5);
  for (int i = 0; i < extra; ++i) {
    want.push_back("nccl" + madeUpName(rng, i));
    api.push_back(want.back());
  }
  api.push_back(api[rng() % api.size()]);  // a name twice counts once
  std::shuffle(api.begin(), api.end(), rng);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(want, tpar::shim::unknownToShim(api));
  EXPECT_TRUE(tpar::shim::unknownToShim(rowNames()).empty());
}

TEST(ShimUnknown, TheShimsOwnExportsAreExactlyItsRows) {
  std::vector<std::string> exported;
  std::string why;
  ASSERT_TRUE(tpar::shim::exportedFunctions(TPAR_SHIM_LIBRARY, &exported, &why)) << why;
  EXPECT_EQ(rowNames(), tpar::shim::ncclApiOf(exported))
      << "every row is exported with its p-alias, and nothing else is";
}

TEST(ShimUnknown, FindsTheFunctionANewerNcclAdded) {
  std::vector<std::string> exported;
  std::string why;
  ASSERT_TRUE(tpar::shim::exportedFunctions(TPAR_STANDIN_NEWER_LIBRARY, &exported, &why)) << why;
  EXPECT_NE(exported.end(), std::find(exported.begin(), exported.end(), "ncclStandinInternalOnly"));
  EXPECT_EQ(std::vector<std::string>{"ncclStandinFutureCall"},
            tpar::shim::unknownToShim(tpar::shim::ncclApiOf(exported)));
}

TEST(ShimUnknown, AFileThatIsNoSharedObjectIsAnErrorNotACrash) {
  std::mt19937 rng(std::random_device{}());
  const std::string dir = ::testing::TempDir() + "tpar-elf-" + std::to_string(getpid());
  ASSERT_EQ(0, system(("mkdir -p " + dir).c_str()));
  // The shim's own first bytes: an ELF header whose section headers lie past the end.
  std::ifstream shim(TPAR_SHIM_LIBRARY, std::ios::binary);
  std::string head(64 + rng() % 512, '\0');
  shim.read(&head[0], static_cast<std::streamsize>(head.size()));
  std::string noise(1 + rng() % 4096, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  noise[0] = 'x';  // never the ELF magic
  for (const auto& [name, bytes, reason] :
       {std::tuple<std::string, std::string, std::string>{"noise", noise, "not an ELF file"},
        {"cut", head, "no section headers"},
        {"empty", "", "not an ELF file"}}) {
    const std::string path = dir + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    std::vector<std::string> out{"stale"};
    std::string why;
    EXPECT_FALSE(tpar::shim::exportedFunctions(path, &out, &why)) << name;
    EXPECT_NE(std::string::npos, why.find(reason)) << name << ": " << why;
    EXPECT_TRUE(out.empty()) << name;
  }
  std::vector<std::string> out;
  std::string why;
  EXPECT_FALSE(tpar::shim::exportedFunctions(dir + "/missing.so", &out, &why));
  EXPECT_NE(std::string::npos, why.find(dir + "/missing.so")) << why;
  ASSERT_EQ(0, system(("rm -rf " + dir).c_str()));
}

}  // namespace
}  // namespace tpar_shim_test
