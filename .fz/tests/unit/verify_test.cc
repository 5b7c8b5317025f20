// `tpar verify`'s options and arithmetic: presets, overrides, per-rank GEMM shapes, all-reduce
// bytes, the tokens/s projection, and the options it must refuse (no GPU needed).
#include "tools/tpar/verify/verify.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tpar_cli {
namespace {

VerifyConfig parseOk(const std::vector<std::string>& args, int gpus = 8) {
  VerifyConfig cfg;
  const std::string err = parseVerifyArgs(args, gpus, &cfg);
  EXPECT_EQ("", err);
  return cfg;
}

TEST(VerifyModel, PresetsHaveThePublishedSizes) {
  struct Want {
    const char* name;
    int64_t layers, hidden, intermediate;
  };
  for (const Want& w : {Want{"kimi-k2", 61, 7168, 18432}, Want{"llama-70b", 80, 8192, 28672},
                        Want{"qwen-32b", 64, 5120, 27648}}) {
    const VerifyConfig cfg = parseOk({"--model", w.name});
    EXPECT_EQ(w.name, cfg.model);
    EXPECT_EQ(w.layers, cfg.shape.layers) << w.name;
    EXPECT_EQ(w.hidden, cfg.shape.hidden) << w.name;
    EXPECT_EQ(w.intermediate, cfg.shape.intermediate) << w.name;
    EXPECT_FALSE(cfg.overridden) << w.name;
  }
  EXPECT_EQ(3u, modelPresets().size());
  EXPECT_EQ(nullptr, findModelPreset("gpt-5"));
}

TEST(VerifyModel, DefaultsAreKimiK2WithSixteenTokensAndTheDocumentedKnobs) {
  const VerifyConfig cfg = parseOk({}, 4);
  EXPECT_EQ("kimi-k2", cfg.model);
  EXPECT_EQ(61, cfg.shape.layers);
  EXPECT_EQ(16, cfg.shape.tokens);
  EXPECT_EQ(4, cfg.shape.tp);  // every GPU
  EXPECT_EQ((std::vector<std::string>{"tpar", "nccl"}), cfg.backends);
  EXPECT_DOUBLE_EQ(3.0, cfg.accept_len);
  EXPECT_DOUBLE_EQ(0.0, cfg.draft_ms);
  EXPECT_EQ(20, cfg.iters);
  EXPECT_EQ("", cfg.json_path);
}

TEST(VerifyModel, OneGpuDefaultsToEightVirtualRanks) {
  EXPECT_EQ(8, parseOk({}, 1).shape.tp);
  EXPECT_EQ(2, parseOk({"--tp", "2"}, 1).shape.tp);
  EXPECT_EQ(4, parseOk({"--ranks", "4"}, 1).shape.tp);
}

TEST(VerifyModel, ExplicitSizesOverrideThePreset) {
  const VerifyConfig cfg =
      parseOk({"--model",        "llama-70b", "--layers",   "2",
               "--intermediate", "2048",      "--tokens",   "64",
               "--tp",           "4",         "--backends", "tpar:oneshot,nccl,tpar:twoshot",
               "--accept-len",   "2.5",       "--draft-ms", "1.5",
               "--iters",        "7",         "--json",     "/tmp/v.json",
               "--dtype",        "bf16"});
  EXPECT_EQ("llama-70b", cfg.model);
  EXPECT_TRUE(cfg.overridden);
  EXPECT_EQ(2, cfg.shape.layers);
  EXPECT_EQ(8192, cfg.shape.hidden);  // not given: the preset's
  EXPECT_EQ(2048, cfg.shape.intermediate);
  EXPECT_EQ(64, cfg.shape.tokens);
  EXPECT_EQ(4, cfg.shape.tp);
  EXPECT_EQ((std::vector<std::string>{"tpar:oneshot", "nccl", "tpar:twoshot"}), cfg.backends);
  EXPECT_DOUBLE_EQ(2.5, cfg.accept_len);
  EXPECT_DOUBLE_EQ(1.5, cfg.draft_ms);
  EXPECT_EQ(7, cfg.iters);
  EXPECT_EQ("/tmp/v.json", cfg.json_path);
}

TEST(VerifyModel, OverrideEqualToThePresetIsNotReportedAsOverridden) {
  EXPECT_FALSE(parseOk({"--model", "qwen-32b", "--hidden", "5120"}).overridden);
}

TEST(VerifyModel, GemmShapesAreTheRanksShards) {
  ModelShape s;
  s.layers = 61;
  s.hidden = 7168;
  s.intermediate = 18432;
  s.tokens = 16;
  s.tp = 8;
  const auto g = layerGemms(s);
  ASSERT_EQ(3u, g.size());
  // Attention output: [tokens x hidden/tp] x [hidden/tp x hidden].
  EXPECT_STREQ("attn-out", g[0].name);
  EXPECT_EQ(16, g[0].m);
  EXPECT_EQ(896, g[0].k);
  EXPECT_EQ(7168, g[0].n);
  // Gate+up: [tokens x hidden] x [hidden x 2*intermediate/tp].
  EXPECT_STREQ("gate+up", g[1].name);
  EXPECT_EQ(16, g[1].m);
  EXPECT_EQ(7168, g[1].k);
  EXPECT_EQ(4608, g[1].n);
  // Down: [tokens x intermediate/tp] x [intermediate/tp x hidden].
  EXPECT_STREQ("down", g[2].name);
  EXPECT_EQ(16, g[2].m);
  EXPECT_EQ(2304, g[2].k);
  EXPECT_EQ(7168, g[2].n);

  EXPECT_DOUBLE_EQ(2.0 * 16 * 896 * 7168, gemmFlops(g[0]));
  const double per_layer = 2.0 * 16 * (896.0 * 7168 + 7168.0 * 4608 + 2304.0 * 7168);
  EXPECT_DOUBLE_EQ(61 * per_layer, passFlopsPerRank(s));
  EXPECT_DOUBLE_EQ(8 * 61 * per_layer, passFlops(s));
  // One layer's shard: (896*7168 + 7168*4608 + 2304*7168) bf16.
  EXPECT_EQ((896u * 7168 + 7168u * 4608 + 2304u * 7168) * 2, weightBytesPerRank(s));
  EXPECT_EQ(61 * weightBytesPerRank(s), weightBytesReadPerRankPerPass(s));
}

TEST(VerifyModel, ShardsShrinkWithTp) {
  ModelShape s{2, 1024, 2048, 8, 2};
  auto g = layerGemms(s);
  EXPECT_EQ(512, g[0].k);
  EXPECT_EQ(2048, g[1].n);
  EXPECT_EQ(1024, g[2].k);
  s.tp = 1;
  g = layerGemms(s);
  EXPECT_EQ(1024, g[0].k);
  EXPECT_EQ(4096, g[1].n);
  EXPECT_EQ(2048, g[2].k);
}

TEST(VerifyModel, AllReduceBytesPerPassAreTwoPerLayerOfTokensTimesHiddenBf16) {
  ModelShape s{61, 7168, 18432, 16, 8};
  EXPECT_EQ(16u * 7168, allReduceCount(s));
  EXPECT_EQ(16u * 7168 * 2, allReduceBytes(s));  // 224 KiB
  EXPECT_EQ(122, allReducesPerPass(s));
  EXPECT_EQ(2u * 61 * 16 * 7168 * 2, allReduceBytesPerPass(s));
  ModelShape t{80, 8192, 28672, 64, 4};
  EXPECT_EQ(2u * 80 * 64 * 8192 * 2, allReduceBytesPerPass(t));
}

TEST(VerifyModel, MemoryEstimateGrowsWithRanksOnTheDevice) {
  ModelShape s{61, 7168, 18432, 16, 8};
  EXPECT_GT(rankMemoryBytes(s), weightBytesPerRank(s) + activationBytesPerRank(s));
  EXPECT_EQ(kDeviceReserveBytes + 8 * rankMemoryBytes(s), deviceMemoryBytes(s, 8));
  EXPECT_LT(deviceMemoryBytes(s, 1), deviceMemoryBytes(s, 2));
}

TEST(VerifyModel, ProjectedTokensPerSecondIsAcceptLenOverStepTime) {
  EXPECT_DOUBLE_EQ(100.0, projectedTokensPerSecond(3.0, 30.0, 0.0));
  EXPECT_DOUBLE_EQ(75.0, projectedTokensPerSecond(3.0, 30.0, 10.0));
  EXPECT_DOUBLE_EQ(250.0, projectedTokensPerSecond(2.5, 8.0, 2.0));
  EXPECT_DOUBLE_EQ(0.0, projectedTokensPerSecond(3.0, 0.0, 0.0));
  EXPECT_NE(std::string::npos, std::string(kProjectionFormula).find("accept_len"));
}

TEST(VerifyModel, MedianIsTheMiddleSample) {
  EXPECT_DOUBLE_EQ(2.0, medianOf({3.0, 1.0, 2.0}));
  EXPECT_DOUBLE_EQ(2.5, medianOf({4.0, 1.0, 2.0, 3.0}));
  EXPECT_DOUBLE_EQ(5.0, medianOf({5.0}));
  EXPECT_DOUBLE_EQ(0.0, medianOf({}));
}

TEST(VerifyModel, NonFiniteBf16AndBitwiseDifferencesAreCounted) {
  // 1.0, NaN, +Inf, -Inf, -0.0, largest finite.
  const std::vector<uint16_t> v = {0x3F80, 0x7FC0, 0x7F80, 0xFF80, 0x8000, 0x7F7F};
  EXPECT_EQ(3u, countNonFiniteBf16(v));
  std::vector<uint16_t> w = v;
  EXPECT_EQ(0u, countBitwiseDifferences(v, w));
  w[4] = 0x0000;  // +0.0 == -0.0 as numbers, but not as bits
  w[0] = 0x3F81;
  EXPECT_EQ(2u, countBitwiseDifferences(v, w));
  EXPECT_EQ(6u, countBitwiseDifferences(v, {}));
}

TEST(VerifyArgs, BadOptionsAreRejectedWithTheirName) {
  struct Bad {
    std::vector<std::string> args;
    const char* mentions;
  };
  const std::vector<Bad> bad = {
      {{"--hidden", "1000", "--tp", "3"}, "--hidden"},
      {{"--intermediate", "1001", "--hidden", "1024", "--tp", "2"}, "--intermediate"},
      {{"--tokens", "0"}, "--tokens"},
      {{"--tokens", "-4"}, "--tokens"},
      {{"--tp", "0"}, "--ranks"},
      {{"--ranks", "17"}, "--ranks"},
      {{"--layers", "0"}, "--layers"},
      {{"--model", "gpt-5"}, "gpt-5"},
      {{"--backends", "mpi"}, "mpi"},
      {{"--backends", "tpar,tpar"}, "twice"},
      {{"--backends", ""}, "--backends"},
      {{"--backends", "tpar,,nccl"}, "--backends"},
      {{"--accept-len", "0"}, "--accept-len"},
      {{"--draft-ms", "-1"}, "--draft-ms"},
      {{"--iters", "0"}, "--iters"},
      {{"--dtype", "fp16"}, "bfloat16"},
      {{"-d", "float32"}, "--datatype"},
      {{"--tokens", "abc"}, "tokens"},
      {{"--no-such-option"}, "no-such-option"},
  };
  for (const Bad& b : bad) {
    VerifyConfig cfg;
    const std::string err = parseVerifyArgs(b.args, 8, &cfg);
    EXPECT_FALSE(err.empty()) << b.args[0];
    EXPECT_NE(std::string::npos, err.find(b.mentions)) << b.args[0] << ": " << err;
  }
}

TEST(VerifyArgs, FusedNeedsAShapeTheFusedCallTakesAndATparBackend) {
  EXPECT_FALSE(parseOk({}).fused);
  const VerifyConfig cfg = parseOk({"--model", "kimi-k2", "--fused"});
  EXPECT_TRUE(cfg.fused);
  EXPECT_EQ(7168, cfg.shape.hidden);
  const struct {
    std::vector<std::string> args;
    const char* mentions;
  } bad[] = {
      {{"--fused", "--hidden", "16392", "--ranks", "8"}, "--hidden 16392"},  // above 16384
      {{"--fused", "--hidden", "7172", "--ranks", "4"}, "--hidden 7172"},    // not a multiple of 8
      {{"--fused", "--backends", "nccl"}, "no tpar backend"},
  };
  for (const auto& b : bad) {
    VerifyConfig c;
    const std::string err = parseVerifyArgs(b.args, 8, &c);
    EXPECT_NE(std::string::npos, err.find(b.mentions)) << b.args[1] << ": " << err;
  }
}

TEST(VerifyArgs, DefaultTpThatDoesNotDivideSaysItWasTheDefault) {
  VerifyConfig cfg;
  const std::string err = parseVerifyArgs({}, 3, &cfg);  // 3 GPUs, hidden 7168
  EXPECT_NE(std::string::npos, err.find("--ranks 3 (the default")) << err;
}

}  // namespace
}  // namespace tpar_cli
