// main() of the GPU tests. Virtual ranks need one hardware queue per stream to run their
// kernels concurrently; raise the default of 8 before CUDA starts.
#include <cstdlib>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "common/test_main.h"

namespace {

// Every test starts on GPU 0: a test that drives several GPUs leaves the last one current, and
// the tests after it make their virtual ranks' streams on the current device.
class StartOnDeviceZero : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override {
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) cudaSetDevice(0);
    (void)cudaGetLastError();
  }
};

}  // namespace

int main(int argc, char** argv) {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  return tpar_test::runTests(argc, argv, [] {
    ::testing::UnitTest::GetInstance()->listeners().Append(new StartOnDeviceZero);
  });
}
