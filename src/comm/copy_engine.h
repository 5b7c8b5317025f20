// Where the copy-engine path's pieces lie (NOTE [copy-engine path] in kernels/copy_engine.cu):
// host arithmetic only, so that unit tests check the very ranges the copies use.
#ifndef TPAR_COMM_COPY_ENGINE_H_
#define TPAR_COMM_COPY_ENGINE_H_

#include <cstdint>

namespace tpar {

// A launch piece of `bytes` over n ranks: `vecs` 16-byte vectors in n chunks of `chunk_vecs`
// (the last ones shorter or empty), each chunk in `pieces` pieces of `piece_vecs`.
struct CeGeometry {
  uint64_t bytes = 0;
  uint64_t vecs = 0;
  uint64_t chunk_vecs = 0;
  uint64_t piece_vecs = 0;
  int nranks = 1;
  int pieces = 1;
};

// `pieces` is clamped to 1..kCeMaxPieces (kernels/launch.h).
CeGeometry ceGeometry(uint64_t bytes, int nranks, int pieces);

// Bytes [off, off + len) of the message that piece k of chunk c holds, clipped to the message
// (len 0: nothing there).
struct CeRange {
  uint64_t off = 0;
  uint64_t len = 0;
};
CeRange ceRange(const CeGeometry& g, int chunk, int piece);
// Chunk c whole (its reduced values, as the gather copies them).
CeRange ceChunk(const CeGeometry& g, int chunk);

// The flag word's check: the call header word, the launch's count and the pieces, so that ranks
// that disagree on any of them are told apart.
uint32_t ceCheck(uint32_t meta, uint64_t count, int pieces);

}  // namespace tpar

#endif  // TPAR_COMM_COPY_ENGINE_H_
