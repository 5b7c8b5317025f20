#include "unit/schedule_model.h"

#include "kernels/prims/schedule.h"

namespace tpar {

// The kernels' own formulas (kernels/prims/schedule.h): rank r's target in step s.
std::vector<Transfer> stagedSchedule(int n) {
  using kernels::stagedTarget;
  std::vector<Transfer> out;
  for (int s = 1; s < n; ++s)
    for (int r = 0; r < n; ++r)
      out.push_back({Phase::kReduceScatter, s, r, stagedTarget(r, s, n), stagedTarget(r, s, n)});
  for (int s = 1; s < n; ++s)
    for (int r = 0; r < n; ++r) out.push_back({Phase::kAllGather, n - 1 + s, r, stagedTarget(r, s, n), r});
  return out;
}

std::vector<Transfer> hierSchedule(const std::vector<std::vector<int>>& islands) {
  std::vector<Transfer> out;
  const int k = static_cast<int>(islands.size());
  if (k == 0) return out;
  const int m = static_cast<int>(islands[0].size());
  using kernels::ahead;
  // Step 1, as the kernel pushes: position p sends chunk p+i to position p+i (mod m).
  for (int i = 1; i < m; ++i)
    for (int isl = 0; isl < k; ++isl)
      for (int p = 0; p < m; ++p)
        out.push_back({Phase::kReduceScatter, i, islands[isl][p], islands[isl][ahead(p, i, m)],
                       ahead(p, i, m)});
  // Step 2: position p of island isl sends its partial of chunk p to island isl+i (mod k).
  for (int i = 1; i < k; ++i)
    for (int isl = 0; isl < k; ++isl)
      for (int p = 0; p < m; ++p)
        out.push_back({Phase::kCrossIslands, m - 1 + i, islands[isl][p], islands[ahead(isl, i, k)][p], p});
  // Step 3: position p sends the result of chunk p to position p+i (mod m).
  for (int i = 1; i < m; ++i)
    for (int isl = 0; isl < k; ++isl)
      for (int p = 0; p < m; ++p)
        out.push_back({Phase::kAllGather, m - 1 + k - 1 + i, islands[isl][p],
                       islands[isl][ahead(p, i, m)], p});
  return out;
}

uint64_t hierCrossBytesPerRank(uint64_t bytes, int elem_bytes, int k, int m) {
  // fp32 partials: 4 / elem_bytes times the bytes of the chunk.
  return uint64_t(k - 1) * (bytes / m) * 4 / elem_bytes;
}

uint64_t twoShotCrossBytesPerRank(uint64_t bytes, int k, int m) {
  // n = k m chunks of bytes / n; (k-1) m of the other ranks are in other islands: the
  // reduce-scatter sends each of them its chunk, the all-gather our reduced chunk.
  const uint64_t n = uint64_t(k) * m;
  return 2 * uint64_t(k - 1) * m * (bytes / n);
}

}  // namespace tpar
