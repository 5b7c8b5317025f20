// The environment registry: parsing, errors naming the variable, and docs/env.md in step.
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "base/config.h"
#include "base/env.h"
#include "base/error.h"

namespace tpar {
namespace {

EnvGetter fromMap(const std::map<std::string, std::string>& m) {
  return [m](const char* name) -> const char* {
    auto it = m.find(name);
    return it == m.end() ? nullptr : it->second.c_str();
  };
}

TEST(EnvParse, DefaultsComeFromTheRegistry) {
  Env env;
  ASSERT_EQ(tparSuccess, parseEnv(fromMap({}), &env));
  EXPECT_EQ(30000, env.timeout_ms);
  EXPECT_EQ(8u << 20, env.max_bytes_per_call);
  EXPECT_EQ(tparAlgoAuto, env.algo);
  EXPECT_FALSE(env.allow_shared_device);
  EXPECT_EQ(-1, env.one_shot_max_bytes);
  EXPECT_EQ(512, env.threads);
  EXPECT_TRUE(env.set_vars.empty());
}

TEST(EnvParse, SetValuesAreParsedAndListed) {
  Env env;
  ASSERT_EQ(tparSuccess, parseEnv(fromMap({{"TPAR_TIMEOUT_MS", "250"},
                                           {"TPAR_MAX_BYTES_PER_CALL", "2M"},
                                           {"TPAR_ALGO", "TwoShot"},
                                           {"TPAR_ALLOW_SHARED_DEVICE", "yes"},
                                           {"TPAR_ONESHOT_MAX_BYTES", "48K"},
                                           {"TPAR_EPOCH_START", "4294967291"}}),
                                  &env));
  EXPECT_EQ(250, env.timeout_ms);
  EXPECT_EQ(2u << 20, env.max_bytes_per_call);
  EXPECT_EQ(tparAlgoTwoShot, env.algo);
  EXPECT_TRUE(env.allow_shared_device);
  EXPECT_EQ(48 << 10, env.one_shot_max_bytes);
  EXPECT_EQ(4294967291u, env.epoch_start);
  EXPECT_EQ(6u, env.set_vars.size());
}

TEST(EnvParse, AlgoChoicesFollowTheEnumOrder) {
  const std::pair<const char*, int> cases[] = {{"auto", tparAlgoAuto},
                                               {"oneshot", tparAlgoOneShot},
                                               {"twoshot", tparAlgoTwoShot},
                                               {"staged", tparAlgoStaged},
                                               {"hier", tparAlgoHierarchical},
                                               {"HIER", tparAlgoHierarchical},
                                               // The enum's own word, accepted as an alias.
                                               {"hierarchical", tparAlgoHierarchical},
                                               {"Hierarchical", tparAlgoHierarchical},
                                               {"twoshot-ll", tparAlgoTwoShotLL},
                                               {"nccl", tparAlgoNccl}};
  for (const auto& [text, want] : cases) {
    Env env;
    ASSERT_EQ(tparSuccess, parseEnv(fromMap({{"TPAR_ALGO", text}}), &env)) << text;
    EXPECT_EQ(want, env.algo) << text;
  }
}

TEST(EnvParse, TuningAndTopologyFilesAreStringsThatReachTheConfig) {
  Env env;
  ASSERT_EQ(tparSuccess, parseEnv(fromMap({}), &env));
  EXPECT_EQ("", env.tuning_file);
  EXPECT_EQ("", env.topo_file);
  ASSERT_EQ(tparSuccess, parseEnv(fromMap({{"TPAR_TUNING_FILE", "/etc/tpar/tuning.json"},
                                           {"TPAR_TOPO_FILE", "/fixtures/two sockets.xml"}}),
                                  &env));
  EXPECT_EQ("/etc/tpar/tuning.json", env.tuning_file);
  EXPECT_EQ("/fixtures/two sockets.xml", env.topo_file);
  EXPECT_EQ(2u, env.set_vars.size());
  ResolvedConfig r;
  ASSERT_EQ(tparSuccess, resolveConfig(nullptr, env, &r));
  EXPECT_EQ("/etc/tpar/tuning.json", r.tuning_file);
  EXPECT_EQ("/fixtures/two sockets.xml", r.topo_file);
}

TEST(EnvParse, MalformedValuesFailNamingTheVariable) {
  const std::map<std::string, std::string> bad[] = {
      {{"TPAR_TIMEOUT_MS", "abc"}},         {{"TPAR_TIMEOUT_MS", "-1"}},
      {{"TPAR_TIMEOUT_MS", "10ms"}},        {{"TPAR_MAX_BYTES_PER_CALL", "12Q"}},
      {{"TPAR_MAX_BYTES_PER_CALL", "1K"}},  {{"TPAR_MAX_BYTES_PER_CALL", "99999999999999999999"}},
      {{"TPAR_ALGO", "ring"}},              {{"TPAR_ALLOW_SHARED_DEVICE", "maybe"}},
      {{"TPAR_ALGO", "hierarch"}},          {{"TPAR_ALGO", "two-shot"}},
      {{"TPAR_THREADS", "100"}},            {{"TPAR_THREADS", "2048"}},
      {{"TPAR_MAX_BLOCKS", "-3"}},          {{"TPAR_DEBUG", "loud"}},
      {{"TPAR_EPOCH_START", "4294967296"}}, {{"TPAR_ONESHOT_MAX_BYTES", "x"}},
  };
  for (const auto& m : bad) {
    Env env;
    env.timeout_ms = 12345;
    EXPECT_EQ(tparInvalidArgument, parseEnv(fromMap(m), &env)) << m.begin()->first;
    EXPECT_NE(std::string::npos, lastError().find(m.begin()->first)) << lastError();
    EXPECT_NE(std::string::npos, lastError().find(m.begin()->second)) << lastError();
    EXPECT_EQ(12345, env.timeout_ms) << "output changed on failure";
  }
}

TEST(EnvParse, IntegersAreDecimalOnly) {
  int64_t v = 0;
  ASSERT_TRUE(parseInt("010", &v));
  EXPECT_EQ(10, v);  // not octal 8
  ASSERT_TRUE(parseInt("-5", &v));
  EXPECT_EQ(-5, v);
  for (const char* bad : {"0x10", " 10", "+10", "1e3", "", "10 "}) {
    EXPECT_FALSE(parseInt(bad, &v)) << "'" << bad << "'";
  }
  Env env;
  ASSERT_EQ(tparSuccess, parseEnv(fromMap({{"TPAR_TIMEOUT_MS", "0100"}}), &env));
  EXPECT_EQ(100, env.timeout_ms);
  EXPECT_EQ(tparInvalidArgument, parseEnv(fromMap({{"TPAR_TIMEOUT_MS", "0x10"}}), &env));
}

TEST(EnvParse, ByteSizesAcceptBinaryUnits) {
  uint64_t b = 0;
  EXPECT_TRUE(parseBytes("4096", &b));
  EXPECT_EQ(4096u, b);
  EXPECT_TRUE(parseBytes("64k", &b));
  EXPECT_EQ(65536u, b);
  EXPECT_TRUE(parseBytes("8MiB", &b));
  EXPECT_EQ(8u << 20, b);
  EXPECT_TRUE(parseBytes("1G", &b));
  EXPECT_EQ(1u << 30, b);
  EXPECT_FALSE(parseBytes("", &b));
  EXPECT_FALSE(parseBytes("-4", &b));
  EXPECT_FALSE(parseBytes("M", &b));
  EXPECT_FALSE(parseBytes("20000000000G", &b));
}

TEST(EnvDocs, DocsEnvMdMatchesTheRegistry) {
  std::ifstream f(std::string(TPAR_SOURCE_DIR) + "/docs/env.md");
  ASSERT_TRUE(f.good()) << "docs/env.md is missing; generate it with `tpar env --markdown`";
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(envMarkdown(), ss.str()) << "docs/env.md is stale: regenerate with `tpar env --markdown > docs/env.md`";
}

TEST(ConfigResolve, ConfigFieldsOverrideTheEnvironment) {
  Env env;
  ASSERT_EQ(tparSuccess, parseEnv(fromMap({{"TPAR_TIMEOUT_MS", "250"}, {"TPAR_ALGO", "oneshot"}}), &env));
  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  ResolvedConfig r;
  ASSERT_EQ(tparSuccess, resolveConfig(&cfg, env, &r));
  EXPECT_EQ(250, r.timeout_ms);
  EXPECT_EQ(tparAlgoOneShot, r.forced_algo);
  cfg.timeoutMs = 40;
  cfg.algorithm = tparAlgoAuto;
  cfg.maxBytesPerCall = (1 << 20) + 5;  // rounded down to 16 bytes
  cfg.allowSharedDevice = 1;
  ASSERT_EQ(tparSuccess, resolveConfig(&cfg, env, &r));
  EXPECT_EQ(40, r.timeout_ms);
  EXPECT_EQ(tparAlgoAuto, r.forced_algo);
  EXPECT_EQ(1u << 20, r.max_bytes_per_call);
  EXPECT_TRUE(r.allow_shared_device);
  ASSERT_EQ(tparSuccess, resolveConfig(nullptr, env, &r));
  EXPECT_EQ(250, r.timeout_ms);
}

}  // namespace
}  // namespace tpar
