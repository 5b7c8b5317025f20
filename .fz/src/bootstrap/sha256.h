// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the bootstrap's challenge-response
// (NOTE [bootstrap authentication] in socket_util.h). Small and dependency-free; checked against
// the published test vectors in tests/unit/bootstrap_trust_test.cc.
#ifndef TPAR_BOOTSTRAP_SHA256_H_
#define TPAR_BOOTSTRAP_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace tpar {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  Sha256Digest finish();  // the object is spent afterwards

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

Sha256Digest sha256(const void* data, size_t size);

// HMAC-SHA256 of the concatenation of `parts` (pointer, size) under `key`.
struct ByteSpan {
  const void* data;
  size_t size;
};
Sha256Digest hmacSha256(const void* key, size_t key_size, const ByteSpan* parts, size_t count);

// Compares without an early exit, so that the time taken says nothing about where two secrets
// first differ.
bool constantTimeEqual(const void* a, const void* b, size_t size);

}  // namespace tpar

#endif  // TPAR_BOOTSTRAP_SHA256_H_
