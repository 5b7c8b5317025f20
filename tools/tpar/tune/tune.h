// `tpar tune`: measures every algorithm and a few launch shapes per message size on this
// machine, checks every result, and writes the fastest correct plan per size as the tuning
// table the communicator loads at init (docs/TUNING.md).
#ifndef TPAR_TOOLS_TUNE_H_
#define TPAR_TOOLS_TUNE_H_

#include <string>
#include <vector>

#include "api/internal.h"
#include "tpar/tpar.h"

namespace tpar_cli {

struct TuneOptions {
  int ranks = 0;                  // 0: every GPU, or 8 virtual ranks on one GPU
  bool virtual_ranks = false;     // every rank on GPU 0, even with more GPUs (--virtual)
  size_t min_bytes = 1024;
  size_t max_bytes = 64u << 20;
  double factor = 2.0;
  std::vector<size_t> sizes;      // explicit list (--sizes), overrides -b/-e/-f
  int iters = 50;                 // calls per CUDA graph
  int warmup = 5;
  std::vector<tparDataType_t> dtypes = {tparBfloat16};
  bool shapes = true;             // search the launch shapes (0: kernel-default shapes only)
  bool quick = false;             // the smaller search space (quickTuneSpace)
  std::vector<int> blocks;        // --blocks: replaces the space's block counts
  std::vector<int> threads;       // --threads: replaces the space's thread counts
  std::vector<int> steps;         // --steps: replaces the space's pipelined steps
  bool print_all = false;         // print every measurement, not the best few per size
  std::string output;             // "": tuningFilePath of the group
  bool dry_run = false;           // measure and print, write nothing
  bool nccl = true;               // also measure NCCL where it can run (ranks on distinct GPUs)
  // --wire: the formats (tparWire_t) whose smallest winning size is measured after the search,
  // each against the lossless plans the search chose, and written to the table.
  std::vector<int> wires;
  int transport = TPAR_CONFIG_UNDEF_INT;  // tparConfig_t.transport; unset: TPAR_TRANSPORT
  std::string command_line;
  // One process per rank (--procs): this process starts them and merges their measurements.
  bool procs = false;
  // Set in such a child: its rank, the rank count, the group's unique id (hex) and the file
  // for its measurements.
  int worker_rank = -1;
  int worker_world = 0;
  std::string worker_id;
  std::string results_json;
};

// Parses `tpar tune` arguments (argv without program and subcommand). Returns "" or the error.
std::string parseTuneArgs(const std::vector<std::string>& args, TuneOptions* opt);

// The message sizes of a run, ascending and distinct.
std::vector<size_t> tuneSizes(const TuneOptions& opt);

// The shapes `tpar tune` searches (docs/TUNING.md, "Search space"). Every algorithm gets every
// (blocks, threads) pair; the pipelined kernel also every (steps, mode).
struct TuneSpace {
  std::vector<int> blocks;   // active blocks per rank
  std::vector<int> threads;  // threads per block
  std::vector<int> steps;    // pipelined: steps per block
  std::vector<bool> pulls;   // pipelined: push (false) and/or pull (true)
};
// Blocks 1..64, threads 128..1024, steps 1..8, push and pull.
TuneSpace fullTuneSpace();
// --quick: the shapes that won on the measured machines and their neighbours.
TuneSpace quickTuneSpace();

// What the group can launch: a shape beyond it is excluded with the reason.
struct TuneLimits {
  int grid_blocks = 32;  // the communicator's grid (TPAR_MAX_BLOCKS)
  int max_threads = tpar::kernels::kMaxThreads;  // the communicator's threads (TPAR_THREADS)
};

// A plan of the search space that is not measured, and why.
struct ExcludedPlan {
  tpar::Plan plan;
  std::string why;
};

struct TuneCandidates {
  std::vector<tpar::Plan> plans;       // measured, in this order (NCCL last)
  std::vector<ExcludedPlan> excluded;  // left out, each with its reason
  // Every algorithm the group can run, with blocks and threads 0: measured per size as the
  // plan forcing it gives there (commForcedPlan), before `plans`. Empty without `shapes`,
  // where `plans` holds them already.
  std::vector<tpar::Plan> forced;
};

// The plans `tpar tune` measures for a group: every algorithm the context can run over the
// shapes of `space` that fit `limits`, then NCCL when `nccl`. With `shapes` false every
// algorithm runs with the kernel-default shape only (blocks and threads 0). An algorithm the
// group cannot run is excluded once, with blocks and threads 0.
TuneCandidates tuneCandidates(const tpar::TunerContext& ctx, const TuneSpace& space,
                              const TuneLimits& limits, bool shapes, bool nccl);

// Rough seconds a run takes: per candidate and size a fixed cost (check, capture, sync) plus
// the timed calls at a pessimistic per-call time. Printed before the run starts.
double tuneEstimateSeconds(size_t candidates, const std::vector<size_t>& sizes, int iters,
                           int warmup, int nranks);

// One measured plan for one size bucket.
struct TuneCandidate {
  tpar::Plan plan;
  bool is_default = false;  // the built-in choice for this size (measured first)
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

// One size of a wire format's measurement: the lossless path the table gives there (its
// fastest correct plan) and the format, both timed in this run.
struct WirePoint {
  uint64_t bytes = 0;
  double lossless_us = 0;  // 0: no correct lossless plan at this size
  double wire_us = 0;      // 0: not measured (the format does not apply, or it failed)
  long long wrong = -1;    // the format's elements off its reference; -1: not checked
  std::string error;       // why the format was not measured here ("" when it was)
  bool wins(double noise) const {
    return error.empty() && wrong == 0 && wire_us > 0 && lossless_us > 0 &&
           wire_us * (1.0 + noise) < lossless_us;
  }
};

// What `tpar tune --wire` found for one format.
struct WireResult {
  int wire = 0;                  // tparWire_t
  tparDataType_t dtype = tparBfloat16;
  std::vector<WirePoint> points;  // ascending sizes
  int64_t min_bytes = -1;         // wireBreakEven
};

// The smallest measured size from which the format wins (faster than the lossless path by more
// than `noise`, and exact against its reference) at that size and every larger one measured:
// the table's threshold for the format, so that it is never used below a size where it
// measured a gain. tpar::kWireNever when it does not win at the largest size; -1 without
// points.
int64_t wireBreakEven(const std::vector<WirePoint>& points, double noise);

// The lines `tpar tune --wire` prints: per format and size the two times and their ratio, then
// the threshold written.
std::string wireReport(const std::vector<WireResult>& results);

// The fastest usable candidate, or -1. A later candidate must beat the best so far by more
// than `noise` (a fraction) to replace it, so that candidates listed first (simpler plans,
// kernel-default shapes) win ties and the table does not flip between runs on noise.
int pickFastest(const std::vector<TuneCandidate>& candidates, double noise);

// The table for these buckets: one entry per bucket that has a usable candidate, entries of
// `keep` for dtypes that were not measured now are carried over, and so are its wire
// thresholds (`tpar tune --wire` then sets those it measured).
tpar::TuningTable tableFromBuckets(const std::vector<TuneBucket>& buckets,
                                   const tpar::TunerContext& ctx, const tpar::TuningTable* keep,
                                   double noise);

// One line of the gain report: the tuned choice against the built-in default of one size,
// both measured in the same run.
struct TuneGain {
  uint64_t bytes = 0;
  tparDataType_t dtype = tparBfloat16;
  bool tuned_ok = false;    // some candidate was correct
  tpar::Plan tuned;
  double tuned_us = 0;
  bool default_ok = false;  // the default was measured and correct
  tpar::Plan def;
  double default_us = 0;
  double gain() const { return tuned_ok && default_ok ? default_us / tuned_us : 0; }
};
std::vector<TuneGain> tuneGains(const std::vector<TuneBucket>& buckets, double noise);
// The report as printed: one line per size (size, type, tuned plan and time, default plan and
// time, default / tuned), then the sizes the table speeds up.
std::string gainReport(const std::vector<TuneGain>& gains);

// A plan as the tune reports print it: algorithm, blocks, threads, steps, mode.
std::string planText(const tpar::Plan& p);
// "8,16,32": a list as the options take it.
std::string joinInts(const std::vector<int>& v);

int runTune(const TuneOptions& opt);

// --procs (tune_procs.cc). The arguments of a rank's child: the parent's search, sizes and
// settings, without the parent's output options (the parent writes the table).
std::vector<std::string> childTuneArgs(const TuneOptions& opt);
// A rank's measurements as its child writes them, and back.
std::string bucketsToJson(const std::vector<TuneBucket>& buckets, const tpar::TunerContext& ctx);
std::string bucketsFromJson(const std::string& text, std::vector<TuneBucket>* buckets,
                            tpar::TunerContext* ctx);
// Merges the ranks' measurements of the same candidates: a candidate's time is the slowest
// rank's, its wrong elements the sum over ranks (-1 when a rank did not check), its error the
// first rank's. "" or why they do not describe the same search.
std::string mergeRankBuckets(const std::vector<std::vector<TuneBucket>>& per_rank,
                             std::vector<TuneBucket>* out);
// Runs the children of `n` ranks (on GPUs 0..n-1, or all on GPU 0 with `virt`), then reports
// and writes the table as the one-process run does.
int runTuneProcs(const TuneOptions& opt, int n, bool virt, const std::string& gpu_name);

// Shared by both ways of running (tune.cu): one size's measurements as printed, and the gain
// report, the table and the exit status once every size is measured.
void printTuneBucket(const TuneBucket& b, bool all);
int finishTune(const std::vector<TuneBucket>& buckets, const tpar::TunerContext& ctx,
               const TuneOptions& opt, const std::string& gpu_label, double elapsed_s,
               const std::vector<WireResult>& wires = {});

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_TUNE_H_
