// Receive regions in pinned host memory, for GPUs that cannot reach each other peer-to-peer
// (tparTransportHost).
//
// NOTE [host regions]
// Each rank owns one region: an anonymous shared-memory file (memfd) mapped into its process,
// its pages bound to the NUMA node of the rank's GPU (the receiver polls it; the writers' posted
// writes cross the inter-socket link once), registered with CUDA as portable and mapped, so that
// every GPU of the process can store into it and poll it. Ranks of the same process use the
// owner's mapping. Ranks of other processes open the owner's file through /proc/<pid>/fd/<fd>,
// map and register it themselves: no name ever exists in /dev/shm, so nothing outlives the
// processes, even when one is killed. The memory goes back to the system once the last
// mapping is gone.
#ifndef TPAR_TRANSPORT_HOST_REGION_H_
#define TPAR_TRANSPORT_HOST_REGION_H_

#include <cstddef>
#include <cstdint>

#include "tpar/tpar.h"

namespace tpar {

struct HostRegion {
  int fd = -1;              // the memfd (owner) or -1
  void* host = nullptr;     // this process's mapping
  char* device = nullptr;   // the same memory as the GPUs see it
  size_t bytes = 0;
  bool registered = false;  // cudaHostRegister succeeded
};

// Creates a region of `bytes` near CUDA device `cuda_device` (current device); `fill(host)`
// writes its initial contents before CUDA sees it. On failure nothing is left behind.
tparResult_t createHostRegion(size_t bytes, int cuda_device, void (*fill)(void*, size_t, void*),
                              void* fill_arg, HostRegion* out);

// Maps a region owned by process `pid` through its descriptor `fd`.
tparResult_t openPeerHostRegion(int32_t pid, int32_t fd, size_t bytes, HostRegion* out);

// Unregisters, unmaps and closes. Safe on a default-constructed region.
void closeHostRegion(HostRegion* region);

}  // namespace tpar

#endif  // TPAR_TRANSPORT_HOST_REGION_H_
