// The GEMMs of one layer of `tpar verify --model kimi-k2` on one of 8 ranks, at a given token
// count, once each: run under ncu to see the launch shape cuBLAS picks (grid, block, cluster
// size; scripts/contention-check.sh, NOTE [rank gate]). Usage: gemm_shapes [TOKENS]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
  int tokens = argc > 1 ? atoi(argv[1]) : 64;
  cublasHandle_t h; cublasCreate(&h);
  void *a, *b, *c; cudaMalloc(&a, 256u << 20); cudaMalloc(&b, 256u << 20); cudaMalloc(&c, 64u << 20);
  cudaMemset(a, 0x3c, 256u << 20); cudaMemset(b, 0x3c, 256u << 20);
  struct S { int m, k, n; } s[] = {{tokens, 896, 7168}, {tokens, 7168, 4608}, {tokens, 2304, 7168}};
  const float one = 1, zero = 0;
  for (auto& g : s) {
    cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, g.n, g.m, g.k, &one, b, CUDA_R_16BF, g.n, a,
                 CUDA_R_16BF, g.k, &zero, c, CUDA_R_16BF, g.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    printf("tokens %d gemm %dx%dx%d status %d\n", tokens, g.m, g.k, g.n, (int)st);
  }
  printf("sync %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
