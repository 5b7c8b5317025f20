// A handle that is not a live communicator (foreign bytes, destroyed, aborted): every query
// refuses it with tparInvalidArgument and writes none of its outputs. Shared by the unit tests
// (a fake handle) and the GPU tests (a destroyed one).
#ifndef TPAR_TESTS_COMMON_DEAD_HANDLE_H_
#define TPAR_TESTS_COMMON_DEAD_HANDLE_H_

#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "tpar/tpar.h"

namespace tpar_test {

inline void expectQueriesRefuseDeadHandle(tparComm_t comm) {
  constexpr int kUntouched = -12345;
  int v = kUntouched;
  EXPECT_EQ(tparInvalidArgument, tparCommCount(comm, &v));
  EXPECT_NE(std::string::npos,
            std::string(tparGetLastError(nullptr)).find("not a live communicator"))
      << tparGetLastError(nullptr);
  EXPECT_EQ(tparInvalidArgument, tparCommUserRank(comm, &v));
  EXPECT_EQ(tparInvalidArgument, tparCommCuDevice(comm, &v));
  EXPECT_EQ(kUntouched, v);
  tparResult_t async = tparInternalError;
  EXPECT_EQ(tparInvalidArgument, tparCommGetAsyncError(comm, &async));
  EXPECT_EQ(tparInternalError, async);
  uint64_t kernels = 777;
  EXPECT_EQ(tparInvalidArgument, tparCommGetKernelCount(comm, &kernels));
  EXPECT_EQ(777u, kernels);
  tparCommInfo_t info;
  std::memset(&info, 0x5a, sizeof(info));
  EXPECT_EQ(tparInvalidArgument, tparCommQuery(comm, &info));
  EXPECT_EQ(0x5a5a5a5a, info.rank);
  tparAlgo_t algo = tparAlgoNccl;  // a value no failed call would write
  EXPECT_EQ(tparInvalidArgument, tparCommSelectAlgorithm(comm, 4096, &algo));
  EXPECT_EQ(tparInvalidArgument, tparCommSelectAlgorithmForType(comm, 4096, tparFloat32, &algo));
  EXPECT_EQ(tparAlgoNccl, algo);
  // tparGetLastError with a handle that is not live falls back to this thread's text.
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(comm)).find("not a live communicator"));
}

}  // namespace tpar_test

#endif  // TPAR_TESTS_COMMON_DEAD_HANDLE_H_
