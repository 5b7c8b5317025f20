// The communicator: one rank's view of the group, its workspace, peers and settings.
#ifndef TPAR_CORE_COMM_H_
#define TPAR_CORE_COMM_H_

#include <array>
#include <string>
#include <vector>

#include "core/config.h"
#include "kernels/launch.h"
#include "transport/transport.h"
#include "tpar/tpar.h"

struct tparComm {
  int rank = 0;
  int nranks = 0;
  int device = 0;
  tpar::ResolvedConfig cfg;
  tpar::kernels::WorkspaceLayout layout{0};
  char* workspace = nullptr;
  tpar::kernels::DeviceState* device_state = nullptr;
  uint32_t* block_epochs = nullptr;
  tpar::kernels::HostState* host_state = nullptr;      // host pointer
  tpar::kernels::HostState* host_state_dev = nullptr;  // the same, as the GPU sees it
  std::array<char*, tpar::kernels::kMaxRanks> peer_ws{};
  std::vector<tpar::PeerMapping> mappings;
  tparTransport_t transport = tparTransportSameDevice;
  int max_blocks = 1;
  bool launch_overlap = false;  // NOTE [launch overlap]
  int threads = 512;
  std::string last_error;
};

namespace tpar {

// Builds a communicator's local half (workspace, host state, launch shape) on the current
// device. `ranks_on_device` counts the ranks of this process sharing the device (their kernels
// must be co-resident). On failure nothing is left allocated.
tparResult_t createLocal(int rank, int nranks, const ResolvedConfig& cfg, int ranks_on_device,
                         tparComm** out);

// Frees what createLocal and peer mapping made. Waits for the device first.
void destroyComm(tparComm* comm);

// Registry of live communicators, so that a destroyed or foreign handle is reported instead of
// dereferenced.
void registerComm(tparComm* comm);
void unregisterComm(tparComm* comm);
bool isLiveComm(tparComm* comm);

// PeerInfo describing this rank (current device).
tparResult_t describeSelf(const tparComm& comm, PeerInfo* out);

// The whole all-reduce path after argument checks.
tparResult_t allReduce(tparComm* comm, const void* send, void* recv, size_t count,
                       tparDataType_t dtype, tparRedOp_t op, cudaStream_t stream);

}  // namespace tpar

#endif  // TPAR_CORE_COMM_H_
