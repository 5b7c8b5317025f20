// FNV-1a, 64 bits: stable across compilers, builds and runs (unlike std::hash), for names that
// must mean the same on every rank, in every process and in every file (topology signatures,
// tuning file names, host and namespace identities, the bootstrap's layout check). The offset
// basis is part of those names: a topology signature made with another one names a different
// machine (docs/TOPOLOGY.md, "Signature").
#ifndef TPAR_BASE_HASH_H_
#define TPAR_BASE_HASH_H_

#include <cstddef>
#include <cstdint>

namespace tpar {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;  // 14695981039346656037
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

inline uint64_t fnv1a(const void* data, size_t len, uint64_t h = kFnvOffset) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < len; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

// The 8 bytes of `value`, least significant first.
inline uint64_t fnv1aU64(uint64_t h, uint64_t value) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(value >> (8 * i));
  return fnv1a(b, 8, h);
}

}  // namespace tpar

#endif  // TPAR_BASE_HASH_H_
