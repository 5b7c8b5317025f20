// Creating and destroying (or aborting) communicators many times leaves nothing behind: no
// descriptor, thread, shared-memory or pinned host mapping, locked page or GPU memory more than
// before. Virtual ranks on one GPU, once with receive regions in GPU memory (the default) and
// once in pinned host memory (transport 1).
#include <string>
#include <vector>

#include "gpu/test_util.h"
#include "multiprocess/resource_check.h"

namespace tpar_test {
namespace {

constexpr int kAutoTransport = 0;  // tparConfig_t::transport
constexpr int kHostTransport = 1;

class LeakAfterDestroy : public ::testing::TestWithParam<int> {
 protected:
  // One communicator's life: init, two checked all-reduces (one-shot and two-shot sizes under
  // auto selection), then destroy, or abort when `abort` (the handles are then gone, and
  // VirtualGroup's own destroy calls are refused without touching them).
  void cycle(bool abort, bool check_transport) {
    tparConfig_t cfg = sharedDeviceConfig(/*timeout_ms=*/5000);
    cfg.transport = GetParam();
    VirtualGroup g;
    ASSERT_EQ("", g.init(kRanks, cfg));
    if (check_transport) {
      tparCommInfo_t info;
      TPAR_OK(tparCommQuery(g.comm(0), &info));
      const tparTransport_t want =
          GetParam() == kHostTransport ? tparTransportHost : tparTransportSameDevice;
      ASSERT_EQ(want, info.transport) << tparTransportName(info.transport);
    }
    runAndCheck(g, 4099, tparBfloat16, tparSum, false);
    runAndCheck(g, 300001, tparBfloat16, tparSum, false);
    if (abort) {
      for (int r = 0; r < kRanks; ++r) TPAR_OK(tparCommAbort(g.comm(r)));
    }
    g.release();
  }
  static constexpr int kRanks = 4;
};

TEST_P(LeakAfterDestroy, FiftyCommunicatorsLeaveNoDescriptorsThreadsMappingsOrMemory) {
  TPAR_REQUIRE_GPU();
  // Whatever is made once per process (modules, topology discovery, NVML, the first pinned
  // allocation) is made here, before the baseline.
  for (int i = 0; i < 2; ++i) {
    cycle(i == 1, i == 0);
    if (HasFatalFailure()) return;
  }
  CUDA_OK(cudaDeviceSynchronize());
  settledFreeDeviceMemory();
  const ResourceSnapshot before = takeSnapshot(/*with_device=*/true);
  const int kCycles = 50;
  for (int i = 0; i < kCycles; ++i) {
    SCOPED_TRACE("cycle " + std::to_string(i));
    cycle(/*abort=*/i % 5 == 4, false);
    if (HasFatalFailure()) return;
  }
  CUDA_OK(cudaDeviceSynchronize());
  ResourceSnapshot after = takeSnapshot(true);
  // Freed GPU memory can take a moment to show in cudaMemGetInfo.
  for (int i = 0; i < 20 && !leaksSince(before, after).empty(); ++i) {
    settledFreeDeviceMemory(500);
    after = takeSnapshot(true);
  }
  EXPECT_EQ("", leaksSince(before, after))
      << "before: " << describe(before) << "\nafter:  " << describe(after);
  std::printf("%d communicators of %d ranks: before %s\n  after %s\n", kCycles, kRanks,
              describe(before).c_str(), describe(after).c_str());
}

INSTANTIATE_TEST_SUITE_P(Transports, LeakAfterDestroy,
                         ::testing::Values(kAutoTransport, kHostTransport),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(info.param == kHostTransport ? "host" : "default");
                         });

}  // namespace
}  // namespace tpar_test
