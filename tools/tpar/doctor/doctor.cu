// `tpar doctor`: the first thing to run on a new machine. It lists the GPUs and their links,
// measures them, checks that tpar computes right here, times it against NCCL and says in plain
// words what that means. The GPU work lives in probes.cu; this file gathers the inventory and
// turns a DoctorResults into a verdict, tables and JSON (pure functions, unit-tested).
#include <cuda_runtime_api.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <memory>

#include "api/internal.h"
#include "tools/tpar/common/cli_options.h"
#include "tools/tpar/common/commands.h"
#include "tools/tpar/doctor/doctor.h"
#include "tools/tpar/common/nccl_loader.h"
#include "tools/tpar/doctor/nvml.h"
#include "tools/tpar/doctor/probes.h"
#include "tools/tpar/common/report.h"
#include "tpar/tpar.h"

namespace tpar_cli {
namespace {

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  return buf;
}

std::string sizeName(size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt("%zu MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt("%zu KiB", bytes >> 10);
  return fmt("%zu B", bytes);
}

std::string gpuList(const std::vector<int>& devs) {
  std::string s;
  for (size_t i = 0; i < devs.size(); ++i) s += (i ? ", " : "") + std::to_string(devs[i]);
  return s;
}

// "-" for what was not measured.
std::string num(double v, const char* f) { return v > 0 ? fmt(f, v) : "-"; }

nlohmann::json orNull(double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(); }

const PairProbe* pairOf(const DoctorResults& r, int a, int b) {
  for (const PairProbe& p : r.pairs)
    if (p.a == a && p.b == b) return &p;
  return nullptr;
}

bool peerBothWays(const DoctorResults& r, int a, int b) {
  const PairProbe* ab = pairOf(r, a, b);
  const PairProbe* ba = pairOf(r, b, a);
  return ab && ba && ab->peer_access && ba->peer_access;
}

// Where the self-test ran, in words.
std::string whereTested(const DoctorResults& r) {
  if (usesVirtualRanks(r.devices)) return "2 virtual ranks on GPU " + std::to_string(r.devices[0]);
  if (r.devices.size() == r.gpus.size()) return "all " + std::to_string(r.gpus.size()) + " GPUs";
  return "GPUs " + gpuList(r.devices);
}

// "a-b" over the GPUs' host measurements, for the summary of the host-memory path.
std::string spread(const DoctorResults& r, double LinkMeasure::*field, const char* f) {
  double lo = 0, hi = 0;
  for (const GpuProbe& g : r.gpus) {
    const double v = g.host.*field;
    if (v <= 0) continue;
    lo = lo > 0 ? std::min(lo, v) : v;
    hi = std::max(hi, v);
  }
  if (hi <= 0) return "-";
  return lo == hi ? fmt(f, lo) : fmt(f, lo) + "-" + fmt(f, hi);
}

std::string timingLine(const DoctorResults& r, const TimingResult& t) {
  const std::string at = "At " + sizeName(t.bytes) + ": ";
  if (t.tpar_us <= 0) return at + "tpar not timed (" + t.tpar_error + ").";
  const std::string tpar = fmt("tpar %.1f us", t.tpar_us);
  if (usesVirtualRanks(r.devices)) {
    return at + tpar + " with 2 virtual ranks sharing one GPU; not comparable with NCCL (which " +
           "cannot run two ranks on one GPU) nor with a machine of several GPUs.";
  }
  if (t.nccl_us <= 0) return at + tpar + "; NCCL not measured (" + t.nccl_error + ").";
  const double ratio = t.nccl_us / t.tpar_us;
  const std::string both = tpar + fmt(", NCCL %.1f us", t.nccl_us);
  if (ratio >= 1.0) return at + both + fmt(": tpar is %.1fx faster.", ratio);
  return at + both + fmt(": tpar is %.1fx SLOWER than NCCL here.", 1.0 / ratio);
}

// "PASS" only when the forced algorithm itself ran and every check passed.
std::string selfTestLine(const SelfTestResult& t) {
  if (!t.passed) return fmt("  %-13s FAIL  %s\n", t.backend.c_str(), t.detail.c_str());
  if (!t.fallback.empty())
    return fmt("  %-13s fell back to %s: %s\n", t.backend.c_str(), t.fallback.c_str(),
               t.detail.c_str());
  return fmt("  %-13s PASS  %s\n", t.backend.c_str(), t.detail.c_str());
}

nlohmann::json linkJson(const LinkMeasure& m) {
  return {{"write_gbps", orNull(m.write_gbps)},
          {"read_gbps", orNull(m.read_gbps)},
          {"both_gbps", orNull(m.both_gbps)},
          {"latency_us", orNull(m.latency_us)},
          {"error", m.error}};
}

int numaNodeOf(const std::string& bus_id) {
  const std::string dir = sysfsBusId(bus_id);
  if (dir.empty()) return -1;
  std::ifstream f("/sys/bus/pci/devices/" + dir + "/numa_node");
  int node = -1;
  return f >> node ? node : -1;
}

void gatherInventory(DoctorResults* r) {
  r->nvidia_driver = nvidiaDriverVersion();
  cudaDriverGetVersion(&r->cuda_driver);
  cudaRuntimeGetVersion(&r->cuda_runtime);
  std::string why;
  if (const NcclLib* nccl = loadNccl(&why))
    r->nccl_version = ncclVersionString(nccl->version);
  else
    r->nccl_error = why;
  const bool nvml = nvmlAvailable(&r->nvml_error);
  const std::vector<GpuInfo> gpus = listGpus(&why);
  if (gpus.empty()) {
    r->no_gpu = why.empty() ? "no devices" : why;
    return;
  }
  for (const GpuInfo& info : gpus) {
    GpuProbe g;
    g.index = info.index;
    g.name = info.name;
    g.cc_major = info.cc_major;
    g.cc_minor = info.cc_minor;
    g.bus_id = info.bus_id;
    g.numa_node = numaNodeOf(info.bus_id);
    PcieLink link;
    if (nvml && nvmlPcieLink(info.bus_id, &link, nullptr)) {
      g.pcie_gen = link.gen;
      g.pcie_width = link.width;
      g.pcie_gen_max = link.gen_max;
      g.pcie_width_max = link.width_max;
    }
    r->gpus.push_back(g);
  }
  for (const GpuProbe& a : r->gpus) {
    for (const GpuProbe& b : r->gpus) {
      if (a.index == b.index) continue;
      PairProbe p;
      p.a = a.index;
      p.b = b.index;
      p.topology = topologyName(p.a, p.b, nvmlTopologyLevel(a.bus_id, b.bus_id),
                                nvmlNvLinkCount(a.bus_id, b.bus_id));
      int v = 0;
      if (cudaDeviceCanAccessPeer(&v, p.a, p.b) == cudaSuccess) p.peer_access = v != 0;
      if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrPerformanceRank, p.a, p.b) == cudaSuccess)
        p.performance_rank = v;
      if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, p.a, p.b) == cudaSuccess)
        p.access_supported = v != 0;
      if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrNativeAtomicSupported, p.a, p.b) ==
          cudaSuccess)
        p.native_atomics = v != 0;
      (void)cudaGetLastError();
      if (!p.peer_access) p.nvml_p2p = nvmlP2pWriteProblem(a.bus_id, b.bus_id);
      r->pairs.push_back(p);
    }
  }
}

