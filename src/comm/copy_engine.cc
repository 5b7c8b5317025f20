#include "comm/copy_engine.h"

#include <algorithm>

#include "base/error.h"
#include "comm/comm.h"
#include "kernels/prims/schedule.h"
#include "registry/launcher.h"

namespace tpar {

using kernels::kVecBytes;
using kernels::WorkspaceLayout;

CeGeometry ceGeometry(uint64_t bytes, int nranks, int pieces) {
  CeGeometry g;
  g.bytes = bytes;
  g.nranks = std::max(nranks, 1);
  g.pieces = std::min(std::max(pieces, 1), WorkspaceLayout::kCeMaxPieces);
  g.vecs = (bytes + kVecBytes - 1) / kVecBytes;
  g.chunk_vecs = kernels::chunkVecs(g.vecs, g.nranks, 1);
  g.piece_vecs = (g.chunk_vecs + g.pieces - 1) / g.pieces;
  return g;
}

namespace {
CeRange clip(const CeGeometry& g, uint64_t v0, uint64_t v1) {
  CeRange r;
  const uint64_t b0 = std::min(v0 * kVecBytes, g.bytes);
  const uint64_t b1 = std::min(v1 * kVecBytes, g.bytes);
  r.off = b0;
  r.len = b1 > b0 ? b1 - b0 : 0;
  return r;
}
}  // namespace

CeRange ceRange(const CeGeometry& g, int chunk, int piece) {
  const uint64_t c0 = uint64_t(chunk) * g.chunk_vecs;
  const uint64_t p0 = std::min(uint64_t(piece) * g.piece_vecs, g.chunk_vecs);
  const uint64_t p1 = std::min(p0 + g.piece_vecs, g.chunk_vecs);
  return clip(g, c0 + p0, c0 + p1);
}

CeRange ceChunk(const CeGeometry& g, int chunk) {
  const uint64_t c0 = uint64_t(chunk) * g.chunk_vecs;
  return clip(g, c0, c0 + g.chunk_vecs);
}

uint32_t ceCheck(uint32_t meta, uint64_t count, int pieces) {
  return meta ^ (static_cast<uint32_t>(count) * 0x9E3779B1u) ^
         (static_cast<uint32_t>(count >> 32) * 0xC2B2AE35u) ^
         (static_cast<uint32_t>(pieces) * 0x85EBCA77u);
}

tparResult_t copyEngineAllReduce(tparComm* comm, const CallLaunch& call, const void* send,
                                 void* recv, uint64_t count, cudaStream_t stream) {
  const int n = comm->nranks, me = comm->rank;
  const uint64_t esize = call.esize;
  const CeGeometry g = ceGeometry(count * esize, n, call.plan.steps);
  const tparDataType_t dtype = call.dtype;
  char* own = comm->peer_ws[me];  // our region: flags in its control page, then the areas
  char* in_area = own + comm->layout.ceBase();
  char* out_area = in_area + comm->layout.ce_bytes;
  auto inArea = [&](int r) { return comm->peer_ws[r] + comm->layout.ceBase(); };
  auto outArea = [&](int r) { return inArea(r) + comm->layout.ce_bytes; };
  const char* src = static_cast<const char*>(send);
  char* dst = static_cast<char*>(recv);

  kernels::CeArgs c{};
  for (int r = 0; r < n; ++r) c.peer_ws[r] = comm->peer_ws[r];
  c.state = comm->device_state;
  c.host_state = comm->host_state_dev;
  c.block_epochs = comm->block_epochs;
  c.source = reinterpret_cast<uint32_t*>(comm->workspace + WorkspaceLayout::kCeSourceOffset);
  c.timeout_ns = static_cast<uint64_t>(comm->cfg.timeout_ms) * 1000000ull;
  c.check = ceCheck(call.args.meta, count, g.pieces);
  c.grid = comm->max_blocks;
  c.rank = me;
  c.nranks = n;
  c.op = call.args.op;
  const void* reduce_fn = kernels::ceDataKernels.get(dtype, false);
  const void* finish_fn = kernels::ceDataKernels.get(dtype, true);
  const void* begin_fn = kernels::ceControlKernels.fn[0][0];
  const void* wait_fn = kernels::ceControlKernels.fn[0][1];
  const int blocks = comm->max_blocks;
  const int threads = kernels::kMaxThreads;
  const char* flag_source = reinterpret_cast<const char*>(c.source);
  auto flagSlot = [&](int slot) {
    return own + WorkspaceLayout::kCeFlagsOffset + uint64_t(slot) * kVecBytes;
  };

  cudaError_t err = launchCe(begin_fn, c, 1, 32, stream);
  if (err != cudaSuccess) return launchFailed(comm, err, "launching the copy-engine path");
  err = cudaEventRecord(comm->ce_fork, stream);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(comm->ce_stream, comm->ce_fork, 0);
  if (err != cudaSuccess) return launchFailed(comm, err, "forking the copy-engine stream");

  // U: our input's pieces of the other chunks, in the order peers need them (piece by piece,
  // the next rank's chunk first), each piece's flag after its data.
  for (int k = 0; k < g.pieces && err == cudaSuccess; ++k) {
    for (int i = 1; i < n && err == cudaSuccess; ++i) {
      const CeRange r = ceRange(g, kernels::ahead(me, i, n), k);
      if (r.len > 0)
        err = cudaMemcpyAsync(in_area + r.off, src + r.off, r.len, cudaMemcpyDefault,
                              comm->ce_stream);
    }
    if (err == cudaSuccess)
      err = cudaMemcpyAsync(flagSlot(k), flag_source, kVecBytes, cudaMemcpyDefault,
                            comm->ce_stream);
  }
  // The join is recorded whatever happened, so that a capture is never left forked.
  const cudaError_t join = cudaEventRecord(comm->ce_join, comm->ce_stream);
  if (err == cudaSuccess) err = join;

  // M: per piece, wait, fetch our chunk's piece from every peer, add.
  char* parts = comm->ce_scratch;
  for (int k = 0; k < g.pieces && err == cudaSuccess; ++k) {
    const CeRange mine = ceRange(g, me, k);
    c.slot = k;
    err = launchCe(wait_fn, c, 1, 32, stream);
    for (int s = 0; s < n && err == cudaSuccess; ++s) {
      c.part[s] = parts + uint64_t(s) * g.piece_vecs * kVecBytes;
      if (s == me || mine.len == 0) continue;
      err = cudaMemcpyAsync(const_cast<void*>(c.part[s]), inArea(s) + mine.off, mine.len,
                            cudaMemcpyDefault, stream);
    }
    if (err != cudaSuccess || mine.len == 0) continue;
    c.mine = src + mine.off;
    c.out = dst + mine.off;
    // One rank has no peer to publish to (and its chunk is the whole message).
    c.host_out = n > 1 ? out_area + (mine.off - ceChunk(g, me).off) : nullptr;
    c.count = mine.len / esize;
    c.aligned = reinterpret_cast<uintptr_t>(c.mine) % kVecBytes == 0 &&
                reinterpret_cast<uintptr_t>(c.out) % kVecBytes == 0;
    err = launchCe(reduce_fn, c, blocks, threads, stream);
  }
  // Our reduced chunk is published; wait for the peers', gather them, join U, finish.
  if (err == cudaSuccess)
    err = cudaMemcpyAsync(flagSlot(WorkspaceLayout::kCeMaxPieces), flag_source, kVecBytes,
                          cudaMemcpyDefault, stream);
  if (err == cudaSuccess) {
    c.slot = WorkspaceLayout::kCeMaxPieces;
    err = launchCe(wait_fn, c, 1, 32, stream);
  }
  char* gathered = comm->ce_scratch;
  for (int s = 0; s < n && err == cudaSuccess; ++s) {
    const CeRange r = ceChunk(g, s);
    if (s == me || r.len == 0) continue;
    err = cudaMemcpyAsync(gathered + r.off, outArea(s), r.len, cudaMemcpyDefault, stream);
  }
  const cudaError_t joined = cudaStreamWaitEvent(stream, comm->ce_join, 0);
  if (err == cudaSuccess) err = joined;
  if (err == cudaSuccess) {
    const CeRange r = ceChunk(g, me);
    c.gathered = gathered;
    c.out = dst;
    c.count = count;
    c.aligned = reinterpret_cast<uintptr_t>(dst) % kVecBytes == 0;
    c.skip0 = r.off / kVecBytes;
    c.skip1 = (r.off + r.len + kVecBytes - 1) / kVecBytes;
    if (r.len == 0) c.skip0 = c.skip1 = 0;
    err = launchCe(finish_fn, c, blocks, threads, stream);
  }
  if (err != cudaSuccess) return launchFailed(comm, err, "issuing the copy-engine path");
  return tparSuccess;
}

}  // namespace tpar
