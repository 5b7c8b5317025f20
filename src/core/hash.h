// FNV-1a, 64 bits: stable across compilers, builds and runs (unlike std::hash), for names that
// must mean the same on every rank and in every file (topology signatures, tuning file names).
#ifndef TPAR_CORE_HASH_H_
#define TPAR_CORE_HASH_H_

#include <cstddef>
#include <cstdint>

namespace tpar {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;

inline uint64_t fnv1a(const void* data, size_t len, uint64_t h = kFnvOffset) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < len; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
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

#endif  // TPAR_CORE_HASH_H_
