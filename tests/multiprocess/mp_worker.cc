// One rank of a multi-process test: joins the group named on the command line, runs several
// all-reduces, checks them against a reference it computes from every rank's inputs (they are
// derived from a shared seed), and writes a hash of each output so the parent can compare the
// ranks bitwise.
//   tpar_mp_worker <unique id hex> <rank> <nranks> <seed> <result file>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gpu/test_util.h"

using namespace tpar_test;

namespace {

int fail(const char* what, const char* detail) {
  std::fprintf(stderr, "mp_worker: %s: %s\n", what, detail);
  return 1;
}

uint64_t fnv(const std::vector<char>& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) return fail("usage", "<id hex> <rank> <nranks> <seed> <result file>");
  const std::string hex = argv[1];
  const int rank = std::atoi(argv[2]);
  const int nranks = std::atoi(argv[3]);
  const uint64_t seed = std::strtoull(argv[4], nullptr, 10);
  tparUniqueId id;
  if (hex.size() != 2 * sizeof(id.internal)) return fail("id", "wrong length");
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    id.internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  if (cudaSetDevice(0) != cudaSuccess) return fail("cudaSetDevice", "");
  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  cfg.allowSharedDevice = 1;
  cfg.timeoutMs = 120000;  // contexts on one GPU are time-sliced: hand-offs take milliseconds
  tparComm_t comm = nullptr;
  if (tparCommInitRankConfig(&comm, nranks, id, rank, &cfg) != tparSuccess) {
    return fail("tparCommInitRankConfig", tparGetLastError(nullptr));
  }
  tparCommInfo_t info;
  tparCommQuery(comm, &info);
  if (nranks > 1 && info.transport != tparTransportCudaIpc) return fail("transport", "not CUDA IPC");
  std::ofstream result(argv[5]);
  const size_t counts[] = {1, 4099, 300001};
  for (tparDataType_t dt : {tparBfloat16, tparFloat32}) {
    for (size_t count : counts) {
      const size_t bytes = count * elemSize(dt);
      std::vector<void*> in(nranks);
      void* out = nullptr;
      for (int r = 0; r < nranks; ++r) {
        cudaMalloc(&in[r], bytes);
        fillRandom(in[r], count, dt, seed * 31 + count * 7 + r, nullptr);
      }
      cudaMalloc(&out, bytes);
      poison(out, bytes, nullptr);
      cudaDeviceSynchronize();
      if (tparAllReduce(in[rank], out, count, dt, tparSum, comm, nullptr) != tparSuccess) {
        return fail("tparAllReduce", tparGetLastError(comm));
      }
      if (cudaDeviceSynchronize() != cudaSuccess) return fail("sync", "");
      tparResult_t async = tparSuccess;
      tparCommGetAsyncError(comm, &async);
      if (async != tparSuccess) return fail("async error", tparGetErrorString(async));
      CheckResult res;
      std::vector<const void*> ins(in.begin(), in.end());
      std::vector<const void*> outs(nranks, out);
      if (checkOutputs(ins, outs, count, dt, tparSum, &res) != cudaSuccess) return fail("check", "");
      if (res.wrong || res.off_ref) {
        std::fprintf(stderr, "mp_worker rank %d: count %zu: %llu wrong, %llu off reference\n", rank,
                     count, res.wrong, res.off_ref);
        return 1;
      }
      std::vector<char> host(bytes);
      cudaMemcpy(host.data(), out, bytes, cudaMemcpyDeviceToHost);
      result << tparDataTypeName(dt) << " " << count << " " << std::hex << fnv(host) << std::dec
             << "\n";
      for (void* p : in) cudaFree(p);
      cudaFree(out);
    }
  }
  result.close();
  if (tparCommDestroy(comm) != tparSuccess) return fail("destroy", tparGetLastError(nullptr));
  std::printf("mp_worker rank %d: ok\n", rank);
  return 0;
}
