// The communication schedules of the staged and hierarchical algorithms as plain data, so that
// their properties can be checked on the CPU: every element reduced exactly once, one inbound
// and one outbound peer per rank and step (staged), and the bytes that cross between islands
// (hierarchical). They are built from the kernels' own formulas (src/kernels/prims/schedule.h),
// which tests/unit/schedule_props_test.cc also checks directly. A model for the tests only: the
// library does not ship it.
#ifndef TPAR_TESTS_UNIT_SCHEDULE_MODEL_H_
#define TPAR_TESTS_UNIT_SCHEDULE_MODEL_H_

#include <cstdint>
#include <vector>

namespace tpar {

enum class Phase { kReduceScatter, kCrossIslands, kAllGather };

struct Transfer {
  Phase phase;
  int step;   // transfers of one step may run at once
  int from;
  int to;
  int chunk;  // index of the part of the message it carries (see each schedule)
};

// Staged two-shot over n ranks: the message is n chunks; rank r owns chunk r. Reduce-scatter
// steps s = 1..n-1: r sends its chunk r+s to rank r+s; all-gather steps s = 1..n-1: r sends
// its reduced chunk r to rank r+s.
std::vector<Transfer> stagedSchedule(int n);

// Hierarchical over `islands` (equal sizes m, k islands): the message is m chunks; the rank at
// island position p owns chunk p. Step 1: inside each island, everyone sends chunk p to the
// rank at position p. Step 2: the ranks at position p of different islands exchange their
// island's partial of chunk p. Step 3: inside each island, the rank at position p sends the
// result of chunk p to the others.
std::vector<Transfer> hierSchedule(const std::vector<std::vector<int>>& islands);

// Bytes one rank sends to other islands in one all-reduce of `bytes` with `elem_bytes`
// elements: hierarchical sends (k-1) fp32 partials of 1/m of the message; flat two-shot sends
// every chunk owned by a rank of another island and the reduced chunk to every such rank.
uint64_t hierCrossBytesPerRank(uint64_t bytes, int elem_bytes, int k, int m);
uint64_t twoShotCrossBytesPerRank(uint64_t bytes, int k, int m);

}  // namespace tpar

#endif  // TPAR_TESTS_UNIT_SCHEDULE_MODEL_H_
