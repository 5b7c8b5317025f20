// What an all-reduce with a compressed wire format computes, on the host (docs/WIRE.md): the
// specification the kernels are checked against bit for bit, and the pipeline the accuracy
// study (bench/experiments/wire_accuracy.cc) measures. Blocks are consecutive runs of the
// block size from the start of the buffer (the kernels' chunks are whole tiles).
//  * every rank's contribution is encoded once and decoded by whoever reduces it (its own too,
//    so that the sum does not depend on who owns it);
//  * the decoded contributions are added in fp32 in rank order;
//  * two-shot: the owner encodes the sum once more for the all-gather and every rank, the
//    owner too, takes its decode; one-shot: every rank keeps its own sum, which is the same;
//  * the result is rounded once to the output's datatype.
#ifndef TPAR_TESTS_COMMON_WIRE_REFERENCE_H_
#define TPAR_TESTS_COMMON_WIRE_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_bf16.h>

#include "kernels/prims/wire.h"
#include "tpar/tpar.h"

namespace tpar {
namespace ref {

enum class WireAlgo { kOneShot, kTwoShot };

// fp32 to bf16 and back, rounded to nearest even (cuda_bf16.h's conversion).
inline float bf16Round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Every value of x through the format: encoded by blocks of `block`, decoded.
template <kernels::WireFormat F, int kBlock>
void wireRoundTrip(const std::vector<float>& x, std::vector<float>* out) {
  using Tile = kernels::WireTile<F, kBlock>;
  out->assign(x.size(), 0.0f);
  std::vector<uint8_t> bytes(Tile::kBytes);
  for (size_t at = 0; at < x.size(); at += Tile::kValues) {
    const int n = static_cast<int>(std::min<size_t>(Tile::kValues, x.size() - at));
    Tile::encode(x.data() + at, n, bytes.data());
    Tile::decode(bytes.data(), n, out->data() + at);
  }
}

inline void wireRoundTrip(kernels::WireFormat f, int block, const std::vector<float>& x,
                          std::vector<float>* out) {
  using kernels::WireFormat;
#define TPAR_WIRE_CASE(F, B)                 \
  if (f == WireFormat::F && block == B) {    \
    wireRoundTrip<WireFormat::F, B>(x, out); \
    return;                                  \
  }
  TPAR_WIRE_CASE(kFp8, 32) TPAR_WIRE_CASE(kFp8, 64) TPAR_WIRE_CASE(kFp8, 128)
  TPAR_WIRE_CASE(kInt8, 32) TPAR_WIRE_CASE(kInt8, 64) TPAR_WIRE_CASE(kInt8, 128)
  TPAR_WIRE_CASE(kInt4, 32) TPAR_WIRE_CASE(kInt4, 64) TPAR_WIRE_CASE(kInt4, 128)
#undef TPAR_WIRE_CASE
  throw std::invalid_argument("no wire format " + std::to_string(static_cast<int>(f)) +
                              " with blocks of " + std::to_string(block));
}

// The all-reduce (sum) of inputs[rank] through the format, before the output's rounding.
inline std::vector<float> wireAllReduce(kernels::WireFormat f, int block, WireAlgo algo,
                                        const std::vector<std::vector<float>>& inputs) {
  std::vector<float> sum(inputs.at(0).size(), 0.0f), decoded;
  for (size_t r = 0; r < inputs.size(); ++r) {
    wireRoundTrip(f, block, inputs[r], &decoded);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = r == 0 ? decoded[i] : sum[i] + decoded[i];
  }
  if (algo == WireAlgo::kOneShot) return sum;
  wireRoundTrip(f, block, sum, &decoded);
  return decoded;
}

// The same with max or min in place of the sum (tparSum: as above): the combination of the
// decoded contributions in rank order, then, two-shot, through the format once more.
inline std::vector<float> wireAllReduce(kernels::WireFormat f, int block, WireAlgo algo,
                                        const std::vector<std::vector<float>>& inputs,
                                        tparRedOp_t op) {
  if (op == tparSum) return wireAllReduce(f, block, algo, inputs);
  std::vector<float> acc, x;
  for (size_t r = 0; r < inputs.size(); ++r) {
    wireRoundTrip(f, block, inputs[r], &x);
    if (r == 0) acc = x;
    for (size_t i = 0; r > 0 && i < acc.size(); ++i)
      acc[i] = op == tparMax ? std::fmax(acc[i], x[i]) : std::fmin(acc[i], x[i]);
  }
  if (algo == WireAlgo::kOneShot) return acc;
  wireRoundTrip(f, block, acc, &x);
  return x;
}

// The lossless all-reduce: fp32 in rank order, no wire rounding.
inline std::vector<float> losslessAllReduce(const std::vector<std::vector<float>>& inputs) {
  std::vector<float> sum(inputs.at(0).size(), 0.0f);
  for (size_t r = 0; r < inputs.size(); ++r)
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = r == 0 ? inputs[r][i] : sum[i] + inputs[r][i];
  return sum;
}

// A ring all-reduce in bf16, as NCCL's ring runs it: each chunk's partial sum is rounded to
// bf16 at every hop; chunk c starts at rank c + 1 (of `chunks` equal chunks).
inline std::vector<float> bf16RingAllReduce(const std::vector<std::vector<float>>& inputs) {
  const size_t n = inputs.size(), count = inputs.at(0).size();
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    const size_t chunk = i * n / count;
    float partial = inputs[(chunk + 1) % n][i];
    for (size_t k = 2; k <= n; ++k) partial = bf16Round(partial + inputs[(chunk + k) % n][i]);
    out[i] = bf16Round(partial);
  }
  return out;
}

}  // namespace ref
}  // namespace tpar

#endif  // TPAR_TESTS_COMMON_WIRE_REFERENCE_H_
