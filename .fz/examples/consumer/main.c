/* Uses the installed (or vendored) tpar from C: the version, an error string, and one all-reduce
 * per local GPU when there are GPUs. Exits 0 when everything it could run worked. */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <tpar/tpar.h>

int main(void) {
  int version = 0;
  if (tparGetVersion(&version) != tparSuccess || version != TPAR_VERSION_CODE) {
    fprintf(stderr, "library version %d, header version %d\n", version, TPAR_VERSION_CODE);
    return 1;
  }
  printf("tpar %d.%d.%d\n", version / 10000, version / 100 % 100, version % 100);
  if (strcmp(tparGetErrorString(tparTimeout), "timed out waiting for peers") != 0) return 1;
  /* A bad argument is refused with its name, before anything needs a GPU. */
  if (tparCommInitAll(NULL, 1, NULL) != tparInvalidArgument) return 1;
  printf("bad argument refused: %s\n", tparGetLastError(NULL));

  int ngpus = 0;
  if (cudaGetDeviceCount(&ngpus) != cudaSuccess || ngpus == 0) {
    printf("no CUDA GPU here: library linked and answering\n");
    return 0;
  }
  tparComm_t comms[TPAR_MAX_RANKS];
  const int n = ngpus < TPAR_MAX_RANKS ? ngpus : TPAR_MAX_RANKS;
  if (tparCommInitAll(comms, n, NULL) != tparSuccess) {
    fprintf(stderr, "tparCommInitAll: %s\n", tparGetLastError(NULL));
    return 1;
  }
  const size_t count = 4096;
  float* bufs[TPAR_MAX_RANKS];
  float host[4096];
  int ok = 1;
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) host[i] = (float)(r + 1);
    cudaSetDevice(r);
    cudaMalloc((void**)&bufs[r], count * sizeof(float));
    cudaMemcpy(bufs[r], host, count * sizeof(float), cudaMemcpyHostToDevice);
  }
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(r);
    ok &= tparAllReduce(bufs[r], bufs[r], count, tparFloat32, tparSum, comms[r], 0) ==
          tparSuccess;
  }
  const float want = (float)(n * (n + 1) / 2);
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(r);
    cudaMemcpy(host, bufs[r], count * sizeof(float), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < count; ++i) ok &= host[i] == want;
    cudaFree(bufs[r]);
    tparCommDestroy(comms[r]);
  }
  printf("%d rank(s), one float32 all-reduce: %s\n", n, ok ? "correct" : "WRONG");
  return ok ? 0 : 1;
}
