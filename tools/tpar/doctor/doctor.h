// `tpar doctor`: what this machine's GPUs and links can do, whether tpar works here, and how it
// compares with NCCL. The probes (probes.cu) fill a DoctorResults; everything said about it
// (the verdict, the tables, the JSON) is a pure function of that struct, so that it can be
// tested on recorded numbers from machines the tests never run on.
#ifndef TPAR_TOOLS_DOCTOR_H_
#define TPAR_TOOLS_DOCTOR_H_

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/internal.h"
#include "tools/tpar/common/exit_codes.h"

namespace tpar_cli {

// What the exit codes of the command (common/exit_codes.h) mean for `tpar doctor`.
constexpr int kDoctorOk = kExitOk;                    // tpar's self-test passed across all GPUs
constexpr int kDoctorSelfTestFailed = kExitCheckFailed;  // tpar ran here and failed
constexpr int kDoctorNoGpu = kExitNoGpu;              // no NVIDIA driver or no CUDA GPU
constexpr int kDoctorError = kExitRunError;           // the doctor itself failed (a file write)

// The two message sizes the verdict compares tpar and NCCL at: a speculative-decoding verify
// pass moves tens to hundreds of KB per all-reduce (docs/DESIGN.md section 1).
constexpr size_t kSmallMessageBytes = 64 << 10;
constexpr size_t kLargeMessageBytes = 512 << 10;

// One direction of one link, as the probes measured it. 0 = not measured.
struct LinkMeasure {
  double write_gbps = 0;  // a kernel on the source GPU storing into the target memory
  double read_gbps = 0;   // a kernel on the source GPU loading from the target memory
  double latency_us = 0;  // one-way flag hand-off: half a ping-pong round trip
  std::string error;      // why a probe failed; "" when everything that ran succeeded
  // Both at once: half the blocks store into one half of the target while the other half load
  // from the other, bytes of both over the time both took (a link's two directions at once:
  // an all-reduce in host memory writes and reads together).
  double both_gbps = 0;
};

struct GpuProbe {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  std::string bus_id;  // as CUDA prints it
  int numa_node = -1;  // -1: unknown (a single-node machine reports -1 too)
  int pcie_gen = 0, pcie_width = 0, pcie_gen_max = 0, pcie_width_max = 0;  // 0: unknown
  LinkMeasure host;   // against pinned host memory mapped into this GPU
  LinkMeasure local;  // against its own memory; measured on single-GPU machines only
};

// An ordered pair: kernels run on GPU a, the memory is GPU b's.
struct PairProbe {
  int a = 0, b = 0;
  std::string topology;           // topologyName(): "PIX", "NV4", "SYS", "?"
  bool peer_access = false;       // cudaDeviceCanAccessPeer(a, b)
  int performance_rank = -1;      // cudaDevP2PAttrPerformanceRank; -1 = unknown
  bool access_supported = false;  // cudaDevP2PAttrAccessSupported
  bool native_atomics = false;    // cudaDevP2PAttrNativeAtomicSupported
  std::string nvml_p2p;           // NVML's reason when peer writes are unsupported
  LinkMeasure link;
};

// The self-test of the hierarchical kernel on a topology fixture with islands runs on this many
// virtual ranks (two islands of four: a two-socket server's shape).
constexpr int kFixtureRanks = 8;

struct SelfTestResult {
  std::string backend;   // "tpar:oneshot", "tpar:twoshot", ...: the algorithm forced
  bool passed = false;   // every element of every checked call was right
  std::string detail;    // how much was checked, or what failed
  std::string ran;       // the algorithm that ran: the forced one, or what it fell back to
  std::string fallback;  // "twoshot (one island)" when the forced one could not run; "" else
  std::string where;     // "": on DoctorResults::devices; else where it ran (the fixture run)
};

struct TimingResult {
  size_t bytes = 0;
  double tpar_us = 0;     // 0: not measured
  std::string tpar_algo;  // what tpar chose at this size
  std::string tpar_error;
  double nccl_us = 0;      // 0: not measured
  std::string nccl_error;  // why NCCL was not measured
};

struct DoctorResults {
  bool quick = false;
  bool nccl_requested = true;  // false under --no-nccl
  std::string no_gpu;          // non-empty: no CUDA GPU (why); nothing else was measured
  std::string nvidia_driver;
  int cuda_driver = 0, cuda_runtime = 0;
  std::vector<GpuProbe> gpus;
  std::vector<PairProbe> pairs;  // every ordered pair a != b
  std::string nvml_error;        // "" when NVML answered
  int host_numa_node = -1;       // where the probes' pinned host buffer was allocated
  std::string nccl_version;      // "" when no NCCL loaded
  std::string nccl_error;
  std::vector<int> devices;       // the self-test's and timing's rank -> GPU ({0, 0}: one GPU)
  std::string transport;          // tparTransportName of that communicator
  std::string init_error;         // why tpar could not create it
  // Every bf16 call up to this size runs one-shot there (tparCommQuery, from the plan).
  size_t one_shot_max_bytes = 0;
  std::string algorithm_table;  // "256 B-32 KiB oneshot, 64 KiB-64 MiB twoshot" (the plan)
  std::vector<SelfTestResult> self_tests;
  int timing_iterations = 0;
  std::vector<TimingResult> timings;
  // tpar's own view of every visible GPU (src/topology): link classes, islands, signature.
  // Empty links with an empty error: not gathered (no GPU, or results made by hand).
  tpar::Topology topology;
  std::string topology_error;
};

struct Verdict {
  int exit_code = kDoctorOk;
  std::string headline;              // one sentence: does tpar work here
  std::vector<std::string> details;  // plain-word paragraphs, most important first
};

// nvidia-smi's `topo -m` names: "X" for a GPU with itself, "NV<n>" for n NVLinks, otherwise
// the NVML common-ancestor level (PIX, PXB, PHB, NODE, SYS); "?" when unknown.
std::string topologyName(int a, int b, int nvml_level, int nvlinks);

// The sysfs directory name of a PCI device ("0000:3b:00.0") from CUDA's or NVML's bus id;
// "" when malformed.
std::string sysfsBusId(const std::string& bus_id);

// Unordered pairs {a, b} (a < b) where peer access is missing in either direction.
std::vector<std::pair<int, int>> blockedPairs(const DoctorResults& r);

// The GPUs the self-test runs on: all of them (up to TPAR_MAX_RANKS; a group where some pair
// lacks peer access runs over pinned host memory), or two virtual ranks on a single GPU.
std::vector<int> chooseDevices(const DoctorResults& r);

// True when some GPU carries more than one rank.
bool usesVirtualRanks(const std::vector<int>& devices);

Verdict makeVerdict(const DoctorResults& r);

// Everything the doctor found, for --json (merged under "doctor" into machineReport()).
nlohmann::json doctorJson(const DoctorResults& r, const Verdict& v);

// The human-readable tables and the verdict.
std::string renderReport(const DoctorResults& r, const Verdict& v);

// The topology section (doctor_topology.cc): gathered from the live machine over every
// visible GPU; its JSON object ("tpar_topology": source, signature, islands, links by class
// name; null when not gathered) and its text ("" when not gathered).
void gatherTopology(DoctorResults* r);
nlohmann::json topologyJson(const DoctorResults& r);
std::string renderTopology(const DoctorResults& r);

struct DoctorOptions {
  std::string json_path;
  bool quick = false;
  bool no_nccl = false;
  std::string command_line;
};

int runDoctor(const DoctorOptions& options);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_DOCTOR_H_
