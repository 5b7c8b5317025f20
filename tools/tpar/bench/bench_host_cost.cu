// `tpar bench --host-cost`: the host time to enqueue one all-reduce on its own. Every rank's
// stream is held by a spin kernel (StreamHold) while a batch of calls is enqueued behind it, so
// no launch waits for the GPU and the launch queue never fills; the same batch of bare launches
// (an empty kernel with tpar's parameter size and launch attributes) is timed in the same hold,
// and the difference is what the library adds. After the release every call runs and its
// output, poisoned before the batch, is checked.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>

#include "api/internal.h"
#include "tools/tpar/bench/bench.h"
#include "tools/tpar/common/backend.h"
#include "tools/tpar/common/cli_options.h"
#include "tools/tpar/common/exit_codes.h"
#include "tools/tpar/common/measure.h"
#include "tools/tpar/verify/verify.h"  // medianOf

namespace tpar_cli {
namespace {

// A batch is enqueued in well under a millisecond; a hold that lasts this long means the host
// blocked on the GPU (the queue filled, or a backend waited), and the spin gives up.
constexpr unsigned kHoldTimeoutMs = 10000;
// Calls whose plans and modules are built before the first timed batch.
constexpr int kWarmupCalls = 3;

unsigned nextHostCostSeed() {
  static unsigned seed = static_cast<unsigned>(std::time(nullptr)) ^ 0x5a5a5a5au;
  return ++seed;
}

struct BareShape {
  bool overlap = false;
  int blocks = 1, threads = 128;
};

using Clock = std::chrono::steady_clock;

double usBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// One backend at one size: `opt.host_cost_batches` holds of `batch` calls per rank.
std::string measureHostCost(Backend& b, Ranks& rk, StreamHold& hold, size_t bytes,
                            tparDataType_t dtype, tparRedOp_t op, const BenchOptions& opt,
                            int batch, const BareShape& bare, HostCostRow* row) {
  const size_t es = tpar::elementBytes(dtype);
  const size_t count = std::max<size_t>(1, bytes / es);
  row->bytes = count * es;
  row->chosen = b.chosen(row->bytes);
  row->batch = batch;
  row->batches = opt.host_cost_batches;
  row->overlap = bare.overlap;
  const std::vector<const void*> send(rk.in.begin(), rk.in.end());
  auto issue = [&] { return b.allReduce(send, rk.out, count, dtype, op, rk.streams); };
  if (std::string e = rk.fill(rk.in, rk.out, count, dtype, 0); !e.empty()) return e;
  for (int i = 0; i < kWarmupCalls; ++i)
    if (std::string e = issue(); !e.empty()) return e;
  if (std::string e = launchBare(rk, kWarmupCalls, bare.overlap, bare.blocks, bare.threads);
      !e.empty())
    return e;
  if (std::string e = rk.sync(); !e.empty()) return e;
  const double per_batch = static_cast<double>(batch) * rk.devs.size();
  std::vector<double> calls, bares;
  long long wrong = 0;
  for (int k = 0; k < opt.host_cost_batches; ++k) {
    const unsigned seed = nextHostCostSeed();
    if (std::string e = rk.fill(rk.in, rk.out, count, dtype, seed); !e.empty()) return e;
    if (std::string e = hold.hold(rk, kHoldTimeoutMs); !e.empty()) {
      hold.release();
      return e;
    }
    // Alternate which goes first, so that neither always finds the caches the other left.
    std::string err;
    Clock::time_point t[4];
    auto timeBare = [&](Clock::time_point* at) {
      at[0] = Clock::now();
      if (err.empty()) err = launchBare(rk, batch, bare.overlap, bare.blocks, bare.threads);
      at[1] = Clock::now();
    };
    auto timeCallsOf = [&](Clock::time_point* at) {
      at[0] = Clock::now();
      for (int c = 0; c < batch && err.empty(); ++c) err = issue();
      at[1] = Clock::now();
    };
    if (k % 2 == 0) {
      timeBare(t);
      timeCallsOf(t + 2);
    } else {
      timeCallsOf(t + 2);
      timeBare(t);
    }
    hold.release();
    if (std::string e = rk.sync(); !e.empty() && err.empty()) err = e;
    if (!err.empty()) return err;
    if (hold.timedOut())
      return "a stream hold gave up after " + std::to_string(kHoldTimeoutMs) +
             " ms before its batch was enqueued (the host waited for the GPU): no host cost";
    if (std::string e = b.asyncError(); !e.empty()) return e;
    long long w = 0;
    if (std::string e = rk.countWrongIn(rk.out, count, dtype, &w, op, seed); !e.empty()) return e;
    wrong += w;
    bares.push_back(usBetween(t[0], t[1]) / per_batch);
    calls.push_back(usBetween(t[2], t[3]) / per_batch);
  }
  row->median_us = medianOf(calls);
  row->min_us = *std::min_element(calls.begin(), calls.end());
  row->bare_median_us = medianOf(bares);
  row->bare_min_us = *std::min_element(bares.begin(), bares.end());
  row->wrong = wrong;
  return "";
}

}  // namespace

int runHostCost(const BenchOptions& opt, const std::vector<GpuInfo>& gpus) {
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "tpar bench: %s\n", msg.c_str());
    return kExitRunError;
  };
  const int ngpus = static_cast<int>(gpus.size());
  const std::vector<std::string> backends =
      withWires(opt.backends.empty() ? defaultBackends(ngpus) : opt.backends, opt.wires);
  const auto sizes = benchSizes(opt);
  const size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  std::printf("# tpar bench --host-cost: host time to enqueue one call per rank (steady clock), "
              "every rank's stream held by a spin kernel so that no launch waits for the GPU\n"
              "# bare: an empty kernel with tpar's parameter size (%zu B) and launch attributes; "
              "call-bare: what the backend adds (medians); %d holds per size, outputs poisoned "
              "before each and checked after its release\n",
              sizeof(tpar::kernels::AllReduceArgs), opt.host_cost_batches);
  std::vector<HostCostRow> rows;
  std::vector<std::string> skipped;
  for (int n : benchRankCounts(opt, ngpus)) {
    const bool virt = n > ngpus;
    std::vector<int> devs(n);
    for (int r = 0; r < n; ++r) devs[r] = virt ? 0 : r;
    // Ranks sharing a GPU share its launch queue: each gets its part of the batch.
    std::map<int, int> per_dev;
    int most = 0;
    for (int d : devs) most = std::max(most, ++per_dev[d]);
    const int batch = std::max(1, opt.host_cost_batch / most);
    std::printf("# %d ranks%s, one thread driving all; %d calls per rank per hold\n", n,
                virt ? " (virtual, on GPU 0)" : "", batch);
    Ranks rk;
    if (std::string e = rk.alloc(devs, max_bytes); !e.empty()) return fail(e);
    StreamHold hold;
    if (std::string e = hold.init(rk); !e.empty()) return fail(e);
    std::printf("%s", hostCostHeader().c_str());
    for (const std::string& name : backends) {
      if (ncclVariants().count(name)) {
        skipped.push_back(name + ": its environment needs a process of its own");
        continue;
      }
      std::string why;
      std::unique_ptr<Backend> b =
          makeBackend(name, &why, opt.transport, int64_t{opt.timeout_s} * 1000);
      if (b != nullptr) why = b->init(devs);
      if (b == nullptr || !why.empty()) {
        skipped.push_back(name + " at " + std::to_string(n) + " ranks: " + why);
        continue;
      }
      BareShape bare;
      bare.overlap = name.rfind("tpar", 0) == 0 && tparLaunchOverlap(devs[0]);
      tparCommInfo_t info;
      if (b->info(&info)) {
        bare.blocks = std::max(1, info.blocksPerRank);
        bare.threads = std::max(32, info.threadsPerBlock);
      }
      for (tparDataType_t dtype : opt.dtypes) {
        for (tparRedOp_t op : opt.ops) {
          for (size_t bytes : sizes) {
            HostCostRow row;
            row.backend = name;
            row.ranks = n;
            if (std::string e =
                    measureHostCost(*b, rk, hold, bytes, dtype, op, opt, batch, bare, &row);
                !e.empty())
              return fail(name + ", " + std::to_string(bytes) + " B: " + e);
            rows.push_back(row);
            std::printf("%s", hostCostLine(row).c_str());
            std::fflush(stdout);
          }
        }
      }
    }
  }
  for (const std::string& s : skipped) std::printf("# skipped %s\n", s.c_str());
  long long wrong = 0;
  for (const HostCostRow& r : rows) wrong += std::max(0LL, r.wrong);
  if (!opt.json_path.empty()) {
    nlohmann::json j = machineReport("tpar bench --host-cost", opt.command_line);
    j["host_cost"] = nlohmann::json::array();
    for (const HostCostRow& r : rows) j["host_cost"].push_back(hostCostToJson(r));
    j["param_bytes"] = sizeof(tpar::kernels::AllReduceArgs);
    j["skipped"] = skipped;
    if (std::string e = writeOutputFile(opt.json_path, j.dump(2) + "\n"); !e.empty())
      return fail("--json: " + e);
    std::printf("# wrote %s\n", opt.json_path.c_str());
  }
  if (rows.empty()) return fail("no backend could run here (see 'skipped' above)");
  if (wrong) {
    std::printf("# FAILED: %lld wrong elements in %zu checked rows\n", wrong, rows.size());
    return kExitCheckFailed;
  }
  std::printf("# ok: 0 wrong elements in %zu checked rows\n", rows.size());
  return kExitOk;
}

}  // namespace tpar_cli
