// The `tpar` command.
//   tpar              what this machine has, then a short benchmark on the local GPUs
//   tpar info         GPUs, driver, library settings
//   tpar bench ...    latency table (see `tpar bench --help`)
//   tpar env [--markdown]   every environment variable tpar reads
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/env.h"
#include "tools/tpar/bench.h"
#include "tpar/tpar.h"

using tpar_cli::BenchOptions;

namespace {

const char* kUsage =
    "usage: tpar [info | bench [options] | env [--markdown] | --help | --version]\n"
    "\n"
    "  tpar            describe this machine, then run a short benchmark on its GPUs\n"
    "  tpar info       GPUs, driver and the settings tpar would use\n"
    "  tpar bench      all-reduce latency of every algorithm, CUDA-graph timed, checked\n"
    "  tpar env        environment variables tpar reads (--markdown: docs/env.md)\n";

const char* kBenchUsage =
    "usage: tpar bench [options]\n"
    "  -b, --minbytes SIZE   smallest message (default 12K)\n"
    "  -e, --maxbytes SIZE   largest message (default 4M)\n"
    "  -f, --stepfactor F    size factor between rows (default 2)\n"
    "      --sizes A,B,...   explicit sizes instead of -b/-e/-f\n"
    "  -n, --iters N         timed calls per rank (default 200)\n"
    "  -w, --warmup_iters N  untimed calls first (default 20)\n"
    "  -G, --cudagraph 0|1   time CUDA-graph replays (1, default) or eager calls (0)\n"
    "  -d, --datatype T      bfloat16 (default), float16, float32\n"
    "      --ranks N[,M..]   ranks (default: all GPUs; on one GPU, 8 virtual ranks)\n"
    "      --algos LIST      auto,oneshot,twoshot (default all three)\n"
    "      --json FILE       write every row with GPU, driver, commit and command\n";

int info() {
  int version = 0;
  tparGetVersion(&version);
  std::printf("tpar %d.%d.%d (commit %s)\n", version / 10000, version / 100 % 100, version % 100,
              TPAR_GIT_COMMIT);
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  int driver = 0;
  cudaDriverGetVersion(&driver);
  if (err != cudaSuccess || n == 0) {
    std::printf("No CUDA GPU on this machine (%s).\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    std::printf("tpar needs NVIDIA GPUs (sm_80 or newer) to all-reduce; what runs here without\n"
                "one: the unit tests (scripts/test.sh) and `tpar env`.\n");
    return 0;
  }
  std::printf("CUDA driver %d.%d, %d GPU(s):\n", driver / 1000, driver % 1000 / 10, n);
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, d);
    char bus[32] = {0};
    cudaDeviceGetPCIBusId(bus, sizeof(bus), d);
    std::printf("  GPU %d: %s, sm_%d%d, %d SMs, %.0f GiB, PCI %s\n", d, p.name, p.major, p.minor,
                p.multiProcessorCount, p.totalGlobalMem / double(1 << 30), bus);
  }
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      int can = 0;
      cudaDeviceCanAccessPeer(&can, a, b);
      if (!can) std::printf("  GPU %d cannot access GPU %d peer-to-peer\n", a, b);
    }
  }
  const tpar::Env* env = nullptr;
  if (tpar::processEnv(&env) != tparSuccess) {
    std::printf("environment: %s\n", tparGetLastError(nullptr));
    return 1;
  }
  for (const auto& kv : env->set_vars) std::printf("  set: %s\n", kv.c_str());
  return 0;
}

bool parseSizeList(const std::string& s, std::vector<size_t>* out) {
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    uint64_t b = 0;
    if (!tpar::parseBytes(item, &b) || b == 0) return false;
    out->push_back(b);
  }
  return !out->empty();
}

