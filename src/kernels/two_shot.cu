// Two-shot all-reduce (two_shot.cuh): the registry's twoshot, twoshot-ll, pipelined and
// twoshot-pull.
#include "kernels/two_shot.cuh"

namespace tpar {
namespace kernels {

extern const KernelSet twoShotKernels = makeKernelSet<TwoShot<SentinelBox, Push>>();
extern const KernelSet twoShotLLKernels = makeKernelSet<TwoShot<LineBox, Push>>();
extern const KernelSet pipelinedKernels = makeKernelSet<TwoShot<FlagBox, PlannedDirection>>();
extern const KernelSet twoShotPullKernels = makeKernelSet<TwoShot<FlagBox, Pull>>();

}  // namespace kernels
}  // namespace tpar
