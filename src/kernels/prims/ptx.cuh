// The PTX the kernels use, each wrapped once.
#ifndef TPAR_KERNELS_PRIMS_PTX_CUH_
#define TPAR_KERNELS_PRIMS_PTX_CUH_

#include <cstdint>

namespace tpar {
namespace kernels {

struct Vec { uint32_t w[4]; };  // the wire unit: one 16-byte vector per thread and step

// Volatile accesses: never cached in L1, never merged or elided by the compiler.
__device__ __forceinline__ Vec loadVolatile(const void* p) {
  Vec v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ void storeVolatile(void* p, const Vec& v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.w[0]),
               "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3])
               : "memory");
}

__device__ __forceinline__ uint32_t loadAcquireSys(const void* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The acquire where every observer is on this GPU (NOTE [hand-offs at GPU scope]).
__device__ __forceinline__ uint32_t loadAcquireGpu(const void* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// A named barrier over the `threads` threads of one group of whole warps (barrier 0 is
// __syncthreads).
__device__ __forceinline__ void groupBarrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// NOTE [launch overlap]
// On GPUs with programmatic dependent launch (sm_90+), the host launches with
// cudaLaunchAttributeProgrammaticStreamSerialization, so a kernel may be scheduled before the
// previous kernel in its stream has finished. Every kernel therefore waits (griddepcontrol.wait:
// the previous grid complete and its memory visible) before its first access to global memory,
// and each block allows the next kernel's launch only as its very last act, after all its
// waits are over: the next kernel's blocks then never hold multiprocessors that ranks still
// waiting for each other need (virtual ranks must all stay resident). Without the attribute,
// or on older GPUs, both instructions do nothing.
__device__ __forceinline__ void waitForPrerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_PRIMS_PTX_CUH_
