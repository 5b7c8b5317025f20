// What the ranks of a communicator must agree on before their calls can meet on the device.
//
// NOTE [agreement]
// A call's device-side shape comes from settings each rank resolves for itself: the grid
// (TPAR_MAX_BLOCKS, then what the GPU can host), the block size (TPAR_THREADS), the algorithm
// choice (TPAR_ALGO, TPAR_ONESHOT_MAX_BYTES, the tuning table, which also fixes the active blocks,
// threads, steps and pull mode of every size), the workspace (maxBytesPerCall) and the first epoch.
// Ranks that differ slice one message differently and wait for blocks that never come: wrong
// results or a hang, which the call header (datatype, op, algorithm, count) cannot see. So every
// rank publishes a CallShape at init: the grid, the tuning table, the Shape lines of settings.def
// (NOTE [settings table]) and, with a wire format, its build's wire block. A setting that differs
// fails init on every rank with tparInvalidUsage naming it, and the grid, which depends on the GPU,
// is the smallest any rank can host (every rank can run it). Before any region is mapped, the ranks
// also compare the size their builds lay the regions out in (WorkspaceTerms). The NCCL attachment
// comes after init (tparCommSetNcclComm); it travels in every call header instead (NOTE [call
// header]), and tpar.h says what happens to calls routed to NCCL when ranks attach differently.
#ifndef TPAR_COMM_AGREEMENT_H_
#define TPAR_COMM_AGREEMENT_H_

#include <cstdint>
#include <type_traits>
#include <vector>

#include "base/config.h"
#include "tpar/tpar.h"

struct tparComm;

namespace tpar {

struct TuningTable;
class Bootstrap;

// Plain bytes: it travels between ranks in an init round.
struct CallShape {
  int32_t grid_blocks;  // the most blocks this rank's GPU can host (comm->max_blocks)
  uint32_t has_tuning;  // a tuning table is in use
  // The resolved value of every Shape setting of settings.def, in shapeSettings() order
  // (base/config.h; NOTE [settings table]).
  int64_t settings[kNumShapeSettings];
  uint64_t tuning_hash;     // tuningTableHash of it (0 without one)
  char tuning_source[128];  // its file, for the message (cut to fit)
  // The values per scale this build's kernels send with the communicator's wire format
  // (kernels::wireKernelBlock; 0 without a format): a property of the build that the call
  // header does not carry; ranks that differ would read each other's codes and scales at
  // different places.
  int32_t wire_block;
};
static_assert(std::is_trivially_copyable_v<CallShape> && std::is_standard_layout_v<CallShape>,
              "CallShape travels between processes as bytes");

// What sizes a rank's regions: the part of a CallShape its peers need before they map them,
// and the size its build lays them out in for those settings (WorkspaceLayout::totalBytes):
// ranks of tpar builds whose layouts differ would address each other's regions at different
// offsets, past the end of a smaller one.
struct WorkspaceTerms {
  uint64_t max_bytes_per_call;
  uint32_t epoch_start;
  uint64_t workspace_bytes;
};

// Round 2 of tparCommInitRank: `terms` (one per rank, in rank order) agree, or init fails with
// the message of agreeOnCallShapes. Round 4 checks the same settings again in the CallShape;
// this earlier check keeps a peer from mapping regions of a size it did not expect.
tparResult_t agreeOnWorkspaces(const std::vector<WorkspaceTerms>& terms);

// This rank's shape (after createLocal and applyTopology).
CallShape describeCallShape(const tparComm& comm);
// The shape of a rank with settings `cfg` whose GPU hosts `grid_blocks`, using `tuning` (null:
// no table).
CallShape describeCallShape(const ResolvedConfig& cfg, int grid_blocks, const TuningTable* tuning);

// Checks that `shapes` (one per rank, in rank order) agree. Fails with tparInvalidUsage naming
// the setting (its variable, and the tparConfig_t field that overrides it) and the two ranks'
// values on the first difference from rank 0, settings in table order; on success
// *grid_blocks is the smallest grid_blocks of all.
tparResult_t agreeOnCallShapes(const std::vector<CallShape>& shapes, int* grid_blocks);

// The last init round of tparCommInitRank: every rank reports whether it set up its peers
// (`local`, this rank's result so far; its error text is this thread's last error) and its
// CallShape. Fails on every rank when any rank failed (tparRemoteError naming it) or when the
// shapes disagree; on success the communicator adopts the agreed grid. Every rank must call it,
// failed or not, so that the rounds stay matched.
tparResult_t checkGroupReady(Bootstrap& boot, tparComm* comm, tparResult_t local);

// What selection reads from a table (signature, rank count and every entry's size, datatype
// and plan); not when or on what it was measured.
uint64_t tuningTableHash(const TuningTable& table);

}  // namespace tpar

#endif  // TPAR_COMM_AGREEMENT_H_