// What tpar itself will do on r->devices: its transport and one-shot/two-shot crossover.
void queryTpar(DoctorResults* r) {
  const std::vector<int>& devs = r->devices;
  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  cfg.allowSharedDevice = usesVirtualRanks(devs) ? 1 : 0;
  std::vector<tparComm_t> comms(devs.size(), nullptr);
  if (tparCommInitAllConfig(comms.data(), static_cast<int>(devs.size()), devs.data(), &cfg) !=
      tparSuccess) {
    r->init_error = tparGetLastError(nullptr);
    return;
  }
  tparCommInfo_t info;
  if (tparCommQuery(comms[0], &info) == tparSuccess) {
    r->transport = tparTransportName(info.transport);
    r->one_shot_max_bytes = info.oneShotMaxBytes;
  }
  r->algorithm_table = tpar::commAlgorithmTable(comms[0]);
  for (tparComm_t c : comms) tparCommDestroy(c);
}

}  // namespace

std::string topologyName(int a, int b, int nvml_level, int nvlinks) {
  if (a == b) return "X";
  if (nvlinks > 0) return "NV" + std::to_string(nvlinks);
  switch (nvml_level) {
    case kNvmlTopologyInternal:  // two GPUs of one board sit behind the board's own switch
    case kNvmlTopologySingle:
      return "PIX";
    case kNvmlTopologyMultiple:
      return "PXB";
    case kNvmlTopologyHostBridge:
      return "PHB";
    case kNvmlTopologyNode:
      return "NODE";
    case kNvmlTopologySystem:
      return "SYS";
    default:
      return "?";
  }
}

