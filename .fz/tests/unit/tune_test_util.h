// Measured candidates for the unit tests of `tpar tune` (no GPU).
#ifndef TPAR_TESTS_UNIT_TUNE_TEST_UTIL_H_
#define TPAR_TESTS_UNIT_TUNE_TEST_UTIL_H_

#include <string>

#include "tools/tpar/tune/tune.h"

namespace tpar_cli {

// A candidate of algorithm `a` with `blocks` active, measured at `us` with `wrong` elements.
inline TuneCandidate cand(tpar::kernels::Algo a, int blocks, double us, long long wrong,
                          const std::string& error = "") {
  TuneCandidate c;
  c.plan.algo = a;
  c.plan.active_blocks = blocks;
  c.us = us;
  c.wrong = wrong;
  c.error = error;
  return c;
}

// The same with `threads` per block.
inline TuneCandidate shaped(tpar::kernels::Algo a, int blocks, int threads, double us,
                            long long wrong = 0) {
  TuneCandidate c = cand(a, blocks, us, wrong);
  c.plan.threads = threads;
  return c;
}

// `c` as the built-in default of its size.
inline TuneCandidate asDefault(TuneCandidate c) {
  c.is_default = true;
  return c;
}

}  // namespace tpar_cli

#endif  // TPAR_TESTS_UNIT_TUNE_TEST_UTIL_H_
