// The pipelined two-shot with the INT8 wire format (wire_two_shot.cuh).
#include "kernels/wire_two_shot.cuh"

namespace tpar {
namespace kernels {

extern const KernelSet pipelinedInt8Kernels = makeKernelSet<WireTwoShot<WireFormat::kInt8>>();

}  // namespace kernels
}  // namespace tpar