std::string sysfsBusId(const std::string& bus_id) { return tpar::canonicalBusId(bus_id); }

std::vector<std::pair<int, int>> blockedPairs(const DoctorResults& r) {
  std::vector<std::pair<int, int>> out;
  for (size_t a = 0; a < r.gpus.size(); ++a)
    for (size_t b = a + 1; b < r.gpus.size(); ++b)
      if (!peerBothWays(r, static_cast<int>(a), static_cast<int>(b)))
        out.emplace_back(static_cast<int>(a), static_cast<int>(b));
  return out;
}

std::vector<int> chooseDevices(const DoctorResults& r) {
  if (r.gpus.empty()) return {};
  if (r.gpus.size() == 1) return {0, 0};
  // Every GPU: where some pair lacks peer access, tpar's communicator puts its receive regions
  // in pinned host memory by itself, and the self-test then checks that path.
  std::vector<int> all;
  for (size_t i = 0; i < r.gpus.size() && i < TPAR_MAX_RANKS; ++i) all.push_back(static_cast<int>(i));
  return all;
}

bool usesVirtualRanks(const std::vector<int>& devices) {
  for (size_t i = 0; i < devices.size(); ++i)
    for (size_t j = i + 1; j < devices.size(); ++j)
      if (devices[i] == devices[j]) return true;
  return false;
}

