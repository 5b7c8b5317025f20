// NVLink between GPUs, asked of NVML loaded at run time (dlopen of libnvidia-ml.so.1), so that
// the library neither links against NVML nor needs its headers, and still works where the
// driver's management library is missing (containers that mount only the CUDA driver).
#ifndef TPAR_TOPOLOGY_NVML_LINKS_H_
#define TPAR_TOPOLOGY_NVML_LINKS_H_

#include <string>
#include <vector>

namespace tpar {

// For GPUs given by PCI bus id ("0000:1a:00.0"): (*nvlink)[a][b] is true when an active
// NVLink joins a and b directly, or both have active links into an NVSwitch fabric. False,
// with `why`, when NVML cannot be loaded or initialized; a GPU that NVML does not know simply
// has no NVLink. Results are kept per set of bus ids: NVLink state does not change while a
// process runs, and nvmlInit costs tens of milliseconds per call on some machines.
bool queryNvLinks(const std::vector<std::string>& bus_ids, std::vector<std::vector<bool>>* nvlink,
                  std::string* why);

}  // namespace tpar

#endif  // TPAR_TOPOLOGY_NVML_LINKS_H_
