#include "registry/launcher.h"

#include <cuda.h>

#include <algorithm>

namespace tpar {

uint32_t makeCallMeta(tparDataType_t dtype, tparRedOp_t op, kernels::Algo algo, uint64_t total_count,
                      bool nccl_attached) {
  // A hash of the whole call's count in the bits left: pieces of differently sized calls then
  // differ even where one piece's count happens to match.
  using B = CallMetaBits;
  uint64_t h = total_count * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return (static_cast<uint32_t>(dtype) << B::kDtypeShift) |
         (static_cast<uint32_t>(op) << B::kOpShift) |
         (static_cast<uint32_t>(algo) << B::kAlgoShift) |
         (nccl_attached ? 1u << B::kNcclShift : 0u) |
         (static_cast<uint32_t>(h & ((1ull << B::kHashBits) - 1)) << B::kHashShift);
}

NormShape normShapeFor(uint64_t rows, uint64_t row_vecs, int grid, int max_threads) {
  NormShape s;
  auto threadsOf = [max_threads](uint64_t vecs) {
    const uint64_t t = std::max<uint64_t>(64, (vecs + 31) / 32 * 32);
    return static_cast<int>(std::min<uint64_t>(t, static_cast<uint64_t>(max_threads)));
  };
  // A group's slots: one per block, and a polling thread per block of the group (>= 64 threads).
  const uint64_t cap = std::min<uint64_t>(std::max(grid, 1),
                                          kernels::WorkspaceLayout::kRowPartialSlots);
  uint64_t g = 1;
  if (rows > 0 && rows * 2 <= cap) {
    g = std::min<uint64_t>({cap / rows, (row_vecs + kMinNormSliceVecs - 1) / kMinNormSliceVecs,
                            64});
  }
  if (g > 1) {
    uint64_t slice = (row_vecs + g - 1) / g;
    slice += slice & 1;  // NVFP4's blocks of 16 span two vectors
    g = (row_vecs + slice - 1) / slice;
    if (g > 1) {
      s.group = static_cast<uint32_t>(g);
      s.slice = static_cast<uint32_t>(slice);
      s.threads = threadsOf(slice);
      return s;
    }
  }
  s.threads = threadsOf(row_vecs);
  return s;
}

int threadsFor(uint64_t work, int blocks, int max_threads) {
  const uint64_t per_block = (work + blocks - 1) / blocks;
  uint64_t t = (per_block + 31) / 32 * 32;
  if (t < 64) t = 64;
  if (t > static_cast<uint64_t>(max_threads)) t = max_threads;
  return static_cast<int>(t);
}

namespace {

using LaunchKernelEx = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);

// cuLaunchKernelEx of the installed driver, or nullptr (NOTE [driver launch]).
LaunchKernelEx driverLaunchKernelEx() {
  static LaunchKernelEx fn = [] {
    void* sym = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &sym, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<LaunchKernelEx>(nullptr);
    }
    return reinterpret_cast<LaunchKernelEx>(sym);
  }();
  return fn;
}

bool launchThroughDriver(void* handle, void** params, int blocks, int threads, bool overlap,
                         cudaStream_t stream) {
  const LaunchKernelEx launch_ex = handle != nullptr ? driverLaunchKernelEx() : nullptr;
  if (launch_ex == nullptr) return false;
  CUlaunchConfig config = {};
  config.gridDimX = static_cast<unsigned>(blocks);
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = static_cast<unsigned>(threads);
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = reinterpret_cast<CUstream>(stream);
  CUlaunchAttribute attr[1];
  if (overlap) {
    attr[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr[0].value.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = 1;
  }
  return launch_ex(&config, static_cast<CUfunction>(handle), params, nullptr) == CUDA_SUCCESS;
}

cudaError_t launch(const KernelHandles* handles, const void* fn, void** params, int blocks,
                   int threads, bool overlap, cudaStream_t stream) {
  if (fn == nullptr) return cudaErrorInvalidValue;
  if (handles != nullptr &&
      launchThroughDriver(handles->find(fn), params, blocks, threads, overlap, stream))
    return cudaSuccess;
  if (!overlap) return cudaLaunchKernel(fn, dim3(blocks), dim3(threads), params, 0, stream);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return cudaLaunchKernelExC(&config, fn, params);
}

}  // namespace

