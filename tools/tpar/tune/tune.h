// `tpar tune`: measures every algorithm and a few launch shapes per message size on this
// machine, checks every result, and writes the fastest correct plan per size as the tuning
// table the communicator loads at init (docs/TUNING.md).
#ifndef TPAR_TOOLS_TUNE_H_
#define TPAR_TOOLS_TUNE_H_

#include <string>
#include <vector>

#include "tpar/tpar.h"
#include "tuner/tuner.h"

namespace tpar_cli {

struct TuneOptions {
  int ranks = 0;                  // 0: every GPU, or 8 virtual ranks on one GPU
  size_t min_bytes = 1024;
  size_t max_bytes = 64u << 20;
  double factor = 2.0;
  std::vector<size_t> sizes;      // explicit list (--sizes), overrides -b/-e/-f
  int iters = 50;                 // calls per CUDA graph
  int warmup = 5;
  std::vector<tparDataType_t> dtypes = {tparBfloat16};
  bool shapes = true;             // also try half of the communicator's blocks
  std::string output;             // "": tuningFilePath of the group
  bool dry_run = false;           // measure and print, write nothing
  bool nccl = true;               // also measure NCCL where it can run (ranks on distinct GPUs)
  int transport = TPAR_CONFIG_UNDEF_INT;  // tparConfig_t.transport; unset: TPAR_TRANSPORT
  std::string command_line;
};

// Parses `tpar tune` arguments (argv without program and subcommand). Returns "" or the error.
std::string parseTuneArgs(const std::vector<std::string>& args, TuneOptions* opt);

// The message sizes of a run, ascending and distinct.
std::vector<size_t> tuneSizes(const TuneOptions& opt);

// The plans `tpar tune` measures for a group: every algorithm the context can run, each with
// the kernel-default shape and (with `shapes`) half of `blocks` active, then NCCL when `nccl`.
// With receive regions in host memory (ctx.host_transport), the pipelined two-shot is measured
// over a grid of blocks and steps instead (with `shapes`), since those decide its time there.
std::vector<tpar::Plan> tuneCandidates(const tpar::TunerContext& ctx, int blocks, bool shapes,
                                       bool nccl);

// One measured plan for one size bucket.
struct TuneCandidate {
  tpar::Plan plan;
  double us = 0;          // per call, from a CUDA-graph replay
  long long wrong = -1;   // elements that differ from the exact sum; -1: not checked
  std::string error;      // why it could not be measured ("" when it was)
  bool usable() const { return error.empty() && wrong == 0 && us > 0; }
};

struct TuneBucket {
  uint64_t bytes = 0;
  tparDataType_t dtype = tparBfloat16;
  std::vector<TuneCandidate> candidates;
};

// The fastest usable candidate, or -1. A later candidate must beat the best so far by more
// than `noise` (a fraction) to replace it, so that candidates listed first (simpler plans,
// kernel-default shapes) win ties and the table does not flip between runs on noise.
int pickFastest(const std::vector<TuneCandidate>& candidates, double noise);

// The table for these buckets: one entry per bucket that has a usable candidate, entries of
// `keep` for dtypes that were not measured now are carried over.
tpar::TuningTable tableFromBuckets(const std::vector<TuneBucket>& buckets,
                                   const tpar::TunerContext& ctx, const tpar::TuningTable* keep,
                                   double noise);

int runTune(const TuneOptions& opt);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_TUNE_H_
