// The pipelined two-shot with the FP8 wire format (wire_two_shot.cuh).
#include "kernels/wire_two_shot.cuh"

namespace tpar {
namespace kernels {

extern const KernelSet pipelinedFp8Kernels = makeKernelSet<WireTwoShot<WireFormat::kFp8>>();

}  // namespace kernels
}  // namespace tpar