cudaError_t launchAllReduce(const KernelHandles* handles, const void* fn,
                            const kernels::AllReduceArgs& args, int blocks, int threads,
                            bool overlap, cudaStream_t stream) {
  void* params[] = {const_cast<kernels::AllReduceArgs*>(&args)};
  return launch(handles, fn, params, blocks, threads, overlap, stream);
}

cudaError_t launchAllReduceNorm(const KernelHandles* handles, const void* fn,
                                const kernels::AllReduceArgs& args, const kernels::NormArgs& norm,
                                int blocks, int threads, bool overlap, cudaStream_t stream) {
  void* params[] = {const_cast<kernels::AllReduceArgs*>(&args),
                    const_cast<kernels::NormArgs*>(&norm)};
  return launch(handles, fn, params, blocks, threads, overlap, stream);
}

template <typename F>
cudaError_t forEachKernel(const kernels::KernelSet* const* sets, int nsets, F&& f) {
  cudaError_t result = cudaSuccess;
  for (int i = 0; i < nsets; ++i)
    for (const auto& per_dtype : sets[i]->fn)
      for (const void* fn : per_dtype)
        if (result == cudaSuccess) result = f(fn);
  return result;
}

cudaError_t launchAddRmsNorm(const KernelHandles* handles, const void* fn,
                             const kernels::NormArgs& norm, const void* sum, int blocks,
                             int threads, cudaStream_t stream) {
  void* params[] = {const_cast<kernels::NormArgs*>(&norm), const_cast<void**>(&sum)};
  return launch(handles, fn, params, blocks, threads, false, stream);
}

void KernelHandles::resolve(const kernels::KernelSet* const* sets, int nsets) {
  by_entry_.clear();
  if (driverLaunchKernelEx() == nullptr) return;
  (void)forEachKernel(sets, nsets, [this](const void* fn) {
    cudaFunction_t f = nullptr;
    if (fn != nullptr && cudaGetFuncBySymbol(&f, fn) == cudaSuccess && f != nullptr)
      by_entry_.emplace_back(fn, static_cast<void*>(f));
    else
      (void)cudaGetLastError();
    return cudaSuccess;
  });
  std::sort(by_entry_.begin(), by_entry_.end());
}

void* KernelHandles::find(const void* fn) const {
  const auto it = std::lower_bound(by_entry_.begin(), by_entry_.end(),
                                   std::pair<const void*, void*>(fn, nullptr));
  return it != by_entry_.end() && it->first == fn ? it->second : nullptr;
}

// NOTE [preload]
// Under lazy module loading (the CUDA 12+ default) a kernel's module is loaded at its first
// launch, and loading waits for the device to go idle. A rank whose first kernel spins waiting
// for a peer on another stream then blocks that peer's first launch: a deadlock (two streams,
// one spinning on a flag the other sets: it hangs under LAZY, not under EAGER). Touching every
// kernel with cudaFuncGetAttributes at communicator init loads them all up front.
cudaError_t preloadKernels(const kernels::KernelSet* const* sets, int nsets) {
  return forEachKernel(sets, nsets, [](const void* fn) {
    cudaFuncAttributes attr;
    return cudaFuncGetAttributes(&attr, fn);
  });
}

cudaError_t maxActiveBlocksPerSm(const kernels::KernelSet* const* sets, int nsets, int threads,
                                 int* blocks) {
  int best = 1 << 30;
  const cudaError_t result = forEachKernel(sets, nsets, [&](const void* fn) {
    int b = 0;
    const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, fn, threads, 0);
    if (e == cudaSuccess && b < best) best = b;
    return e;
  });
  *blocks = best;
  return result;
}

}  // namespace tpar
