// `tpar verify`: one speculative-decoding verify forward pass of a tensor-parallel transformer,
// timed with each all-reduce backend, plus the same pass without all-reduces and the
// all-reduces alone, so that the share of the all-reduce in the pass is measured, not guessed.
//
// One set of weights: every rank holds ONE layer's weight shard and every layer reuses it. A
// verify pass of 2-64 tokens is memory-bound either way (each GEMM streams its weights once),
// so the time per layer is the same as with distinct weights as long as the shard does not fit
// in L2 (true for the presets: 100+ MiB per rank); it keeps 8 virtual ranks of a 70B-class
// model inside one GPU. For a tiny --hidden the shard may sit in L2 and the compute times are
// optimistic.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/tpar/common/backend.h"
#include "tools/tpar/common/cli_options.h"
#include "tools/tpar/common/commands.h"
#include "tools/tpar/common/exit_codes.h"
#include "tools/tpar/verify/model_pass.h"
#include "tools/tpar/common/report.h"
#include "tools/tpar/verify/verify.h"

namespace tpar_cli {
namespace {

constexpr int kWarmupReplays = 3;
constexpr double kMiB = 1024.0 * 1024.0;

struct BackendResult {
  std::string name;
  std::string status = "failed";  // "ok", "skipped", "failed"
  std::string reason;
  std::string algo;
  double pass_ms = 0, ar_only_ms = 0;
  std::vector<double> pass_samples, ar_only_samples;
  size_t differing = 0;  // elements of some rank's final state that differ from rank 0's
  size_t nonfinite = 0;
};

bool isTpar(const std::string& backend) { return backend.rfind("tpar", 0) == 0; }

// tpar promises bitwise-equal results on every rank; NCCL does not (its result is reported).
bool checkPassed(const BackendResult& r) {
  return r.nonfinite == 0 && (!isTpar(r.name) || r.differing == 0);
}

std::string shapeText(int64_t rows, int64_t cols) {
  return "[" + std::to_string(rows) + " x " + std::to_string(cols) + "]";
}

void printShapes(const VerifyConfig& cfg) {
  const ModelShape& s = cfg.shape;
  const auto g = layerGemms(s);
  auto gemmLine = [](const GemmShape& x) {
    std::printf("  %-9s GEMM   %s x %s  (%.3g GFLOP)\n", x.name, shapeText(x.m, x.k).c_str(),
                shapeText(x.k, x.n).c_str(), gemmFlops(x) / 1e9);
  };
  const std::string ar =
      shapeText(s.tokens, s.hidden) + " bf16 = " + std::to_string(allReduceBytes(s)) + " B";
  std::printf("per layer, per rank:\n");
  gemmLine(g[0]);
  std::printf("  all-reduce       %s, then residual add + RMSNorm\n", ar.c_str());
  gemmLine(g[1]);
  std::printf("  SiLU*mul         %s\n", shapeText(s.tokens, s.intermediate / s.tp).c_str());
  gemmLine(g[2]);
  std::printf("  all-reduce       %s, then residual add + RMSNorm\n", ar.c_str());
  std::printf(
      "per pass: %lld all-reduces = %zu B (%.2f MiB) per rank; GEMMs %.3g GFLOP per rank, "
      "%.3g GFLOP all ranks\n",
      static_cast<long long>(allReducesPerPass(s)), allReduceBytesPerPass(s),
      allReduceBytesPerPass(s) / kMiB, passFlopsPerRank(s) / 1e9, passFlops(s) / 1e9);
  std::printf(
      "weights: one layer's shard per rank (%.1f MiB) reused by all %lld layers: "
      "%.2f GiB streamed per rank per pass\n",
      weightBytesPerRank(s) / kMiB, static_cast<long long>(s.layers),
      weightBytesReadPerRankPerPass(s) / (1024.0 * kMiB));
}

// Everything one backend contributes: the full pass and the all-reduces alone, timed, then one
// checked replay.
// `fused`: the pass with the fused call in place of each all-reduce and the norm after it.
std::string measureBackend(ModelPass& pass, Backend& b, const VerifyConfig& cfg,
                           BackendResult* res, bool fused = false) {
  const ModelShape& s = cfg.shape;
  const PassKind full = fused ? PassKind::kFused : PassKind::kFull;
  const PassKind alone = fused ? PassKind::kFusedOnly : PassKind::kAllReduceOnly;
  res->algo = fused ? "fused" : b.chosen(allReduceBytes(s));
  // Eager first: loads kernels and lets the backend make its connections outside a capture.
  if (std::string e = pass.runEager(full, &b); !e.empty()) return "eager pass: " + e;
  if (std::string e = b.asyncError(); !e.empty()) return "eager pass: " + e;
  if (std::string e = pass.capture(full, &b); !e.empty()) return "capture: " + e;
  if (std::string e = pass.capture(alone, &b); !e.empty())
    return "capture (all-reduce only): " + e;
  if (std::string e = pass.time(full, kWarmupReplays, cfg.iters, &res->pass_samples); !e.empty())
    return "timing: " + e;
  if (std::string e = pass.time(alone, kWarmupReplays, cfg.iters, &res->ar_only_samples);
      !e.empty())
    return "timing (all-reduce only): " + e;
  if (std::string e = b.asyncError(); !e.empty()) return "after timing: " + e;
  res->pass_ms = medianOf(res->pass_samples);
  res->ar_only_ms = medianOf(res->ar_only_samples);

  // Correctness of what was timed: one more replay with the all-reduce outputs poisoned.
  if (std::string e = pass.poisonAllReduceOutputs(); !e.empty()) return e;
  if (std::string e = pass.replay(full); !e.empty()) return "checked replay: " + e;
  if (std::string e = b.asyncError(); !e.empty()) return "checked replay: " + e;
  std::vector<uint16_t> x0, n0, x, n;
  if (std::string e = pass.finalState(0, &x0, &n0); !e.empty()) return e;
  res->nonfinite = countNonFiniteBf16(x0) + countNonFiniteBf16(n0);
  for (int r = 1; r < pass.ranks(); ++r) {
    if (std::string e = pass.finalState(r, &x, &n); !e.empty()) return e;
    res->nonfinite += countNonFiniteBf16(x) + countNonFiniteBf16(n);
    const size_t d = countBitwiseDifferences(x0, x) + countBitwiseDifferences(n0, n);
    if (d > res->differing) res->differing = d;
  }
  return "";
}

// The backend's result, and with --fused for a tpar backend its fused pass's as a second row.
std::vector<BackendResult> runBackend(ModelPass& pass, const std::string& name,
                                      const std::vector<int>& devs, bool virtual_ranks,
                                      const VerifyConfig& cfg) {
  BackendResult res;
  res.name = name;
  std::string why;
  std::unique_ptr<Backend> b = makeBackend(name, &why);
  if (!b) {
    res.status = "skipped";  // e.g. no NCCL library on this machine
    res.reason = why;
    return {res};
  }
  why = b->init(devs);
  if (!why.empty()) {
    // NCCL refuses two ranks on one device: on one GPU it cannot run at all.
    res.status = virtual_ranks && !isTpar(name) ? "skipped" : "failed";
    res.reason = why;
    return {res};
  }
  std::vector<BackendResult> out;
  for (bool fused : {false, true}) {
    if (fused && !(cfg.fused && isTpar(name))) break;
    BackendResult r;
    r.name = fused ? name + "+fused" : name;
    why = measureBackend(pass, *b, cfg, &r, fused);
    pass.dropGraphs();  // they refer to this backend's buffers
    r.status = why.empty() ? "ok" : "failed";
    r.reason = why;
    out.push_back(r);
  }
  return out;
}

// --fused: each fused row against its backend's unfused row, and the separate norms it removes.
nlohmann::json fusedJson(const BackendResult& fused, const BackendResult& plain, double norms_ms) {
  const double saved = plain.pass_ms - fused.pass_ms;
  return {{"backend", fused.name},
          {"baseline", plain.name},
          {"pass_ms", fused.pass_ms},
          {"unfused_pass_ms", plain.pass_ms},
          {"pass_shorter_by_ms", saved},
          {"separate_norms_ms", norms_ms},
          {"shorter_by_at_least_the_norms", saved >= norms_ms}};
}

std::string agreementText(const BackendResult& r) {
  if (r.differing == 0) return "bitwise";
  return "DIFFER:" + std::to_string(r.differing);
}

void printTable(const std::vector<BackendResult>& results, double compute_ms,
                const VerifyConfig& cfg) {
  std::printf("\n%-14s %9s %10s %10s %7s %10s %10s %-9s %-12s %9s\n", "backend", "pass_ms",
              "compute_ms", "ar_share", "ar_%", "ar_only", "tokens/s", "algo", "ranks_agree",
              "nonfinite");
  for (const BackendResult& r : results) {
    if (r.status != "ok") {
      std::printf("%-14s %s: %s\n", r.name.c_str(), r.status.c_str(), r.reason.c_str());
      continue;
    }
    const double share = r.pass_ms - compute_ms;
    std::printf("%-14s %9.3f %10.3f %10.3f %6.1f%% %10.3f %10.2f %-9s %-12s %9zu\n", r.name.c_str(),
                r.pass_ms, compute_ms, share, r.pass_ms > 0 ? 100.0 * share / r.pass_ms : 0.0,
                r.ar_only_ms, projectedTokensPerSecond(cfg.accept_len, r.pass_ms, cfg.draft_ms),
                r.algo.empty() ? "-" : r.algo.c_str(), agreementText(r).c_str(), r.nonfinite);
  }
  std::printf("%-14s %9s %10.3f %10s %7s %10s %10.2f   (the pass if the all-reduce were free)\n",
              "(no all-red.)", "-", compute_ms, "0", "0%", "-",
              projectedTokensPerSecond(cfg.accept_len, compute_ms, cfg.draft_ms));
}

nlohmann::json ratioJson(const BackendResult& t, const BackendResult& nccl, double compute_ms,
                         const VerifyConfig& cfg) {
  const double t_share = t.pass_ms - compute_ms, n_share = nccl.pass_ms - compute_ms;
  nlohmann::json j = {{"backend", t.name},
                      {"baseline", nccl.name},
                      {"pass_speedup", nccl.pass_ms / t.pass_ms},
                      {"allreduce_only_speedup", nccl.ar_only_ms / t.ar_only_ms},
                      {"tokens_per_s_ratio",
                       projectedTokensPerSecond(cfg.accept_len, t.pass_ms, cfg.draft_ms) /
                           projectedTokensPerSecond(cfg.accept_len, nccl.pass_ms, cfg.draft_ms)}};
  // A share at or below zero is noise (or overlap); its ratio means nothing.
  j["allreduce_share_ratio"] =
      t_share > 0 && n_share > 0 ? nlohmann::json(n_share / t_share) : nlohmann::json(nullptr);
  return j;
}

void printRatios(const std::vector<nlohmann::json>& ratios) {
  for (const auto& j : ratios) {
    std::printf("%s vs %s: pass %.2fx faster, all-reduces alone %.2fx faster, ",
                j["backend"].get<std::string>().c_str(), j["baseline"].get<std::string>().c_str(),
                j["pass_speedup"].get<double>(), j["allreduce_only_speedup"].get<double>());
    if (j["allreduce_share_ratio"].is_null())
      std::printf("all-reduce share ratio n/a (a share <= 0)");
    else
      std::printf("all-reduce share %.2fx smaller", j["allreduce_share_ratio"].get<double>());
    std::printf(", tokens/s x%.2f\n", j["tokens_per_s_ratio"].get<double>());
  }
}

int runVerify(const VerifyArgs& args, const std::string& command_line) {
  // Virtual ranks spin-wait on each other's kernels: every rank's stream needs its own hardware
  // queue (the default is 8). Only effective before CUDA starts, hence here; a value the user
  // set wins.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  auto fail = [](const std::string& msg, int code = kExitRunError) {
    std::fprintf(stderr, "tpar verify: %s\n", msg.c_str());
    return code;
  };
  std::string why;
  const std::vector<GpuInfo> gpus = listGpus(&why);
  // Options first: a wrong option is wrong on any machine.
  VerifyConfig cfg;
  if (std::string e = resolveVerifyConfig(args, static_cast<int>(gpus.size()), &cfg); !e.empty())
    return fail(e, kExitUsage);
  if (!cfg.json_path.empty()) {
    if (std::string e = checkOutputPath(cfg.json_path); !e.empty())
      return fail("--json: " + e, kExitUsage);
  }
  if (gpus.empty())
    return fail(why + "; the verify pass needs at least one GPU", kExitNoGpu);
  const ModelShape& s = cfg.shape;
  const bool virtual_ranks = static_cast<int64_t>(gpus.size()) < s.tp;
  std::vector<int> devs;
  for (int64_t r = 0; r < s.tp; ++r) devs.push_back(virtual_ranks ? 0 : static_cast<int>(r));

