// Loading hwloc XML safely: the checks before hwloc sees a file, and the crash guard.
//
// NOTE [topology crash guard]
// hwloc 2.9 crashes on some malformed XML (SEGV in hwloc_bitmap_set and hwloc_bitmap_or, found
// by fuzzing), and a topology file comes from the user (TPAR_TOPO_FILE). So the bytes are first
// parsed, exactly as they will be here, by a helper program (tpar-hwloc-probe, installed next to
// libtpar or in libexec/tpar) in a process of its own; a file that kills the helper is refused.
// The helper is started with posix_spawn, which only executes it: nothing of this process
// (locks held by other threads, the caller's handlers) runs in the child, unlike fork in a
// multi-threaded process. Its verdict comes back as one byte on a pipe, so neither the
// caller's SIGCHLD disposition (SIG_IGN makes waitpid fail) nor a handler that reaps every
// child can take it away; the helper is killed when it has not answered within
// kProbeTimeoutMs. The file is read once: the helper gets the same bytes as the load that
// follows (a memfd as its standard input), so the file cannot change in between.
#ifndef TPAR_TOPOLOGY_XML_PROBE_H_
#define TPAR_TOPOLOGY_XML_PROBE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "topology/topology.h"
#include "tpar/tpar.h"

namespace tpar {

constexpr int64_t kProbeTimeoutMs = 20000;
// Topology files of real machines are a few MiB at most.
constexpr size_t kMaxTopologyXmlBytes = 64u << 20;

// Reads a whole topology file: a regular file (a FIFO or a device would block or never end)
// of at most kMaxTopologyXmlBytes. tparInvalidArgument naming the path otherwise.
tparResult_t readTopologyXml(const std::string& path, std::string* xml);

// Refuses an XML topology format newer than the installed hwloc reads (hwloc 3 writes
// <topology version="3.0">; hwloc 2.x reads formats up to 2.x), naming both.
tparResult_t checkXmlFormatVersion(const std::string& xml, const std::string& path);

// Parses `xml` with hwloc in this process, without the guard (loadTopologyXml's second half;
// the helper's only work). `path` names the file in messages.
tparResult_t parseTopologyXml(const std::string& xml, const std::string& path,
                              const std::vector<std::string>& bus_ids, Topology* out);

// The helper next to this library (or in ../libexec/tpar); "" when there is none.
std::string probeHelperPath();

// NOTE [topology crash guard]: runs `helper` on `xml`; tparInvalidArgument naming `path` when
// the helper dies or does not answer within timeout_ms, tparSystemError when it cannot be
// started.
tparResult_t probeTopologyXml(const std::string& xml, const std::string& path,
                              const std::string& helper, int64_t timeout_ms);

}  // namespace tpar

#endif  // TPAR_TOPOLOGY_XML_PROBE_H_
