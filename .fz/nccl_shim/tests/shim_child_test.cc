// The shim as a program sees it, against the stand-in NCCL: every function forwards with its
// arguments and result intact, groups are tracked per thread, communicators that cannot have a
// tpar communicator pass through, the disable switch touches nothing, and the real NCCL is
// found without ever being the shim (so tpar's own NCCL calls cannot come back into it).
//
// Each ShimChild.* test runs in a child process with the environment it needs; the test of the
// same behaviour in the parent starts it and checks its log.
#include <unistd.h>

#include <climits>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "api/internal.h"
#include "arg_format.h"
#include "common/fifo_dir.h"
#include "shim_test_util.h"
#include "tpar_nccl_shim.h"

namespace tpar_shim_test {
namespace {

namespace fs = std::filesystem;

void* openShim(int mode = RTLD_NOW | RTLD_LOCAL) { return dlopen(TPAR_SHIM_LIBRARY, mode); }

std::string realPath(const std::string& p) {
  std::error_code ec;
  const fs::path r = fs::canonical(p, ec);
  return ec ? p : r.string();
}

std::string lastError(void* shim) {
  const char* e = symbol<const char* (*)(ncclComm_t)>(shim, "ncclGetLastError")(nullptr);
  return e != nullptr ? e : "(null)";
}

// The shim loaded, its NCCL found and the stand-in attached; fails the test otherwise.
#define OPEN_SHIM_AND_STANDIN(shim, standin)                                                 \
  void* shim = openShim();                                                                   \
  ASSERT_NE(nullptr, shim) << dlerror();                                                     \
  ASSERT_NE(nullptr, symbol<const char* (*)()>(shim, "tparShimNcclPath")()) << lastError(shim); \
  Standin standin;                                                                           \
  ASSERT_TRUE(standin.attach()) << "the shim did not load " TPAR_STANDIN_LIBRARY

template <typename F>
F shimFn(void* shim, const char* name) {
  F f = symbol<F>(shim, name);
  EXPECT_NE(nullptr, f) << name;
  return f;
}

// --- Every function forwards intact ---------------------------------------------------------

alignas(64) char g_arena[512 << 10];

// A value no other argument of the table has: pointers into a scratch arena (some calls write
// through them), numbers from 100 up.
template <typename T>
T testValue(int k) {
  if constexpr (std::is_pointer_v<T>) {
    return reinterpret_cast<T>(g_arena + 64 * (k % 2048));
  } else if constexpr (std::is_same_v<T, ncclUniqueId>) {
    ncclUniqueId id;
    for (size_t j = 0; j < sizeof(id.internal); ++j) id.internal[j] = static_cast<char>(k * 7 + j);
    return id;
#if TPAR_NCCL_HAS_DEVICE_API
  } else if constexpr (std::is_same_v<T, ncclTeam_t>) {
    return ncclTeam_t{k, k + 1, k + 2};
#endif
#if TPAR_NCCL_HAS_DEVICE_API && TPAR_NCCL_DECLARES(ncclGetMultimemDevicePointer)
  } else if constexpr (std::is_same_v<T, ncclMultimemHandle_t>) {
    return ncclMultimemHandle_t{g_arena + 64 * (k % 2048)};
#endif
  } else {
    return static_cast<T>(100 + k);
  }
}

template <typename... A, size_t... I>
std::tuple<A...> argsFor(int row, std::index_sequence<I...>) {
  return std::tuple<A...>(testValue<A>(row * 16 + static_cast<int>(I))...);
}

template <typename R>
void expectResult(const R& r, const std::string& sym, int rc) {
  if constexpr (std::is_same_v<R, ncclResult_t>) {
    EXPECT_EQ(rc, r) << sym;
  } else if constexpr (std::is_same_v<R, const char*>) {
    // The stand-in returns its function's name: the very pointer must come back.
    EXPECT_STREQ(sym.c_str() + (sym[0] == 'p' ? 1 : 0), r) << sym;
  } else if constexpr (std::is_integral_v<R>) {
    EXPECT_EQ(R(4242), r) << sym;
  } else {
    EXPECT_EQ(7, r.nRanks) << sym;
    EXPECT_EQ(8, r.rank) << sym;
    EXPECT_EQ(9, r.stride) << sym;
  }
}

struct ForwardCheck {
  void* shim;
  Standin* standin;
  int rc;     // what the stand-in returns
  bool pure;  // the shim may make no call of its own
  std::set<std::string> exercised;
};

template <typename Fn>
struct Row;
template <typename R, typename... A>
struct Row<R (*)(A...)> {
  static void check(const char* name, int row, ForwardCheck* fc) {
    for (const std::string sym : {std::string(name), "p" + std::string(name)}) {
      auto fn = reinterpret_cast<R (*)(A...)>(dlsym(fc->shim, sym.c_str()));
      ASSERT_NE(nullptr, fn) << sym << " is not exported";
      const std::tuple<A...> args = argsFor<A...>(row, std::index_sequence_for<A...>());
      fc->standin->clearLog();
      if constexpr (std::is_void_v<R>) {
        std::apply(fn, args);
      } else {
        expectResult(std::apply(fn, args), sym, fc->rc);
      }
      EXPECT_EQ(callText(name, args), fc->standin->line(0)) << sym << ": the call NCCL got";
      if (fc->pure) EXPECT_EQ(1, fc->standin->size()) << sym << ": calls of the shim's own";
      fc->exercised.insert(sym);
    }
  }
};

// Env: TPAR_SHIM_TEST_RESULT (what the stand-in returns), TPAR_SHIM_DISABLE.
TEST(ShimChild, ForwardsEveryFunction) {
  OPEN_SHIM_AND_STANDIN(shim, standin);
  const char* rc_text = std::getenv("TPAR_SHIM_TEST_RESULT");
  const char* off = std::getenv("TPAR_SHIM_DISABLE");
  const bool disabled = off != nullptr && std::string(off) == "1";
  ForwardCheck fc{shim, &standin, rc_text != nullptr ? std::atoi(rc_text) : 0, false, {}};
  // Disabled, nothing but the forward may happen; enabled, a failed call makes no other call.
  fc.pure = disabled || fc.rc != ncclSuccess;
  standin.setResult(fc.rc);
  int row = 0;
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define TPAR_NCCL_FORWARD(ret, name, params, args) \
  Row<ret(*) params>::check(#name, row++, &fc);
#define TPAR_NCCL_OWN TPAR_NCCL_FORWARD
#include "nccl_api.def"
#undef TPAR_NCCL_FORWARD
#undef TPAR_NCCL_OWN
  // Every function of the header, checked (the list the build made from nccl.h).
  std::ifstream names(TPAR_NCCL_API_NAMES);
  std::string name;
  int listed = 0;
  while (std::getline(names, name)) {
    if (name.empty()) continue;
    ++listed;
    EXPECT_TRUE(fc.exercised.count(name)) << name << " was not checked";
  }
  EXPECT_GT(listed, 40);
  if (disabled) {
    auto query = shimFn<int (*)(void*, size_t, int, int)>(shim, "tparShimQueryRoute");
    EXPECT_EQ(tparShimRouteDisabled, query(nullptr, 16, ncclBfloat16, ncclSum));
  }
  std::printf("checked %zu exported functions\n", fc.exercised.size());
}

// --- Groups ---------------------------------------------------------------------------------

TEST(ShimChild, GroupDepthFollowsGroupCalls) {
  OPEN_SHIM_AND_STANDIN(shim, standin);
  auto query = shimFn<int (*)(void*, size_t, int, int)>(shim, "tparShimQueryRoute");
  auto start = shimFn<ncclResult_t (*)()>(shim, "ncclGroupStart");
  auto end = shimFn<ncclResult_t (*)()>(shim, "ncclGroupEnd");
  auto stats = shimFn<int (*)(void*, tparShimStats_t*)>(shim, "tparShimGetStats");
  auto all_reduce = shimFn<decltype(&ncclAllReduce)>(shim, "ncclAllReduce");
  void* comm = g_arena;  // a communicator the shim never made
  auto where = [&] { return query(comm, 16, ncclBfloat16, ncclSum); };

  EXPECT_EQ(tparShimRouteNoTparComm, where());
  ASSERT_EQ(ncclSuccess, start());
  EXPECT_EQ(tparShimRouteInGroup, where());
  ASSERT_EQ(ncclSuccess, start());
  ASSERT_EQ(ncclSuccess, end());
  EXPECT_EQ(tparShimRouteInGroup, where()) << "still inside the outer group";
  // Depth belongs to the thread.
  int other = -1;
  std::thread([&] { other = where(); }).join();
  EXPECT_EQ(tparShimRouteNoTparComm, other);
  ASSERT_EQ(ncclSuccess, end());
  EXPECT_EQ(tparShimRouteNoTparComm, where());

  // A failed ncclGroupStart opens nothing; a failed ncclGroupEnd still closes.
  standin.setResult(ncclInvalidUsage);
  EXPECT_EQ(ncclInvalidUsage, start());
  standin.setResult(ncclSuccess);
  EXPECT_EQ(tparShimRouteNoTparComm, where());
  ASSERT_EQ(ncclSuccess, start());
  standin.setResult(ncclInvalidUsage);
  EXPECT_EQ(ncclInvalidUsage, end());
  standin.setResult(ncclSuccess);
  EXPECT_EQ(tparShimRouteNoTparComm, where());
  // An extra ncclGroupEnd does not open a negative depth.
  end();
  ASSERT_EQ(ncclSuccess, start());
  EXPECT_EQ(tparShimRouteInGroup, where());
#if TPAR_NCCL_HAS_SIM_INFO
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(ncclSuccess, shimFn<decltype(&ncclGroupSimulateEnd)>(shim, "ncclGroupSimulateEnd")(&sim));
#else
  EXPECT_EQ(ncclSuccess, end());
#endif
  EXPECT_EQ(tparShimRouteNoTparComm, where()) << "a simulated end ends the group too";

  // An all-reduce in a group goes to NCCL and is counted as such.
  tparShimStats_t before, after;
  ASSERT_EQ(0, stats(nullptr, &before));
  ASSERT_EQ(ncclSuccess, start());
  standin.clearLog();
  EXPECT_EQ(ncclSuccess, all_reduce(g_arena, g_arena, 16, ncclBfloat16, ncclSum,
                                    static_cast<ncclComm_t>(comm), nullptr));
  ASSERT_EQ(ncclSuccess, end());
  ASSERT_EQ(0, stats(nullptr, &after));
  EXPECT_EQ(before.calls[tparShimRouteInGroup] + 1, after.calls[tparShimRouteInGroup]);
  ASSERT_GE(standin.size(), 1);
  EXPECT_EQ(0u, standin.line(0).rfind("ncclAllReduce(", 0)) << standin.line(0);
}

// --- Communicators that pass through --------------------------------------------------------

TEST(ShimChild, OneRankCommunicatorPassesThrough) {
  OPEN_SHIM_AND_STANDIN(shim, standin);
  auto init = shimFn<decltype(&ncclCommInitRank)>(shim, "ncclCommInitRank");
  auto destroy = shimFn<decltype(&ncclCommDestroy)>(shim, "ncclCommDestroy");
  auto all_reduce = shimFn<decltype(&ncclAllReduce)>(shim, "ncclAllReduce");
  auto stats = shimFn<int (*)(void*, tparShimStats_t*)>(shim, "tparShimGetStats");
  auto query = shimFn<int (*)(void*, size_t, int, int)>(shim, "tparShimQueryRoute");
  standin.setGroup(1, 0, 0);
  ncclUniqueId id{};
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclSuccess, init(&comm, 1, id, 0)) << lastError(shim);
  ASSERT_NE(nullptr, comm);
  tparShimStats_t st;
  ASSERT_EQ(0, stats(comm, &st));
  EXPECT_EQ(1u, st.commsPassThrough);
  EXPECT_EQ(0u, st.commsWithTpar);
  EXPECT_EQ(tparShimRouteNoTparComm, query(comm, 10, ncclBfloat16, ncclSum));
  const struct {
    size_t count;
    ncclDataType_t type;
  } calls[] = {{10, ncclBfloat16}, {10, ncclBfloat16}, {10, ncclFloat32}, {20, ncclBfloat16}};
  for (const auto& c : calls) {
    standin.clearLog();
    EXPECT_EQ(ncclSuccess, all_reduce(g_arena, g_arena + 4096, c.count, c.type, ncclSum, comm,
                                      nullptr));
    EXPECT_EQ(1, standin.size());
  }
  ASSERT_EQ(0, stats(comm, &st));
  EXPECT_EQ(4u, st.calls[tparShimRouteNoTparComm]);
  EXPECT_EQ(0u, st.calls[tparShimRouteTpar]);
  EXPECT_EQ(ncclSuccess, destroy(comm));
  EXPECT_EQ(-1, stats(comm, &st)) << "a destroyed communicator is unknown";
  ASSERT_EQ(0, stats(nullptr, &st));
  EXPECT_EQ(4u, st.calls[tparShimRouteNoTparComm]) << "the process keeps its counts";
}

// ncclCommInitRankConfig with blocking = 0, a split of it (inheriting), a split without a
// color, an init inside a group, and ncclCommInitAll (tparCommInitAll cannot run without GPUs).
TEST(ShimChild, NonBlockingGroupedAndInitAllCommsPassThrough) {
  OPEN_SHIM_AND_STANDIN(shim, standin);
  auto init = shimFn<decltype(&ncclCommInitRank)>(shim, "ncclCommInitRank");
  auto init_config = shimFn<decltype(&ncclCommInitRankConfig)>(shim, "ncclCommInitRankConfig");
  auto init_all = shimFn<decltype(&ncclCommInitAll)>(shim, "ncclCommInitAll");
  auto split = shimFn<decltype(&ncclCommSplit)>(shim, "ncclCommSplit");
  auto finalize = shimFn<decltype(&ncclCommFinalize)>(shim, "ncclCommFinalize");
  auto destroy = shimFn<decltype(&ncclCommDestroy)>(shim, "ncclCommDestroy");
  auto start = shimFn<ncclResult_t (*)()>(shim, "ncclGroupStart");
  auto end = shimFn<ncclResult_t (*)()>(shim, "ncclGroupEnd");
  auto stats = shimFn<int (*)(void*, tparShimStats_t*)>(shim, "tparShimGetStats");
  // Two ranks: a blocking communicator of this group would start the setup.
  standin.setGroup(2, 0, 0);
  ncclUniqueId id{};
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t nb = nullptr;
  standin.clearLog();
  ASSERT_EQ(ncclSuccess, init_config(&nb, 2, id, 0, &config));
  EXPECT_EQ(1, standin.size()) << "no setup on a non-blocking communicator";
  ncclComm_t child = nullptr;
  standin.clearLog();
  ASSERT_EQ(ncclSuccess, split(nb, 0, 0, &child, nullptr));
  ASSERT_NE(nullptr, child);
  EXPECT_EQ(1, standin.size()) << "a split without a config inherits non-blocking";
  ncclComm_t none = reinterpret_cast<ncclComm_t>(g_arena);
  ASSERT_EQ(ncclSuccess, split(nb, NCCL_SPLIT_NOCOLOR, 0, &none, nullptr));
  EXPECT_EQ(nullptr, none);
  ncclComm_t grouped = nullptr;
  ASSERT_EQ(ncclSuccess, start());
  standin.clearLog();
  ASSERT_EQ(ncclSuccess, init(&grouped, 2, id, 0));
  EXPECT_EQ(1, standin.size()) << "no setup inside a group";
  ASSERT_EQ(ncclSuccess, end());
  ncclComm_t all[3] = {};
  ASSERT_EQ(ncclSuccess, init_all(all, 3, nullptr));
  tparShimStats_t st;
  ASSERT_EQ(0, stats(nullptr, &st));
  EXPECT_EQ(6u, st.commsPassThrough);
  EXPECT_EQ(0u, st.commsWithTpar);
  for (ncclComm_t c : {nb, child, grouped, all[0], all[1], all[2]}) {
    EXPECT_EQ(0, stats(c, &st)) << c;
    EXPECT_EQ(ncclSuccess, finalize(c));
    EXPECT_EQ(ncclSuccess, destroy(c));
    EXPECT_EQ(-1, stats(c, &st));
  }
}

// Without a GPU this rank cannot run the setup's collectives: the communicator is aborted and
// the init fails, as the other ranks' will when their bounded wait runs out.
TEST(ShimChild, SetupThatCannotRunAbortsTheCommunicator) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0) {
    GTEST_SKIP() << "a GPU is present: the setup runs there (the GPU tests cover it)";
  }
  OPEN_SHIM_AND_STANDIN(shim, standin);
  auto init = shimFn<decltype(&ncclCommInitRank)>(shim, "ncclCommInitRank");
  auto stats = shimFn<int (*)(void*, tparShimStats_t*)>(shim, "tparShimGetStats");
  standin.setGroup(2, 1, 0);
  ncclUniqueId id{};
  ncclComm_t comm = reinterpret_cast<ncclComm_t>(g_arena);
  standin.clearLog();
  EXPECT_EQ(ncclUnhandledCudaError, init(&comm, 2, id, 1));
  EXPECT_EQ(nullptr, comm);
  const std::string error = lastError(shim);
  EXPECT_NE(std::string::npos, error.find("setting up tpar")) << error;
  EXPECT_NE(std::string::npos, error.find("aborted")) << error;
  // The communicator NCCL made (the one the shim queried) is the one aborted.
  std::string made, aborted;
  for (const std::string& l : standin.lines()) {
    std::smatch m;
    if (std::regex_match(l, m, std::regex("ncclCommCount\\((p:[^,]+),.*"))) made = m[1];
    if (std::regex_match(l, m, std::regex("ncclCommAbort\\((p:[^)]+)\\)"))) aborted = m[1];
  }
  EXPECT_FALSE(made.empty());
  EXPECT_EQ(made, aborted);
  tparShimStats_t st;
  ASSERT_EQ(0, stats(nullptr, &st));
  EXPECT_EQ(0u, st.commsPassThrough + st.commsWithTpar) << "nothing registered";
}

