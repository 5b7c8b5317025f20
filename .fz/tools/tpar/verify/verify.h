// `tpar verify`: one speculative-decoding verify forward pass of a tensor-parallel transformer,
// timed with each all-reduce backend, to show what the all-reduce costs in the pass that a
// serving engine actually runs. This header holds the options and the arithmetic (shapes,
// FLOPs, bytes, the tokens/s projection) as pure functions so that they are unit-tested
// without a GPU; model_pass.h runs the pass.
#ifndef TPAR_TOOLS_VERIFY_H_
#define TPAR_TOOLS_VERIFY_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tpar_cli {

struct ModelPreset {
  const char* name;
  int64_t layers;
  int64_t hidden;
  int64_t intermediate;
};

// kimi-k2, llama-70b, qwen-32b. kimi-k2 is a mixture of experts; its preset gives every layer
// the dense MLP width (18432). The count and size of the all-reduces, which this command is
// about, do not depend on the MLP width.
const std::vector<ModelPreset>& modelPresets();
// nullptr for an unknown name.
const ModelPreset* findModelPreset(const std::string& name);

constexpr const char* kDefaultModel = "kimi-k2";
// 4 sequences x (3 draft tokens + 1): the middle of the 2..64 tokens a verify pass carries.
constexpr int64_t kDefaultTokens = 16;
// With one GPU, the TP degree of the machines this library is for.
constexpr int kDefaultVirtualRanks = 8;
constexpr int kMaxTp = 16;  // TPAR_MAX_RANKS
constexpr double kDefaultAcceptLen = 3.0;
constexpr int kDefaultIters = 20;

// The options as typed. An unset optional takes the preset's value (or the default).
struct VerifyArgs {
  std::string model = kDefaultModel;
  std::optional<int64_t> layers, hidden, intermediate, tokens, tp;
  std::string backends = "tpar,nccl";
  double accept_len = kDefaultAcceptLen;
  double draft_ms = 0.0;
  int64_t iters = kDefaultIters;
  std::string json_path;
  std::string dtype = "bf16";
  bool fused = false;
};

// The transformer the pass models, split over `tp` ranks.
struct ModelShape {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t tokens = 0;  // batch x (draft + 1)
  int64_t tp = 0;
};

struct VerifyConfig {
  std::string model;        // the preset the unset sizes came from
  bool overridden = false;  // some size differs from the preset's
  ModelShape shape;
  std::vector<std::string> backends;
  double accept_len = kDefaultAcceptLen;
  double draft_ms = 0.0;
  int iters = kDefaultIters;
  std::string json_path;
  // --fused: every tpar backend also runs the pass with the fused all-reduce + residual add +
  // RMSNorm in place of each all-reduce and the norm after it ("<backend>+fused").
  bool fused = false;
};

// Registers the options of `tpar verify` on `sub`, writing into `args`.
void addVerifyOptions(CLI::App* sub, VerifyArgs* args);

// Applies the preset, then the explicit options; checks everything. `gpu_count` picks the
// default --tp (every GPU when there are two or more, else kDefaultVirtualRanks).
// Returns "" or what is wrong, naming the option.
std::string resolveVerifyConfig(const VerifyArgs& args, int gpu_count, VerifyConfig* cfg);

// Parses the arguments after `verify` and resolves them (for tests and scripts).
std::string parseVerifyArgs(const std::vector<std::string>& args, int gpu_count, VerifyConfig* cfg);

// Row-major C[m x n] = A[m x k] * B[k x n].
struct GemmShape {
  const char* name;
  int64_t m, n, k;
};

// The GEMMs of one layer on one rank, in issue order: attention output (row-parallel, input
// sharded), gate+up (column-parallel), down (row-parallel).
std::vector<GemmShape> layerGemms(const ModelShape& s);

double gemmFlops(const GemmShape& g);
// Multiply-adds count 2; all layers. Per rank, and all ranks together.
double passFlopsPerRank(const ModelShape& s);
double passFlops(const ModelShape& s);

// Elements of one bf16 all-reduce: the [tokens x hidden] activation.
size_t allReduceCount(const ModelShape& s);
size_t allReduceBytes(const ModelShape& s);
int64_t allReducesPerPass(const ModelShape& s);  // 2 per layer
// What each rank all-reduces in one pass: 2 * layers * tokens * hidden * 2 B.
size_t allReduceBytesPerPass(const ModelShape& s);

// One layer's weight shard on one rank (the single set every layer reuses), in bytes.
size_t weightBytesPerRank(const ModelShape& s);
// Weight bytes one rank streams from memory in a pass (layers x the shard).
size_t weightBytesReadPerRankPerPass(const ModelShape& s);
// Activation buffers of one rank.
size_t activationBytesPerRank(const ModelShape& s);
// cuBLAS workspace per rank (set explicitly so that capture never allocates).
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// What the communicators of one rank may take (tpar: 4 x 8 MiB receive workspace; NCCL's
// buffers are of the same order).
constexpr size_t kCommReserveBytesPerRank = size_t{96} << 20;
// Context, cuBLAS kernels and allocator slack per device.
constexpr size_t kDeviceReserveBytes = size_t{512} << 20;
// Everything one rank needs on its device.
size_t rankMemoryBytes(const ModelShape& s);
// Everything a device holding `ranks_on_device` ranks needs.
size_t deviceMemoryBytes(const ModelShape& s, int ranks_on_device);

// Projected decode speed of one sequence: each verify step yields `accept_len` tokens on
// average and costs one verify pass plus the drafting.
//   tokens/s = accept_len / (verify_ms + draft_ms) * 1000
double projectedTokensPerSecond(double accept_len, double verify_ms, double draft_ms);
constexpr const char* kProjectionFormula =
    "tokens/s per sequence = accept_len / (verify_ms + draft_ms) * 1000";

// bf16 bit patterns that are NaN or infinite.
size_t countNonFiniteBf16(const std::vector<uint16_t>& bits);
// Positions where two equally long bf16 arrays differ bitwise (size mismatch: the longer size).
size_t countBitwiseDifferences(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b);

// Median of the samples (mean of the two middle ones for an even count); 0 when empty.
double medianOf(std::vector<double> samples);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_VERIFY_H_
