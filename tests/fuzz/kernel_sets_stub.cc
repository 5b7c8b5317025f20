// The parsers' build has no CUDA kernels: the algorithm registry (src/registry/algorithms.cc), which
// the tuning-table reader uses for names and topology needs, gets empty kernel sets here.
#include "kernels/launch.h"

namespace tpar {
namespace kernels {

extern const KernelSet oneShotKernels{}, oneShotPullKernels{}, twoShotKernels{},
    twoShotLLKernels{}, twoShotPullKernels{}, pipelinedKernels{}, stagedKernels{}, hierKernels{};

}  // namespace kernels
}  // namespace tpar