// --- Finding the real NCCL ------------------------------------------------------------------

// Env: LD_LIBRARY_PATH holds the stand-in; TPAR_NCCL_LIBRARY empty. The shim is loaded as a
// preloaded one would be; tpar's own loader then opens "libnccl.so.2", gets the shim, and must
// end up at the stand-in.
TEST(ShimChild, CoreRoutesToTheRealNccl) {
  void* shim = openShim(RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(nullptr, shim) << dlerror();
  const char* path = symbol<const char* (*)()>(shim, "tparShimNcclPath")();
  ASSERT_NE(nullptr, path) << lastError(shim);
  EXPECT_EQ(realPath(TPAR_STANDIN_LIBRARY), realPath(path));
  Standin standin;
  ASSERT_TRUE(standin.attach());
  void* by_name = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  EXPECT_EQ(shim, by_name) << "the name libnccl.so.2 should open the shim, as under LD_PRELOAD";
  if (by_name != nullptr) dlclose(by_name);

  std::string why;
  const tpar::NcclLib* lib = tpar::loadNccl(&why);
  ASSERT_NE(nullptr, lib) << why;
  EXPECT_EQ(realPath(TPAR_STANDIN_LIBRARY), realPath(lib->path));
  EXPECT_EQ(dlsym(standin.handle(), "ncclAllReduce"), reinterpret_cast<void*>(lib->allReduce));
  EXPECT_NE(dlsym(shim, "ncclAllReduce"), reinterpret_cast<void*>(lib->allReduce));

  auto stats = shimFn<int (*)(void*, tparShimStats_t*)>(shim, "tparShimGetStats");
  tparShimStats_t before, after;
  ASSERT_EQ(0, stats(nullptr, &before));
  standin.clearLog();
  EXPECT_EQ(0, lib->allReduce(g_arena, g_arena, 8, tpar::kNcclBfloat16, tpar::kNcclSum,
                              reinterpret_cast<tpar::NcclComm>(g_arena), nullptr));
  ASSERT_EQ(1, standin.size());
  EXPECT_EQ(0u, standin.line(0).rfind("ncclAllReduce(", 0)) << standin.line(0);
  ASSERT_EQ(0, stats(nullptr, &after));
  for (int r = 0; r < tparShimNumRoutes; ++r)
    EXPECT_EQ(before.calls[r], after.calls[r]) << "the shim saw the call (route " << r << ")";
}

// Env: TPAR_NCCL_LIBRARY names the shim or a copy of it; TPAR_SHIM_TEST_EXPECT the reason.
TEST(ShimChild, RefusesItselfAsTheRealNccl) {
  void* shim = openShim();
  ASSERT_NE(nullptr, shim) << dlerror();
  EXPECT_EQ(nullptr, symbol<const char* (*)()>(shim, "tparShimNcclPath")());
  const std::string error = lastError(shim);
  EXPECT_NE(std::string::npos, error.find(std::getenv("TPAR_SHIM_TEST_EXPECT"))) << error;
  int version = 0;
  EXPECT_EQ(ncclInvalidUsage, shimFn<decltype(&ncclGetVersion)>(shim, "ncclGetVersion")(&version));
  EXPECT_EQ(0, version);
  std::string why;
  EXPECT_EQ(nullptr, tpar::loadNccl(&why));
  EXPECT_NE(std::string::npos, why.find("without a real NCCL")) << why;
}

// Env: TPAR_SHIM_TEST_DIR is a made-up site-packages with torch/lib/libtorch_cuda.so and
// nvidia/nccl/lib/libnccl.so.2 (the stand-in); TPAR_NCCL_LIBRARY empty.
TEST(ShimChild, FindsTheNcclOfThePyTorchWheel) {
  const std::string dir = std::getenv("TPAR_SHIM_TEST_DIR");
  void* torch = dlopen((dir + "/torch/lib/libtorch_cuda.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(nullptr, torch) << dlerror();
  void* shim = openShim(RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(nullptr, shim) << dlerror();
  const char* path = symbol<const char* (*)()>(shim, "tparShimNcclPath")();
  ASSERT_NE(nullptr, path) << lastError(shim);
  EXPECT_EQ(realPath(dir + "/nvidia/nccl/lib/libnccl.so.2"), realPath(path));
}


// Env: TPAR_NCCL_LIBRARY names the newer stand-in (NOTE [unknown NCCL functions]); the process
// stops at the first call unless TPAR_SHIM_ALLOW_UNKNOWN_NCCL=1.
TEST(ShimChild, CallsAnNcclWithUnknownFunctions) {
  void* shim = openShim();
  ASSERT_NE(nullptr, shim) << dlerror();
  int version = 0;
  EXPECT_EQ(ncclSuccess, shimFn<decltype(&ncclGetVersion)>(shim, "ncclGetVersion")(&version));
  EXPECT_EQ(NCCL_VERSION_CODE, version);
}

// Env: TPAR_SHIM_TEST_DIR holds a stand-in libnccl.so.2, loaded before the shim as PyTorch
// loads its NCCL before an engine opens the shim; TPAR_NCCL_LIBRARY empty.
TEST(ShimChild, LoadsTheShimAfterAnNccl) {
  const std::string nccl = std::string(std::getenv("TPAR_SHIM_TEST_DIR")) + "/libnccl.so.2";
  ASSERT_NE(nullptr, dlopen(nccl.c_str(), RTLD_NOW | RTLD_LOCAL)) << dlerror();
  std::fprintf(stderr, "child: NCCL loaded\n");
  void* shim = openShim();
  std::fprintf(stderr, "child: shim loaded\n");
  ASSERT_NE(nullptr, shim) << dlerror();
  const char* path = symbol<const char* (*)()>(shim, "tparShimNcclPath")();
  ASSERT_NE(nullptr, path) << lastError(shim);
  EXPECT_EQ(realPath(nccl), realPath(path));
}

// --- The parents ----------------------------------------------------------------------------

std::vector<std::string> standinEnv() {
  return {std::string("TPAR_NCCL_LIBRARY=") + TPAR_STANDIN_LIBRARY, "TPAR_SHIM_DISABLE=0",
          "TPAR_DEBUG=warn"};
}

void expectChildPasses(const std::string& name, std::vector<std::string> env,
                       std::string* output = nullptr) {
  std::string out;
  const int rc = runChildTest(name, env, &out);
  if (rc == 2) GTEST_SKIP() << out;
  EXPECT_EQ(0, rc) << out;
  if (output != nullptr) *output = out;
}

int countLines(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re),
                                        std::sregex_iterator()));
}

TEST(ShimForwarding, EveryFunctionArrivesIntactWhenDisabled) {
  for (const char* rc : {"0", "2"}) {
    auto env = standinEnv();
    env.push_back("TPAR_SHIM_DISABLE=1");
    env.push_back(std::string("TPAR_SHIM_TEST_RESULT=") + rc);
    SCOPED_TRACE(std::string("the stand-in returns ") + rc);
    expectChildPasses("ForwardsEveryFunction", env);
  }
}

TEST(ShimForwarding, EveryFunctionArrivesIntactWhenEnabled) {
  for (const char* rc : {"0", "2"}) {
    auto env = standinEnv();
    env.push_back(std::string("TPAR_SHIM_TEST_RESULT=") + rc);
    SCOPED_TRACE(std::string("the stand-in returns ") + rc);
    expectChildPasses("ForwardsEveryFunction", env);
  }
}

TEST(ShimGroups, DepthFollowsGroupCallsPerThread) {
  expectChildPasses("GroupDepthFollowsGroupCalls", standinEnv());
}

TEST(ShimComms, OneRankCommunicatorPassesThroughAndLogsEachDecisionOnce) {
  auto env = standinEnv();
  env.back() = "TPAR_DEBUG=info";
  std::string out;
  expectChildPasses("OneRankCommunicatorPassesThrough", env, &out);
  EXPECT_EQ(1, countLines(out, "forwarding to NCCL [0-9.]+ at [^\n]*libnccl\\.so\\.2 \\(found: "
                               "TPAR_NCCL_LIBRARY\\)"))
      << out;
  EXPECT_EQ(1, countLines(out, "every call goes to NCCL: a group of one rank")) << out;
  EXPECT_EQ(1, countLines(out, "all-reduce of 10 x bfloat16 sum -> NCCL \\(no-tpar-comm\\)"))
      << "logged once per size and datatype\n" << out;
  EXPECT_EQ(1, countLines(out, "all-reduce of 10 x float32 sum -> NCCL")) << out;
  EXPECT_EQ(1, countLines(out, "all-reduce of 20 x bfloat16 sum -> NCCL")) << out;
  EXPECT_EQ(1, countLines(out, "destroyed: 4 all-reduces, 0 through tpar, 4 to NCCL "
                               "\\(no-tpar-comm 4\\)"))
      << out;
}

TEST(ShimComms, NonBlockingGroupedAndInitAllCommsPassThrough) {
  auto env = standinEnv();
  env.back() = "TPAR_DEBUG=info";
  std::string out;
  expectChildPasses("NonBlockingGroupedAndInitAllCommsPassThrough", env, &out);
  EXPECT_EQ(2, countLines(out, "every call goes to NCCL: non-blocking communicator")) << out;
  EXPECT_EQ(1, countLines(out, "every call goes to NCCL: created inside ncclGroupStart")) << out;
  EXPECT_EQ(3, countLines(out, "ncclCommInitAll: comm [^\n]* every call goes to NCCL: "
                               "tparCommInitAll"))
      << out;
}

TEST(ShimComms, SetupThatCannotRunAbortsTheCommunicator) {
  expectChildPasses("SetupThatCannotRunAbortsTheCommunicator", standinEnv());
}

TEST(ShimLoading, CoreRoutesToTheRealNcclNotBackIntoTheShim) {
  const std::string dir = fs::path(TPAR_STANDIN_LIBRARY).parent_path().string();
  expectChildPasses("CoreRoutesToTheRealNccl",
                    {"TPAR_NCCL_LIBRARY=", "LD_LIBRARY_PATH=" + dir, "TPAR_DEBUG=warn"});
}

TEST(ShimLoading, RefusesItselfAsTheRealNccl) {
  expectChildPasses("RefusesItselfAsTheRealNccl",
                    {std::string("TPAR_NCCL_LIBRARY=") + TPAR_SHIM_LIBRARY,
                     "TPAR_SHIM_TEST_EXPECT=is libtpar_nccl.so itself"});
  const fs::path dir = fs::temp_directory_path() / ("tpar-shim-copy-" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::copy_file(TPAR_SHIM_LIBRARY, dir / "libnccl.so.2", fs::copy_options::overwrite_existing);
  expectChildPasses("RefusesItselfAsTheRealNccl",
                    {"TPAR_NCCL_LIBRARY=" + (dir / "libnccl.so.2").string(),
                     "TPAR_SHIM_TEST_EXPECT=is another copy of libtpar_nccl.so"});
  fs::remove_all(dir);
}

// Env: TPAR_NCCL_LIBRARY names a FIFO, which dlopen would wait on (NOTE [user files]).
TEST(ShimChild, RefusesAFifoAsTheRealNccl) {
  void* shim = openShim();
  ASSERT_NE(nullptr, shim) << dlerror();
  EXPECT_EQ(nullptr, symbol<const char* (*)()>(shim, "tparShimNcclPath")());
  const std::string error = lastError(shim);
  EXPECT_NE(std::string::npos, error.find("is not a regular file")) << error;
}

TEST(ShimLoading, RefusesAFifoAsTheRealNcclWithoutBlocking) {
  tpar_test::FifoDir d;
  ASSERT_FALSE(d.dir().empty());
  expectChildPasses("RefusesAFifoAsTheRealNccl", {"TPAR_NCCL_LIBRARY=" + d.fifo()});
}

constexpr const char* kUnknownLine =
    "tpar: fatal: libtpar_nccl.so forwards to NCCL [0-9.]+ at [^\n]*standin-newer/libnccl\\.so"
    "\\.2[^\n]*, which exports 1 function\\(s\\) this libtpar_nccl.so does not: "
    "ncclStandinFutureCall\\. ";

TEST(ShimLoading, AnNcclWithFunctionsTheShimLacksStopsTheProcessAtTheFirstCall) {
  std::string out;
  EXPECT_EQ(128 + SIGABRT,
            runChildTestStatus("CallsAnNcclWithUnknownFunctions",
                               {std::string("TPAR_NCCL_LIBRARY=") + TPAR_STANDIN_NEWER_LIBRARY,
                                "TPAR_SHIM_ALLOW_UNKNOWN_NCCL=0", "TPAR_DEBUG=none"},
                               &out))
      << out;
  EXPECT_EQ(1, countLines(out, kUnknownLine)) << "said whatever TPAR_DEBUG says\n" << out;
  EXPECT_EQ(std::string::npos, out.find("ncclStandinInternalOnly"))
      << "a function without a profiling alias is not NCCL's API\n" << out;
  // Allowed: a warning, and the call goes through.
  expectChildPasses("CallsAnNcclWithUnknownFunctions",
                    {std::string("TPAR_NCCL_LIBRARY=") + TPAR_STANDIN_NEWER_LIBRARY,
                     "TPAR_SHIM_ALLOW_UNKNOWN_NCCL=1", "TPAR_DEBUG=warn"},
                    &out);
  EXPECT_EQ(1, countLines(out, "does not: ncclStandinFutureCall\\. [^\n]*"
                               "\\(TPAR_SHIM_ALLOW_UNKNOWN_NCCL=1: running anyway\\)"))
      << out;
  // The stand-in the shim knows entirely: no line.
  expectChildPasses("CallsAnNcclWithUnknownFunctions", standinEnv(), &out);
  EXPECT_EQ(std::string::npos, out.find("does not:")) << out;
}

TEST(ShimLoading, AnNcclWithFunctionsTheShimLacksStopsTheProcessWhenTheShimLoads) {
  const std::string newer = fs::path(TPAR_STANDIN_NEWER_LIBRARY).parent_path().string();
  std::string out;
  EXPECT_EQ(128 + SIGABRT,
            runChildTestStatus("LoadsTheShimAfterAnNccl",
                               {"TPAR_NCCL_LIBRARY=", "TPAR_SHIM_TEST_DIR=" + newer}, &out))
      << out;
  EXPECT_EQ(1, countLines(out, kUnknownLine)) << out;
  EXPECT_NE(std::string::npos, out.find("child: NCCL loaded")) << out;
  EXPECT_EQ(std::string::npos, out.find("child: shim loaded"))
      << "stopped inside dlopen, before any function could be looked up\n" << out;
  // The NCCL the shim knows, loaded first, is the one it forwards to.
  const std::string known = fs::path(TPAR_STANDIN_LIBRARY).parent_path().string();
  expectChildPasses("LoadsTheShimAfterAnNccl",
                    {"TPAR_NCCL_LIBRARY=", "TPAR_SHIM_TEST_DIR=" + known}, &out);
}

TEST(ShimLoading, FindsTheNcclOfThePyTorchWheel) {
  const fs::path site =
      fs::temp_directory_path() / ("tpar-shim-wheel-" + std::to_string(getpid())) / "site-packages";
  fs::create_directories(site / "torch" / "lib");
  fs::create_directories(site / "nvidia" / "nccl" / "lib");
  fs::copy_file(TPAR_SHIM_TEST_OBJECT, site / "torch" / "lib" / "libtorch_cuda.so",
                fs::copy_options::overwrite_existing);
  fs::copy_file(TPAR_STANDIN_LIBRARY, site / "nvidia" / "nccl" / "lib" / "libnccl.so.2",
                fs::copy_options::overwrite_existing);
  std::string out;
  expectChildPasses("FindsTheNcclOfThePyTorchWheel",
                    {"TPAR_NCCL_LIBRARY=", "TPAR_SHIM_TEST_DIR=" + site.string(), "TPAR_DEBUG=info"},
                    &out);
  EXPECT_EQ(1, countLines(out, "found: PyTorch wheel beside [^\n]*libtorch_cuda\\.so")) << out;
  fs::remove_all(site.parent_path());
}

}  // namespace
}  // namespace tpar_shim_test
