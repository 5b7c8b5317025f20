// A communicator's settings: tparConfig_t fields override environment variables, which override
// built-in defaults. Resolved once at init and immutable afterwards.
#ifndef TPAR_BASE_CONFIG_H_
#define TPAR_BASE_CONFIG_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/env.h"
#include "tpar/tpar.h"

namespace tpar {

// The scopes of settings.def (NOTE [settings table]) as the config needs them: which lines a
// communicator holds, and which of those shape a call.
#define TPAR_SETTING_CONFIG_FIELD_Process
#define TPAR_SETTING_CONFIG_FIELD_Comm(cfg_field, cfg_type) cfg_type cfg_field{};
#define TPAR_SETTING_CONFIG_FIELD_Shape(cfg_field, cfg_type) cfg_type cfg_field{};
#define TPAR_SETTING_IS_SHAPE_Process false
#define TPAR_SETTING_IS_SHAPE_Comm(cfg_field, cfg_type) false
#define TPAR_SETTING_IS_SHAPE_Shape(cfg_field, cfg_type) true

// One member per Comm and Shape line of settings.def; max_bytes_per_call is rounded down to 16
// bytes. A default-constructed one holds the defaults, as resolveConfig gives them when no
// variable and no tparConfig_t field is set.
struct ResolvedConfig {
  ResolvedConfig();
#define TPAR_SETTING(name, field, type, kind, default_value, choices, reader, expected, scope, \
                     ...)                                                                     \
  TPAR_SETTING_CONFIG_FIELD_##scope
#include "base/settings.def"
#undef TPAR_SETTING
};

// Whether each line of settings.def shapes a call, in table order.
inline constexpr bool kSettingShapesCalls[] = {
#define TPAR_SETTING(name, field, type, kind, default_value, choices, reader, expected, scope, \
                     ...)                                                                     \
  TPAR_SETTING_IS_SHAPE_##scope,
#include "base/settings.def"
#undef TPAR_SETTING
};
static_assert(sizeof(kSettingShapesCalls) / sizeof(bool) == kNumSettings);

constexpr int countShapeSettings() {
  int n = 0;
  for (bool shape : kSettingShapesCalls) n += shape ? 1 : 0;
  return n;
}
// How many settings ranks must agree on: the slots of CallShape::settings.
inline constexpr int kNumShapeSettings = countShapeSettings();

// The position of the Shape setting `name` among the Shape settings (-1: it is none).
constexpr int shapeSettingIndex(std::string_view name) {
  const int line = settingIndex(name);
  if (line < 0 || !kSettingShapesCalls[line]) return -1;
  int n = 0;
  for (int i = 0; i < line; ++i) n += kSettingShapesCalls[i] ? 1 : 0;
  return n;
}

// A setting that every rank must hold alike (NOTE [agreement]).
struct ShapeSetting {
  const char* name;          // the environment variable
  const char* config_field;  // the tparConfig_t member that overrides it; nullptr: none
  int64_t (*value)(const ResolvedConfig& cfg);  // as CallShape carries it
  std::string (*show)(int64_t value);           // as the agreement's messages print it
};

// The Shape lines of settings.def in table order: CallShape::settings[i] holds
// shapeSettings()[i].
const std::array<ShapeSetting, kNumShapeSettings>& shapeSettings();

// Validates `user` (may be null) and merges it over `env`. Bad fields fail with
// tparInvalidArgument naming the field; *out is written only on success.
tparResult_t resolveConfig(const tparConfig_t* user, const Env& env, ResolvedConfig* out);

}  // namespace tpar

#endif  // TPAR_BASE_CONFIG_H_
