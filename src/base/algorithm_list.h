// The one list of all-reduce algorithms (NOTE [algorithm descriptor]).
#ifndef TPAR_BASE_ALGORITHM_LIST_H_
#define TPAR_BASE_ALGORITHM_LIST_H_

#include <cstring>
#include <string>

#include "tpar/tpar.h"

// NOTE [algorithm descriptor]
// An algorithm is one line of TPAR_KERNEL_ALGORITHMS, and everything that names or numbers it
// is generated from that line:
//   - the kernel key kernels::Algo::k<Key> (src/kernels/launch.h), whose value is the line's
//     position: the call header carries it (NOTE [call header]), so lines are only appended;
//   - the check that every tparAlgo_t value of include/tpar/tpar.h has exactly one line here or
//     in TPAR_OTHER_ALGORITHMS (a static_assert below);
//   - the public names (tparAlgoName, TPAR_ALGO's choices, tuning tables, the CLI), each with
//     the older names that parsers still accept;
//   - the declaration of the kernel set, kernels::<kernels> (defined by a schedule file), and
//     the registry's index by key and by public value (src/registry/algorithms.cc), whose row
//     adds what the host needs to run it; a static_assert fails the build when a line has no
//     row or a row repeats a key.
// The line is data only (no kernel types), so that the ground floor (the environment registry)
// and the device code can both read it. Variants that share a schedule but differ in what they
// do to the data (a fused epilogue, a wire codec) are lines of their own: one kernel set each,
// one key each, and the call header tells them apart.
//
//   X(Key, public value, "name", "alias" or "", kernel set)
#define TPAR_KERNEL_ALGORITHMS(X)                                                   \
  X(OneShot, tparAlgoOneShot, "oneshot", "", oneShotKernels)                        \
  X(TwoShot, tparAlgoTwoShot, "twoshot", "", twoShotKernels)                        \
  X(Staged, tparAlgoStaged, "staged", "", stagedKernels)                            \
  X(Hier, tparAlgoHierarchical, "hier", "hierarchical", hierKernels)                \
  X(OneShotPull, tparAlgoOneShotPull, "oneshot-pull", "", oneShotPullKernels)       \
  X(TwoShotPull, tparAlgoTwoShotPull, "twoshot-pull", "", twoShotPullKernels)       \
  X(Pipelined, tparAlgoPipelined, "pipelined", "", pipelinedKernels)                \
  X(TwoShotLL, tparAlgoTwoShotLL, "twoshot-ll", "", twoShotLLKernels)

// Variants that fuse the work after an all-reduce into its kernel (docs/FUSED.md): residual add
// + RMSNorm. A line each, naming the plain algorithm whose schedule, mailbox and limits it
// shares; their keys follow the plain ones (appended, like those), so the call header tells a
// fused launch from a plain one. No tparAlgo_t value: they serve tparAllReduceAddRmsNorm only.
//   F(Key, plain Key, "name", kernel set)
#define TPAR_FUSED_ALGORITHMS(F)                                       \
  F(OneShotNorm, OneShot, "oneshot+norm", oneShotNormKernels)          \
  F(OneShotPullNorm, OneShotPull, "oneshot-pull+norm", oneShotPullNormKernels)    \
  F(TwoShotNorm, TwoShot, "twoshot+norm", twoShotNormKernels)

// Variants that carry a compressed wire format (docs/WIRE.md) over a plain algorithm's
// schedule: a line each, naming the plain algorithm and the format (tparWire_t); their keys
// follow the fused ones (appended). No tparAlgo_t value: a communicator's wire setting picks
// them for the plain algorithm's calls (wirePlan in tuner/tuner.h, wireAlgorithmOf).
//   W(Key, plain Key, "name", tparWire_t, kernel set)
#define TPAR_WIRE_ALGORITHMS(W)                                                      \
  W(PipelinedFp8, Pipelined, "pipelined+fp8", tparWireFp8, pipelinedFp8Kernels)      \
  W(PipelinedInt8, Pipelined, "pipelined+int8", tparWireInt8, pipelinedInt8Kernels)  \
  W(PipelinedInt4, Pipelined, "pipelined+int4", tparWireInt4, pipelinedInt4Kernels)

// Other kernels of a plain algorithm for receive regions in host memory: the same key and call
// header, the registry row's host_kernels (NOTE [one-shot pull over flag lines in host memory]).
//   H(plain Key, kernel set)
#define TPAR_HOST_KERNEL_SETS(H) H(OneShotPull, oneShotPullHostKernels)

// The public values that run no tpar kernel: the communicator's choice, and the NCCL
// communicator attached with tparCommSetNcclComm.
//   Y(public value, "name")
#define TPAR_OTHER_ALGORITHMS(Y) \
  Y(tparAlgoAuto, "auto")        \
  Y(tparAlgoNccl, "nccl")

