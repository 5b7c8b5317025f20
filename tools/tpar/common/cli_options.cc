#include "tools/tpar/common/cli_options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include "api/internal.h"

namespace tpar_cli {

std::string bytesText(size_t bytes) {
  static const char* kUnits[] = {"", "K", "M", "G"};
  int u = 0;
  while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + kUnits[u];
}

std::string parseList(const std::string& option, const std::string& text,
                      const std::function<bool(const std::string&)>& one) {
  std::stringstream ss(text);
  std::string item;
  bool any = false;
  while (std::getline(ss, item, ',')) {
    if (item.empty() || !one(item)) return option + ": bad value '" + item + "'";
    any = true;
  }
  return any ? "" : option + ": empty list";
}

void addSizeOptions(CLI::App* app, size_t* min_bytes, size_t* max_bytes, double* factor,
                    std::vector<size_t>* sizes, std::shared_ptr<std::string> error,
                    const std::string& unit, double min_factor) {
  auto bytesOption = [error](const char* name, size_t* target) {
    return [name, target, error](const std::string& v) {
      uint64_t b = 0;
      if (!tpar::parseBytes(v, &b) || b == 0) *error = std::string(name) + ": bad size '" + v + "'";
      *target = b;
    };
  };
  app->add_option_function<std::string>("-b,--minbytes", bytesOption("--minbytes", min_bytes),
                                        "smallest " + unit + " (e.g. 1K)")
      ->default_str(bytesText(*min_bytes));
  app->add_option_function<std::string>("-e,--maxbytes", bytesOption("--maxbytes", max_bytes),
                                        "largest " + unit + " (e.g. 64M)")
      ->default_str(bytesText(*max_bytes));
  app->add_option("-f,--stepfactor", *factor, "size factor between " + unit + "s")
      ->check(CLI::Range(min_factor, 1e6))
      ->capture_default_str();
  app->add_option_function<std::string>(
      "--sizes",
      [sizes, error](const std::string& v) {
        std::stringstream ss(v);
        std::string item;
        while (std::getline(ss, item, ',')) {
          uint64_t b = 0;
          if (!tpar::parseBytes(item, &b) || b == 0) *error = "--sizes: bad size '" + item + "'";
          sizes->push_back(b);
        }
      },
      unit + " sizes, comma-separated (overrides -b/-e/-f)");
}

std::vector<size_t> sizeRange(size_t min_bytes, size_t max_bytes, double factor) {
  std::vector<size_t> out;
  for (double b = static_cast<double>(min_bytes); b <= max_bytes * 1.000001; b *= factor)
    out.push_back(static_cast<size_t>(b));
  if (max_bytes >= min_bytes && (out.empty() || out.back() < max_bytes)) out.push_back(max_bytes);
  return out;
}

bool parseDatatypeName(const std::string& name, tparDataType_t* out) {
  if (name == "bfloat16" || name == "bf16") *out = tparBfloat16;
  else if (name == "float16" || name == "half" || name == "fp16") *out = tparFloat16;
  else if (name == "float32" || name == "float" || name == "fp32") *out = tparFloat32;
  else return false;
  return true;
}

bool parseTransportName(const std::string& name, int* out) {
  if (name == "auto") *out = 0;
  else if (name == "host") *out = 1;
  else if (name == "p2p") *out = 2;
  else return false;
  return true;
}

const char* transportOptionName(int transport) {
  switch (transport) {
    case 0: return "auto";
    case 1: return "host";
    case 2: return "p2p";
    default: return "env";
  }
}

const char* wireOptionName(int wire) {
  const char* name = tpar::wireFormatName(wire);
  return name != nullptr ? name : "env";
}

std::string checkOutputPath(const std::string& path) {
  if (path.empty()) return "an empty path";
  struct stat st;
  const bool existed = stat(path.c_str(), &st) == 0;
  // Opened without O_TRUNC: an existing file keeps its contents until the run writes it.
  int fd = -1;
  if (tpar::openUserFile(path, tpar::UserFileMode::kWrite, "output file", &fd) != tparSuccess)
    return tparGetLastError(nullptr);
  close(fd);
  if (!existed) unlink(path.c_str());
  return "";
}

std::string writeOutputFile(const std::string& path, const std::string& text) {
  if (tpar::writeUserFile(path, "output file", text) != tparSuccess)
    return tparGetLastError(nullptr);
  return "";
}

}  // namespace tpar_cli
