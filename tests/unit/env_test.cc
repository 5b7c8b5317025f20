// The environment registry: parsing, errors naming the variable, and docs/env.md in step; the
// tests named *Table go over every line of the settings table (NOTE [settings table]).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "base/config.h"
#include "base/env.h"
#include "base/error.h"
#include "comm/agreement.h"
#include "kernels/prims/wire.h"

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

// TPAR_WIRE takes tparWire_t's names in any case, and "bf16" for the lossless format, as
// `tpar bench --wire` does; near misses are refused naming the variable.
TEST(EnvParse, WireFormatsAndTheLosslessOtherName) {
  const std::pair<const char*, int> cases[] = {
      {"none", tparWireNone}, {"bf16", tparWireNone}, {"BF16", tparWireNone},
      {"fp8", tparWireFp8},   {"FP8", tparWireFp8},   {"int8", tparWireInt8},
      {"int4", tparWireInt4}, {"Int4", tparWireInt4}};
  for (const auto& [text, want] : cases) {
    Env env;
    env.wire = -7;
    ASSERT_EQ(tparSuccess, parseEnv(fromMap({{"TPAR_WIRE", text}}), &env)) << text;
    EXPECT_EQ(want, env.wire) << text;
  }
  for (const char* text : {"bf8", "bf16x", "fp16", "int", "lossless"}) {
    Env env;
    env.wire = -7;
    EXPECT_EQ(tparInvalidArgument, parseEnv(fromMap({{"TPAR_WIRE", text}}), &env)) << text;
    EXPECT_NE(std::string::npos, lastError().find("TPAR_WIRE")) << lastError();
    EXPECT_EQ(-7, env.wire) << text << ": output changed on failure";
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

// ------------------------------------------------------------------------------------------
// The settings table, line by line.

const EnvGetter kNothingSet = [](const char*) -> const char* { return nullptr; };

// The Env members (one per line of settings.def) in which two Envs differ.
std::vector<std::string> differingMembers(const Env& a, const Env& b) {
  std::vector<std::string> out;
#define TPAR_SETTING(name, field, ...) \
  if (!(a.field == b.field)) out.push_back(#field);
#include "base/settings.def"
#undef TPAR_SETTING
  if (a.log_level_set != b.log_level_set) out.push_back("log_level_set");
  if (a.set_vars != b.set_vars) out.push_back("set_vars");
  return out;
}

// Whether a line stores any text as given (a std::string member): such a line has no
// malformed value.
bool takesAnyText(const std::string& name) {
  static const std::map<std::string, bool> kAnyText = {
#define TPAR_SETTING(name, field, type, ...) {name, std::is_same_v<type, std::string>},
#include "base/settings.def"
#undef TPAR_SETTING
  };
  return kAnyText.at(name);
}

std::mt19937_64 seededRng(std::string* seed_text) {
  const uint64_t seed = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  *seed_text = "random seed " + std::to_string(seed);
  return std::mt19937_64(seed);
}

std::string randomLetters(std::mt19937_64& rng, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += static_cast<char>('a' + rng() % 26);
  return s;
}

TEST(EnvTable, EveryLineIsOneRegistryEntryInTableOrder) {
  const std::vector<EnvVarSpec>& reg = envRegistry();
  ASSERT_EQ(static_cast<size_t>(kNumSettings), reg.size());
  std::set<std::string> names;
  for (int i = 0; i < kNumSettings; ++i) {
    EXPECT_STREQ(kSettingNames[i], reg[i].name);
    EXPECT_EQ(i, settingIndex(reg[i].name));
    EXPECT_TRUE(names.insert(reg[i].name).second) << reg[i].name << " twice";
    EXPECT_EQ(reg[i].type == EnvType::kChoice, reg[i].choices != nullptr) << reg[i].name;
  }
  EXPECT_EQ(-1, settingIndex("TPAR_NO_SUCH_SETTING"));
}

TEST(EnvTable, EveryVariableParsesItsOwnDefault) {
  Env defaults;
  ASSERT_EQ(tparSuccess, parseEnv(kNothingSet, &defaults)) << lastError();
  int checked = 0;
  for (const EnvVarSpec& spec : envRegistry()) {
    const std::string name = spec.name;
    const std::string value = spec.default_value;
    if (value.empty()) continue;  // an empty value is an unset variable
    Env env;
    ASSERT_EQ(tparSuccess,
              parseEnv([&](const char* n) { return name == n ? value.c_str() : nullptr; }, &env))
        << name << "=" << value << ": " << lastError();
    Env want = defaults;
    want.set_vars = {name + "=" + value};
    if (name == "TPAR_DEBUG") want.log_level_set = true;  // given, though equal to the default
    EXPECT_EQ(std::vector<std::string>{}, differingMembers(want, env)) << name << "=" << value;
    ++checked;
  }
  EXPECT_GT(checked, kNumSettings / 2);
}

// The variables whose ResolvedConfig members (the Comm and Shape lines) differ in two configs.
template <class C>
void compareMember(const ResolvedConfig& a, const ResolvedConfig& b, C ResolvedConfig::*member,
                   const char* name, std::vector<std::string>* out) {
  if (!(a.*member == b.*member)) out->push_back(name);
}
void compareMember(const ResolvedConfig&, const ResolvedConfig&, std::nullptr_t, const char*,
                   std::vector<std::string>*) {}
#define TPAR_TEST_MEMBER_Process nullptr
#define TPAR_TEST_MEMBER_Comm(cfg_field, cfg_type) &ResolvedConfig::cfg_field
#define TPAR_TEST_MEMBER_Shape(cfg_field, cfg_type) &ResolvedConfig::cfg_field
std::vector<std::string> differingMembers(const ResolvedConfig& a, const ResolvedConfig& b) {
  std::vector<std::string> out;
#define TPAR_SETTING(name, field, type, kind, default_value, choices, reader, expected, scope, \
                     ...)                                                                     \
  compareMember(a, b, TPAR_TEST_MEMBER_##scope, name, &out);
#include "base/settings.def"
#undef TPAR_SETTING
  return out;
}

TEST(EnvTable, DefaultConstructionHoldsTheDefaults) {
  Env parsed;
  ASSERT_EQ(tparSuccess, parseEnv(kNothingSet, &parsed)) << lastError();
  EXPECT_EQ(std::vector<std::string>{}, differingMembers(Env(), parsed));
  ResolvedConfig resolved;
  resolved.threads = -1;
  ASSERT_EQ(tparSuccess, resolveConfig(nullptr, parsed, &resolved)) << lastError();
  EXPECT_EQ(std::vector<std::string>{}, differingMembers(ResolvedConfig(), resolved));
  // A few spelled out, so that a table that lost its defaults cannot pass.
  EXPECT_EQ(512, ResolvedConfig().threads);
  EXPECT_EQ(-1, ResolvedConfig().one_shot_max_bytes);
  EXPECT_EQ(tparAlgoAuto, ResolvedConfig().forced_algo);
  EXPECT_TRUE(ResolvedConfig().launch_overlap);
  EXPECT_EQ(static_cast<int>(LogLevel::kWarn), Env().log_level);
}

// Garbage that no reader of its kind accepts, fresh each call.
std::string malformedValue(const EnvVarSpec& spec, std::mt19937_64& rng) {
  const std::string n = std::to_string(rng() % 100000);
  switch (spec.type) {
    case EnvType::kInt: {
      const std::string bad[] = {n + randomLetters(rng, 2), n + "." + n, "x" + n, n + " "};
      return bad[rng() % 4];
    }
    case EnvType::kBytes: {
      const std::string bad[] = {n + "Q", "-" + n, n + "KK", randomLetters(rng, 3) + n};
      return bad[rng() % 4];
    }
    case EnvType::kBool: {
      const std::string bad[] = {"maybe" + n, std::to_string(2 + rng() % 98), "yes " + n};
      return bad[rng() % 3];
    }
    case EnvType::kChoice:
    case EnvType::kString:
      // Longer than any choice name, so no choice or alias.
      return "zz" + randomLetters(rng, 12) + n;
  }
  return "?";
}

TEST(EnvTable, AMalformedValueOfEveryVariableFailsNamingItAndLeavesTheEnvAlone) {
  std::string seed;
  std::mt19937_64 rng = seededRng(&seed);
  SCOPED_TRACE(seed);
  std::set<EnvType> kinds;
  for (const EnvVarSpec& spec : envRegistry()) {
    const std::string name = spec.name;
    for (int round = 0; round < 4; ++round) {
      const std::string value = malformedValue(spec, rng);
      // Whatever the output held before (here: a parse with random timeouts) stays.
      const std::string timeout = std::to_string(1 + rng() % kMaxTimeoutMs);
      Env before;
      ASSERT_EQ(tparSuccess, parseEnv(fromMap({{"TPAR_TIMEOUT_MS", timeout}}), &before));
      Env env = before;
      const tparResult_t res =
          parseEnv([&](const char* n) { return name == n ? value.c_str() : nullptr; }, &env);
      if (takesAnyText(name)) {
        // Paths and file names: any text is taken as given.
        EXPECT_EQ(tparSuccess, res) << name << "=" << value << ": " << lastError();
        continue;
      }
      kinds.insert(spec.type);
      EXPECT_EQ(tparInvalidArgument, res) << name << "=" << value;
      EXPECT_NE(std::string::npos, lastError().find("environment variable " + name + "="))
          << lastError();
      EXPECT_NE(std::string::npos, lastError().find("'" + value + "'")) << lastError();
      EXPECT_EQ(std::vector<std::string>{}, differingMembers(before, env))
          << name << "=" << value << " changed the output";
    }
  }
  // Every kind with a reader that can refuse has been refused (TPAR_DEBUG_SUBSYS is a string).
  const std::set<EnvType> want = {EnvType::kInt, EnvType::kBytes, EnvType::kBool,
                                  EnvType::kChoice, EnvType::kString};
  EXPECT_EQ(want, kinds);
}

TEST(ConfigTable, ShapeSettingsAreTheShapeLinesInTableOrder) {
  ASSERT_GT(kNumShapeSettings, 0);
  int next = 0;
  for (const EnvVarSpec& spec : envRegistry()) {
    const int i = shapeSettingIndex(spec.name);
    if (i < 0) continue;
    ASSERT_LT(i, kNumShapeSettings);
    EXPECT_EQ(next, i) << spec.name;
    EXPECT_STREQ(spec.name, shapeSettings()[i].name);
    ++next;
  }
  EXPECT_EQ(kNumShapeSettings, next);
  // A hand-picked pair, so that an empty or shuffled table cannot pass.
  EXPECT_GE(shapeSettingIndex("TPAR_THREADS"), 0);
  EXPECT_GE(shapeSettingIndex("TPAR_MAX_BLOCKS"), 0);
  EXPECT_EQ(-1, shapeSettingIndex("TPAR_TIMEOUT_MS"));  // a Comm line that ranks may differ in
  EXPECT_STREQ("maxBytesPerCall", shapeSettings()[shapeSettingIndex("TPAR_MAX_BYTES_PER_CALL")]
                                      .config_field);
}

TEST(ConfigTable, ConfigOverridesAreBoundedAndNamed) {
  Env env;
  ASSERT_EQ(tparSuccess, parseEnv(kNothingSet, &env));
  struct Case {
    const char* field;
    void (*set)(tparConfig_t*, int64_t);
    int64_t bad;
  };
  std::string seed;
  std::mt19937_64 rng = seededRng(&seed);
  SCOPED_TRACE(seed);
  const Case cases[] = {
      {"config->maxBytesPerCall", [](tparConfig_t* c, int64_t v) { c->maxBytesPerCall = v; },
       static_cast<int64_t>(1 + rng() % ((64 << 10) - 1))},
      {"config->timeoutMs", [](tparConfig_t* c, int64_t v) { c->timeoutMs = v; },
       kMaxTimeoutMs + 1 + static_cast<int64_t>(rng() % 1000)},
      {"config->algorithm", [](tparConfig_t* c, int64_t v) { c->algorithm = static_cast<int>(v); },
       tparNumAlgos + static_cast<int64_t>(rng() % 100)},
      {"config->allowSharedDevice",
       [](tparConfig_t* c, int64_t v) { c->allowSharedDevice = static_cast<int>(v); },
       2 + static_cast<int64_t>(rng() % 100)},
      {"config->transport", [](tparConfig_t* c, int64_t v) { c->transport = static_cast<int>(v); },
       -2 - static_cast<int64_t>(rng() % 100)},
  };
  for (const Case& c : cases) {
    tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
    c.set(&cfg, c.bad);
    ResolvedConfig out;
    out.threads = 4242;
    EXPECT_EQ(tparInvalidArgument, resolveConfig(&cfg, env, &out)) << c.field;
    EXPECT_NE(std::string::npos, lastError().find(c.field + std::string(" ") +
                                                  std::to_string(c.bad)))
        << lastError();
    EXPECT_EQ(4242, out.threads) << c.field << " half-applied";
  }
}

// Text for `spec` that its reader takes and that gives a Shape slot other than `not_this`, or ""
// when none of a random pool does (a new kind of Shape line would need the pool extended).
std::string otherValidValue(const EnvVarSpec& spec, int shape_index, int64_t not_this,
                            std::mt19937_64& rng) {
  std::vector<std::string> pool;
  if (spec.choices != nullptr) {
    std::stringstream ss(spec.choices);
    for (std::string item; std::getline(ss, item, '|');) pool.push_back(item);
  }
  pool.push_back("auto");
  pool.push_back("0");  // booleans
  pool.push_back("1");
  for (int i = 0; i < 8; ++i) {
    pool.push_back(std::to_string(rng() % 1025));                   // counts
    pool.push_back(std::to_string(32 * (2 + rng() % 15)));          // multiples of 32, 64..512
    pool.push_back(std::to_string(rng() % 4294967296ull));          // 32-bit numbers
    pool.push_back(std::to_string(64 + rng() % (1 << 20)) + "K");   // sizes, 64K..1G
  }
  std::shuffle(pool.begin(), pool.end(), rng);
  const std::string name = spec.name;
  for (const std::string& text : pool) {
    Env env;
    if (parseEnv([&](const char* n) { return name == n ? text.c_str() : nullptr; }, &env) !=
        tparSuccess)
      continue;
    ResolvedConfig cfg;
    if (resolveConfig(nullptr, env, &cfg) != tparSuccess) continue;
    if (describeCallShape(cfg, 32, nullptr).settings[shape_index] != not_this) return text;
  }
  return "";
}

CallShape shapeOf(const std::map<std::string, std::string>& vars) {
  Env env;
  EXPECT_EQ(tparSuccess, parseEnv(fromMap(vars), &env)) << lastError();
  ResolvedConfig cfg;
  EXPECT_EQ(tparSuccess, resolveConfig(nullptr, env, &cfg)) << lastError();
  return describeCallShape(cfg, 32, nullptr);
}

// From the variable to init's verdict: one rank sets a Shape variable to a value of its own,
// the others leave it unset, and the agreement fails naming the variable and that rank.
TEST(AgreementTable, EveryShapeVariableSetOnOneRankAloneFailsNamingIt) {
  std::string seed;
  std::mt19937_64 rng = seededRng(&seed);
  SCOPED_TRACE(seed);
  const CallShape base = shapeOf({});
  int checked = 0;
  for (const EnvVarSpec& spec : envRegistry()) {
    const int i = shapeSettingIndex(spec.name);
    if (i < 0) continue;
    const std::string value = otherValidValue(spec, i, base.settings[i], rng);
    ASSERT_FALSE(value.empty()) << "no value of " << spec.name << " changes its CallShape slot";
    const int odd = 1 + static_cast<int>(rng() % 3);
    std::vector<CallShape> shapes(4, base);
    shapes[odd] = shapeOf({{spec.name, value}});
    int grid = -1;
    clearError();
    EXPECT_EQ(tparInvalidUsage, agreeOnCallShapes(shapes, &grid)) << spec.name << "=" << value;
    EXPECT_NE(std::string::npos, lastError().find(std::string("disagree on ") + spec.name))
        << lastError();
    EXPECT_NE(std::string::npos, lastError().find("rank " + std::to_string(odd) + " has"))
        << lastError();
    EXPECT_EQ(-1, grid);
    // The same value on every rank agrees.
    std::vector<CallShape> same(4, shapes[odd]);
    EXPECT_EQ(tparSuccess, agreeOnCallShapes(same, &grid)) << lastError();
    ++checked;
  }
  EXPECT_EQ(kNumShapeSettings, checked);
}

// The same over CallShape's slots, with any values: no slot goes unchecked.
TEST(AgreementTable, EverySlotThatDiffersFailsNamingItsVariable) {
  std::string seed;
  std::mt19937_64 rng = seededRng(&seed);
  SCOPED_TRACE(seed);
  const CallShape base = shapeOf({});
  for (int i = 0; i < kNumShapeSettings; ++i) {
    for (int odd = 1; odd < 4; ++odd) {
      std::vector<CallShape> shapes(4, base);
      shapes[odd].settings[i] += 1 + static_cast<int64_t>(rng() % 1000);
      int grid = -1;
      EXPECT_EQ(tparInvalidUsage, agreeOnCallShapes(shapes, &grid)) << shapeSettings()[i].name;
      EXPECT_NE(std::string::npos, lastError().find(shapeSettings()[i].name)) << lastError();
      EXPECT_NE(std::string::npos, lastError().find("rank " + std::to_string(odd)))
          << lastError();
      EXPECT_EQ(-1, grid);
    }
  }
}

// A hand-picked pair, spelled out: the message shows both values.
TEST(AgreementTable, ThreadsThatDifferAreNamedWithBothValues) {
  std::string seed;
  std::mt19937_64 rng = seededRng(&seed);
  SCOPED_TRACE(seed);
  const std::string threads = std::to_string(32 * (2 + rng() % 14));  // 64..480, never 512
  const std::vector<CallShape> shapes = {shapeOf({}), shapeOf({{"TPAR_THREADS", threads}})};
  int grid = -1;
  ASSERT_EQ(tparInvalidUsage, agreeOnCallShapes(shapes, &grid));
  EXPECT_NE(std::string::npos,
            lastError().find("ranks disagree on TPAR_THREADS: rank 0 has 512, rank 1 has " +
                             threads))
      << lastError();
  const std::vector<CallShape> algos = {shapeOf({}), shapeOf({{"TPAR_ALGO", "Hierarchical"}})};
  ASSERT_EQ(tparInvalidUsage, agreeOnCallShapes(algos, &grid));
  EXPECT_NE(std::string::npos,
            lastError().find("TPAR_ALGO or config->algorithm: rank 0 has auto, rank 1 has hier"))
      << lastError();
}

// The wire format's block is a constant of the build, not a setting: with a format, a rank of
// a build that sends another block fails init naming both blocks; lossless communicators send
// no block.
TEST(AgreementTable, WireBlocksOfAnotherBuildAreNamedWithBothValues) {
  std::string seed;
  std::mt19937_64 rng = seededRng(&seed);
  SCOPED_TRACE(seed);
  EXPECT_EQ(0, shapeOf({}).wire_block);
  const struct {
    const char* name;
    kernels::WireFormat f;
  } formats[] = {{"fp8", kernels::WireFormat::kFp8},
                 {"int8", kernels::WireFormat::kInt8},
                 {"int4", kernels::WireFormat::kInt4}};
  const int blocks[] = {32, 64, 128};
  for (const auto& format : formats) {
    const CallShape base = shapeOf({{"TPAR_WIRE", format.name}});
    const int own = kernels::wireKernelBlock(format.f);
    EXPECT_EQ(own, base.wire_block) << format.name;
    int other = own;
    while (other == own) other = blocks[rng() % 3];
    const int odd = 1 + static_cast<int>(rng() % 3);
    std::vector<CallShape> shapes(4, base);
    shapes[odd].wire_block = other;
    int grid = -1;
    ASSERT_EQ(tparInvalidUsage, agreeOnCallShapes(shapes, &grid)) << format.name;
    EXPECT_NE(std::string::npos, lastError().find("disagree on the values per scale of the wire"))
        << lastError();
    EXPECT_NE(std::string::npos,
              lastError().find("rank 0 has " + std::to_string(own) + ", rank " +
                               std::to_string(odd) + " has " + std::to_string(other)))
        << lastError();
    EXPECT_EQ(-1, grid);
  }
}

TEST(AgreementTable, WorkspaceTermsAreNamedLikeTheirSettings) {
  std::string seed;
  std::mt19937_64 rng = seededRng(&seed);
  SCOPED_TRACE(seed);
  const uint64_t bytes = (64u << 10) + 16 * (rng() % 1000);
  const uint32_t epoch = static_cast<uint32_t>(rng());
  const uint64_t ws = 4 * bytes + 16 * (rng() % 1000);
  EXPECT_EQ(tparSuccess,
            agreeOnWorkspaces({{bytes, epoch, ws}, {bytes, epoch, ws}, {bytes, epoch, ws}}));
  EXPECT_EQ(tparInvalidUsage,
            agreeOnWorkspaces({{bytes, epoch, ws}, {bytes, epoch, ws}, {bytes + 16, epoch, ws}}));
  EXPECT_NE(std::string::npos,
            lastError().find("disagree on TPAR_MAX_BYTES_PER_CALL or config->maxBytesPerCall"))
      << lastError();
  EXPECT_NE(std::string::npos, lastError().find("rank 2 has " + std::to_string(bytes + 16)))
      << lastError();
  EXPECT_EQ(tparInvalidUsage, agreeOnWorkspaces({{bytes, epoch, ws}, {bytes, epoch + 1, ws}}));
  EXPECT_NE(std::string::npos, lastError().find("disagree on TPAR_EPOCH_START")) << lastError();
  // The same settings laid out in regions of another size: another build (or transport).
  EXPECT_EQ(tparInvalidUsage,
            agreeOnWorkspaces({{bytes, epoch, ws}, {bytes, epoch, ws + 512}}));
  EXPECT_NE(std::string::npos,
            lastError().find("rank 1's " + std::to_string(ws + 512) + " with the same "
                             "maxBytesPerCall (every rank must run the same tpar build"))
      << lastError();
}

}  // namespace
}  // namespace tpar
