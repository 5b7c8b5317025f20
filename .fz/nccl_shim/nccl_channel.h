// The setup's collectives (NOTE [shim setup]) over a real NCCL communicator: a small device
// buffer, a private stream, and a bounded wait for each collective.
#ifndef TPAR_NCCL_SHIM_NCCL_CHANNEL_H_
#define TPAR_NCCL_SHIM_NCCL_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "setup.h"

namespace tpar {
namespace shim {

class NcclSetupChannel : public SetupChannel {
 public:
  // On the current CUDA device (the communicator's); null with `why` when the buffer or the
  // stream cannot be made.
  static std::unique_ptr<NcclSetupChannel> create(ncclComm_t comm, int rank, int64_t timeout_ms,
                                                  std::string* why);
  // Frees the buffer and the stream. After a failed collective, abort the communicator first:
  // freeing waits for the device.
  ~NcclSetupChannel() override;

  bool allGather(const void* mine, void* all, size_t bytes, std::string* why) override;
  bool broadcast(void* buf, size_t bytes, int root, std::string* why) override;
  bool allMin(int32_t* value, std::string* why) override;

 private:
  NcclSetupChannel() = default;
  // Waits for the stream, at most timeout_ms_, watching the communicator's asynchronous error.
  bool wait(const char* what, std::string* why);
  bool check(ncclResult_t rc, const char* what, std::string* why);

  ncclComm_t comm_ = nullptr;
  int rank_ = 0;
  int nranks_ = 0;
  int64_t timeout_ms_ = 0;
  char* dev_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace shim
}  // namespace tpar

#endif  // TPAR_NCCL_SHIM_NCCL_CHANNEL_H_
