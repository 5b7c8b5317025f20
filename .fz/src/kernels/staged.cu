// Staged two-shot all-reduce: the two-shot schedule (two_shot.cuh) with the pushes of each
// position in rotation (kRotation): in step s (1..n-1) rank r pushes to rank r+s and waits for
// what rank r-s pushed to it before it takes step s+1, in the reduce-scatter and again in the
// all-gather. For PCIe trees where all-to-all pushes collapse at a root complex.
#include "kernels/two_shot.cuh"

namespace tpar {
namespace kernels {

extern const KernelSet stagedKernels =
    makeKernelSet<TwoShot<SentinelBox, kPush, IdentityCodec, IdentityEpilogue, AllRanks, true>>();

}  // namespace kernels
}  // namespace tpar