namespace tpar {

// Bits of the call header word that carry the kernel key (NOTE [call header]).
constexpr int kCallHeaderAlgoBits = 5;

// The kernel key: its value is the line's position (the kernel-side name is kernels::Algo).
#define TPAR_ALGO_ENUM_(Key, pub, name, alias, set) k##Key,
#define TPAR_FUSED_ENUM_(Key, plain, name, set) k##Key,
#define TPAR_WIRE_ENUM_(Key, plain, name, wire, set) k##Key,
enum class AlgoKey : int {
  TPAR_KERNEL_ALGORITHMS(TPAR_ALGO_ENUM_) TPAR_FUSED_ALGORITHMS(TPAR_FUSED_ENUM_)
      TPAR_WIRE_ALGORITHMS(TPAR_WIRE_ENUM_)
};
#undef TPAR_ALGO_ENUM_
#undef TPAR_FUSED_ENUM_
#undef TPAR_WIRE_ENUM_

#define TPAR_ALGO_COUNT_(...) +1
// The plain algorithms (the registry's rows), and the fused variants after them.
constexpr int kNumKernelAlgos = 0 TPAR_KERNEL_ALGORITHMS(TPAR_ALGO_COUNT_);
constexpr int kNumFusedAlgos = 0 TPAR_FUSED_ALGORITHMS(TPAR_ALGO_COUNT_);
constexpr int kNumWireAlgos = 0 TPAR_WIRE_ALGORITHMS(TPAR_ALGO_COUNT_);
#undef TPAR_ALGO_COUNT_
static_assert(kNumKernelAlgos + kNumFusedAlgos + kNumWireAlgos <= (1 << kCallHeaderAlgoBits),
              "the call header's algorithm field is too narrow for the algorithm list");

// One public value and its names; `key` is the kernel key's value, -1 for the others.
struct PublicAlgo {
  tparAlgo_t pub;
  const char* name;
  const char* alias;  // "" for none
  int key;
};

namespace algo_list_detail {
#define TPAR_ALGO_KERNEL_ROW_(Key, pub, name, alias, set) \
  {pub, name, alias, static_cast<int>(AlgoKey::k##Key)},
#define TPAR_ALGO_OTHER_ROW_(pub, name) {pub, name, "", -1},
constexpr PublicAlgo kRows[] = {
    TPAR_KERNEL_ALGORITHMS(TPAR_ALGO_KERNEL_ROW_) TPAR_OTHER_ALGORITHMS(TPAR_ALGO_OTHER_ROW_)};
#undef TPAR_ALGO_KERNEL_ROW_
#undef TPAR_ALGO_OTHER_ROW_
constexpr int kNumRows = sizeof(kRows) / sizeof(kRows[0]);

struct Rows {
  PublicAlgo by_pub[tparNumAlgos];
};
constexpr Rows index() {
  Rows r{};
  for (int p = 0; p < tparNumAlgos; ++p) r.by_pub[p] = {static_cast<tparAlgo_t>(p), "", "", -1};
  for (int i = 0; i < kNumRows; ++i)
    if (kRows[i].pub >= 0 && kRows[i].pub < tparNumAlgos) r.by_pub[kRows[i].pub] = kRows[i];
  return r;
}
constexpr bool everyValueOnce() {
  if (kNumRows != tparNumAlgos) return false;
  for (int i = 0; i < kNumRows; ++i) {
    if (kRows[i].pub < 0 || kRows[i].pub >= tparNumAlgos) return false;
    for (int j = i + 1; j < kNumRows; ++j)
      if (kRows[i].pub == kRows[j].pub) return false;
  }
  return true;
}
}  // namespace algo_list_detail

static_assert(algo_list_detail::everyValueOnce(),
              "every tparAlgo_t value (tpar.h) needs exactly one line in TPAR_KERNEL_ALGORITHMS "
              "or TPAR_OTHER_ALGORITHMS");

// Every public value's row, indexed by tparAlgo_t.
inline constexpr algo_list_detail::Rows kPublicAlgos = algo_list_detail::index();

// tparAlgoName: the public name of a tparAlgo_t, or "unknown".
inline const char* publicAlgoName(tparAlgo_t pub) {
  return pub >= 0 && pub < tparNumAlgos ? kPublicAlgos.by_pub[pub].name : "unknown";
}

// The public value that `name` (or an older alias of it) names; false for none.
inline bool publicAlgoFromName(const char* name, tparAlgo_t* out) {
  for (const PublicAlgo& a : kPublicAlgos.by_pub) {
    if (std::strcmp(name, a.name) == 0 || (a.alias[0] != '\0' && std::strcmp(name, a.alias) == 0)) {
      *out = a.pub;
      return true;
    }
  }
  return false;
}

// Every public name in tparAlgo_t order, '|'-separated (TPAR_ALGO's choices; aliases are
// accepted but not listed).
inline const char* publicAlgoChoices() {
  static const std::string choices = [] {
    std::string s;
    for (const PublicAlgo& a : kPublicAlgos.by_pub) s += std::string(s.empty() ? "" : "|") + a.name;
    return s;
  }();
  return choices.c_str();
}

// A wire format's name as TPAR_WIRE, tables and tools spell it ("none", "fp8", "int8",
// "int4"), or nullptr for a value that is no format.
inline const char* wireFormatName(int wire) {
  switch (wire) {
    case tparWireNone: return "none";
    case tparWireFp8: return "fp8";
    case tparWireInt8: return "int8";
    case tparWireInt4: return "int4";
    default: return nullptr;
  }
}

// The tparWire_t that `name` (lower case) names: a format's name, or "bf16", the lossless
// format's other name (a float16/bfloat16 call travels in its own 16 bits); false for none.
inline bool wireFromName(const char* name, int* out) {
  for (int w = tparWireNone; w < tparNumWires; ++w) {
    if (std::strcmp(name, wireFormatName(w)) == 0) {
      *out = w;
      return true;
    }
  }
  if (std::strcmp(name, "bf16") != 0) return false;
  *out = tparWireNone;
  return true;
}

}  // namespace tpar

#endif  // TPAR_BASE_ALGORITHM_LIST_H_
