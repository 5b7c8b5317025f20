// Fuzz target for the hwloc XML topology reader, tpar::loadTopologyXml (src/topology/topology.h).
//
// TPAR_TOPO_FILE points communicator init at any file, and users send the XML of their
// machines, so the reader must return tparSuccess or tparInvalidArgument for any bytes and never
// crash. What it returns on success is indexed by rank without further checks (applyTopology
// in src/comm/comm.cc builds the tuner context and the hierarchical rank map from it), so the
// shape rules are checked here: a square, symmetric link matrix with kSameDevice exactly where
// two ranks name one GPU, and islands that partition the ranks in the documented order.
//
// hwloc and libxml2 are not instrumented: coverage guides the fuzzer through tpar's code only,
// and a memory error inside them shows up only when it crashes the process.
#include <hwloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "fuzz_check.h"
#include "topology/topology.h"

namespace {

using tpar::LinkClass;
using tpar_fuzz::fail;

// The input as a file, since the reader takes a path. The file is unlinked as soon as it is
// written and read through /proc/self/fd: an input that crashes the process (the point of
// fuzzing) would otherwise leave its file in /tmp, and triaging a few hundred crashes left
// hundreds. The loader reads the file once, through that path.
class TempFile {
 public:
  TempFile(const uint8_t* data, size_t size) {
    char name[] = "/tmp/tpar_fuzz_topo_XXXXXX";
    fd_ = mkstemp(name);
    if (fd_ < 0) fail("mkstemp: %s", std::strerror(errno));
    unlink(name);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = write(fd_, data + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("writing %s: %s", name, std::strerror(errno));
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~TempFile() { close(fd_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

tparResult_t load(const std::string& path, const std::vector<std::string>& bus_ids,
                  tpar::Topology* out) {
  tpar::clearError();
  try {
    const tparResult_t r = tpar::loadTopologyXml(path, bus_ids, out);
    if (r != tparSuccess && r != tparInvalidArgument)
      fail("loadTopologyXml returned %d; expected tparSuccess or tparInvalidArgument",
           static_cast<int>(r));
    if (r != tparSuccess && tpar::lastError().empty())
      fail("loadTopologyXml failed with an empty last error");
    return r;
  } catch (const std::exception& e) {
    // Bad files are reported through the result; an exception, whatever its cause, is a bug.
    fail("loadTopologyXml threw %s", e.what());
  }
}

// `gpu_of[r]` says which GPU rank r is (ranks naming one GPU are virtual ranks of it).
void checkShape(const tpar::Topology& t, const std::vector<int>& gpu_of) {
  const size_t n = gpu_of.size();
  if (t.gpus.size() != n) fail("%zu gpus for %zu ranks", t.gpus.size(), n);
  if (t.links.size() != n) fail("links has %zu rows for %zu ranks", t.links.size(), n);
  for (size_t a = 0; a < n; ++a) {
    if (t.links[a].size() != n)
      fail("links row %zu has %zu entries, not %zu", a, t.links[a].size(), n);
  }
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      const int c = static_cast<int>(t.links[a][b]);
      if (c < static_cast<int>(LinkClass::kSameDevice) || c > static_cast<int>(LinkClass::kNoP2P))
        fail("links[%zu][%zu] = %d is not a LinkClass", a, b, c);
      if (t.links[a][b] != t.links[b][a])
        fail("links[%zu][%zu] = %d but links[%zu][%zu] = %d", a, b, c, b, a,
             static_cast<int>(t.links[b][a]));
      const bool same_gpu = gpu_of[a] == gpu_of[b];
      if (same_gpu != (t.links[a][b] == LinkClass::kSameDevice))
        fail("links[%zu][%zu] = %s for ranks %s", a, b, tpar::linkClassName(t.links[a][b]),
             same_gpu ? "on one GPU" : "on different GPUs");
    }
  }
  // NOTE [islands]: a partition, each island ascending, islands ordered by their first rank.
  std::set<int> seen;
  int previous_first = -1;
  for (size_t i = 0; i < t.islands.size(); ++i) {
    const std::vector<int>& island = t.islands[i];
    if (island.empty()) fail("island %zu is empty", i);
    if (island.front() <= previous_first) fail("island %zu is out of order", i);
    previous_first = island.front();
    for (size_t k = 0; k < island.size(); ++k) {
      const int r = island[k];
      if (r < 0 || static_cast<size_t>(r) >= n) fail("island %zu holds rank %d of %zu", i, r, n);
      if (k > 0 && r <= island[k - 1]) fail("island %zu is not in ascending order", i);
      if (!seen.insert(r).second) fail("rank %d is in two islands", r);
    }
  }
  if (seen.size() != n) fail("islands cover %zu of %zu ranks", seen.size(), n);
  if (t.signature.empty()) fail("empty signature");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // hwloc prints a paragraph per rejected file; thousands of them would bury libFuzzer's
  // report. Set HWLOC_HIDE_ERRORS=0 to see them when reproducing one input.
  setenv("HWLOC_HIDE_ERRORS", "2", 0);
  // hwloc loads its plugins (the libxml2 XML reader among them) with the first topology and
  // unloads them with the last. Unloaded after each input, libxml2's global state would be
  // reported as a leak without symbols, and every input would pay a dlopen. One topology kept
  // for the whole run keeps them loaded, as in a process that has a communicator.
  static hwloc_topology_t keep_plugins_loaded = nullptr;
  if (hwloc_topology_init(&keep_plugins_loaded) != 0) fail("hwloc_topology_init failed");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const TempFile file(data, size);

  // Every GPU of the file, in bus order: the form TPAR_TOPO_FILE uses.
  tpar::Topology all;
  if (load(file.path(), {}, &all) != tparSuccess) return 0;
  const size_t n = all.gpus.size();
  if (n == 0) fail("success with no GPU");
  std::vector<int> identity(n);
  for (size_t r = 0; r < n; ++r) identity[r] = static_cast<int>(r);
  checkShape(all, identity);
  if (all.source != "xml:" + file.path()) fail("source is '%s'", all.source.c_str());

  // The same GPUs asked for by bus id, as communicator init asks for them; here in reverse
  // order and with the first one repeated as a virtual rank, so that the list's order is what
  // sets the ranks. Each pair must keep its link class. Bus ids that two GPUs of the file share
  // cannot name one GPU, so such a file stops here.
  std::set<std::string> ids;
  for (const tpar::TopoGpu& g : all.gpus) ids.insert(g.bus_id);
  if (ids.size() != n) return 0;
  std::vector<std::string> bus_ids;
  std::vector<int> gpu_of;
  for (size_t r = n; r-- > 0;) {
    bus_ids.push_back(all.gpus[r].bus_id);
    gpu_of.push_back(static_cast<int>(r));
  }
  bus_ids.push_back(all.gpus[0].bus_id);
  gpu_of.push_back(0);
  tpar::Topology mapped;
  // A refusal is allowed: hwloc takes device numbers a PCI bus id cannot spell (above 0x1f),
  // and a non-GPU device of the file may carry a GPU's bus id. Whatever it accepts must agree.
  if (load(file.path(), bus_ids, &mapped) != tparSuccess) return 0;
  checkShape(mapped, gpu_of);
  for (size_t a = 0; a < gpu_of.size(); ++a) {
    if (mapped.gpus[a].bus_id != bus_ids[a])
      fail("rank %zu is %s, asked for %s", a, mapped.gpus[a].bus_id.c_str(), bus_ids[a].c_str());
    const tpar::TopoGpu& want = all.gpus[gpu_of[a]];
    if (mapped.gpus[a].numa_node != want.numa_node || mapped.gpus[a].package != want.package)
      fail("GPU %s moved to another NUMA node or package", bus_ids[a].c_str());
    for (size_t b = 0; b < gpu_of.size(); ++b) {
      if (gpu_of[a] == gpu_of[b]) continue;
      if (mapped.links[a][b] != all.links[gpu_of[a]][gpu_of[b]])
        fail("GPUs %s and %s are %s by bus id but %s in bus order", bus_ids[a].c_str(),
             bus_ids[b].c_str(), tpar::linkClassName(mapped.links[a][b]),
             tpar::linkClassName(all.links[gpu_of[a]][gpu_of[b]]));
    }
  }
  return 0;
}
