// The options and the arithmetic of `tpar verify` (no GPU code: unit-tested in CI).
#include "tools/tpar/verify/verify.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>

namespace tpar_cli {
namespace {

// Generous bounds that keep every GEMM dimension and element count inside the `int` that
// cuBLAS and the kernels' grids take.
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHidden = 65536;
constexpr int64_t kMaxIntermediate = 262144;
constexpr int64_t kMaxTokens = 16384;
constexpr int64_t kMaxIters = 100000;

const char* const kBackendNames[] = {"tpar", "tpar:oneshot", "tpar:twoshot", "tpar:staged", "tpar:hier", "nccl"};

std::string presetNames() {
  std::string s;
  for (const ModelPreset& p : modelPresets()) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

std::string checkRange(const char* option, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return "";
  return std::string(option) + " " + std::to_string(v) + " is outside " + std::to_string(lo) +
         ".." + std::to_string(hi);
}

std::string parseBackendList(const std::string& text, std::vector<std::string>* out) {
  out->clear();
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) return "--backends: empty entry in '" + text + "'";
    if (std::find(std::begin(kBackendNames), std::end(kBackendNames), item) ==
        std::end(kBackendNames))
      return "--backends: unknown backend '" + item + "' (tpar, tpar:oneshot, tpar:twoshot, tpar:staged, tpar:hier, nccl)";
    if (std::find(out->begin(), out->end(), item) != out->end())
      return "--backends: '" + item + "' is listed twice";
    out->push_back(item);
  }
  if (out->empty()) return "--backends: no backend given";
  return "";
}

}  // namespace

const std::vector<ModelPreset>& modelPresets() {
  static const std::vector<ModelPreset> kPresets = {
      {"kimi-k2", 61, 7168, 18432},
      {"llama-70b", 80, 8192, 28672},
      {"qwen-32b", 64, 5120, 27648},
  };
  return kPresets;
}

const ModelPreset* findModelPreset(const std::string& name) {
  for (const ModelPreset& p : modelPresets())
    if (name == p.name) return &p;
  return nullptr;
}

void addVerifyOptions(CLI::App* sub, VerifyArgs* args) {
  sub->add_option("--model", args->model,
                  "size preset: " + presetNames() + " (default " + kDefaultModel +
                      "); --layers/--hidden/--intermediate override it");
  auto sizeOption = [sub](const char* name, std::optional<int64_t>* target, const char* help) {
    sub->add_option_function<int64_t>(
        name, [target](const int64_t& v) { *target = v; }, help);
  };
  sizeOption("--layers", &args->layers, "transformer layers");
  sizeOption("--hidden", &args->hidden, "hidden size");
  sizeOption("--intermediate", &args->intermediate, "MLP intermediate size (whole model)");
  sizeOption("--tokens", &args->tokens,
             "tokens in the verify pass: batch x (draft + 1) (default 16)");
  sizeOption("--ranks,--tp", &args->tp,
             "tensor-parallel ranks (default: every GPU; with one GPU, 8 virtual ranks)");
  sub->add_option("--backends", args->backends,
                  "comma-separated: tpar, tpar:oneshot, tpar:twoshot, tpar:staged, tpar:hier, nccl "
                  "(default tpar,nccl)");
  sub->add_option("--accept-len", args->accept_len,
                  "tokens accepted per verify step, for the tokens/s projection (default 3.0)");
  sub->add_option("--draft-ms", args->draft_ms,
                  "drafting time per step in ms, for the tokens/s projection (default 0)");
  sub->add_option("-n,--iters", args->iters, "timed replays of each graph (default 20)");
  sub->add_option("-J,--json", args->json_path, "write the results as JSON to this file");
  sub->add_option("-d,--datatype,--dtype", args->dtype,
                  "activation and weight type (only bfloat16; default bf16)");
  sub->add_flag("--fused", args->fused,
                "every tpar backend also runs the pass with the fused all-reduce + residual add "
                "+ RMSNorm (tparAllReduceAddRmsNorm) in place of each all-reduce and the norm "
                "after it, as the row '<backend>+fused'");
}

