#include "transport/transport.h"

#include <unistd.h>

#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"

namespace tpar {

using kernels::WorkspaceLayout;

namespace {

// Control page: header slots at epoch_start - 2 (NOTE [call header]), DeviceState zero, every
// block's epoch at epoch_start.
void fillControlPage(uint32_t* page, uint32_t epoch_start) {
  for (uint64_t i = 0; i < WorkspaceLayout::kDataOffset / 4; ++i) page[i] = 0;
  for (uint64_t i = 0; i < WorkspaceLayout::kHeaderRegion / 4; ++i) page[i] = epoch_start - 2;
  for (int b = 0; b < kernels::kMaxBlocks; ++b) {
    page[WorkspaceLayout::kEpochsOffset / 4 + b] = epoch_start;
  }
  // Row-group slots: {0.0f, epoch_start - 2}, a tag no live epoch equals (NOTE [row groups]).
  for (uint32_t i = 0; i < 2 * WorkspaceLayout::kRowPartialSlots; ++i) {
    page[WorkspaceLayout::kRowPartialsOffset / 4 + 2 * i + 1] = epoch_start - 2;
  }
}

void fillPullAreas(uint32_t* words, const WorkspaceLayout& layout, uint32_t epoch_start) {
  for (uint64_t i = 0; i < 2 * layout.pull_bytes / 4; ++i) words[i] = epoch_start - 2;
}

}  // namespace

void fillRegionImage(char* base, const WorkspaceLayout& layout, uint32_t epoch_start) {
  fillControlPage(reinterpret_cast<uint32_t*>(base), epoch_start);
  std::memset(base + WorkspaceLayout::kDataOffset, 0xFF, 2 * layout.data_bytes);
  fillPullAreas(reinterpret_cast<uint32_t*>(base + layout.pullBase()), layout, epoch_start);
}

tparResult_t createRankHostRegion(const WorkspaceLayout& layout, uint32_t epoch_start,
                                  int cuda_device, HostRegion* out) {
  struct Arg {
    const WorkspaceLayout* layout;
    uint32_t epoch_start;
  } arg{&layout, epoch_start};
  return createHostRegion(
      layout.totalBytes(), cuda_device,
      [](void* host, size_t, void* p) {
        const Arg* a = static_cast<const Arg*>(p);
        fillRegionImage(static_cast<char*>(host), *a->layout, a->epoch_start);
      },
      &arg, out);
}

tparResult_t allocWorkspace(const WorkspaceLayout& layout, uint32_t epoch_start,
                            bool control_only, char** out) {
  static_assert(WorkspaceLayout::kHeaderRegion <= WorkspaceLayout::kStateOffset,
                "headers overlap DeviceState");
  static_assert(WorkspaceLayout::kStateOffset + sizeof(kernels::DeviceState) <=
                    WorkspaceLayout::kEpochsOffset,
                "DeviceState overlaps the block epochs");
  static_assert(WorkspaceLayout::kStateOffset + sizeof(kernels::DeviceState) <=
                        WorkspaceLayout::kRowPartialsOffset &&
                    WorkspaceLayout::kRowPartialsOffset +
                            2 * WorkspaceLayout::kRowPartialSlots * sizeof(uint64_t) <=
                        WorkspaceLayout::kEpochsOffset,
                "the row-group slots overlap DeviceState or the block epochs");
  char* ws = nullptr;
  const uint64_t total = control_only ? WorkspaceLayout::kDataOffset : layout.totalBytes();
  TPAR_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&ws), total));
  std::vector<uint32_t> page(WorkspaceLayout::kDataOffset / 4, 0);
  fillControlPage(page.data(), epoch_start);
  cudaError_t err = cudaMemcpy(ws, page.data(), WorkspaceLayout::kDataOffset, cudaMemcpyHostToDevice);
  if (!control_only) {
    // Data: every word the sentinel (NOTE [sentinel protocol]).
    if (err == cudaSuccess) {
      err = cudaMemset(ws + WorkspaceLayout::kDataOffset, 0xFF, 2 * layout.data_bytes);
    }
    std::vector<uint32_t> pull(2 * layout.pull_bytes / 4);
    fillPullAreas(pull.data(), layout, epoch_start);
    if (err == cudaSuccess) {
      err = cudaMemcpy(ws + layout.pullBase(), pull.data(), 2 * layout.pull_bytes,
                       cudaMemcpyHostToDevice);
    }
  }
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    cudaFree(ws);
    return cudaFailure(err, "initializing the workspace", __FILE__, __LINE__);
  }
  *out = ws;
  return tparSuccess;
}

