// `tpar bench`: nccl-tests-style all-reduce benchmark, every backend side by side in one run,
// correctness checked in the benchmark itself.
#ifndef TPAR_TOOLS_BENCH_H_
#define TPAR_TOOLS_BENCH_H_

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/tpar/common/report.h"
#include "tpar/tpar.h"

namespace tpar_cli {

struct BenchOptions {
  std::vector<int> ranks;         // empty: every GPU, or 8 virtual ranks on one GPU
  size_t min_bytes = 1024;
  size_t max_bytes = 64u << 20;
  double factor = 2.0;
  std::vector<size_t> sizes;      // explicit list (--sizes), overrides -b/-e/-f
  int iters = 100;
  int warmup = 10;
  bool graph = true;              // CUDA-graph timing for sizes <= graph_max_bytes
  size_t graph_max_bytes = 4u << 20;
  bool check = true;
  tparDataType_t dtype = tparBfloat16;
  std::vector<std::string> backends;  // empty: the defaults for the machine
  // tparConfig_t::transport of the tpar backends (--transport auto|host|p2p: 0, 1, 2);
  // TPAR_CONFIG_UNDEF_INT: TPAR_TRANSPORT decides.
  int transport = TPAR_CONFIG_UNDEF_INT;
  std::string json_path;
  std::string rows_path;          // internal: a child writes its rows here (NCCL variants)
  bool procs = false;             // one process per rank instead of one thread for all
  int worker_rank = -1;           // internal: this process is rank worker_rank of worker_world
  int worker_world = 0;
  std::string worker_id;          // internal: hex unique id of the backend's communicator
  std::string command_line;
};

// NCCL variants that need their own process environment.
const std::map<std::string, std::vector<std::string>>& ncclVariants();

// The backends a run without --backends measures with `ngpus` GPUs.
std::vector<std::string> defaultBackends(int ngpus);

// The sizes a run covers: --sizes, or min..max by factor (min and max included).
std::vector<size_t> benchSizes(const BenchOptions& opt);

// Parses `tpar bench` arguments (argv without the program and subcommand names) into `opt`.
// Returns "" or the error text. Used by the CLI and by the unit tests.
std::string parseBenchArgs(const std::vector<std::string>& args, BenchOptions* opt);

// One measured (backend, ranks, size) row.
struct BenchRow {
  std::string backend;
  int ranks = 0;
  bool virtual_ranks = false;
  size_t bytes = 0;
  size_t count = 0;
  std::string chosen;
  bool graph = true;
  double us_out = 0, us_in = 0;
  long long wrong_out = -1, wrong_in = -1;  // -1: not checked
  std::string transport;  // where the receive regions were (tparTransportName); "" unknown
  bool has_floor = false;  // floor is set: host transport, modelled algorithm, link measured
  HostLinkFloor floor;
};

// The host link as this run measured it, over the GPUs of one rank set: the slowest of them.
struct HostLinkSummary {
  bool measured = false;
  double write_gbps = 0, read_gbps = 0;
  double rtt_us = 0;  // one-way flag hand-off through host memory (LinkMeasure::latency_us)
};

// Sets row->floor (hostLinkFloor of the algorithm the row ran) when it ran on the host
// transport and `link` was measured; `ranks_per_link`: the most ranks on one GPU.
bool setHostFloor(BenchRow* row, const HostLinkSummary& link, int ranks_per_link);

nlohmann::json rowToJson(const BenchRow& row);

// Runs the benchmark, prints the tables; returns the exit code (1 when any element was wrong).
int runBench(const BenchOptions& opt);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_BENCH_H_