Verdict makeVerdict(const DoctorResults& r) {
  Verdict v;
  if (!r.no_gpu.empty()) {
    v.exit_code = kDoctorNoGpu;
    v.headline = "tpar cannot run here: " + r.no_gpu + ".";
    v.details.push_back(
        "tpar needs NVIDIA GPUs visible to CUDA: check nvidia-smi, the driver, "
        "and CUDA_VISIBLE_DEVICES.");
    return v;
  }
  const int n = static_cast<int>(r.gpus.size());
  const auto blocked = blockedPairs(r);
  std::vector<const SelfTestResult*> failed;
  for (const SelfTestResult& t : r.self_tests)
    if (!t.passed) failed.push_back(&t);
  const bool passed = !r.self_tests.empty() && failed.empty();

  if (!passed) {
    v.exit_code = kDoctorSelfTestFailed;
    v.headline = "tpar does NOT work here: its self-test failed on " + whereTested(r) + ".";
    if (r.self_tests.empty()) v.details.push_back("The self-test did not run.");
    for (const SelfTestResult* t : failed) v.details.push_back(t->backend + ": " + t->detail);
    if (!r.init_error.empty())
      v.details.push_back("tpar could not create a communicator: " + r.init_error);
    v.details.push_back("Please report this with the file written by `tpar doctor --json FILE`.");
  } else if (!blocked.empty()) {
    v.headline = "tpar works here, through pinned host memory: its self-test passed on " +
                 whereTested(r) + ", and peer-to-peer access is blocked between some of them.";
  } else if (n == 1) {
    v.headline =
        "tpar works here, with 2 virtual ranks on this machine's single GPU (tensor "
        "parallelism itself needs two or more GPUs).";
  } else {
    v.headline = "tpar works here: its self-test passed on all " + std::to_string(n) + " GPUs.";
  }

  if (!blocked.empty()) {
    std::string list;
    for (auto [a, b] : blocked) {
      const PairProbe* p = pairOf(r, a, b);
      list += fmt("%sGPU %d and GPU %d", list.empty() ? "" : "; ", a, b);
      if (p && !p->nvml_p2p.empty())
        list += " (" + p->topology + ", NVML: " + p->nvml_p2p + ")";
      else if (p)
        list += " (" + p->topology + ")";
    }
    v.details.push_back("Peer-to-peer is blocked between " + list +
                        ". Common causes: PCIe ACS "
                        "sending peer traffic up to the root complex, an IOMMU in translated "
                        "mode (try iommu=pt), or consumer GPUs whose driver disables P2P.");
    v.details.push_back(
        "For a group with such a pair tpar uses its host-staged transport: receive regions in "
        "pinned host memory, so every byte crosses PCIe to host memory and back "
        "(TPAR_TRANSPORT=p2p refuses such a group instead). Measured through host memory: "
        "write " +
        spread(r, &LinkMeasure::write_gbps, "%.1f") + " GB/s, read " +
        spread(r, &LinkMeasure::read_gbps, "%.1f") + " GB/s, one-way " +
        spread(r, &LinkMeasure::latency_us, "%.2f") + " us per GPU.");
  }

  for (const SelfTestResult& t : r.self_tests) {
    if (t.passed && !t.fallback.empty())
      v.details.push_back(t.backend + " cannot run on " + whereTested(r) + ": it fell back to " +
                          t.fallback + ", so its self-test there checked " + t.ran + ", not " +
                          t.backend.substr(t.backend.find(':') + 1) + ".");
  }
  if (passed) {
    if (!r.transport.empty()) {
      // From the plan the communicator follows (tparCommSelectAlgorithm per size), not from a
      // constant: it differs by transport, rank count and tuning table.
      v.details.push_back("tpar will use the '" + r.transport + "' transport on " + whereTested(r) +
                          (r.algorithm_table.empty()
                               ? "."
                               : "; its algorithms there for bfloat16 messages: " +
                                     r.algorithm_table + "."));
    }
    for (const TimingResult& t : r.timings) v.details.push_back(timingLine(r, t));
    v.details.push_back(
        "SGLang and vLLM: tpar's Python package (TPAR_ENGINE_PLUGIN=1) or its NCCL drop-in "
        "library (libtpar_nccl.so) makes tpar their all-reduce (docs/integration.md); from C or "
        "C++, tparCommInitRank or tparCommInitAll, then tparAllReduce on your stream, "
        "CUDA-graph capturable.");
  }

  for (const GpuProbe& g : r.gpus) {
    if (g.pcie_width > 0 && g.pcie_width_max > 0 && g.pcie_width < g.pcie_width_max)
      v.details.push_back(fmt("GPU %d's PCIe link runs at x%d of x%d: check its slot or riser.",
                              g.index, g.pcie_width, g.pcie_width_max));
    if (!g.host.error.empty())
      v.details.push_back(fmt("GPU %d <-> host memory probe: ", g.index) + g.host.error);
    if (!g.local.error.empty())
      v.details.push_back(fmt("GPU %d <-> own memory probe: ", g.index) + g.local.error);
  }
  for (const PairProbe& p : r.pairs) {
    if (!p.link.error.empty())
      v.details.push_back(fmt("GPU %d -> GPU %d probe: ", p.a, p.b) + p.link.error +
                          " (peer access is reported, but the link did not behave)");
    if (p.link.write_gbps > 0 && p.link.read_gbps > 1.1 * p.link.write_gbps)
      v.details.push_back(
          fmt("GPU %d -> GPU %d: reads measured faster than writes (%.1f vs "
              "%.1f GB/s); tpar's kernels push (write) today.",
              p.a, p.b, p.link.read_gbps, p.link.write_gbps));
  }
  if (!r.nvml_error.empty())
    v.details.push_back("PCIe links and topology unknown: NVML unavailable (" + r.nvml_error +
                        ").");
  if (r.quick) v.details.push_back("Bandwidth not measured (--quick).");
  return v;
}

