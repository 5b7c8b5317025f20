// One rank of a bootstrap group in the unit tests: connect, gather a blob per rank, check every
// byte (bootstrap_trust_test.cc and bootstrap_flood_test.cc).
#ifndef TPAR_TESTS_UNIT_BOOTSTRAP_GATHER_H_
#define TPAR_TESTS_UNIT_BOOTSTRAP_GATHER_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "base/error.h"

namespace tpar {
namespace test {

struct GatherOutcome {
  tparResult_t code = tparInternalError;
  std::string error;
  size_t wrongBytes = 0;
};

// Connects as `rank` of `nranks` and gathers one blob of `bytes` random bytes per rank (each
// rank's blob derived from `seed`), checking every byte received.
inline GatherOutcome gatherOnce(const tparUniqueId& id, int rank, int nranks, uint64_t seed,
                                size_t bytes, int64_t timeoutMs) {
  GatherOutcome o;
  std::unique_ptr<Bootstrap> boot;
  o.code = connectBootstrap(id, rank, nranks, timeoutMs, &boot);
  if (o.code == tparSuccess) {
    std::vector<uint8_t> data(bytes * nranks, 0xee), expected(bytes * nranks);
    for (int r = 0; r < nranks; ++r) {
      std::mt19937_64 rng(seed + r);
      for (size_t i = 0; i < bytes; ++i) expected[r * bytes + i] = static_cast<uint8_t>(rng());
    }
    std::memcpy(&data[rank * bytes], &expected[rank * bytes], bytes);
    o.code = boot->allGather(data.data(), bytes);
    if (o.code == tparSuccess) {
      for (size_t i = 0; i < data.size(); ++i) o.wrongBytes += data[i] != expected[i];
    }
  }
  if (o.code != tparSuccess) o.error = lastError();
  return o;
}

}  // namespace test
}  // namespace tpar

#endif  // TPAR_TESTS_UNIT_BOOTSTRAP_GATHER_H_
