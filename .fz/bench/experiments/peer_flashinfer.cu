// FlashInfer's PCIe all-reduce kernels (include/flashinfer/comm/pcie_ipc_all_reduce.cuh of a
// FlashInfer checkout that scripts/peer-flashinfer.sh restores into an ignored folder; no code of
// it is in this repository) over virtual ranks on one GPU, timed as `tpar bench` times tpar: the
// same exact inputs, element checks and CUDA-graph timing (tools/tpar/common/measure.h). It
// sweeps the grid FlashInfer's own autotuner searches (every variant x blocks 1..128 x threads
// 64..1024 its dispatch accepts), checks every candidate's result before timing it, and re-times
// the best few with the full iteration count: "FlashInfer's best" in docs/PERFORMANCE.md is the
// fastest correct candidate of that second timing.
//
// Slabs in GPU memory (as its CUDA IPC buffers) or in pinned host memory mapped into the GPU
// (the no-P2P comparison: every byte over the GPU's PCIe link, as tpar's host transport).
// A candidate whose blocks of all ranks cannot be resident together is skipped (its ranks would
// wait for blocks that never run), and every wait on the GPU is bounded: a candidate that does
// not finish in --timeout-ms ends the process with exit status 3 and what it was running.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "flashinfer/comm/pcie_ipc_all_reduce.cuh"
#include "tools/tpar/common/cli_options.h"
#include "tools/tpar/common/measure.h"
#include "tools/tpar/common/report.h"

#ifndef TPAR_PEER_FLASHINFER_COMMIT
#define TPAR_PEER_FLASHINFER_COMMIT "unknown"
#endif

namespace fi = flashinfer::comm::pcie_ipc;
using nlohmann::json;
using tpar_cli::Ranks;

namespace {

// FlashInfer's autotuner grid (flashinfer/comm/pcie_ipc_tuning.py) and workspace block bound.
constexpr int kTuneBlocks[] = {1, 2, 4, 8, 12, 16, 32, 64, 96, 128};
constexpr int kTuneThreads[] = {64, 128, 256, 512, 1024};
constexpr int kMaxBlocks = 128;

struct Candidate {
  int variant, blocks, threads;
};

const char* variantName(int v) {
  switch (static_cast<fi::Variant>(v)) {
    case fi::Variant::kUnstaged: return "unstaged";
    case fi::Variant::kStaged: return "staged";
    case fi::Variant::kStagedRing: return "staged-ring";
    case fi::Variant::kFlatStaged: return "flat-staged";
  }
  return "?";
}

// The kernel all_reduce() launches for (ranks, variant), bfloat16, without programmatic
// launch (its FFI refuses it): the header's dispatch table. nullptr where it has none.
const void* kernelOf(int n, int variant) {
  using T = nv_bfloat16;
  const auto v = static_cast<fi::Variant>(variant);
  if (n == 2) {
    if (v == fi::Variant::kUnstaged)
      return reinterpret_cast<const void*>(&fi::ipc_tp2_remote_push_kernel<T, false, false>);
    if (v == fi::Variant::kStaged)
      return reinterpret_cast<const void*>(&fi::ipc_tp2_remote_push_kernel<T, true, false>);
    return nullptr;
  }
  if (n == 4) {
    if (v == fi::Variant::kUnstaged)
      return reinterpret_cast<const void*>(&fi::push_oneshot_param_kernel<T, 4, false, false>);
    if (v == fi::Variant::kStaged)
      return reinterpret_cast<const void*>(&fi::ipc_rsag_push_param_kernel<T, 4, false>);
    if (v == fi::Variant::kStagedRing)
      return reinterpret_cast<const void*>(&fi::ipc_rsag_ring_push_param_kernel<T, 4, false>);
    return nullptr;
  }
  if (n == 8) {
    if (v == fi::Variant::kUnstaged)
      return reinterpret_cast<const void*>(&fi::ipc_topo_rsag8_push_param_kernel<T, false>);
    if (v == fi::Variant::kStaged)
      return reinterpret_cast<const void*>(&fi::ipc_topo_rsag8_block_param_kernel<T, false>);
    if (v == fi::Variant::kStagedRing)
      return reinterpret_cast<const void*>(&fi::ipc_topo_rsag8_ring_push_param_kernel<T, false>);
    if (v == fi::Variant::kFlatStaged)
      return reinterpret_cast<const void*>(&fi::ipc_rsag_push_param_kernel<T, 8, false>);
  }
  return nullptr;
}

// The checks FlashInfer's binding makes before a launch (csrc/pcie_ipc_all_reduce.cu).
bool launchable(int n, const Candidate& c) {
  if (kernelOf(n, c.variant) == nullptr) return false;
  if (c.blocks <= 0 || c.blocks > kMaxBlocks || c.threads < n || c.threads > 1024) return false;
  if (n == 8 && c.variant == static_cast<int>(fi::Variant::kStaged) && c.blocks % 4 != 0)
    return false;
  return true;
}

// Every block of every rank resident at once on `sms` multiprocessors.
bool resident(int n, const Candidate& c, int sms, std::string* err) {
  int per_sm = 0;
  const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, kernelOf(n, c.variant), c.threads, 0);
  if (e != cudaSuccess) {
    *err = std::string("cudaOccupancyMaxActiveBlocksPerMultiprocessor: ") + cudaGetErrorString(e);
    return false;
  }
  return static_cast<long>(n) * c.blocks <= static_cast<long>(per_sm) * sms;
}

