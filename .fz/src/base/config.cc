#include "base/config.h"

#include <cstddef>
#include <type_traits>
#include <vector>

#include "base/error.h"

namespace tpar {
namespace {

// What resolveConfig and the agreement need of a line of settings.def (NOTE [settings table]).
// The scope gives the ResolvedConfig member (nullptr for Process lines), the override its
// tparConfig_t member and bounds (nullptr for NoOverride).
#define TPAR_CONFIG_MEMBER_Process nullptr
#define TPAR_CONFIG_MEMBER_Comm(cfg_field, cfg_type) &ResolvedConfig::cfg_field
#define TPAR_CONFIG_MEMBER_Shape(cfg_field, cfg_type) &ResolvedConfig::cfg_field
#define TPAR_CONFIG_OVERRIDE_NoOverride nullptr
#define TPAR_CONFIG_OVERRIDE_Override(member, unset, lo, hi, tail) \
  configOverride(&tparConfig_t::member, #member, unset, lo, hi, tail)
#define TPAR_CONFIG_OVERRIDE_NAME_NoOverride nullptr
#define TPAR_CONFIG_OVERRIDE_NAME_Override(member, unset, lo, hi, tail) #member

template <class M>
struct ConfigOverride {
  M tparConfig_t::*member;
  const char* label;  // the member's name
  M unset, lo, hi;
  const char* tail;   // the rest of the error after the value
};
template <class M, class U, class L, class H>
constexpr ConfigOverride<M> configOverride(M tparConfig_t::*member, const char* label, U unset,
                                           L lo, H hi, const char* tail) {
  return {member, label, static_cast<M>(unset), static_cast<M>(lo), static_cast<M>(hi), tail};
}

template <class E, class C>
void copyFromEnv(const Env& env, ResolvedConfig* cfg, E Env::*from, C ResolvedConfig::*to) {
  cfg->*to = static_cast<C>(env.*from);
}
template <class E>
void copyFromEnv(const Env&, ResolvedConfig*, E Env::*, std::nullptr_t) {}

template <class Member>
tparResult_t applyOverride(const tparConfig_t&, ResolvedConfig*, Member, std::nullptr_t) {
  return tparSuccess;
}
template <class C, class M>
tparResult_t applyOverride(const tparConfig_t& user, ResolvedConfig* cfg, C ResolvedConfig::*to,
                           const ConfigOverride<M>& o) {
  const M value = user.*o.member;
  if (value == o.unset) return tparSuccess;
  if (value < o.lo || value > o.hi) {
    return setError(tparInvalidArgument, "config->%s %s %s", o.label,
                    std::to_string(value).c_str(), o.tail);
  }
  cfg->*to = static_cast<C>(value);
  return tparSuccess;
}
template <class M>
tparResult_t applyOverride(const tparConfig_t&, ResolvedConfig*, std::nullptr_t,
                           const ConfigOverride<M>&) {
  static_assert(sizeof(M) == 0, "a tparConfig_t override needs a Comm or Shape setting");
  return tparInternalError;
}

// CallShape carries every Shape setting as an int64_t.
template <bool kShape, class C>
int64_t shapeValue(const ResolvedConfig& cfg, C ResolvedConfig::*member) {
  if constexpr (kShape) {
    static_assert(std::is_integral_v<C> || std::is_enum_v<C>,
                  "a Shape setting must be a number (CallShape carries it as int64_t)");
    static_assert(sizeof(C) <= sizeof(int64_t), "a Shape setting must fit in 64 bits");
    return static_cast<int64_t>(cfg.*member);
  } else {
    return 0;
  }
}
template <bool kShape>
int64_t shapeValue(const ResolvedConfig&, std::nullptr_t) {
  static_assert(!kShape, "a Shape setting is a ResolvedConfig member");
  return 0;
}

struct ConfigRow {
  void (*copy)(const Env& env, ResolvedConfig* cfg);
  tparResult_t (*apply)(const tparConfig_t& user, ResolvedConfig* cfg);
  bool shape;
  ShapeSetting shape_setting;
};

const std::vector<ConfigRow>& configRows() {
#define TPAR_SETTING(name, field, type, kind, default_value, choices, reader, expected, scope, \
                     override, description)                                                  \
  {[](const Env& env, ResolvedConfig* cfg) {                                                 \
     copyFromEnv(env, cfg, &Env::field, TPAR_CONFIG_MEMBER_##scope);                         \
   },                                                                                        \
   [](const tparConfig_t& user, ResolvedConfig* cfg) {                                       \
     return applyOverride(user, cfg, TPAR_CONFIG_MEMBER_##scope,                             \
                          TPAR_CONFIG_OVERRIDE_##override);                                  \
   },                                                                                        \
   TPAR_SETTING_IS_SHAPE_##scope,                                                            \
   {name, TPAR_CONFIG_OVERRIDE_NAME_##override,                                              \
    [](const ResolvedConfig& cfg) {                                                          \
      return shapeValue<TPAR_SETTING_IS_SHAPE_##scope>(cfg, TPAR_CONFIG_MEMBER_##scope);     \
    },                                                                                       \
    [](int64_t value) { return (reader).show(value); }}},
  static const std::vector<ConfigRow> kRows = {
#include "base/settings.def"
  };
#undef TPAR_SETTING
  return kRows;
}

// Keep pieces 16-byte multiples so that chunking preserves vector alignment.
void alignPieces(ResolvedConfig* cfg) { cfg->max_bytes_per_call &= ~uint64_t{15}; }

}  // namespace

ResolvedConfig::ResolvedConfig() {
  static const Env kDefaults;
  for (const ConfigRow& row : configRows()) row.copy(kDefaults, this);
  alignPieces(this);
}

const std::array<ShapeSetting, kNumShapeSettings>& shapeSettings() {
  static const std::array<ShapeSetting, kNumShapeSettings> kShape = [] {
    std::array<ShapeSetting, kNumShapeSettings> out{};
    size_t n = 0;
    for (const ConfigRow& row : configRows())
      if (row.shape) out[n++] = row.shape_setting;
    return out;
  }();
  return kShape;
}

tparResult_t resolveConfig(const tparConfig_t* user, const Env& env, ResolvedConfig* out) {
  ResolvedConfig cfg;
  for (const ConfigRow& row : configRows()) row.copy(env, &cfg);

  if (user != nullptr) {
    // The initializer sets size, magic and version; anything else means the struct was not
    // initialized with TPAR_CONFIG_INITIALIZER (or comes from an incompatible header).
    if (user->size != sizeof(tparConfig_t) || user->magic != TPAR_CONFIG_MAGIC) {
      return setError(tparInvalidArgument,
                      "config was not initialized with TPAR_CONFIG_INITIALIZER (size %zu, "
                      "magic 0x%x; expected %zu, 0x%x)",
                      user->size, user->magic, sizeof(tparConfig_t), TPAR_CONFIG_MAGIC);
    }
    if (user->version / 100 != TPAR_VERSION_CODE / 100) {
      return setError(tparInvalidArgument, "config->version %u does not match library %d",
                      user->version, TPAR_VERSION_CODE);
    }
    for (const ConfigRow& row : configRows()) TPAR_TRY(row.apply(*user, &cfg));
  }
  alignPieces(&cfg);
  *out = cfg;
  return tparSuccess;
}

}  // namespace tpar
