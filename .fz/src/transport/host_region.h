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
//
// NOTE [host region trust]
// Who can open a region: the kernel lets a process open /proc/<pid>/fd/<fd> of another only
// when it may ptrace it: the same user (and not across PID namespaces, where <pid> names
// another process or none). So the trust boundary of the host transport is the user: any
// process of that user can read and write every rank's receive region, as it could read and
// write the ranks' memory through ptrace anyway; no other user can. What a peer publishes
// (pid, fd number, size) is still checked before anything is mapped: the descriptor must be a
// memfd sealed against growing and shrinking (F_SEAL_GROW | F_SEAL_SHRINK: it can never be
// truncated under a mapping, which would end a process with SIGBUS) of exactly the size that
// was published and that the layout needs. A rank that names some other file (a regular
// file, a pipe, a region of the wrong size) is refused with tparInvalidUsage.
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

// Maps a region owned by process `pid` through its descriptor `fd` after checkPeerRegionFd.
tparResult_t openPeerHostRegion(int32_t pid, int32_t fd, size_t bytes, HostRegion* out);

// NOTE [host region trust]: fails with tparInvalidUsage unless `fd` is a sealed memfd of
// exactly `bytes` bytes. `what` names the descriptor in the message.
tparResult_t checkPeerRegionFd(int fd, size_t bytes, const char* what);

// Unregisters, unmaps and closes. Safe on a default-constructed region.
void closeHostRegion(HostRegion* region);

}  // namespace tpar

#endif  // TPAR_TRANSPORT_HOST_REGION_H_
