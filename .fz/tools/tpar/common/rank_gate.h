// An arrival gate for virtual ranks: one small kernel per rank, launched on each rank's stream
// right before that rank's all-reduce, that returns once every rank of the group has reached
// it. See NOTE [rank gate] in rank_gate.cu.
#ifndef TPAR_TOOLS_COMMON_RANK_GATE_H_
#define TPAR_TOOLS_COMMON_RANK_GATE_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace tpar_cli {

class RankGate {
 public:
  RankGate() = default;
  RankGate(const RankGate&) = delete;
  RankGate& operator=(const RankGate&) = delete;
  ~RankGate();

  // Counters for `nranks` ranks that all run on the current device; a rank waits at most
  // `timeout_ms` for the others. "" or what failed.
  std::string init(int nranks, int64_t timeout_ms);
  // Rank `rank`'s gate on `stream` (of the same device). Graph-safe: a captured gate passes
  // once per replay.
  cudaError_t launch(int rank, cudaStream_t stream) const;
  // "" unless a gate gave up waiting (a rank never arrived); call after the streams are idle.
  std::string check() const;

 private:
  uint32_t* arrivals_ = nullptr;  // device memory: per rank, gates passed; then a give-up flag
  int nranks_ = 0;
  uint64_t timeout_ns_ = 0;
  int device_ = 0;
};

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_COMMON_RANK_GATE_H_
