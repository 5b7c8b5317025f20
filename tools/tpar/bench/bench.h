// `tpar bench`: an nccl-tests all_reduce_perf that measures every backend side by side in one
// run, checking every result. It takes all_reduce_perf's flags with their meaning (docs/CLI.md
// lists them and the few differences) and prints its table: the columns of nccl-tests first,
// in its order and widths, then tpar's own (backend, algo, floor) after them.
#ifndef TPAR_TOOLS_BENCH_H_
#define TPAR_TOOLS_BENCH_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "tools/tpar/common/report.h"
#include "tpar/tpar.h"

namespace tpar_cli {

struct BenchOptions {
  // nccl-tests' flags. Ranks: -t threads x -g GPUs per thread (one thread drives every rank
  // here either way; --procs runs one process per rank).
  int nthreads = 1;               // -t
  int ngpus = 0;                  // -g (0: not given)
  size_t min_bytes = 1024;        // -b
  size_t max_bytes = 64u << 20;   // -e
  size_t step_bytes = 1u << 20;   // -i: additive step, used when the factor is 1
  double factor = 2.0;            // -f: multiplicative step when > 1
  int iters = 100;                // -n
  int warmup = 10;                // -w
  int agg_iters = 1;              // -m: calls per timed iteration
  int run_cycles = 1;             // -N: repeat the whole sweep (0: until interrupted)
  int parallel_init = 0;          // -p: accepted; one call initializes every rank here
  int check_iters = 1;            // -c: checked calls per size on fresh inputs (0: none)
  std::vector<tparRedOp_t> ops = {tparSum};               // -o (a list, or all)
  std::vector<tparDataType_t> dtypes = {tparBfloat16};    // -d (a list, or all)
  int blocking = 0;               // -z: 1/2 wait after every call, 3 after every iteration
  int stream_null = 0;            // -y: only 0 (every rank has its own stream)
  int timeout_s = 0;              // -T: bound on every wait of tpar's communicators (0: env)
  int graph_launches = 1;         // -G: replays of the captured iterations (0: eager)
  bool graph_given = false;       // -G was on the command line: it applies to every size
  size_t graph_max_bytes = 4u << 20;  // without -G (or --graph-max-bytes): eager above this
  // -G 0 given (without -z): every row is timed eagerly and, up to graph_max_bytes, from graph
  // replays of the same calls too, printed side by side.
  bool eager_and_graph = false;
  int report_cputime = 0;         // -C: report the host time to issue a call
  int report_timestamps = 0;      // -S: a timestamp after each row's nccl-tests columns
  int average = 3;                // -a: rank time reported: 0 rank 0, 1 mean, 2 min, 3 max
  int local_register = 0;         // -R: register buffers with NCCL (tpar needs none)
  int memory_report = 0;          // -M: memory each backend took at init
  int unalign = 0;                // -u: buffers start this many elements past an alignment
  std::string json_path;          // -J / --json
  // tpar's own options (long only).
  std::vector<int> ranks;         // --ranks: empty: -t x -g, else every GPU, or 8 virtual
  std::vector<size_t> sizes;      // --sizes: explicit list, overrides -b/-e/-f/-i
  std::vector<std::string> backends;  // --backends; empty: the defaults for the machine
  // tparConfig_t::transport of the tpar backends (--transport auto|host|p2p: 0, 1, 2);
  // TPAR_CONFIG_UNDEF_INT: TPAR_TRANSPORT decides.
  int transport = TPAR_CONFIG_UNDEF_INT;
  // --wire: tparConfig_t::wire values; each tpar backend runs once per format, named with it
  // ("tpar+fp8"); empty: TPAR_WIRE decides and the names carry none.
  std::vector<int> wires;
  bool procs = false;             // one process per rank instead of one thread for all
  // --host-cost: instead of the table, the host time to enqueue one call with every rank's
  // stream held (no launch queue fills), against a bare launch of tpar's parameter size.
  bool host_cost = false;
  int host_cost_batch = 200;      // --host-cost-batch: calls timed per hold
  int host_cost_batches = 50;     // --host-cost-batches: holds per size
  // --fused: instead of the table, the fused all-reduce + residual add + RMSNorm against
  // tpar's all-reduce, that all-reduce then a separate norm kernel, and NCCL then that kernel,
  // for every --hidden x --tokens (bench_fused.cu).
  bool fused = false;
  std::vector<size_t> fused_hidden = {4096, 7168, 8192};  // --hidden
  std::vector<size_t> fused_tokens = {1, 8, 64};          // --tokens
  std::string rows_path;          // internal: a child writes its rows here
  int worker_rank = -1;           // internal: this process is rank worker_rank of worker_world
  int worker_world = 0;
  std::string worker_id;          // internal: hex unique id of the backend's communicator
  std::string command_line;
};

// NCCL variants that need their own process environment.
const std::map<std::string, std::vector<std::string>>& ncclVariants();

// The backends a run without --backends measures with `ngpus` GPUs.
std::vector<std::string> defaultBackends(int ngpus);

// The sizes a run covers: --sizes, or min..max by factor (factor > 1) or by step_bytes.
std::vector<size_t> benchSizes(const BenchOptions& opt);

// The backends as --wire asks: every tpar backend once per format of `wires`, named with it
// ("tpar" with fp8: "tpar+fp8"), in that order; NCCL's unchanged. `wires` empty: `backends`.
std::vector<std::string> withWires(const std::vector<std::string>& backends,
                                   const std::vector<int>& wires);

// The rank counts a run covers on a machine with `gpus` GPUs.
std::vector<int> benchRankCounts(const BenchOptions& opt, int gpus);

// Whether a message of `bytes` is timed from CUDA-graph replays.
bool usesGraph(const BenchOptions& opt, size_t bytes);

// Registers `tpar bench`'s options on `app` (nccl-tests' flags and tpar's long options),
// parsed into `opt`; the returned function, called once parsing is over, checks what they
// mean together and returns "" or the error text.
std::function<std::string()> addBenchOptions(CLI::App* app, BenchOptions* opt);

// `tpar bench --fused` (bench_fused.cu): the process's exit code.
int runFusedBench(const BenchOptions& opt);

// Parses `tpar bench` arguments (argv without the program and subcommand names) into `opt`.
// Returns "" or the error text. Used by the unit tests.
std::string parseBenchArgs(const std::vector<std::string>& args, BenchOptions* opt);

// The arguments that make a child `tpar bench` measure what `opt` asks, for one backend
// (without the child's own --rows-json / --worker-* arguments).
std::vector<std::string> childBenchArgs(const BenchOptions& opt, const std::string& backend);

// nccl-tests' names: "half", "float", "bfloat16"; "sum", "max", "min".
const char* ncclTestsTypeName(tparDataType_t dtype);
const char* ncclTestsOpName(tparRedOp_t op);

// One measured (backend, ranks, datatype, op, size) row.
struct BenchRow {
  std::string backend;
  int ranks = 0;
  bool virtual_ranks = false;
  tparDataType_t dtype = tparBfloat16;
  tparRedOp_t op = tparSum;
  size_t bytes = 0;
  size_t count = 0;
  std::string chosen;
  // The backend's forced algorithm could not run on this group: what ran instead and why,
  // "twoshot (one island)" (Backend::fallback); "" when it ran.
  std::string fallback;
  bool graph = true;
  double us_out = 0, us_in = 0;    // the time -a reports (host time with -C)
  // -G 0 (eager_and_graph): the same calls from graph replays; < 0 where not measured (above
  // --graph-max-bytes). us_out/us_in are then the eager times.
  double graph_us_out = -1, graph_us_in = -1;
  std::vector<double> rank_us_out, rank_us_in;  // each rank's, when measured per rank
  long long wrong_out = -1, wrong_in = -1;  // -1: not checked
  std::string transport;  // where the receive regions were (tparTransportName); "" unknown
  std::string timestamp;  // -S
  bool has_floor = false;  // floor is set: host transport, modelled algorithm, link measured
  HostLinkFloor floor;
  // The physical floor: the lowest floor over every algorithm that could carry this message
  // (lowestHostFloor), and which one it is. Set with `floor`.
  bool has_phys = false;
  HostLinkFloor phys;
  std::string phys_algo;
};

// Reduces per-rank times as -a asks: 0 rank 0, 1 mean, 2 min, 3 max (0 for an empty list).
double averageRankTimes(const std::vector<double>& us, int average);

// The host link as this run measured it, over the GPUs of one rank set: the slowest of them.
struct HostLinkSummary {
  bool measured = false;
  double write_gbps = 0, read_gbps = 0;
  double both_gbps = 0;  // both directions at once (LinkMeasure::both_gbps); 0: not measured
  double rtt_us = 0;  // one-way flag hand-off through host memory (LinkMeasure::latency_us)
};

// Sets row->floor (hostLinkFloor of the algorithm the row ran) and row->phys (lowestHostFloor)
// when it ran on the host transport and `link` was measured; `ranks_per_link`: the most ranks
// on one GPU.
bool setHostFloor(BenchRow* row, const HostLinkSummary& link, int ranks_per_link);

// The lowest hostLinkFloor over every algorithm of the registry that could run `bytes` over
// `nranks` ranks here: those that need islands (a topology the floor does not know) and those
// below their minimum rank count are left out. One piece each: splitting only adds rounds, so
// this bounds every split from below. False when none has a model.
bool lowestHostFloor(size_t bytes, int nranks, int ranks_per_link, const HostLinkSummary& link,
                     HostLinkFloor* out, std::string* algo);

nlohmann::json rowToJson(const BenchRow& row);
BenchRow rowFromJson(const nlohmann::json& j);

// The table (bench_table.cc). Header lines start with '#'; a row has the 13 columns of
// nccl-tests (size count type redop root, then time algbw busbw #wrong out of place and in
// place), then -S's timestamp, then tpar's: backend, algo and, with `floors`, the host-link
// floor and the time over it.
struct TableStyle {
  bool cputime = false;     // -C: the time columns are named "cputime"
  bool timestamps = false;  // -S
  bool floors = false;      // floor, phys and x floor after algo
  bool eager_and_graph = false;  // graph and e-g (out of place) after algo
};
std::string tableHeader(const TableStyle& style);
std::string tableRow(const BenchRow& row, const TableStyle& style);
// nccl-tests' closing lines: "# Out of bounds values : N OK|FAILED" and, per backend and rank
// count, "# Avg bus bandwidth    : X" (the number first, then which backend).
std::string tableFooter(const std::vector<BenchRow>& rows);
// Comment lines after the table: each backend's speed-up over NCCL where NCCL ran at the same
// ranks and size, and each row's time over its host-link floor.
std::string tableComparisons(const std::vector<BenchRow>& rows);
// The run's last lines: every forced algorithm that fell back (per backend and rank count),
// then "# ok: 0 wrong elements ..." only when rows were checked, "# FAILED: N wrong elements"
// when some were wrong, and the number of rows not checked (-c 0) whenever there are any.
std::string closingLines(const std::vector<BenchRow>& rows);
// The note printed before a backend's rows when its forced algorithm cannot run here.
std::string fallbackNote(const std::string& backend, int ranks, const std::string& fallback);

// The host cost of one call (--host-cost) for one backend, rank count and size: per rank and
// call, over `batches` holds of `batch` calls each (bench_host_cost.cu).
struct HostCostRow {
  std::string backend;
  int ranks = 0;
  size_t bytes = 0;
  std::string chosen;
  int batch = 0, batches = 0;
  double median_us = 0, min_us = 0;            // the backend's call
  double bare_median_us = 0, bare_min_us = 0;  // a bare launch of the same parameter size
  bool overlap = false;  // the bare launches carried programmatic stream serialization
  long long wrong = -1;  // elements wrong over every batch's checked outputs (-1: not checked)
  double overheadUs() const { return median_us - bare_median_us; }
};
std::string hostCostHeader();
std::string hostCostLine(const HostCostRow& row);
nlohmann::json hostCostToJson(const HostCostRow& row);

// Runs the benchmark, prints the tables; returns the exit code (common/exit_codes.h).
int runBench(const BenchOptions& opt);
// --host-cost instead of the table (bench_host_cost.cu); the exit code.
int runHostCost(const BenchOptions& opt, const std::vector<GpuInfo>& gpus);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_BENCH_H_
