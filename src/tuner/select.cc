#include "tuner/select.h"

namespace tpar {

uint64_t defaultOneShotMaxBytes(int nranks) {
  // One-shot sends (n-1)x the message per rank in one crossing; two-shot sends 2(n-1)/n x in
  // two crossings. The crossover moves down as n grows. Measured values: docs/PERFORMANCE.md.
  if (nranks <= 2) return 256u << 10;
  if (nranks <= 4) return 64u << 10;
  return 32u << 10;
}

kernels::Algo selectAlgo(uint64_t bytes, int nranks, tparAlgo_t forced,
                         int64_t one_shot_max_bytes) {
  if (forced == tparAlgoOneShot) return kernels::Algo::kOneShot;
  if (forced == tparAlgoTwoShot) return kernels::Algo::kTwoShot;
  const uint64_t limit = one_shot_max_bytes >= 0 ? static_cast<uint64_t>(one_shot_max_bytes)
                                                 : defaultOneShotMaxBytes(nranks);
  return bytes <= limit ? kernels::Algo::kOneShot : kernels::Algo::kTwoShot;
}

}  // namespace tpar
