// (bytes, ranks, dtype, topology) -> algorithm and launch shape. A pure function of inputs that
// are identical on every rank of a communicator, so every rank picks the same plan by
// construction. Built-in defaults per link class; a tuning table measured by `tpar tune` on the
// machine (JSON keyed by the topology signature) replaces them when present.
#ifndef TPAR_TUNER_TUNER_H_
#define TPAR_TUNER_TUNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/launch.h"
#include "registry/algorithms.h"
#include "tpar/tpar.h"

namespace tpar {

constexpr int kMaxPlanSteps = 64;

struct Plan {
  kernels::Algo algo = kernels::Algo::kOneShot;
  int active_blocks = 0;  // 0: every block of the communicator's grid
  int threads = 0;        // 0: sized from the work (threadsFor)
  int steps = 0;          // pipelined: steps per block (0: one), at most kMaxPlanSteps
  bool pull = false;      // pipelined: publish once in our own region, peers read it there
  // Hand the call to the attached NCCL communicator (tparAlgoNccl); the fields above are then
  // unused. Table entries say "algo": "nccl".
  bool nccl = false;
};

// Two plans launch the same way (an NCCL plan's other fields are unused).
inline bool samePlan(const Plan& a, const Plan& b) {
  return a.nccl == b.nccl && (a.nccl || (a.algo == b.algo && a.active_blocks == b.active_blocks &&
                                         a.threads == b.threads && a.steps == b.steps &&
                                         a.pull == b.pull));
}

// What the tuner knows about the group (the same on every rank).
struct TunerContext {
  int nranks = 1;
  std::string signature;          // Topology::signature
  int islands = 1;                // number of islands
  int island_size = 1;            // ranks per island when all islands are equal, else 0
  int worst_link = 0;             // LinkClass of the worst pair, as int
  bool hierarchical_ok = false;   // islands are equal-sized and > 1 (kernels can run it)
  bool host_transport = false;    // receive regions in host memory (tparTransportHost)
  // The most ranks that share one GPU (virtual ranks: all of them). With receive regions in
  // host memory they share its link, its polls and its fences (hostShape).
  int ranks_per_gpu = 1;
  // The pull area in GPU memory takes a whole piece (NOTE [a whole pull area for ranks on one
  // GPU] in comm/comm.cc): the two-shot pull runs a large call in one launch there.
  bool whole_pull = false;
  // The largest piece one launch of the pipelined schedule takes, in bytes (comm.cc runs a
  // larger call as such pieces, one launch each); 0: not known, no limit.
  uint64_t piece_bytes = 0;
  // An NCCL communicator is attached (tparCommSetNcclComm; every rank attaches alike): table
  // entries naming NCCL apply. Without one they give way to the defaults.
  bool nccl = false;
};

// One measured size bucket: messages up to max_bytes use this plan.
struct TuningEntry {
  uint64_t max_bytes = 0;
  tparDataType_t dtype = tparBfloat16;
  Plan plan;
  double us = 0;  // time measured by `tpar tune` (0: not measured); for people, not for choice
  // The built-in default's time in the same run (0: not measured); for people, like `us`.
  double default_us = 0;
};

// A table's wire threshold for a format that `tpar tune --wire` measured slower than the lossless
// path at every size: the format never applies by default.
constexpr int64_t kWireNever = INT64_MAX;

struct TuningTable {
  std::string signature;
  int nranks = 0;
  std::vector<TuningEntry> entries;  // ascending max_bytes per dtype
  // Per wire format (indexed by tparWire_t; [tparWireNone] unused): the smallest call from
  // which `tpar tune --wire` measured the format ahead of the lossless path at every size it
  // measured above, or kWireNever; -1: not measured (defaultWireMinBytes applies).
  int64_t wire_min_bytes[tparNumWires] = {-1, -1, -1, -1};
  std::string created;               // when it was measured (ISO 8601, UTC); informational
  std::string gpu;                   // GPU name it was measured on; informational
  std::string source;                // file it came from (not stored in the file)
};

// The largest message (bytes) for which the built-in plan picks one-shot on receive regions in
// GPU memory, when nothing overrides it. One-shot sends (n-1)x the message per rank in one
// crossing, two-shot 2(n-1)/n x in two, so the crossover moves down as n grows (the measured
// values are in docs/PERFORMANCE.md and docs/TUNING.md).
uint64_t defaultOneShotMaxBytes(int nranks);

// The grid of a communicator without TPAR_MAX_BLOCKS (before the residency bound): the default,
// and that of ranks sharing a GPU in its memory (NOTE [wide grid for shared GPUs]), whose small
// one-shots keep the default's count of blocks active, and of two ranks sharing one on the host
// transport with a wire format (NOTE [wire grid for two ranks on one GPU]).
constexpr int kDefaultGridBlocks = 32;
constexpr int kSharedGpuGridBlocks = 64;

// The smallest call that a communicator's wire format (tparConfig_t::wire, TPAR_WIRE) carries
// by default (TPAR_WIRE_MIN_BYTES moves it); smaller calls stay lossless. From the break-even
// sizes measured on the host transport with the scales staged in shared memory
// (docs/PERFORMANCE.md, "Wire formats: scales in shared memory"): at 2, 4 and 8 ranks every
// format is ahead from 512 KiB at every size measured above it (INT4 from 256 KiB, and 8 ranks
// from 128 KiB by a few percent). One threshold for every rank count: the counts between were
// not measured, and none measured wants a larger one.
constexpr uint64_t kWireMinBytes = 512u << 10;
inline uint64_t defaultWireMinBytes(int /*nranks*/) { return kWireMinBytes; }

// The most steps a format's plan runs (wirePlan, NOTE [wire steps in powers of two]). Once a
// step too wide for the staged scales ran as parts, 8 steps ran INT4 faster than the 16 of the
// lossless shape at 4 and 8 virtual ranks, and FP8 and INT8 even or faster (docs/PERFORMANCE.md,
// "Wire formats: steps in parts, and at most 8 steps").
constexpr int kWireMaxSteps = 8;

// The smallest call that wire format `wire` carries on a communicator: `configured`
// (TPAR_WIRE_MIN_BYTES) when set (>= 0), else what the communicator's tuning table measured for
// the format, else -1 (wirePlan then takes defaultWireMinBytes). Every rank agrees on both
// inputs at init.
int64_t wireMinBytes(int64_t configured, const TuningTable* table, int wire);
// Where a communicator's format applies, for its init log: "float16/bfloat16 calls from 524288
// bytes (the default)", "... (TPAR_WIRE_MIN_BYTES)", "... (the tuning table)", or "no call (the
// tuning table measured it behind)".
std::string wireThresholdText(int64_t configured, const TuningTable* table, int wire,
                              int nranks);

// The length of each piece when a call of `bytes` is cut into as few pieces of at most
// `piece_bytes` (a multiple of `align`) as it takes, all of one length in whole `align`s but the
// last (the formats' calls, in whole wire blocks: NOTE [wire shape per piece]); `bytes` itself
// when it fits one piece or piece_bytes is 0. comm.cc cuts the calls and wirePlan shapes their
// plan with it, so both see the same length.
inline uint64_t evenPieceBytes(uint64_t bytes, uint64_t piece_bytes, uint64_t align) {
  if (piece_bytes == 0 || bytes <= piece_bytes) return bytes;
  const uint64_t pieces = (bytes + piece_bytes - 1) / piece_bytes;
  const uint64_t each = (bytes + pieces - 1) / pieces;
  return (each + align - 1) / align * align;  // at most piece_bytes, itself whole aligns
}

// The longest piece of a call of `bytes` with wire format `wire` (tparWire_t) of `esize`-byte
// values, where a lossless piece may take `limit` bytes: the whole call when its codes and
// scales fit those bytes (NOTE [wire pieces by the bytes that travel] in kernels/prims/wire.h);
// for a longer call, that longest length where it is two lossless pieces or more (INT4), else
// the lossless piece in whole wire blocks. comm.cc cuts a format's calls by it (evenPieceBytes)
// and wirePlan shapes their plan for it.
uint64_t wirePieceBytes(uint64_t bytes, uint64_t limit, int nranks, int wire, size_t esize);

// The plan of a call of `bytes` when the communicator has a wire format: `plan` itself when the
// format does not apply (none set, a datatype other than float16 and bfloat16, below
// `min_bytes` (TPAR_WIRE_MIN_BYTES; -1: defaultWireMinBytes), NCCL, or a forced algorithm
// other than pipelined, or receive regions in GPU memory unless pipelined is forced: there the
// formats measured slower than lossless); else the pipelined schedule (`plan` itself when
// pipelined is forced, else the host shape on every block of the grid, its steps rounded down to
// a power of two: NOTE [wire steps in powers of two]), whose kernel with the
// format runs (registry's wireAlgorithmOf). *applies says which.
Plan wirePlan(const Plan& plan, uint64_t bytes, tparDataType_t dtype, const TunerContext& ctx,
              tparAlgo_t forced, int wire, bool* applies, int64_t min_bytes = -1);

// The built-in choice for this context (no table).
Plan defaultPlan(uint64_t bytes, tparDataType_t dtype, const TunerContext& ctx,
                 int64_t one_shot_max_bytes);

// The sizes after which defaultPlan may change its algorithm for `ctx` (unordered; for
// oneShotLimit, which must not miss one).
std::vector<uint64_t> defaultPlanBoundaries(const TunerContext& ctx, int64_t one_shot_max_bytes);

// Why algorithm `a` cannot run on the group of `ctx` ("one island", "islands of unequal
// size"), or nullptr when it can. Forced, or named by a table, such an algorithm runs two-shot
// instead (selectPlan); reports say so (forcedFallback, `tpar bench`, `tpar doctor`, the log).
const char* fallbackReason(kernels::Algo a, const TunerContext& ctx);

// What runs when the algorithm `forced` (TPAR_ALGO / config) cannot run on the group of
// `ctx`: `runs` and `why` (nullptr: the forced algorithm itself runs, or none is forced).
struct Fallback {
  kernels::Algo requested = kernels::Algo::kTwoShot;
  kernels::Algo runs = kernels::Algo::kTwoShot;
  const char* why = nullptr;
};
Fallback forcedFallback(tparAlgo_t forced, const TunerContext& ctx);

// The largest message of `dtype` up to which every size runs a one-shot kernel (oneshot or
// oneshot-pull) under selectPlan with these inputs; 0 when even 1 byte runs another kernel (or
// NCCL); UINT64_MAX when no size does (a forced one-shot, one rank). tparCommQuery's
// oneShotMaxBytes.
uint64_t oneShotLimit(tparDataType_t dtype, const TunerContext& ctx, const TuningTable* table,
                      tparAlgo_t forced, int64_t one_shot_max_bytes);

// The plan for a call: `forced` (TPAR_ALGO / config) first, then the table when it matches the
// context, then the defaults. An algorithm the context cannot run (hierarchical without equal
// islands) falls back to two-shot; a table entry naming NCCL without ctx.nccl gives the
// defaults. A forced NCCL stays NCCL either way: the call refuses it when none is attached.
Plan selectPlan(uint64_t bytes, tparDataType_t dtype, const TunerContext& ctx,
                const TuningTable* table, tparAlgo_t forced, int64_t one_shot_max_bytes);

// A table that gives `plan` for every size and datatype of `ctx`'s group: how `tpar tune` and
// the tests run one plan through the very path (selectPlan) that a saved table takes.
TuningTable singlePlanTable(const TunerContext& ctx, const Plan& plan);

// Reads a tuning file. A file that does not parse, has another format version, or names
// another topology signature or rank count fails with tparInvalidArgument and a message naming
// the file and the problem; the caller then uses the defaults. A file that cannot be read
// (missing, unreadable) fails with tparSystemError naming the path; a path that is not a regular
// file (a FIFO, a device, a directory) with tparInvalidArgument, at once (NOTE [user files]).
tparResult_t loadTuningFile(const std::string& path, const TunerContext& ctx, TuningTable* out);
// Writes a temporary file and renames it over `path`; refuses (tparInvalidArgument) an existing
// `path` that is not a regular file, which the rename would replace.
tparResult_t saveTuningFile(const std::string& path, const TuningTable& table);
std::string tuningToJson(const TuningTable& table);
tparResult_t tuningFromJson(const std::string& text, TuningTable* out);

// Where the communicator looks for a table: $TPAR_TUNING_FILE, else
// $XDG_CACHE_HOME/tpar or ~/.cache/tpar, file "tuning-<signature hash>-<nranks>.json".
std::string tuningFilePath(const TunerContext& ctx);
// The same from explicit values (null or empty: unset), so that tests need not touch the
// process environment. "" when no directory can be named (no HOME either).
std::string tuningFilePathFrom(const TunerContext& ctx, const std::string& tuning_file,
                               const char* xdg_cache_home, const char* home);

// A plan's algorithm as tables and tools name it: algoName, or "nccl".
const char* planAlgoName(const Plan& p);
// Sets out->algo or out->nccl from such a name; false for unknown names.
bool planAlgoFromName(const std::string& name, Plan* out);

}  // namespace tpar

#endif  // TPAR_TUNER_TUNER_H_
