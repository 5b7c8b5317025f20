// The pipelined two-shot with the INT4 wire format (wire_two_shot.cuh).
#include "kernels/wire_two_shot.cuh"

namespace tpar {
namespace kernels {

extern const KernelSet pipelinedInt4Kernels = makeKernelSet<WireTwoShot<WireFormat::kInt4>>();

}  // namespace kernels
}  // namespace tpar