int bench(int argc, char** argv, const std::string& cmdline) {
  BenchOptions opt;
  opt.command_line = cmdline;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "tpar bench: %s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    auto bad = [&](const std::string& v) {
      std::fprintf(stderr, "tpar bench: bad value '%s' for %s\n%s", v.c_str(), a.c_str(), kBenchUsage);
      std::exit(2);
    };
    uint64_t b = 0;
    int64_t k = 0;
    if (a == "-h" || a == "--help") {
      std::printf("%s", kBenchUsage);
      return 0;
    } else if (a == "-b" || a == "--minbytes") {
      std::string v = value("-b");
      if (!tpar::parseBytes(v, &b) || b == 0) bad(v);
      opt.min_bytes = b;
    } else if (a == "-e" || a == "--maxbytes") {
      std::string v = value("-e");
      if (!tpar::parseBytes(v, &b) || b == 0) bad(v);
      opt.max_bytes = b;
    } else if (a == "-f" || a == "--stepfactor") {
      std::string v = value("-f");
      opt.factor = std::atof(v.c_str());
      if (opt.factor <= 1.0) bad(v);
    } else if (a == "--sizes") {
      std::string v = value("--sizes");
      if (!parseSizeList(v, &opt.sizes)) bad(v);
    } else if (a == "-n" || a == "--iters") {
      std::string v = value("-n");
      if (!tpar::parseInt(v, &k) || k < 1) bad(v);
      opt.iters = static_cast<int>(k);
    } else if (a == "-w" || a == "--warmup_iters") {
      std::string v = value("-w");
      if (!tpar::parseInt(v, &k) || k < 0) bad(v);
      opt.warmup = static_cast<int>(k);
    } else if (a == "-G" || a == "--cudagraph") {
      std::string v = value("-G");
      if (v != "0" && v != "1") bad(v);
      opt.graph = v == "1";
    } else if (a == "-d" || a == "--datatype") {
      std::string v = value("-d");
      if (v == "bfloat16" || v == "bf16") opt.dtype = tparBfloat16;
      else if (v == "float16" || v == "half" || v == "fp16") opt.dtype = tparFloat16;
      else if (v == "float32" || v == "float" || v == "fp32") opt.dtype = tparFloat32;
      else bad(v);
    } else if (a == "--ranks") {
      std::string v = value("--ranks");
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (!tpar::parseInt(item, &k) || k < 1 || k > TPAR_MAX_RANKS) bad(v);
        opt.rank_list.push_back(static_cast<int>(k));
      }
    } else if (a == "--algos") {
      std::string v = value("--algos");
      opt.algos.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (item == "auto") opt.algos.push_back(tparAlgoAuto);
        else if (item == "oneshot") opt.algos.push_back(tparAlgoOneShot);
        else if (item == "twoshot") opt.algos.push_back(tparAlgoTwoShot);
        else bad(v);
      }
    } else if (a == "--json") {
      opt.json_path = value("--json");
    } else {
      std::fprintf(stderr, "tpar bench: unknown option '%s'\n%s", a.c_str(), kBenchUsage);
      return 2;
    }
  }
  return tpar_cli::runBench(opt);
}

}  // namespace

int main(int argc, char** argv) {
  std::string cmdline;
  for (int i = 0; i < argc; ++i) cmdline += (i ? " " : "") + std::string(argv[i]);
  if (argc < 2) {
    if (int rc = info()) return rc;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return 0;
    std::printf("\n");
    char* args[] = {const_cast<char*>("--sizes"), const_cast<char*>("12K,112K,384K,1M"),
                    const_cast<char*>("-n"), const_cast<char*>("100")};
    return bench(4, args, cmdline);
  }
  const std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("tpar %d.%d.%d (commit %s)\n", TPAR_MAJOR, TPAR_MINOR, TPAR_PATCH, TPAR_GIT_COMMIT);
    return 0;
  }
  if (cmd == "info") return info();
  if (cmd == "bench") return bench(argc - 2, argv + 2, cmdline);
  if (cmd == "env") {
    if (argc > 2 && std::strcmp(argv[2], "--markdown") == 0) {
      std::printf("%s", tpar::envMarkdown().c_str());
      return 0;
    }
    for (const auto& spec : tpar::envRegistry())
      std::printf("%-28s default %-8s %s\n", spec.name, spec.default_value, spec.description);
    return 0;
  }
  std::fprintf(stderr, "tpar: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
