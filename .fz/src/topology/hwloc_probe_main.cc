// tpar-hwloc-probe: the crash guard's helper (NOTE [topology crash guard] in xml_probe.h).
// Reads an hwloc XML topology from standard input, parses it exactly as libtpar does, and
// writes one byte to standard output: '0' when it parsed, '1' when hwloc or tpar refused it. A
// file that crashes hwloc ends this process before it writes anything.
#include <unistd.h>

#include <cerrno>
#include <string>

#include "topology/xml_probe.h"

int main() {
  std::string xml;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(0, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return 2;
    if (n == 0) break;
    if (xml.size() + static_cast<size_t>(n) > tpar::kMaxTopologyXmlBytes) return 2;
    xml.append(buf, static_cast<size_t>(n));
  }
  tpar::Topology topo;
  const char verdict =
      tpar::parseTopologyXml(xml, "(stdin)", {}, &topo) == tparSuccess ? '0' : '1';
  return write(1, &verdict, 1) == 1 ? 0 : 2;
}
