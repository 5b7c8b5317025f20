// The formulas of every schedule: how a message splits into chunks, blocks and steps, and which
// peer and position each thread handles. Host and device share them, so the property tests
// (tests/unit/schedule_props_test.cc) check the very arithmetic the kernels run.
#ifndef TPAR_KERNELS_PRIMS_SCHEDULE_H_
#define TPAR_KERNELS_PRIMS_SCHEDULE_H_

#include <cstdint>

#include "kernels/launch.h"

namespace tpar {
namespace kernels {

// (me + i) mod n for 0 <= me, i < n, without a division.
TPAR_HOST_DEVICE inline int ahead(int me, int i, int n) {
  return me + i >= n ? me + i - n : me + i;
}

// Vectors per rank's chunk: ceil(vecs / n), rounded up to whole rows of `row_vecs` vectors
// (an epilogue that works on rows asks for them; 1 otherwise).
TPAR_HOST_DEVICE inline uint64_t chunkVecs(uint64_t vecs, int n, uint64_t row_vecs) {
  const uint64_t c = (vecs + n - 1) / n;
  return row_vecs > 1 ? (c + row_vecs - 1) / row_vecs * row_vecs : c;
}

// Block-sliced schedules: the message as `vecs` vectors in n chunks of `chunk`, and block b's
// slice [j0, j1) of positions within every chunk. Block b of every rank owns the same slice, so
// blocks hand off to their peers' block b and never wait for a sibling.
struct Slice {
  uint64_t vecs, chunk, j0, j1;
  TPAR_HOST_DEVICE uint64_t width() const { return j1 > j0 ? j1 - j0 : 0; }
};

TPAR_HOST_DEVICE inline Slice blockSlice(uint64_t vecs, int n, int grid, int block,
                                         uint64_t row_vecs) {
  Slice s;
  s.vecs = vecs;
  s.chunk = chunkVecs(vecs, n, row_vecs);
  const uint64_t slice = (s.chunk + grid - 1) / grid;
  s.j0 = uint64_t(block) * slice;
  s.j1 = s.j0 + slice < s.chunk ? s.j0 + slice : s.chunk;
  return s;
}

// Step k of `steps` of a slice: positions [*s0, *s1), empty when the slice is used up. Every
// step but the last is `align` positions wide or a multiple of that (1: the plain split).
TPAR_HOST_DEVICE inline void alignedStepRange(const Slice& s, int steps, int k, uint64_t align,
                                              uint64_t* s0, uint64_t* s1) {
  const uint64_t sw = ((s.width() + steps - 1) / steps + align - 1) / align * align;
  *s0 = s.j0 + uint64_t(k) * sw;
  *s1 = *s0 + sw < s.j1 ? *s0 + sw : s.j1;
  if (*s0 > *s1) *s0 = *s1;
}

TPAR_HOST_DEVICE inline void stepRange(const Slice& s, int steps, int k, uint64_t* s0,
                                       uint64_t* s1) {
  alignedStepRange(s, steps, k, 1, s0, s1);
}

// blockSlice with the chunk and every block's slice in whole multiples of `align` positions
// (the last slice shorter or empty), so that runs of `align` positions never straddle two.
TPAR_HOST_DEVICE inline Slice alignedBlockSlice(uint64_t vecs, int n, int grid, int block,
                                                uint64_t align) {
  Slice s = blockSlice(vecs, n, grid, block, align);
  const uint64_t slice = ((s.chunk + grid - 1) / grid + align - 1) / align * align;
  s.j0 = uint64_t(block) * slice;
  s.j1 = s.j0 + slice < s.chunk ? s.j0 + slice : s.chunk;
  return s;
}

// The (peer, position) pairs of a phase: pair u is peer ahead(me, 1 + u / width) (rotation: at
// each step every rank a different target), position s0 + u % width. 32-bit: a piece has fewer
// than 2^28 vectors (a format's piece of 1 GiB of codes), and a 64-bit division costs several
// times more on every pair's path.
struct PeerPositions {
  int n, me;
  uint64_t s0;
  uint32_t width;
  TPAR_HOST_DEVICE uint32_t pairs() const { return static_cast<uint32_t>(n - 1) * width; }
  TPAR_HOST_DEVICE int peer(uint32_t u, uint64_t* j) const {
    const uint32_t q = u / width;
    *j = s0 + (u - q * width);
    return ahead(me, 1 + static_cast<int>(q), n);
  }
};

// Staged two-shot, step s (1..n-1) of either phase: rank me sends to ahead(me, s, n) and
// receives from me - s (mod n): one inbound and one outbound peer per rank and step.
TPAR_HOST_DEVICE inline int stagedTarget(int me, int s, int n) { return ahead(me, s, n); }
TPAR_HOST_DEVICE inline int stagedSource(int me, int s, int n) { return ahead(me, n - s, n); }

// A grid-wide thread index in which consecutive warps lie in different blocks: few items still
// reach every multiprocessor, and each warp covers 32 consecutive items (coalesced).
TPAR_HOST_DEVICE inline uint64_t spreadIndex(uint32_t thread, uint32_t block, int grid) {
  return (uint64_t(thread / 32) * grid + block) * 32 + thread % 32;
}

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_PRIMS_SCHEDULE_H_