nlohmann::json doctorJson(const DoctorResults& r, const Verdict& v) {
  nlohmann::json j;
  j["quick"] = r.quick;
  j["nccl_requested"] = r.nccl_requested;
  j["no_gpu"] = r.no_gpu.empty() ? nlohmann::json() : nlohmann::json(r.no_gpu);
  j["nvml"] = r.nvml_error.empty() ? "ok" : "unavailable: " + r.nvml_error;
  j["nccl"] = {
      {"version", r.nccl_version.empty() ? nlohmann::json() : nlohmann::json(r.nccl_version)},
      {"error", r.nccl_error}};
  j["host_numa_node"] = r.host_numa_node;
  j["gpus"] = nlohmann::json::array();
  for (const GpuProbe& g : r.gpus) {
    nlohmann::json gj = {{"index", g.index},
                         {"name", g.name},
                         {"compute_capability", fmt("%d.%d", g.cc_major, g.cc_minor)},
                         {"bus_id", g.bus_id},
                         {"numa_node", g.numa_node},
                         {"pcie",
                          {{"gen", g.pcie_gen},
                           {"width", g.pcie_width},
                           {"gen_max", g.pcie_gen_max},
                           {"width_max", g.pcie_width_max}}},
                         {"host", linkJson(g.host)}};
    gj["local"] = r.gpus.size() == 1 ? linkJson(g.local) : nlohmann::json();
    j["gpus"].push_back(gj);
  }
  nlohmann::json topo = nlohmann::json::array();
  for (const GpuProbe& a : r.gpus) {
    nlohmann::json row = nlohmann::json::array();
    for (const GpuProbe& b : r.gpus) {
      const PairProbe* p = pairOf(r, a.index, b.index);
      row.push_back(p ? p->topology : "X");
    }
    topo.push_back(row);
  }
  j["topology"] = topo;
  j["tpar_topology"] = topologyJson(r);
  j["pairs"] = nlohmann::json::array();
  for (const PairProbe& p : r.pairs) {
    nlohmann::json pj = {{"a", p.a},
                         {"b", p.b},
                         {"topology", p.topology},
                         {"peer_access", p.peer_access},
                         {"performance_rank", p.performance_rank},
                         {"access_supported", p.access_supported},
                         {"native_atomics", p.native_atomics},
                         {"nvml_p2p", p.nvml_p2p}};
    pj.update(linkJson(p.link));
    j["pairs"].push_back(pj);
  }
  nlohmann::json tests = nlohmann::json::array();
  for (const SelfTestResult& t : r.self_tests)
    tests.push_back({{"backend", t.backend},
                     {"where", t.where.empty() ? whereTested(r) : t.where},
                     {"passed", t.passed},
                     {"ran", t.ran},
                     {"fallback", t.fallback.empty() ? nlohmann::json() : nlohmann::json(t.fallback)},
                     {"detail", t.detail}});
  j["self_test"] = {{"devices", r.devices},
                    {"virtual_ranks", usesVirtualRanks(r.devices)},
                    {"transport", r.transport},
                    {"init_error", r.init_error},
                    {"one_shot_max_bytes", r.one_shot_max_bytes},
                    {"algorithm_table", r.algorithm_table},
                    {"results", tests}};
  nlohmann::json rows = nlohmann::json::array();
  for (const TimingResult& t : r.timings) {
    rows.push_back(
        {{"bytes", t.bytes},
         {"tpar_us", orNull(t.tpar_us)},
         {"tpar_algo", t.tpar_algo},
         {"tpar_error", t.tpar_error},
         {"nccl_us", orNull(t.nccl_us)},
         {"nccl_error", t.nccl_error},
         {"speedup_vs_nccl", t.tpar_us > 0 && t.nccl_us > 0 ? nlohmann::json(t.nccl_us / t.tpar_us)
                                                            : nlohmann::json()}});
  }
  j["timing"] = {{"dtype", tparDataTypeName(tparBfloat16)},
                 {"method", "one CUDA graph per rank, launched together"},
                 {"iterations", r.timing_iterations},
                 {"comparable_with_nccl", !r.devices.empty() && !usesVirtualRanks(r.devices)},
                 {"rows", rows}};
  j["verdict"] = {{"exit_code", v.exit_code},
                  {"tpar_works", v.exit_code == kDoctorOk},
                  {"headline", v.headline},
                  {"details", v.details}};
  return j;
}

