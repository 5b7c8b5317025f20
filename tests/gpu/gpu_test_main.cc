// main() of the GPU tests. Virtual ranks need one hardware queue per stream to run their
// kernels concurrently; raise the default of 8 before CUDA starts.
#include <cstdlib>

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
