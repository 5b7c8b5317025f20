// An empty shared library: the tests copy it where PyTorch's libtorch_cuda.so would be, load it,
// and check that the shim finds the NCCL of PyTorch's wheel layout next to it.
extern "C" __attribute__((visibility("default"))) int tparShimTestDummy() { return 1; }