  std::printf(
      "tpar verify: %s%s (%lld layers, hidden %lld, intermediate %lld), %lld tokens, "
      "TP %lld, bf16\n",
      cfg.model.c_str(), cfg.overridden ? " with overridden sizes" : "",
      static_cast<long long>(s.layers), static_cast<long long>(s.hidden),
      static_cast<long long>(s.intermediate), static_cast<long long>(s.tokens),
      static_cast<long long>(s.tp));
  if (virtual_ranks) {
    std::printf(
        "*** VIRTUAL RANKS: %lld ranks share GPU 0 (%s; %zu GPU(s) visible). Their GEMMs "
        "and all-reduces share one GPU's SMs and memory, so compute is shared and these "
        "numbers are not those of a TP=%lld machine: use them to compare backends and "
        "catch regressions. ***\n",
        static_cast<long long>(s.tp), gpus[0].name.c_str(), gpus.size(),
        static_cast<long long>(s.tp));
  } else {
    std::printf("ranks: rank r on GPU r, %lld GPU(s) of %zu (%s)\n", static_cast<long long>(s.tp),
                gpus.size(), gpus[0].name.c_str());
  }
  printShapes(cfg);
  std::printf(
      "timing: median of %d CUDA-graph replays (after %d warm-up) of the whole pass, one "
      "graph per rank, all ranks launched together, from an event before the launches "
      "to the join of every rank's stream\n",
      cfg.iters, kWarmupReplays);
  std::printf(
      "  pass_ms    the whole pass\n"
      "  compute_ms the same pass without the all-reduces (measured once, every row)\n"
      "  ar_share   pass_ms - compute_ms: what the all-reduces add to the pass\n"
      "  ar_only    the %lld all-reduces alone, back to back in one graph\n"
      "  tokens/s   %s, verify_ms = pass_ms (accept_len %.2f, draft_ms %.2f)\n"
      "  ranks_agree  final hidden state of every rank bitwise equal to rank 0's\n",
      static_cast<long long>(allReducesPerPass(s)), kProjectionFormula, cfg.accept_len,
      cfg.draft_ms);
  if (cfg.fused)
    std::printf(
        "  <backend>+fused  the pass with tparAllReduceAddRmsNorm in place of each all-reduce\n"
        "             and the residual add + RMSNorm after it (ar_only: those calls alone; its\n"
        "             norm rounds as the engines' kernels do, so its final state is its own)\n");
  std::fflush(stdout);