// Waits for every rank's stream, at most `timeout_ms`; past it the process ends (a kernel that
// waits forever cannot be stopped otherwise), naming `what`.
std::string syncWithin(Ranks& rk, int timeout_ms, const std::string& what) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (cudaStream_t s : rk.streams) {
    for (;;) {
      const cudaError_t e = cudaStreamQuery(s);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) return std::string("cudaStreamQuery: ") + cudaGetErrorString(e);
      if (std::chrono::steady_clock::now() > end) {
        std::fprintf(stderr, "peer_flashinfer: %s did not finish within %d ms; exiting\n",
                     what.c_str(), timeout_ms);
        std::fflush(stderr);
        std::_Exit(3);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return "";
}

// One group's slabs: n x total_bytes in GPU memory or mapped pinned host memory, zeroed (the
// sentinel kernels read +0.0 as "not written yet"), and each rank's views of them.
struct Slabs {
  bool host = false;
  std::vector<char*> base;  // host: the host addresses; else device addresses
  std::vector<int64_t> dev;  // the addresses the GPU uses
  std::vector<fi::PeerViews> views;
  fi::WorkspaceLayout layout{};
  ~Slabs() {
    for (char* p : base) {
      if (p == nullptr) continue;
      if (host) cudaFreeHost(p);
      else cudaFree(p);
    }
  }
  std::string alloc(int n, int64_t max_numel, bool in_host) {
    host = in_host;
    layout = fi::compute_workspace_layout(n, max_numel, 2, kMaxBlocks);
    base.assign(n, nullptr);
    dev.assign(n, 0);
    for (int r = 0; r < n; ++r) {
      if (host) {
        void* p = nullptr;
        TPAR_CLI_CUDA(cudaHostAlloc(&p, layout.total_bytes, cudaHostAllocMapped | cudaHostAllocPortable));
        base[r] = static_cast<char*>(p);
        std::memset(p, 0, layout.total_bytes);
        void* d = nullptr;
        TPAR_CLI_CUDA(cudaHostGetDevicePointer(&d, p, 0));
        dev[r] = reinterpret_cast<int64_t>(d);
      } else {
        void* p = nullptr;
        TPAR_CLI_CUDA(cudaMalloc(&p, layout.total_bytes));
        base[r] = static_cast<char*>(p);
        TPAR_CLI_CUDA(cudaMemset(p, 0, layout.total_bytes));
        dev[r] = reinterpret_cast<int64_t>(p);
      }
    }
    TPAR_CLI_CUDA(cudaDeviceSynchronize());
    views.resize(n);
    for (int r = 0; r < n; ++r) views[r] = fi::make_peer_views(dev.data(), n, r, layout);
    return "";
  }
};

struct Options {
  std::vector<int> ranks;
  std::vector<size_t> sizes;
  std::vector<std::string> memories{"device", "host"};
  int iters = 200, warmup = 20;
  int sweep_iters = 20, sweep_warmup = 2, top = 3;
  int timeout_ms = 20000;
  std::string json_path;
};

std::string run(const Options& opt, json* out) {
  int sms = 0;
  TPAR_CLI_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t max_bytes = *std::max_element(opt.sizes.begin(), opt.sizes.end());
  const int64_t max_numel = static_cast<int64_t>((max_bytes / 2 + 7) / 8 * 8);
  for (const std::string& memory : opt.memories) {
    for (int n : opt.ranks) {
      Slabs slabs;
      if (std::string e = slabs.alloc(n, max_numel, memory == "host"); !e.empty()) return e;
      Ranks rk;
      if (std::string e = rk.alloc(std::vector<int>(n, 0), max_numel * 2); !e.empty()) return e;
      for (size_t bytes : opt.sizes) {
        const size_t count = bytes / 2;
        json row = {{"backend", "flashinfer:pcie_ipc"}, {"memory", memory}, {"ranks", n},
                    {"bytes", bytes}, {"dtype", "bfloat16"}, {"virtual", true}};
        Candidate current{};
        auto issue = [&]() -> std::string {
          for (int r = 0; r < n; ++r) {
            const cudaError_t e = fi::all_reduce<nv_bfloat16>(
                static_cast<const nv_bfloat16*>(rk.in[r]), static_cast<nv_bfloat16*>(rk.out[r]),
                static_cast<int64_t>(count), slabs.views[r], r, n, kMaxBlocks, max_numel,
                current.blocks, current.threads, static_cast<fi::Variant>(current.variant), false,
                rk.streams[r]);
            if (e != cudaSuccess) return std::string("all_reduce: ") + cudaGetErrorString(e);
          }
          return "";
        };
        auto label = [&](const Candidate& c) {
          return std::to_string(n) + " ranks, " + memory + ", " + std::to_string(bytes) +
                 " bytes, " + variantName(c.variant) + " " + std::to_string(c.blocks) + "x" +
                 std::to_string(c.threads);
        };
        // Poisoned outputs, one call, every element checked.
        auto check = [&](const Candidate& c, long long* wrong) -> std::string {
          current = c;
          if (std::string e = rk.fill(rk.in, rk.out, count, tparBfloat16); !e.empty()) return e;
          if (std::string e = issue(); !e.empty()) return e;
          if (std::string e = syncWithin(rk, opt.timeout_ms, label(c)); !e.empty()) return e;
          return rk.countWrongIn(rk.out, count, tparBfloat16, wrong);
        };
        auto timeOf = [&](const Candidate& c, int iters, int warmup, double* us) -> std::string {
          current = c;
          tpar_cli::TimingPlan plan;
          plan.iters = iters;
          plan.warmup = warmup;
          plan.graph_launches = 1;
          tpar_cli::Timing t;
          if (std::string e = tpar_cli::timeCalls(rk, plan, issue, &t); !e.empty()) return e;
          *us = t.maxUs();
          return "";
        };
        struct Timed {
          Candidate c;
          double us;
        };
        std::vector<Timed> swept;
        int not_resident = 0, wrong_candidates = 0;
        for (int v = 0; v < fi::kVariantCount; ++v)
          for (int b : kTuneBlocks)
            for (int t : kTuneThreads) {
              const Candidate c{v, b, t};
              if (!launchable(n, c)) continue;
              std::string err;
              if (!resident(n, c, sms, &err)) {
                if (!err.empty()) return err;
                ++not_resident;
                continue;
              }
              long long wrong = 0;
              if (std::string e = check(c, &wrong); !e.empty()) return label(c) + ": " + e;
              if (wrong != 0) {
                ++wrong_candidates;
                continue;
              }
              double us = 0;
              if (std::string e = timeOf(c, opt.sweep_iters, opt.sweep_warmup, &us); !e.empty())
                return label(c) + ": " + e;
              swept.push_back({c, us});
            }
        std::sort(swept.begin(), swept.end(), [](const Timed& a, const Timed& b) { return a.us < b.us; });
        json best = nullptr, top = json::array();
        double best_us = 0;
        for (size_t i = 0; i < swept.size() && i < static_cast<size_t>(opt.top); ++i) {
          const Candidate& c = swept[i].c;
          double us = 0;
          if (std::string e = timeOf(c, opt.iters, opt.warmup, &us); !e.empty())
            return label(c) + ": " + e;
          // The timed calls' last result, checked again.
          long long wrong = 0;
          if (std::string e = rk.countWrongIn(rk.out, count, tparBfloat16, &wrong); !e.empty())
            return e;
          json one = {{"variant", variantName(c.variant)}, {"blocks", c.blocks},
                      {"threads", c.threads}, {"us", us}, {"sweep_us", swept[i].us},
                      {"wrong_after_timing", wrong}};
          top.push_back(one);
          if (wrong == 0 && (best.is_null() || us < best_us)) {
            best = one;
            best_us = us;
          }
        }
        row["candidates_timed"] = swept.size();
        row["candidates_not_resident"] = not_resident;
        row["candidates_wrong"] = wrong_candidates;
        row["top"] = top;
        row["best"] = best;
        row["us"] = best.is_null() ? json(nullptr) : json(best_us);
        std::printf("%-6s %d ranks %9zu B: best %s (%d candidates, %d not resident, %d wrong)\n",
                    memory.c_str(), n, bytes,
                    best.is_null() ? "none"
                                   : (std::to_string(best_us) + " us, " +
                                      best["variant"].get<std::string>() + " " +
                                      std::to_string(best["blocks"].get<int>()) + "x" +
                                      std::to_string(best["threads"].get<int>()))
                                         .c_str(),
                    static_cast<int>(swept.size()), not_resident, wrong_candidates);
        std::fflush(stdout);
        (*out)["rows"].push_back(row);
      }
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"FlashInfer's PCIe all-reduce kernels over virtual ranks on one GPU, best of its "
               "tuning grid (bench/experiments/peer_flashinfer.cu)"};
  Options opt;
  std::string ranks = "2,4,8", sizes = "12K,112K,384K,1M,4M", memories = "device,host";
  app.add_option("--ranks", ranks, "virtual ranks, comma-separated (2, 4, 8)")->capture_default_str();
  app.add_option("--sizes", sizes, "message sizes, comma-separated, K/M/G suffixes, multiples of 16 bytes")->capture_default_str();
  app.add_option("--memory", memories, "where the slabs live: device, host (pinned, mapped)")->capture_default_str();
  app.add_option("-n,--iters", opt.iters, "timed calls of the best candidates")->capture_default_str();
  app.add_option("-w,--warmup", opt.warmup, "untimed calls first")->capture_default_str();
  app.add_option("--sweep-iters", opt.sweep_iters, "timed calls of every candidate in the sweep")->capture_default_str();
  app.add_option("--top", opt.top, "candidates re-timed with --iters")->capture_default_str();
  app.add_option("--timeout-ms", opt.timeout_ms, "bound on one checked call")->capture_default_str();
  app.add_option("--json", opt.json_path, "write the rows as JSON here");
  CLI11_PARSE(app, argc, argv);

  std::string err = tpar_cli::parseList("--ranks", ranks, [&](const std::string& s) {
    if (s != "2" && s != "4" && s != "8") return false;
    opt.ranks.push_back(std::stoi(s));
    return true;
  });
  if (err.empty()) {
    err = tpar_cli::parseList("--sizes", sizes, [&](const std::string& s) {
      uint64_t b = 0;
      // Whole 16-byte packs, as FlashInfer's binding requires.
      if (!tpar::parseBytes(s, &b) || b == 0 || b % 16 != 0) return false;
      opt.sizes.push_back(b);
      return true;
    });
  }
  std::vector<std::string> mem;
  if (err.empty()) {
    err = tpar_cli::parseList("--memory", memories, [&](const std::string& s) {
      if (s != "device" && s != "host") return false;
      mem.push_back(s);
      return true;
    });
  }
  opt.memories = mem;
  if (err.empty() && (opt.iters < 1 || opt.sweep_iters < 1 || opt.top < 1 || opt.timeout_ms < 1))
    err = "-n, --sweep-iters, --top and --timeout-ms must be at least 1";
  if (err.empty() && !opt.json_path.empty()) err = tpar_cli::checkOutputPath(opt.json_path);
  if (!err.empty()) {
    std::fprintf(stderr, "peer_flashinfer: %s\n", err.c_str());
    return 2;
  }
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  json out = tpar_cli::machineReport("peer_flashinfer", command);
  out["flashinfer_commit"] = TPAR_PEER_FLASHINFER_COMMIT;
  out["timing"] = "graph";
  out["iters"] = opt.iters;
  out["warmup"] = opt.warmup;
  out["sweep_iters"] = opt.sweep_iters;
  out["rows"] = json::array();
  if (std::string e = run(opt, &out); !e.empty()) {
    std::fprintf(stderr, "peer_flashinfer: %s\n", e.c_str());
    return 1;
  }
  if (!opt.json_path.empty()) {
    if (std::string e = tpar_cli::writeOutputFile(opt.json_path, out.dump(1) + "\n"); !e.empty()) {
      std::fprintf(stderr, "peer_flashinfer: %s\n", e.c_str());
      return 1;
    }
  }
  return 0;
}
