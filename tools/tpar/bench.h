// `tpar bench`: latency of every algorithm over a size range, CUDA-graph timed, with the
// correctness of every measured configuration checked in the same run.
#ifndef TPAR_TOOLS_BENCH_H_
#define TPAR_TOOLS_BENCH_H_

#include <string>
#include <vector>

#include "tpar/tpar.h"

namespace tpar_cli {

struct BenchOptions {
  int ranks = 0;                  // 0: number of GPUs, or 8 virtual ranks on one GPU
  std::vector<int> rank_list;     // several rank counts in one run (--ranks 2,4,8)
  size_t min_bytes = 12 << 10;
  size_t max_bytes = 4 << 20;
  double factor = 2.0;
  std::vector<size_t> sizes;      // explicit list (--sizes), overrides -b/-e/-f
  int iters = 200;
  int warmup = 20;
  bool graph = true;
  tparDataType_t dtype = tparBfloat16;
  std::vector<tparAlgo_t> algos = {tparAlgoAuto, tparAlgoOneShot, tparAlgoTwoShot};
  std::string json_path;
  std::string command_line;
};

// Runs the benchmark and prints the table; returns the process exit code.
int runBench(const BenchOptions& opt);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_BENCH_H_
