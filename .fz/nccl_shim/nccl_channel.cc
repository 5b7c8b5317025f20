#include "nccl_channel.h"

#include <chrono>
#include <thread>

#include "real_nccl.h"

namespace tpar {
namespace shim {
namespace {

constexpr size_t kBufferBytes = 1024;  // 16 votes of 16 bytes, or one id message, twice
constexpr size_t kSendOffset = kBufferBytes / 2;

template <Api kApi, typename Fn>
Fn real() {
  return reinterpret_cast<Fn>(realFunction(kApi));
}

std::string cudaText(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

}  // namespace

std::unique_ptr<NcclSetupChannel> NcclSetupChannel::create(ncclComm_t comm, int rank,
                                                           int64_t timeout_ms, std::string* why) {
  std::unique_ptr<NcclSetupChannel> ch(new NcclSetupChannel());
  ch->comm_ = comm;
  ch->rank_ = rank;
  ch->timeout_ms_ = timeout_ms;
  for (Api api : {Api::k_ncclAllGather, Api::k_ncclBroadcast, Api::k_ncclAllReduce,
                  Api::k_ncclCommGetAsyncError, Api::k_ncclGetErrorString}) {
    if (realFunction(api) == nullptr) {
      *why = std::string("the real NCCL lacks ") + apiName(api);
      return nullptr;
    }
  }
  auto count = real<Api::k_ncclCommCount, ncclResult_t (*)(ncclComm_t, int*)>();
  if (count == nullptr || count(comm, &ch->nranks_) != ncclSuccess) {
    *why = "ncclCommCount failed";
    return nullptr;
  }
  cudaError_t err = cudaMalloc(&ch->dev_, kBufferBytes);
  if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&ch->stream_, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    *why = "setup buffer: " + cudaText(err);
    return nullptr;  // the destructor frees what was made
  }
  return ch;
}

NcclSetupChannel::~NcclSetupChannel() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (dev_ != nullptr) cudaFree(dev_);
}

bool NcclSetupChannel::check(ncclResult_t rc, const char* what, std::string* why) {
  if (rc == ncclSuccess || rc == ncclInProgress) return true;
  auto text = real<Api::k_ncclGetErrorString, const char* (*)(ncclResult_t)>();
  *why = std::string(what) + " failed: " + (text != nullptr ? text(rc) : "unknown NCCL error");
  return false;
}

bool NcclSetupChannel::wait(const char* what, std::string* why) {
  auto async = real<Api::k_ncclCommGetAsyncError, ncclResult_t (*)(ncclComm_t, ncclResult_t*)>();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  for (int polls = 0;; ++polls) {
    // A call NCCL still enqueues (ncclInProgress) is not on the stream yet: an idle stream
    // proves nothing until the communicator's state is ncclSuccess.
    ncclResult_t state = ncclSuccess;
    if (async(comm_, &state) != ncclSuccess) state = ncclSuccess;
    if (state != ncclSuccess && state != ncclInProgress) return check(state, what, why);
    if (state == ncclSuccess) {
      const cudaError_t err = cudaStreamQuery(stream_);
      if (err == cudaSuccess) return true;
      if (err != cudaErrorNotReady) {
        (void)cudaGetLastError();
        *why = std::string(what) + ": " + cudaText(err);
        return false;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      *why = std::string(what) + " did not complete within " + std::to_string(timeout_ms_) +
             " ms (TPAR_BOOTSTRAP_TIMEOUT_MS): every rank must load libtpar_nccl.so and set "
             "TPAR_SHIM_DISABLE alike";
      return false;
    }
    // Spin briefly (the usual case ends in microseconds), then back off.
    if (polls > 100) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

bool NcclSetupChannel::allGather(const void* mine, void* all, size_t bytes, std::string* why) {
  if (bytes * static_cast<size_t>(nranks_) > kSendOffset) {
    *why = "setup message too large";
    return false;
  }
  auto gather = real<Api::k_ncclAllGather, ncclResult_t (*)(const void*, void*, size_t,
                                                            ncclDataType_t, ncclComm_t,
                                                            cudaStream_t)>();
  cudaError_t err = cudaMemsetAsync(dev_, 0, kSendOffset, stream_);
  if (err == cudaSuccess)
    err = cudaMemcpyAsync(dev_ + kSendOffset, mine, bytes, cudaMemcpyHostToDevice, stream_);
  if (err != cudaSuccess) {
    *why = "vote: " + cudaText(err);
    return false;
  }
  if (!check(gather(dev_ + kSendOffset, dev_, bytes, ncclUint8, comm_, stream_), "ncclAllGather",
             why) ||
      !wait("ncclAllGather", why)) {
    return false;
  }
  err = cudaMemcpy(all, dev_, bytes * nranks_, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) *why = "vote: " + cudaText(err);
  return err == cudaSuccess;
}

bool NcclSetupChannel::broadcast(void* buf, size_t bytes, int root, std::string* why) {
  if (bytes > kSendOffset) {
    *why = "setup message too large";
    return false;
  }
  auto bcast = real<Api::k_ncclBroadcast, ncclResult_t (*)(const void*, void*, size_t,
                                                           ncclDataType_t, int, ncclComm_t,
                                                           cudaStream_t)>();
  cudaError_t err = cudaMemcpyAsync(dev_, buf, bytes, cudaMemcpyHostToDevice, stream_);
  if (err != cudaSuccess) {
    *why = "unique id: " + cudaText(err);
    return false;
  }
  if (!check(bcast(dev_, dev_, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast", why) ||
      !wait("ncclBroadcast", why)) {
    return false;
  }
  err = cudaMemcpy(buf, dev_, bytes, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) *why = "unique id: " + cudaText(err);
  return err == cudaSuccess;
}

bool NcclSetupChannel::allMin(int32_t* value, std::string* why) {
  auto reduce = real<Api::k_ncclAllReduce, ncclResult_t (*)(const void*, void*, size_t,
                                                            ncclDataType_t, ncclRedOp_t,
                                                            ncclComm_t, cudaStream_t)>();
  cudaError_t err = cudaMemcpyAsync(dev_, value, sizeof(*value), cudaMemcpyHostToDevice, stream_);
  if (err != cudaSuccess) {
    *why = "agreement: " + cudaText(err);
    return false;
  }
  if (!check(reduce(dev_, dev_, 1, ncclInt32, ncclMin, comm_, stream_), "ncclAllReduce", why) ||
      !wait("ncclAllReduce", why)) {
    return false;
  }
  err = cudaMemcpy(value, dev_, sizeof(*value), cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) *why = "agreement: " + cudaText(err);
  return err == cudaSuccess;
}

}  // namespace shim
}  // namespace tpar
