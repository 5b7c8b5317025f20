// The host cost of one tparAllReduce apart from the CUDA driver, on any machine (no GPU).
//
// tparAllReduce is: the handle check, the argument checks, the stream checks (driver), the
// trace check, the plan and the launch arguments, the device switch and the launch (driver).
// This times every step that is tpar's own code, alone and in sequence, on a communicator
// object that never saw a GPU (2 ranks, 12 KiB of bf16 by default). The driver steps are
// timed on a GPU by host_cost.cu next to this file.
//
// Build: cmake --build build --target tpar_host_cost_cpu
// Run:   build/bench/experiments/tpar_host_cost_cpu [--bytes N] [--iters N]
//        (ns per step, the best of 5 repetitions; a shared machine adds noise, never removes it)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "api/api_log.h"
#include "api/call_checks.h"
#include "comm/comm.h"
#include "base/error.h"
#include "tuner/tuner.h"

namespace {

using tpar::kernels::Algo;

template <typename T>
inline void keep(const T& v) {
  asm volatile("" : : "r"(&v) : "memory");
}

// ns per call of f: the best of 5 repetitions of `iters` calls.
template <typename F>
double nsPerCall(long iters, F&& f) {
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < iters; ++i) f();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / iters);
  }
  return best;
}

struct FakeComm {
  std::unique_ptr<tparComm> comm = std::make_unique<tparComm>();
  tpar::kernels::HostState host{};
  alignas(256) char workspace[2][256] = {};

  FakeComm(int nranks, tparAlgo_t forced, bool table) {
    tparComm* c = comm.get();
    c->rank = 0;
    c->nranks = nranks;
    c->cfg.forced_algo = forced;
    c->layout = tpar::kernels::WorkspaceLayout::forMaxBytes(c->cfg.max_bytes_per_call);
    c->host_state = &host;
    c->host_state_dev = &host;
    c->max_blocks = 32;
    for (int r = 0; r < nranks; ++r) c->peer_ws[r] = workspace[r % 2];
    if (tpar::applyTopology(c, tpar::flatTopology(nranks, tpar::LinkClass::kSameSwitch)) !=
        tparSuccess) {
      std::fprintf(stderr, "applyTopology: %s\n", tpar::lastError().c_str());
      std::exit(1);
    }
    if (table) {
      // A measured table of a few sizes, as `tpar tune` writes one.
      tpar::TuningTable t;
      t.signature = c->tuner_ctx.signature;
      t.nranks = nranks;
      for (uint64_t kb : {4, 16, 64, 256, 1024, 4096}) {
        tpar::TuningEntry e;
        e.max_bytes = kb << 10;
        e.plan.algo = kb <= 64 ? Algo::kOneShot : Algo::kTwoShot;
        t.entries.push_back(e);
      }
      c->tuning = t;
      c->has_tuning = true;
    }
    tpar::registerComm(c);
  }
  ~FakeComm() { tpar::unregisterComm(comm.get()); }
};

void run(const char* label, int nranks, tparAlgo_t forced, bool table, size_t bytes, long iters) {
  FakeComm fake(nranks, forced, table);
  tparComm* comm = fake.comm.get();
  alignas(16) static char buf[16];
  const void* send = buf;
  void* recv = buf;  // in place: the overlap check passes
  const size_t count = bytes / 2;
  const tparDataType_t dtype = tparBfloat16;
  const tparRedOp_t op = tparSum;
  cudaStream_t stream = nullptr;

  const double clear = nsPerCall(iters, [] { tpar::clearError(); });
  const double live = nsPerCall(iters, [&] {
    const bool ok = tpar::isLiveComm(comm);
    keep(ok);
  });
  const double checks = nsPerCall(iters, [&] {
    const tparResult_t r = tpar::checkAllReduceArgs(comm, send, recv, count, dtype, op);
    keep(r);
  });
  const double log = nsPerCall(iters, [&] {
    tpar::logAllReduce(comm, send, recv, count, dtype, op, stream);
  });
  const double plan = nsPerCall(iters, [&] {
    const tpar::Plan p = tpar::planFor(comm, bytes, dtype);
    keep(p);
  });
  tpar::CallLaunch call;
  const double prepare = nsPerCall(iters, [&] {
    tpar::prepareAllReduce(comm, count, dtype, op, &call);
    const int threads = tpar::setPiece(comm, &call, send, recv, count, 0);
    keep(call);
    keep(threads);
  });
  const double all = nsPerCall(iters, [&] {
    tpar::clearError();
    if (!tpar::isLiveComm(comm)) std::abort();
    if (tpar::checkAllReduceArgs(comm, send, recv, count, dtype, op) != tparSuccess) std::abort();
    tpar::logAllReduce(comm, send, recv, count, dtype, op, stream);
    tpar::prepareAllReduce(comm, count, dtype, op, &call);
    const int threads = tpar::setPiece(comm, &call, send, recv, count, 0);
    keep(call);
    keep(threads);
  });
  std::printf("%-26s %5d %8zu | %6.1f %6.1f %6.1f %6.1f %6.1f %8.1f | %6.1f\n", label, nranks,
              bytes, clear, live, checks, log, plan, prepare, all);
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = 12u << 10;
  long iters = 2000000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--bytes") == 0) bytes = std::strtoull(argv[i + 1], nullptr, 0);
    else if (std::strcmp(argv[i], "--iters") == 0) iters = std::strtol(argv[i + 1], nullptr, 0);
    else {
      std::fprintf(stderr, "usage: %s [--bytes N] [--iters N]\n", argv[0]);
      return 2;
    }
  }
  std::printf("host cost of tparAllReduce without the driver, ns per call (best of 5 x %ld)\n",
              iters);
  std::printf("prepare = planFor + launch arguments + first piece; all = every step in sequence\n");
  std::printf("%-26s %5s %8s | %6s %6s %6s %6s %6s %8s | %6s\n", "case", "ranks", "bytes",
              "clear", "live", "checks", "log", "plan", "prepare", "all");
  run("defaults", 2, tparAlgoAuto, false, bytes, iters);
  run("defaults", 8, tparAlgoAuto, false, bytes, iters);
  run("tuning table", 2, tparAlgoAuto, true, bytes, iters);
  run("forced twoshot", 2, tparAlgoTwoShot, false, bytes, iters);
  run("defaults, 16 ranks", 16, tparAlgoAuto, false, bytes, iters);
  return 0;
}
