// The GPU work of `tpar doctor`: link probes (bandwidth and latency kernels), the self-test of
// tpar's algorithms, and the tpar-vs-NCCL timing. Each step fills its part of DoctorResults
// and never stops the others: a failure is recorded as text next to the number it prevented.
#ifndef TPAR_TOOLS_PROBES_H_
#define TPAR_TOOLS_PROBES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/tpar/doctor/doctor.h"

namespace tpar_cli {

struct ProbePlan {
  bool bandwidth = true;               // --quick skips the bandwidth probes
  size_t bandwidth_bytes = 64u << 20;  // far above any L2, so the link is what gets timed
  int bandwidth_reps = 5;              // median of these, after one warm-up
  int latency_rounds = 1000;           // round trips timed per run
  int latency_reps = 3;                // median of these runs
  uint64_t timeout_ns = 1000000000;    // every spin loop gives up after this
  int timing_iterations = 300;         // all-reduces per CUDA graph in the timing
};

ProbePlan probePlan(bool quick);

// Loads every kernel of the doctor on each device now. NOTE [preload] (docs/DESIGN.md
// principle 8): under lazy loading, the first launch of a kernel behind a spinning kernel of
// the same GPU (the ping-pong probes, an all-reduce of another virtual rank) waits for the GPU
// to go idle, which it never does.
std::string preloadDoctorKernels(const std::vector<int>& devices);

// Measures each GPU against pinned host memory, each ordered pair with peer access, and (one
// GPU) the GPU against its own memory. Progress goes to stderr.
void probeLinks(const ProbePlan& plan, DoctorResults* r);

// The link between GPU `dev` and pinned host memory mapped into it, measured as probeLinks
// does for the doctor: a kernel's write and read bandwidth against that memory and the one-way
// flag hand-off through it (LinkMeasure::latency_us). Preloads its kernels first. Returns "" or
// what failed (also in m->error); no other work may run on the GPU meanwhile.
std::string probeHostLink(int dev, const ProbePlan& plan, LinkMeasure* m);

// Checks every element of all-reduces of exactly known sums on r->devices, with each of
// tpar's algorithms forced.
void runSelfTests(DoctorResults* r);

// tpar (tparAlgoAuto) and NCCL at kSmallMessageBytes and kLargeMessageBytes, bf16, one CUDA
// graph per rank, on r->devices.
void runTimings(const ProbePlan& plan, DoctorResults* r);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_PROBES_H_
