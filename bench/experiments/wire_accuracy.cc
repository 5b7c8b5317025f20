// How much each compressed wire format changes an all-reduce's result (docs/WIRE.md), on the
// host: the arithmetic of src/kernels/prims/wire.h through the pipeline of
// tests/common/wire_reference.h, next to tpar's lossless path (fp32 in rank order, one rounding)
// and a bf16 ring as NCCL runs it (a rounding at every hop), all against the float64 sum of the
// same bf16 inputs.
//
// Inputs shaped like a row-parallel layer's partial outputs: rows x hidden values per rank, a
// normal bulk, and a few outlier channels (the same on every rank and row) 50 to 100 times
// larger; every value rounded to bf16. Fresh random values each run (the seed is printed and
// recorded; --seed repeats a run).
//
//   tpar_wire_accuracy [--ranks 2,4,8] [--rows 64] [--hidden 7168] [--outliers 8]
//                      [--blocks 32,64,128] [--seed N] [--json FILE]
// Prints one line per (ranks, path): relative L2 error, largest absolute error, and that
// divided by the largest |sum|.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/wire_reference.h"

namespace {

using tpar::kernels::WireFormat;
using tpar::ref::WireAlgo;

std::vector<int> intList(const std::string& option, const char* v) {
  std::vector<int> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long k = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || k <= 0 || k > 1 << 20) {
      std::fprintf(stderr, "tpar_wire_accuracy: %s: '%s' is not a positive whole number\n",
                   option.c_str(), item.c_str());
      std::exit(2);
    }
    out.push_back(static_cast<int>(k));
  }
  return out;
}

struct Error {
  double rel_l2 = 0, max_abs = 0, max_abs_rel = 0;
};

