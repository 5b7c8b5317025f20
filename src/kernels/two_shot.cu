// Two-shot all-reduce (two_shot.cuh): the registry's twoshot, twoshot-ll, pipelined and
// twoshot-pull.
#include "kernels/two_shot.cuh"

namespace tpar {
namespace kernels {

extern const KernelSet twoShotKernels = makeKernelSet<TwoShot<SentinelBox, kPush>, true>();
extern const KernelSet twoShotLLKernels = makeKernelSet<TwoShot<LineBox, kPush>, true>();
extern const KernelSet pipelinedKernels = makeKernelSet<TwoShot<FlagBox, kPlanned>>();
extern const KernelSet twoShotPullKernels = makeKernelSet<TwoShot<FlagBox, kPull>>();

}  // namespace kernels
}  // namespace tpar