  if (std::string e = checkDeviceMemory(s, devs); !e.empty()) return fail(e);
  ModelPass pass;
  if (std::string e = pass.init(s, devs); !e.empty()) return fail("setting up the model: " + e);
  // Compute alone first: cuBLAS picks and loads its kernels before any all-reduce can wait.
  std::vector<double> compute_samples;
  if (std::string e = pass.runEager(PassKind::kComputeOnly, nullptr); !e.empty())
    return fail("compute-only pass: " + e);
  if (std::string e = pass.capture(PassKind::kComputeOnly, nullptr); !e.empty())
    return fail("capturing the compute-only pass: " + e);
  if (std::string e =
          pass.time(PassKind::kComputeOnly, kWarmupReplays, cfg.iters, &compute_samples);
      !e.empty())
    return fail("timing the compute-only pass: " + e);
  pass.dropGraphs();
  const double compute_ms = medianOf(compute_samples);
  // --fused: the separate residual add + RMSNorm kernels alone (what a fused pass removes).
  std::vector<double> norms_samples;
  double norms_ms = 0;
  if (cfg.fused) {
    if (std::string e = pass.capture(PassKind::kNormsOnly, nullptr); !e.empty())
      return fail("capturing the norms-only pass: " + e);
    if (std::string e = pass.time(PassKind::kNormsOnly, kWarmupReplays, cfg.iters, &norms_samples);
        !e.empty())
      return fail("timing the norms-only pass: " + e);
    pass.dropGraphs();
    norms_ms = medianOf(norms_samples);
  }