std::string renderReport(const DoctorResults& r, const Verdict& v) {
  std::string s;
  if (r.no_gpu.empty()) {
    s += fmt("GPUs (NVIDIA driver %s, CUDA driver %d.%d, runtime %d.%d)\n", r.nvidia_driver.c_str(),
             r.cuda_driver / 1000, r.cuda_driver % 1000 / 10, r.cuda_runtime / 1000,
             r.cuda_runtime % 1000 / 10);
    s += fmt("  %-4s %-28s %-4s %-14s %-5s %-10s %-10s\n", "GPU", "name", "cc", "bus id", "NUMA",
             "PCIe now", "PCIe max");
    for (const GpuProbe& g : r.gpus) {
      const std::string now = g.pcie_gen ? fmt("Gen%d x%d", g.pcie_gen, g.pcie_width) : "?";
      const std::string max =
          g.pcie_gen_max ? fmt("Gen%d x%d", g.pcie_gen_max, g.pcie_width_max) : "?";
      s += fmt("  %-4d %-28s %d.%-2d %-14s %-5s %-10s %-10s\n", g.index, g.name.c_str(), g.cc_major,
               g.cc_minor, g.bus_id.c_str(),
               g.numa_node >= 0 ? std::to_string(g.numa_node).c_str() : "-", now.c_str(),
               max.c_str());
    }
    s += fmt("\nGPU <-> pinned host memory (allocated on NUMA node %s)\n",
             r.host_numa_node >= 0 ? std::to_string(r.host_numa_node).c_str() : "?");
    s += fmt("  %-4s %-11s %-11s %-11s\n", "GPU", "write GB/s", "read GB/s", "one-way us");
    for (const GpuProbe& g : r.gpus)
      s += fmt("  %-4d %-11s %-11s %-11s\n", g.index, num(g.host.write_gbps, "%.1f").c_str(),
               num(g.host.read_gbps, "%.1f").c_str(), num(g.host.latency_us, "%.2f").c_str());
    if (r.gpus.size() == 1) {
      const LinkMeasure& l = r.gpus[0].local;
      s += "\nGPU 0 <-> its own memory: write " + num(l.write_gbps, "%.0f") + " GB/s, read " +
           num(l.read_gbps, "%.0f") + " GB/s, one-way " + num(l.latency_us, "%.2f") + " us\n";
    } else {
      s += "\nTopology (as nvidia-smi topo -m)\n      ";
      for (const GpuProbe& b : r.gpus) s += fmt(" %-5s", ("GPU" + std::to_string(b.index)).c_str());
      s += "\n";
      for (const GpuProbe& a : r.gpus) {
        s += fmt("  GPU%-2d", a.index);
        for (const GpuProbe& b : r.gpus) {
          const PairProbe* p = pairOf(r, a.index, b.index);
          s += fmt(" %-5s", p ? p->topology.c_str() : "X");
        }
        s += "\n";
      }
      s += "  X = self, NV# = # NVLinks, PIX = one PCIe switch, PXB = several switches, PHB = a "
           "host bridge,\n  NODE = host bridges of one NUMA node, SYS = across NUMA nodes\n";
      s += "\nPeer-to-peer (kernels on a, memory of b)\n";
      s += fmt("  %-8s %-5s %-4s %-5s %-8s %-11s %-11s %-11s %s\n", "a -> b", "link", "P2P", "rank",
               "atomics", "write GB/s", "read GB/s", "one-way us", "note");
      for (const PairProbe& p : r.pairs) {
        const std::string note = !p.nvml_p2p.empty() ? p.nvml_p2p : p.link.error;
        s +=
            fmt("  %-8s %-5s %-4s %-5s %-8s %-11s %-11s %-11s %s\n",
                fmt("%d -> %d", p.a, p.b).c_str(), p.topology.c_str(), p.peer_access ? "yes" : "no",
                p.performance_rank >= 0 ? std::to_string(p.performance_rank).c_str() : "-",
                p.native_atomics ? "yes" : "no", num(p.link.write_gbps, "%.1f").c_str(),
                num(p.link.read_gbps, "%.1f").c_str(), num(p.link.latency_us, "%.2f").c_str(),
                note.c_str());
      }
    }
    s += renderTopology(r);
    s += "\nNCCL: " +
         (r.nccl_version.empty() ? "not found (" + r.nccl_error + ")" : r.nccl_version) + "\n";
    s += "\nSelf-test on " + whereTested(r) +
         (r.transport.empty() ? "" : " (transport " + r.transport + ")") + "\n";
    for (const SelfTestResult& t : r.self_tests) {
      if (!t.where.empty()) s += "Self-test on " + t.where + "\n";
      s += selfTestLine(t);
    }
    if (!r.timings.empty()) {
      s += fmt("\nAll-reduce, %s sum, one CUDA graph of %d calls per rank, on %s%s\n",
               tparDataTypeName(tparBfloat16), r.timing_iterations, whereTested(r).c_str(),
               usesVirtualRanks(r.devices) ? " (NOT comparable with a multi-GPU machine)" : "");
      s += fmt("  %-9s %-9s %-9s %-9s %s\n", "size", "tpar us", "algo", "NCCL us", "tpar vs NCCL");
      for (const TimingResult& t : r.timings) {
        const std::string ratio =
            usesVirtualRanks(r.devices) ? "not comparable (virtual ranks)"
            : t.tpar_us > 0 && t.nccl_us > 0
                ? fmt("%.2fx %s", std::max(t.nccl_us / t.tpar_us, t.tpar_us / t.nccl_us),
                      t.nccl_us >= t.tpar_us ? "faster" : "slower")
                : (t.tpar_us <= 0 ? t.tpar_error : t.nccl_error);
        s += fmt("  %-9s %-9s %-9s %-9s %s\n", sizeName(t.bytes).c_str(),
                 num(t.tpar_us, "%.2f").c_str(), t.tpar_algo.empty() ? "-" : t.tpar_algo.c_str(),
                 num(t.nccl_us, "%.2f").c_str(), ratio.c_str());
      }
    }
    s += "\n";
  }
  s += "Verdict: " + v.headline + "\n";
  for (const std::string& d : v.details) s += "  - " + d + "\n";
  return s;
}

