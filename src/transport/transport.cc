#include "transport/transport.h"

#include <unistd.h>

#include <cctype>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace tpar {

using kernels::WorkspaceLayout;

tparResult_t allocWorkspace(const WorkspaceLayout& layout, uint32_t epoch_start, char** out) {
  static_assert(WorkspaceLayout::kHeaderRegion <= WorkspaceLayout::kStateOffset,
                "headers overlap DeviceState");
  static_assert(WorkspaceLayout::kStateOffset + sizeof(kernels::DeviceState) <=
                    WorkspaceLayout::kEpochsOffset,
                "DeviceState overlaps the block epochs");
  char* ws = nullptr;
  TPAR_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&ws), layout.totalBytes()));
  // Data: every word the sentinel (NOTE [sentinel protocol]).
  cudaError_t err = cudaMemset(ws + WorkspaceLayout::kDataOffset, 0xFF,
                               layout.totalBytes() - WorkspaceLayout::kDataOffset);
  // Control pages: header slots at epoch_start - 2 (NOTE [call header]), DeviceState zero,
  // every block's epoch at epoch_start.
  std::vector<uint32_t> page(WorkspaceLayout::kDataOffset / 4, 0);
  for (uint64_t i = 0; i < WorkspaceLayout::kHeaderRegion / 4; ++i) page[i] = epoch_start - 2;
  for (int b = 0; b < kernels::kMaxBlocks; ++b) {
    page[WorkspaceLayout::kEpochsOffset / 4 + b] = epoch_start;
  }
  if (err == cudaSuccess) {
    err = cudaMemcpy(ws, page.data(), WorkspaceLayout::kDataOffset, cudaMemcpyHostToDevice);
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
  if (peer.pid == self.pid) {
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
                      peer_rank, peer.pid, peer.bus_id, cudaGetErrorString(err));
    }
    m.ptr = static_cast<char*>(ptr);
    m.ipc_opened = true;
    m.kind = tparTransportCudaIpc;
  }
  *out = m;
  return tparSuccess;
}

void unmapPeer(const PeerMapping& mapping) {
  if (mapping.ipc_opened && mapping.ptr != nullptr) cudaIpcCloseMemHandle(mapping.ptr);
}

tparResult_t busIdOf(int device, char* out, int len) {
  TPAR_CUDA_TRY(cudaDeviceGetPCIBusId(out, len, device));
  for (char* p = out; *p; ++p) *p = static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  return tparSuccess;
}

uint64_t hostHash() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string id = host;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (boot >> boot_id) id += boot_id;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : id) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace tpar
