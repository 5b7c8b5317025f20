// `tpar bench` across processes: NCCL variants that need their own environment run in a child
// `tpar bench`, and --procs runs one process per rank. Children write their rows as JSON.
#ifndef TPAR_TOOLS_BENCH_PROCS_H_
#define TPAR_TOOLS_BENCH_PROCS_H_

#include <functional>
#include <string>
#include <vector>

#include "tools/tpar/bench/bench.h"
#include "tools/tpar/common/backend.h"
#include "tools/tpar/common/measure.h"

namespace tpar_cli {

// Measures one row (bench.cu): times out of place then in place, then checks -c calls of each
// on fresh inputs.
std::string measureBenchRow(Backend& b, Ranks& rk, size_t bytes, tparDataType_t dtype,
                            tparRedOp_t op, const BenchOptions& opt, BenchRow* row);

// This process is rank opt.worker_rank of a --procs run: measures its rank, writes its rows.
int runBenchWorker(const BenchOptions& opt, int ngpus);

// Runs NCCL variant `variant` over `nranks` GPUs in a child with its environment; appends its
// rows. "" or why it could not.
std::string runBenchVariant(const std::string& variant, const BenchOptions& opt, int nranks,
                            std::vector<BenchRow>* rows);

// One process per rank: every backend in its own set of `n` child processes (NCCL variants
// with their environment). A row's time reduces the ranks' times as -a asks. `annotate`
// completes each merged row before `print`.
std::string runBenchProcs(const BenchOptions& opt, int n, int ngpus,
                          const std::vector<std::string>& backends,
                          const std::function<void(BenchRow*)>& annotate,
                          const std::function<void(const BenchRow&)>& print,
                          std::vector<BenchRow>* rows, std::vector<std::string>* skipped);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_BENCH_PROCS_H_
