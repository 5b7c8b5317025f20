// Where receive workspaces live and how each rank reaches its peers' workspaces.
//
// Every transport ends in the same thing: a device pointer, valid on this rank's GPU, to every
// peer's workspace. Kernels see only those pointers.
#ifndef TPAR_TRANSPORT_TRANSPORT_H_
#define TPAR_TRANSPORT_TRANSPORT_H_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "base/identity.h"
#include "kernels/launch.h"
#include "tpar/tpar.h"
#include "transport/host_region.h"

namespace tpar {

// What one rank publishes to the others during init.
struct PeerInfo {
  ProcessIdentity process;  // NOTE [identity]
  int32_t cuda_device;      // ordinal in the publishing process
  char bus_id[32];          // PCI bus id of the GPU, comparable across processes
  uint64_t workspace_ptr;   // valid in the publishing process only
  uint64_t workspace_bytes;
  cudaIpcMemHandle_t ipc_handle;
  uint64_t max_bytes_per_call;
  uint32_t epoch_start;
  int32_t nranks;
  // Host transport (NOTE [host regions]): the region's descriptor in the publishing process,
  // its address as GPUs of that process see it, and its size.
  int32_t host_transport;
  int32_t host_fd;
  uint64_t host_region_ptr;
  uint64_t host_region_bytes;
};

// Allocates this rank's workspace on the current device and puts it in its initial state:
// data regions all sentinel, headers at epoch_start - 2, block epochs at epoch_start, pull
// areas at epoch_start - 2 (NOTE [pull protocol]). Returns after the initialization has
// completed on the device. `control_only`: just the control pages (DeviceState, block
// epochs), for the host transport, whose receive regions live in host memory.
tparResult_t allocWorkspace(const kernels::WorkspaceLayout& layout, uint32_t epoch_start,
                            bool control_only, char** out);
void freeWorkspace(char* ws);

// Writes the initial receive-region contents (headers, sentinel area, pull areas; the control
// pages zero) into a host buffer of layout.totalBytes() bytes.
void fillRegionImage(char* base, const kernels::WorkspaceLayout& layout, uint32_t epoch_start);

// Creates this rank's receive region in pinned host memory near `cuda_device`, initialized.
tparResult_t createRankHostRegion(const kernels::WorkspaceLayout& layout, uint32_t epoch_start,
                                  int cuda_device, HostRegion* out);

// Where DeviceState lives inside the workspace (in the header page, never written by peers).
inline kernels::DeviceState* deviceStateOf(char* ws) {
  return reinterpret_cast<kernels::DeviceState*>(ws + kernels::WorkspaceLayout::kStateOffset);
}
inline uint32_t* blockEpochsOf(char* ws) {
  return reinterpret_cast<uint32_t*>(ws + kernels::WorkspaceLayout::kEpochsOffset);
}

struct PeerMapping {
  char* ptr = nullptr;     // peer workspace, usable on this rank's device
  bool ipc_opened = false; // must be closed with cudaIpcCloseMemHandle
  HostRegion host;         // a peer process's host region mapped here (closed on unmap)
  tparTransport_t kind = tparTransportSameDevice;
};

// Maps `peer`'s workspace for use on `self`'s device (current device = self's).
tparResult_t mapPeer(const PeerInfo& self, const PeerInfo& peer, int peer_rank,
                     PeerMapping* out);
void unmapPeer(PeerMapping* mapping);

// Where a group's receive regions go, from its configured transport (tparConfig_t::transport:
// 0 auto, 1 host, 2 p2p) and whether every pair of its GPUs reaches each other peer-to-peer.
enum class RegionPlace { kGpuMemory, kHostMemory, kImpossible };
RegionPlace chooseRegionPlace(int configured, bool all_pairs_p2p);

// Enables peer access from the current device to `peer_device` (same process).
tparResult_t enablePeerAccess(int self_device, int peer_device);

// PCI bus id of a device as a string (lower case).
tparResult_t busIdOf(int device, char* out, int len);

}  // namespace tpar

#endif  // TPAR_TRANSPORT_TRANSPORT_H_
