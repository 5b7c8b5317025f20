// Built by algorithms_doc_test.py against a copy of the sources with docs/ALGORITHMS.md's
// worked example applied: the registry's checks, and the new algorithm reachable by every
// name and number the list generates. The test passes the example's identifiers as macros
// (EXAMPLE_KEY, EXAMPLE_PUB, EXAMPLE_NAME, EXAMPLE_SET). Prints "ok N rows" or the failures.
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "registry/algorithms.h"
#include "registry/launcher.h"

namespace tpar {
namespace kernels {
extern const KernelSet EXAMPLE_SET;
}
}  // namespace tpar

using namespace tpar;

static int failures = 0;
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);     \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

int main() {
  std::set<int> keys, pubs;
  std::set<std::string> names;
  std::set<uint32_t> metas;
  for (const Algorithm& a : algorithms()) {
    CHECK(keys.insert(static_cast<int>(a.id)).second);
    CHECK(pubs.insert(a.pub).second);
    CHECK(names.insert(a.name).second);
    CHECK(&algorithm(a.id) == &a);
    CHECK(findAlgorithm(a.pub) == &a);
    CHECK(findAlgorithm(std::string(a.name)) == &a);
    CHECK(std::strcmp(publicAlgoName(a.pub), a.name) == 0);
    CHECK(a.kernels != nullptr);
    for (int d = 0; d < tparNumDataTypes; ++d)
      for (int n : {2, 4, 8, 16}) CHECK(a.kernels->get(static_cast<tparDataType_t>(d), n));
    CHECK(metas.insert(makeCallMeta(tparBfloat16, tparSum, a.id, 4096)).second);
  }
  CHECK(static_cast<int>(algorithms().size()) == kNumKernelAlgos);
  CHECK(static_cast<int>(algorithms().size()) == tparNumAlgos - 2);  // all but auto and nccl
  CHECK(findAlgorithm(tparAlgoAuto) == nullptr);
  CHECK(findAlgorithm(tparAlgoNccl) == nullptr);
  // The example, by each of its identities.
  const Algorithm* e = findAlgorithm(EXAMPLE_PUB);
  CHECK(e != nullptr);
  if (e != nullptr) {
    CHECK(e->id == kernels::Algo::EXAMPLE_KEY);
    CHECK(std::strcmp(e->name, EXAMPLE_NAME) == 0);
    CHECK(e->kernels == &kernels::EXAMPLE_SET);
    CHECK(&algorithm(kernels::Algo::EXAMPLE_KEY) == e);
    CHECK(findAlgorithm(std::string(EXAMPLE_NAME)) == e);
    kernels::Algo k;
    CHECK(algoFromName(EXAMPLE_NAME, &k) && k == kernels::Algo::EXAMPLE_KEY);
    CHECK(std::string(publicAlgoChoices()).find(EXAMPLE_NAME) != std::string::npos);
    CHECK(std::strcmp(publicAlgoName(EXAMPLE_PUB), EXAMPLE_NAME) == 0);
  }
  // The algorithms before it keep their keys and names.
  CHECK(std::strcmp(algorithm(kernels::Algo::kTwoShotLL).name, "twoshot-ll") == 0);
  CHECK(std::strcmp(algorithm(kernels::Algo::kTwoShot).name, "twoshot") == 0);
  if (failures == 0) std::printf("ok %zu rows\n", algorithms().size());
  return failures == 0 ? 0 : 1;
}