  std::vector<BackendResult> results;
  for (const std::string& name : cfg.backends) {
    for (BackendResult& r : runBackend(pass, name, devs, virtual_ranks, cfg))
      results.push_back(std::move(r));
  }
  printTable(results, compute_ms, cfg);
  std::vector<nlohmann::json> fused_rows;
  for (const BackendResult& f : results) {
    if (f.status != "ok" || f.algo != "fused") continue;
    const std::string base = f.name.substr(0, f.name.size() - std::string("+fused").size());
    for (const BackendResult& p : results) {
      if (p.name != base || p.status != "ok") continue;
      fused_rows.push_back(fusedJson(f, p, norms_ms));
      std::printf("%s vs %s: pass %.3f -> %.3f ms, %.3f ms shorter; the %lld separate residual "
                  "add + RMSNorm kernels it removes take %.3f ms alone%s\n",
                  f.name.c_str(), p.name.c_str(), p.pass_ms, f.pass_ms, p.pass_ms - f.pass_ms,
                  static_cast<long long>(allReducesPerPass(s)), norms_ms,
                  p.pass_ms - f.pass_ms >= norms_ms ? " (shorter by at least that)" : "");
    }
  }

  std::vector<nlohmann::json> ratios;
  const BackendResult* nccl = nullptr;
  for (const BackendResult& r : results)
    if (r.name == "nccl" && r.status == "ok") nccl = &r;
  for (const BackendResult& r : results)
    if (nccl && isTpar(r.name) && r.status == "ok")
      ratios.push_back(ratioJson(r, *nccl, compute_ms, cfg));
  std::printf("\n");
  printRatios(ratios);