std::string resolveVerifyConfig(const VerifyArgs& args, int gpu_count, VerifyConfig* cfg) {
  const ModelPreset* preset = findModelPreset(args.model);
  if (preset == nullptr)
    return "--model: unknown model '" + args.model + "' (" + presetNames() + ")";
  VerifyConfig c;
  c.model = preset->name;
  ModelShape& s = c.shape;
  s.layers = args.layers.value_or(preset->layers);
  s.hidden = args.hidden.value_or(preset->hidden);
  s.intermediate = args.intermediate.value_or(preset->intermediate);
  c.overridden = s.layers != preset->layers || s.hidden != preset->hidden ||
                 s.intermediate != preset->intermediate;
  s.tokens = args.tokens.value_or(kDefaultTokens);
  const bool tp_given = args.tp.has_value();
  s.tp =
      tp_given ? *args.tp : (gpu_count >= 2 ? std::min(gpu_count, kMaxTp) : kDefaultVirtualRanks);

  for (const std::string& e :
       {checkRange("--layers", s.layers, 1, kMaxLayers),
        checkRange("--hidden", s.hidden, 1, kMaxHidden),
        checkRange("--intermediate", s.intermediate, 1, kMaxIntermediate),
        checkRange("--tokens", s.tokens, 1, kMaxTokens), checkRange("--ranks", s.tp, 1, kMaxTp),
        checkRange("--iters", args.iters, 1, kMaxIters)}) {
    if (!e.empty()) return e;
  }
  const std::string tp_text =
      "--ranks " + std::to_string(s.tp) + (tp_given ? "" : " (the default: one rank per GPU)");
  // Each rank holds hidden/tp of the attention output's input and intermediate/tp of the MLP.
  if (s.hidden % s.tp != 0)
    return "--hidden " + std::to_string(s.hidden) + " is not divisible by " + tp_text;
  if (s.intermediate % s.tp != 0)
    return "--intermediate " + std::to_string(s.intermediate) + " is not divisible by " + tp_text;
  if (!std::isfinite(args.accept_len) || args.accept_len <= 0)
    return "--accept-len must be a positive number of tokens";
  if (!std::isfinite(args.draft_ms) || args.draft_ms < 0) return "--draft-ms must be zero or more";
  if (args.dtype != "bf16" && args.dtype != "bfloat16")
    return "--datatype: only bfloat16 is modelled (got '" + args.dtype + "')";
  if (std::string e = parseBackendList(args.backends, &c.backends); !e.empty()) return e;
  if (args.fused) {
    if (s.hidden % 8 != 0 || s.hidden > 16384)
      return "--fused: --hidden " + std::to_string(s.hidden) +
             " is not a multiple of 8 up to 16384 (what the fused call takes)";
    bool any_tpar = false;
    for (const std::string& b : c.backends) any_tpar |= b.rfind("tpar", 0) == 0;
    if (!any_tpar) return "--fused: --backends lists no tpar backend to fuse";
  }
  c.fused = args.fused;
  c.accept_len = args.accept_len;
  c.draft_ms = args.draft_ms;
  c.iters = static_cast<int>(args.iters);
  c.json_path = args.json_path;
  *cfg = c;
  return "";
}

std::string parseVerifyArgs(const std::vector<std::string>& args, int gpu_count,
                            VerifyConfig* cfg) {
  CLI::App app{"verify", "verify"};
  VerifyArgs raw;
  addVerifyOptions(&app, &raw);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return resolveVerifyConfig(raw, gpu_count, cfg);
}

std::vector<GemmShape> layerGemms(const ModelShape& s) {
  const int64_t h_shard = s.hidden / s.tp;
  const int64_t i_shard = s.intermediate / s.tp;
  return {
      {"attn-out", s.tokens, s.hidden, h_shard},
      {"gate+up", s.tokens, 2 * i_shard, s.hidden},
      {"down", s.tokens, s.hidden, i_shard},
  };
}

double gemmFlops(const GemmShape& g) {
  return 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
}

double passFlopsPerRank(const ModelShape& s) {
  double per_layer = 0;
  for (const GemmShape& g : layerGemms(s)) per_layer += gemmFlops(g);
  return per_layer * static_cast<double>(s.layers);
}

double passFlops(const ModelShape& s) { return passFlopsPerRank(s) * static_cast<double>(s.tp); }

size_t allReduceCount(const ModelShape& s) { return static_cast<size_t>(s.tokens * s.hidden); }

size_t allReduceBytes(const ModelShape& s) { return allReduceCount(s) * 2; }

int64_t allReducesPerPass(const ModelShape& s) { return 2 * s.layers; }

size_t allReduceBytesPerPass(const ModelShape& s) {
  return static_cast<size_t>(allReducesPerPass(s)) * allReduceBytes(s);
}

size_t weightBytesPerRank(const ModelShape& s) {
  size_t elems = 0;
  for (const GemmShape& g : layerGemms(s)) elems += static_cast<size_t>(g.k * g.n);
  return elems * 2;
}

size_t weightBytesReadPerRankPerPass(const ModelShape& s) {
  return weightBytesPerRank(s) * static_cast<size_t>(s.layers);
}

size_t activationBytesPerRank(const ModelShape& s) {
  const size_t th = static_cast<size_t>(s.tokens * s.hidden);
  const size_t ti = static_cast<size_t>(s.tokens * (s.intermediate / s.tp));
  // x0, x, normed, partial, reduced: [tokens x hidden]; gate+up: [tokens x 2*i_shard];
  // activation: [tokens x i_shard]; the norm weight: [hidden].
  return (5 * th + 3 * ti + static_cast<size_t>(s.hidden)) * 2;
}

size_t rankMemoryBytes(const ModelShape& s) {
  return weightBytesPerRank(s) + activationBytesPerRank(s) + kCublasWorkspaceBytes +
         kCommReserveBytesPerRank;
}

size_t deviceMemoryBytes(const ModelShape& s, int ranks_on_device) {
  return kDeviceReserveBytes + static_cast<size_t>(ranks_on_device) * rankMemoryBytes(s);
}

double projectedTokensPerSecond(double accept_len, double verify_ms, double draft_ms) {
  const double step_ms = verify_ms + draft_ms;
  return step_ms > 0 ? accept_len / step_ms * 1000.0 : 0.0;
}

size_t countNonFiniteBf16(const std::vector<uint16_t>& bits) {
  size_t n = 0;
  for (uint16_t b : bits) n += (b & 0x7F80u) == 0x7F80u;  // exponent all ones: Inf or NaN
  return n;
}

size_t countBitwiseDifferences(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

double medianOf(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace tpar_cli
