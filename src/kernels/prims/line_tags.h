// The tags of epoch-tagged lines (LineBox, NOTE [line tags] in mailbox.cuh). Host and device
// share them, so the unit tests (tests/unit/line_tags_test.cc) check the arithmetic the kernels
// run.
#ifndef TPAR_KERNELS_PRIMS_LINE_TAGS_H_
#define TPAR_KERNELS_PRIMS_LINE_TAGS_H_

#include <cstdint>

#include "kernels/launch.h"

namespace tpar {
namespace kernels {

// What the tag word k (0 and 1: the first line's two 8-byte halves, 2 and 3: the second
// line's) is XORed with: odd multiples of 1 to 4, so four distinct non-zero words. So the two
// tags of a line differ from each other, from the other line's and from the bare epoch. They do
// not depend on the vector's position: a slot holds one vector per epoch, and tags the same at
// every position are computed once per call rather than once per peer and vector
// (NOTE [line tags] in mailbox.cuh).
TPAR_HOST_DEVICE inline uint32_t lineTagMix(uint32_t k) { return (k + 1) * 0x9E3779B1u; }

// The word a writer stores as tag k of a vector in `epoch`.
TPAR_HOST_DEVICE inline uint32_t lineTag(uint32_t epoch, uint32_t k) {
  return epoch ^ lineTagMix(k);
}

// Whether the two tag words w1, w3 of line h (0 or 1) of a vector, as loaded, carry `epoch`.
TPAR_HOST_DEVICE inline bool lineCarries(uint32_t w1, uint32_t w3, uint32_t epoch, uint32_t h) {
  return w1 == lineTag(epoch, 2 * h) && w3 == lineTag(epoch, 2 * h + 1);
}

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_PRIMS_LINE_TAGS_H_
