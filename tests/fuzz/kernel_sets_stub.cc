// The parsers' build has no CUDA kernels: the algorithm registry (src/registry/algorithms.cc), which
// the tuning-table reader uses for names and topology needs, gets empty kernel sets here.
#include "kernels/launch.h"

namespace tpar {
namespace kernels {

// One per line of the algorithm list, plain, fused and wire, and the host-memory sets.
#define TPAR_STUB_SET_(Key, pub, name, alias, set) extern const KernelSet set{};
#define TPAR_STUB_FUSED_SET_(Key, plain, name, set) extern const KernelSet set{};
#define TPAR_STUB_WIRE_SET_(Key, plain, name, wire, set) extern const KernelSet set{};
#define TPAR_STUB_HOST_SET_(plain, set) extern const KernelSet set{};
TPAR_KERNEL_ALGORITHMS(TPAR_STUB_SET_)
TPAR_FUSED_ALGORITHMS(TPAR_STUB_FUSED_SET_)
TPAR_WIRE_ALGORITHMS(TPAR_STUB_WIRE_SET_)
TPAR_HOST_KERNEL_SETS(TPAR_STUB_HOST_SET_)
#undef TPAR_STUB_SET_
#undef TPAR_STUB_FUSED_SET_
#undef TPAR_STUB_WIRE_SET_
#undef TPAR_STUB_HOST_SET_
// And the fused call's norm kernel (its composite path), not a line of the list.
extern const KernelSet addRmsNormKernels{};

}  // namespace kernels
}  // namespace tpar