int runDoctor(const DoctorOptions& o) {
  DoctorResults r;
  r.quick = o.quick;
  r.nccl_requested = !o.no_nccl;
  gatherInventory(&r);
  if (r.no_gpu.empty()) {
    gatherTopology(&r);
    const ProbePlan plan = probePlan(o.quick);
    r.devices = chooseDevices(r);
    std::vector<int> all;
    for (const GpuProbe& g : r.gpus) all.push_back(g.index);
    const std::string preload = preloadDoctorKernels(all);
    if (!preload.empty()) {
      r.self_tests.push_back({"doctor kernels", false, "cannot load them: " + preload});
    } else {
      unsigned cpu = 0, node = 0;
      if (syscall(SYS_getcpu, &cpu, &node, nullptr) == 0) r.host_numa_node = static_cast<int>(node);
      probeLinks(plan, &r);
      queryTpar(&r);
      runSelfTests(&r);
      runTimings(plan, &r);
    }
  }
  const Verdict v = makeVerdict(r);
  std::printf("%s", renderReport(r, v).c_str());
  std::fflush(stdout);
  if (!o.json_path.empty()) {
    nlohmann::json j = machineReport("tpar doctor", o.command_line);
    j["doctor"] = doctorJson(r, v);
    if (std::string e = writeOutputFile(o.json_path, j.dump(2) + "\n"); !e.empty()) {
      std::fprintf(stderr, "tpar doctor: --json: %s\n", e.c_str());
      return v.exit_code != kDoctorOk ? v.exit_code : kDoctorError;
    }
    std::fprintf(stderr, "tpar doctor: wrote %s\n", o.json_path.c_str());
  }
  return v.exit_code;
}

Action addDoctorCommand(CLI::App& root, const std::string& command_line) {
  CLI::App* sub = root.add_subcommand(
      "doctor", "what this machine's GPUs and links can do, and whether tpar works here");
  auto opt = std::make_shared<DoctorOptions>();
  opt->command_line = command_line;
  sub->add_option("--json", opt->json_path, "also write everything measured to FILE as JSON")
      ->option_text("FILE");
  sub->add_flag("--quick", opt->quick,
                "skip the bandwidth probes; fewer latency rounds and timed calls");
  sub->add_flag("--no-nccl", opt->no_nccl, "do not time NCCL");
  sub->footer(
      "For doctor: 0 tpar works here (also over pinned host memory where some GPUs cannot "
      "reach each other peer-to-peer: the verdict says so); 1 its self-test failed; 2 a bad "
      "option or --json path; 3 no driver or GPU; 4 the doctor itself failed.");
  return [opt] {
    if (!opt->json_path.empty()) {
      if (std::string e = checkOutputPath(opt->json_path); !e.empty()) {
        std::fprintf(stderr, "tpar doctor: --json: %s\n", e.c_str());
        return kExitUsage;
      }
    }
    return runDoctor(*opt);
  };
}

}  // namespace tpar_cli