Error errorOf(const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0, den = 0, worst = 0, top = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(out[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    worst = std::max(worst, std::fabs(d));
    top = std::max(top, std::fabs(ref[i]));
  }
  return Error{std::sqrt(num / den), worst, worst / top};
}

const char* formatName(WireFormat f) {
  return f == WireFormat::kFp8 ? "fp8" : f == WireFormat::kInt8 ? "int8" : "int4";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks = {2, 4, 8}, blocks = {32, 64, 128};
  int rows = 64, hidden = 7168, outliers = 8;
  uint64_t seed = std::random_device{}() * 0x9E3779B97F4A7C15ull ^
                  static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    auto need = [&]() {
      if (v == nullptr) {
        std::fprintf(stderr, "tpar_wire_accuracy: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      ++i;
      return v;
    };
    if (a == "--ranks") ranks = intList(a, need());
    else if (a == "--blocks") blocks = intList(a, need());
    else if (a == "--rows") rows = intList(a, need()).at(0);
    else if (a == "--hidden") hidden = intList(a, need()).at(0);
    else if (a == "--outliers") outliers = intList(a, need()).at(0);
    else if (a == "--seed") {
      const char* text = need();
      char* end = nullptr;
      seed = std::strtoull(text, &end, 10);
      if (*text == '\0' || *end != '\0' || *text == '-') {
        std::fprintf(stderr, "tpar_wire_accuracy: --seed: '%s' is not a whole number\n", text);
        return 2;
      }
    }
    else if (a == "--json") json = need();
    else {
      std::fprintf(stderr,
                   "usage: tpar_wire_accuracy [--ranks 2,4,8] [--rows 64] [--hidden 7168] "
                   "[--outliers 8] [--blocks 32,64,128] [--seed N] [--json FILE]\n");
      return 2;
    }
  }
  for (int b : blocks) {
    if (b != 32 && b != 64 && b != 128) {
      std::fprintf(stderr, "tpar_wire_accuracy: --blocks: %d is not 32, 64 or 128\n", b);
      return 2;
    }
  }
  if (outliers > hidden) outliers = hidden;
  std::string cmd;
  for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + std::string(argv[i]);

  std::printf("# tpar_wire_accuracy: %d rows x %d hidden per rank, %d outlier channels (50-100x), "
              "bf16 inputs, seed %llu\n",
              rows, hidden, outliers, static_cast<unsigned long long>(seed));
  std::printf("# %5s %-22s %12s %12s %12s\n", "ranks", "path", "rel L2", "max |err|", "/ max |sum|");
  std::ostringstream rows_json;
  bool first = true;
  std::mt19937_64 rng(seed);
  const size_t count = size_t(rows) * hidden;
  for (int n : ranks) {
    // The outlier channels and their factors, then each rank's values.
    std::vector<float> factor(hidden, 1.0f);
    std::uniform_int_distribution<int> channel(0, hidden - 1);
    std::uniform_real_distribution<float> big(50.0f, 100.0f);
    for (int k = 0; k < outliers; ++k) factor[channel(rng)] = big(rng);
    std::normal_distribution<float> bulk(0.0f, 1.0f);
    std::vector<std::vector<float>> in(n, std::vector<float>(count));
    std::vector<double> ref(count, 0.0);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) {
        in[r][i] = tpar::ref::bf16Round(bulk(rng) * factor[i % hidden]);
        ref[i] += in[r][i];
      }
    }
    auto report = [&](const std::string& path, const std::string& format, int block,
                      const std::string& algo, std::vector<float> out) {
      for (float& v : out) v = tpar::ref::bf16Round(v);  // the output's datatype: bf16
      const Error e = errorOf(out, ref);
      std::printf("  %5d %-22s %12.3e %12.3e %12.3e\n", n, path.c_str(), e.rel_l2, e.max_abs,
                  e.max_abs_rel);
      rows_json << (first ? "" : ",\n") << "  {\"ranks\": " << n << ", \"path\": \"" << path
                << "\", \"wire\": \"" << format << "\", \"block\": " << block << ", \"algo\": \""
                << algo << "\", \"rel_l2\": " << e.rel_l2 << ", \"max_abs\": " << e.max_abs
                << ", \"max_abs_over_max_sum\": " << e.max_abs_rel << "}";
      first = false;
    };
    report("lossless", "none", 0, "any", tpar::ref::losslessAllReduce(in));
    report("nccl-bf16-ring", "bf16", 0, "ring", tpar::ref::bf16RingAllReduce(in));
    for (WireFormat f : {WireFormat::kFp8, WireFormat::kInt8, WireFormat::kInt4}) {
      for (int b : blocks) {
        for (WireAlgo algo : {WireAlgo::kTwoShot, WireAlgo::kOneShot}) {
          const std::string a = algo == WireAlgo::kTwoShot ? "twoshot" : "oneshot";
          report(std::string(formatName(f)) + "/" + std::to_string(b) + " " + a, formatName(f), b,
                 a, tpar::ref::wireAllReduce(f, b, algo, in));
        }
      }
    }
  }
  if (!json.empty()) {
    FILE* fp = std::fopen(json.c_str(), "w");
    if (fp == nullptr) {
      std::fprintf(stderr, "tpar_wire_accuracy: cannot write %s\n", json.c_str());
      return 1;
    }
    std::fprintf(fp,
                 "{\"tool\": \"tpar_wire_accuracy\", \"command\": \"%s\", \"commit\": \"%s\", "
                 "\"machine\": \"cpu\", \"inputs\": {\"rows\": %d, \"hidden\": %d, "
                 "\"outlier_channels\": %d, \"outlier_factor\": [50, 100], \"dtype\": "
                 "\"bfloat16\"}, \"seed\": %llu, \"reference\": \"float64 sum of the bf16 inputs\", "
                 "\"output_dtype\": \"bfloat16\",\n\"rows\": [\n%s\n]}\n",
                 cmd.c_str(), TPAR_GIT_COMMIT, rows, hidden, outliers,
                 static_cast<unsigned long long>(seed), rows_json.str().c_str());
    std::fclose(fp);
    std::printf("# wrote %s\n", json.c_str());
  }
  return 0;
}
