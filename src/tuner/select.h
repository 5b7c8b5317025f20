// Algorithm choice. For now a size threshold per rank count; the topology-aware tuner replaces
// the table later. A pure function of group-identical inputs, so every rank picks the same.
#ifndef TPAR_TUNER_SELECT_H_
#define TPAR_TUNER_SELECT_H_

#include <cstdint>

#include "kernels/launch.h"
#include "tpar/tpar.h"

namespace tpar {

// The largest message (bytes) for which one-shot is chosen, when nothing overrides it.
uint64_t defaultOneShotMaxBytes(int nranks);

// forced: tparAlgoAuto or a fixed choice; one_shot_max_bytes: < 0 for the default.
kernels::Algo selectAlgo(uint64_t bytes, int nranks, tparAlgo_t forced,
                         int64_t one_shot_max_bytes);

}  // namespace tpar

#endif  // TPAR_TUNER_SELECT_H_