  int exit_code = 0;
  int measured = 0;
  for (const BackendResult& r : results) {
    if (r.status == "failed") exit_code = kExitRunError;
    if (r.status != "ok") continue;
    ++measured;
    const bool ok = checkPassed(r);
    if (!ok && exit_code == 0) exit_code = kExitCheckFailed;
    std::printf(
        "check %s: final hidden state of all %lld ranks %s; %zu non-finite values%s\n",
        r.name.c_str(), static_cast<long long>(s.tp),
        r.differing == 0
            ? "bitwise identical"
            : ("differs from rank 0 in " + std::to_string(r.differing) + " elements").c_str(),
        r.nonfinite,
        ok ? " -> ok" : (r.nonfinite ? " -> FAILED" : " -> FAILED (tpar promises equal bits)"));
  }
  if (measured == 0 && exit_code == 0) {
    std::fprintf(stderr, "tpar verify: no backend could run here\n");
    exit_code = kExitRunError;
  }

  if (!cfg.json_path.empty()) {
    nlohmann::json j = machineReport("tpar verify", command_line);
    j["config"] = {{"model", cfg.model},
                   {"preset_overridden", cfg.overridden},
                   {"layers", s.layers},
                   {"hidden", s.hidden},
                   {"intermediate", s.intermediate},
                   {"tokens", s.tokens},
                   {"tp", s.tp},
                   {"dtype", "bf16"},
                   {"devices", devs},
                   {"virtual_ranks", virtual_ranks},
                   {"accept_len", cfg.accept_len},
                   {"draft_ms", cfg.draft_ms},
                   {"iters", cfg.iters},
                   {"warmup", kWarmupReplays},
                   {"backends", cfg.backends},
                   {"fused", cfg.fused}};
    nlohmann::json gemms = nlohmann::json::array();
    for (const GemmShape& g : layerGemms(s))
      gemms.push_back(
          {{"name", g.name}, {"m", g.m}, {"n", g.n}, {"k", g.k}, {"flops", gemmFlops(g)}});
    j["per_layer_per_rank_gemms"] = gemms;
    j["per_pass"] = {{"allreduces", allReducesPerPass(s)},
                     {"allreduce_bytes_per_call", allReduceBytes(s)},
                     {"allreduce_bytes_per_rank", allReduceBytesPerPass(s)},
                     {"flops_per_rank", passFlopsPerRank(s)},
                     {"flops_all_ranks", passFlops(s)},
                     {"weight_bytes_per_rank", weightBytesPerRank(s)},
                     {"weight_bytes_read_per_rank", weightBytesReadPerRankPerPass(s)}};
    j["formula"] = kProjectionFormula;
    j["compute_only_ms"] = compute_ms;
    j["compute_only_samples_ms"] = compute_samples;
    j["compute_only_tokens_per_s"] =
        projectedTokensPerSecond(cfg.accept_len, compute_ms, cfg.draft_ms);
    j["backends"] = nlohmann::json::array();
    for (const BackendResult& r : results) {
      nlohmann::json b = {{"backend", r.name}, {"status", r.status}, {"reason", r.reason}};
      if (r.status == "ok") {
        b["algo"] = r.algo;
        b["pass_ms"] = r.pass_ms;
        b["compute_only_ms"] = compute_ms;
        b["allreduce_share_ms"] = r.pass_ms - compute_ms;
        b["allreduce_only_ms"] = r.ar_only_ms;
        b["tokens_per_s"] = projectedTokensPerSecond(cfg.accept_len, r.pass_ms, cfg.draft_ms);
        b["ranks_bitwise_equal"] = r.differing == 0;
        b["differing_elements"] = r.differing;
        b["nonfinite"] = r.nonfinite;
        b["check_passed"] = checkPassed(r);
        b["pass_samples_ms"] = r.pass_samples;
        b["allreduce_only_samples_ms"] = r.ar_only_samples;
      }
      j["backends"].push_back(b);
    }
    j["ratios"] = ratios;
    if (cfg.fused) {
      j["separate_norms_only_ms"] = norms_ms;
      j["separate_norms_only_samples_ms"] = norms_samples;
      j["fused"] = fused_rows;
    }
    j["ok"] = exit_code == 0;
    j["exit_code"] = exit_code;
    if (std::string e = writeOutputFile(cfg.json_path, j.dump(2) + "\n"); !e.empty())
      return fail("--json: " + e);
    std::printf("wrote %s\n", cfg.json_path.c_str());
  }
  std::printf("%s\n", exit_code == 0 ? "ok" : "FAILED");
  return exit_code;
}

}  // namespace

Action addVerifyCommand(CLI::App& root, const std::string& command_line) {
  CLI::App* sub = root.add_subcommand(
      "verify",
      "one speculative-decoding verify pass of a tensor-parallel model: what the all-reduce "
      "costs in it, per backend");
  auto args = std::make_shared<VerifyArgs>();
  addVerifyOptions(sub, args.get());
  return [args, command_line] { return runVerify(*args, command_line); };
}

}  // namespace tpar_cli