void freeWorkspace(char* ws) {
  if (ws != nullptr) cudaFree(ws);
}

RegionPlace chooseRegionPlace(int configured, bool all_pairs_p2p) {
  if (configured == 1) return RegionPlace::kHostMemory;
  if (all_pairs_p2p) return RegionPlace::kGpuMemory;
  return configured == 2 ? RegionPlace::kImpossible : RegionPlace::kHostMemory;
}

tparResult_t enablePeerAccess(int self_device, int peer_device) {
  if (self_device == peer_device) return tparSuccess;
  int can = 0;
  TPAR_CUDA_TRY(cudaDeviceCanAccessPeer(&can, self_device, peer_device));
  if (!can) {
    return setError(tparInvalidUsage,
                    "GPU %d cannot access GPU %d peer-to-peer (cudaDeviceCanAccessPeer = 0); "
                    "this build of tpar needs peer access between all GPUs of a communicator",
                    self_device, peer_device);
  }
  cudaError_t err = cudaDeviceEnablePeerAccess(peer_device, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return tparSuccess;
  }
  if (err != cudaSuccess) return cudaFailure(err, "cudaDeviceEnablePeerAccess", __FILE__, __LINE__);
  return tparSuccess;
}

tparResult_t mapPeer(const PeerInfo& self, const PeerInfo& peer, int peer_rank,
                     PeerMapping* out) {
  PeerMapping m;
  // NOTE [identity]: a pointer of the peer is ours only when the peer is this very process.
  const bool same_process = sameProcess(peer.process, self.process);
  if (self.host_transport != 0) {
    m.kind = tparTransportHost;
    if (same_process) {
      // Registered as portable by its owner: valid on every GPU of this process.
      m.ptr = reinterpret_cast<char*>(peer.host_region_ptr);
    } else if (!samePidNamespace(peer.process, self.process)) {
      return setError(tparInvalidUsage,
                      "rank %d runs in another PID namespace (another container?): its host "
                      "region is opened through /proc/<pid>/fd, which needs the ranks' "
                      "processes in one PID namespace (share the process namespace, e.g. "
                      "docker --pid or a pod's shareProcessNamespace), or GPU memory "
                      "(TPAR_TRANSPORT=p2p)",
                      peer_rank);
    } else {
      tparResult_t res = openPeerHostRegion(peer.process.pid, peer.host_fd,
                                            peer.host_region_bytes, &m.host);
      if (res != tparSuccess) {
        const std::string why = lastError();
        return setError(res, "rank %d (pid %d): %s", peer_rank, peer.process.pid, why.c_str());
      }
      m.ptr = m.host.device;
    }
    *out = m;
    return tparSuccess;
  }
  if (same_process) {
    // One process: the pointer is valid here (unified addressing).
    if (peer.cuda_device != self.cuda_device) {
      TPAR_TRY(enablePeerAccess(self.cuda_device, peer.cuda_device));
      m.kind = tparTransportPeerAccess;
    } else {
      m.kind = tparTransportSameDevice;
    }
    m.ptr = reinterpret_cast<char*>(peer.workspace_ptr);
  } else {
    void* ptr = nullptr;
    cudaError_t err =
        cudaIpcOpenMemHandle(&ptr, peer.ipc_handle, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return setError(tparUnhandledCudaError,
                      "cudaIpcOpenMemHandle for rank %d (pid %d, GPU %s) failed: %s; CUDA IPC "
                      "needs peer access between the GPUs or the same GPU",
                      peer_rank, peer.process.pid, peer.bus_id, cudaGetErrorString(err));
    }
    m.ptr = static_cast<char*>(ptr);
    m.ipc_opened = true;
    m.kind = tparTransportCudaIpc;
  }
  *out = m;
  return tparSuccess;
}

void unmapPeer(PeerMapping* mapping) {
  if (mapping->ipc_opened && mapping->ptr != nullptr) cudaIpcCloseMemHandle(mapping->ptr);
  closeHostRegion(&mapping->host);
}

tparResult_t busIdOf(int device, char* out, int len) {
  TPAR_CUDA_TRY(cudaDeviceGetPCIBusId(out, len, device));
  for (char* p = out; *p; ++p) *p = static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  return tparSuccess;
}

}  // namespace tpar
