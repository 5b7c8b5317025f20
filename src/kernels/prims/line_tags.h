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
// line's) of vector i is XORed with: an odd multiple, so a bijection of i * 4 + k + 1, which is
// distinct and non-zero for every (i, k) of an area below 2^30 vectors. So the four tags of a
// vector differ from each other and from the bare epoch.
TPAR_HOST_DEVICE inline uint32_t lineTagMix(uint64_t i, uint32_t k) {
  return static_cast<uint32_t>(i * 4 + k + 1) * 0x9E3779B1u;
}

// The word a writer stores as tag k of vector i in `epoch`.
TPAR_HOST_DEVICE inline uint32_t lineTag(uint32_t epoch, uint64_t i, uint32_t k) {
  return epoch ^ lineTagMix(i, k);
}

// Whether the two tag words w1, w3 of line h (0 or 1) of vector i, as loaded, carry `epoch`.
TPAR_HOST_DEVICE inline bool lineCarries(uint32_t w1, uint32_t w3, uint32_t epoch, uint64_t i,
                                         uint32_t h) {
  // Compared with the expected tags, which depend on (epoch, i) alone: computed once per vector
  // however many peers' lines at that index are tested.
  return w1 == lineTag(epoch, i, 2 * h) && w3 == lineTag(epoch, i, 2 * h + 1);
}

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_PRIMS_LINE_TAGS_H_
