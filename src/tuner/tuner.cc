#include "tuner/tuner.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "kernels/prims/wire.h"
#include "registry/algorithms.h"
#include "base/env.h"
#include "base/hash.h"
#include "base/error.h"
#include "base/user_file.h"
#include "topology/topology.h"

namespace tpar {
namespace {

constexpr const char* kFormatTag = "tpar-tuning";
constexpr int kFormatVersion = 1;

// A tuning file is a few kilobytes; refusing anything huge keeps communicator init from
// reading whatever a wrong TPAR_TUNING_FILE points at.
constexpr std::streamsize kMaxFileBytes = 4 << 20;

// Staged pays n-1 dependent steps, each behind a flag round trip over the link, so it
// only makes sense above the one-shot limit. At bulk sizes the time is wire time, and no
// measurement yet shows its rotation beating two-shot there; until `tpar tune` measures the
// machine, two-shot keeps the sizes above this one.
constexpr uint64_t kStagedMaxBytes = 4u << 20;

// Receive regions in host memory (defaultPlan): one-shot pull up to this size on two ranks,
// two-shot LL up to the next, the pipelined two-shot above.
constexpr uint64_t kHostOneShotPullMaxBytes = 16u << 10;
constexpr uint64_t kHostLLMaxBytes = 32u << 10;

// Ranks sharing a GPU with receive regions in host memory: up to this size the sentinel
// push kernels with one or two blocks (NOTE [small host calls on a shared GPU]); two ranks
// only above the second size (one-shot pull below it).
constexpr uint64_t kSharedHostSmallMaxBytes = 12u << 10;
constexpr uint64_t kSharedHostPairPullMaxBytes = 8u << 10;
// Past the small calls (NOTE [push calls on a shared GPU]): two ranks sharing a GPU push
// one-shot up to the first size and two-shot up to the second, 3 or 4 ranks up to the third
// (3 ranks one-shot up to the fourth), 5 to 7 ranks two-shot up to the fifth, 8 or more up to
// the sixth; from 5 ranks with one block up to the sixth size, two above it.
constexpr uint64_t kSharedHostPairPushMaxBytes = 64u << 10;
constexpr uint64_t kSharedHostPairTwoShotMaxBytes = 128u << 10;
constexpr uint64_t kSharedHostPushMaxBytes = 96u << 10;
constexpr uint64_t kSharedHostTrioOneShotMaxBytes = 40u << 10;
constexpr uint64_t kSharedHostMidPushMaxBytes = 64u << 10;
constexpr uint64_t kSharedHostWidePushMaxBytes = 40u << 10;
// Past the push (NOTE [two-shot LL on a shared GPU]): eight or more ranks sharing a GPU run the
// two-shot pull up to this size, the pipelined two-shot above it.
constexpr uint64_t kSharedHostWidePullMaxBytes = 384u << 10;
// From 3 ranks sharing a GPU, the pipelined two-shot up to this size runs at most 4 blocks of
// 256 threads (hostShape, NOTE [narrow pipelined calls on a shared GPU]).
constexpr uint64_t kSharedHostNarrowPipelinedMaxBytes = 384u << 10;
// Two ranks sharing a GPU, from this size: the pipelined two-shot up to 16 blocks each (hostShape,
// NOTE [wide pipelined calls of two ranks on one GPU]).
constexpr uint64_t kSharedHostPairWidePipelinedMinBytes = 1u << 20;
// From 4 ranks sharing a GPU, above the narrow size and up to this one: the pipelined two-shot
// with 256 threads and shorter steps (hostShape, NOTE [shorter pipelined steps on a shared GPU]).
constexpr uint64_t kSharedHostMidPipelinedMaxBytes = 1u << 20;

// Every rank on one GPU, in its memory (NOTE [small calls of ranks on one GPU]): from 3 ranks
// one-shot pull up to the first size; two ranks the push one-shot up to the second.
constexpr uint64_t kOneGpuPullMaxBytes = 128u << 10;
// Three and four ranks with a whole pull area take the one-shot pull up to this size (NOTE
// [one-shot pull to 512 KiB for three and four ranks on one GPU]).
constexpr uint64_t kOneGpuSmallGroupPullMaxBytes = 512u << 10;
constexpr uint64_t kOneGpuPairOneShotMaxBytes = 3u << 20;
// Three to five ranks on one GPU pull calls up to this size with a narrow grid (NOTE [a narrow
// one-shot pull for tiny calls of a few ranks on one GPU]).
constexpr uint64_t kOneGpuTinyPullMaxBytes = 16u << 10;
constexpr int kOneGpuTinyPullBlocks = 8;
constexpr int kOneGpuTinyPullThreads = 128;
// Every rank on one GPU with a whole pull area (NOTE [two-shot pull for large calls of ranks
// on one GPU]): the two-shot pull from the first size with 7 and 8 ranks, from the second with
// 5 and 6, from the third with 3 and 4.
constexpr uint64_t kOneGpuWideTwoShotPullMinBytes = 1u << 20;
constexpr uint64_t kOneGpuMidTwoShotPullMinBytes = 2u << 20;
constexpr uint64_t kOneGpuTwoShotPullMinBytes = 4u << 20;

// Ranks sharing a GPU, in its memory: one-shot up to this size runs 32 of the wider grid's
// blocks (NOTE [wide grid for shared GPUs]); at 112 KiB 32 and 64 blocks tied. Where every
// rank is on one GPU the pull of NOTE [small calls of ranks on one GPU] takes these sizes
// first, unless TPAR_ONESHOT_MAX_BYTES is set.
constexpr uint64_t kSharedGpuNarrowMaxBytes = 64u << 10;

const char* dtypeKey(tparDataType_t d) {
  switch (d) {
    case tparFloat32: return "float32";
    case tparFloat16: return "float16";
    case tparBfloat16: return "bfloat16";
    default: return nullptr;
  }
}

bool dtypeFromKey(const std::string& s, tparDataType_t* out) {
  for (int d = 0; d < tparNumDataTypes; ++d) {
    if (s == dtypeKey(static_cast<tparDataType_t>(d))) {
      *out = static_cast<tparDataType_t>(d);
      return true;
    }
  }
  return false;
}

// Hierarchical needs equal islands; a table or a forced choice may name it on a group that
// has none, and the communicator must still run (fallbackReason says why).
Plan runnable(Plan p, const TunerContext& ctx) {
  if (fallbackReason(p.algo, ctx) != nullptr) p.algo = kernels::Algo::kTwoShot;
  return p;
}

// "oneshot, twoshot, ... or nccl": every name a table entry may give.
std::string planAlgoNames() {
  std::string s;
  for (const Algorithm& a : algorithms()) s += std::string(a.name) + ", ";
  return s.substr(0, s.size() - 2) + " or nccl";
}

// The kernels' launch bound caps threads (docs/TUNING.md, "Why threads stop at 512").
bool validThreads(int64_t t) {
  return t == 0 || (t >= 64 && t <= kernels::kMaxThreads && t % 32 == 0);
}

// Field checks for tuningFromJson. Each failure names the field by its JSON path.
tparResult_t bad(const std::string& field, const std::string& problem) {
  return setError(tparInvalidArgument, "tuning table: field '%s' %s", field.c_str(),
                  problem.c_str());
}

tparResult_t getInt(const nlohmann::json& obj, const std::string& key, const std::string& path,
                    int64_t lo, int64_t hi, int64_t* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return bad(path, "is missing");
  if (!it->is_number_integer()) return bad(path, "is " + it->dump() + ", not a whole number");
  // Unsigned values above INT64_MAX come back negative through get<int64_t>.
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return bad(path, "is " + it->dump() + ", out of range");
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return bad(path, "is " + std::to_string(v) + "; expected " + std::to_string(lo) + ".." +
                         std::to_string(hi));
  }
  *out = v;
  return tparSuccess;
}

tparResult_t getString(const nlohmann::json& obj, const std::string& key, const std::string& path,
                       bool required, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return required ? bad(path, "is missing") : tparSuccess;
  if (!it->is_string()) return bad(path, "is " + it->dump() + ", not a string");
  *out = it->get<std::string>();
  return tparSuccess;
}

tparResult_t getMicroseconds(const nlohmann::json& obj, const std::string& key,
                             const std::string& path, double* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return tparSuccess;
  // Bounded (1000 s) so that every accepted value is written back the same way.
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0 ||
      it->get<double>() > 1e9)
    return bad(path, "is " + it->dump() + "; expected a positive number of microseconds up to 1e9");
  *out = it->get<double>();
  return tparSuccess;
}

// Written to the nanosecond, and only when that is a positive finite number: the reader
// rejects 0 and non-numbers, so a sub-nanosecond or overflowing value (both found by fuzzing
// the round trip) would make the file unreadable.
void putMicroseconds(nlohmann::ordered_json& obj, const char* key, double value) {
  const double us = std::round(value * 1000.0) / 1000.0;
  if (std::isfinite(us) && us > 0) obj[key] = us;
}

// "wire_min_bytes": {"fp8": 524288, "int4": "never"}, optional, each format at most once; a
// size from 0 up to 1 TiB, or "never".
tparResult_t wireFromJson(const nlohmann::json& j, TuningTable* t) {
  auto it = j.find("wire_min_bytes");
  if (it == j.end()) return tparSuccess;
  if (!it->is_object()) return bad("wire_min_bytes", "is not an object");
  for (const auto& [key, value] : it->items()) {
    const std::string at = "wire_min_bytes." + key;
    int w = tparWireNone;
    for (int k = tparWireNone + 1; k < tparNumWires; ++k)
      if (key == wireFormatName(k)) w = k;
    if (w == tparWireNone) return bad(at, "names no wire format; expected fp8, int8 or int4");
    if (value.is_string() && value.get<std::string>() == "never") {
      t->wire_min_bytes[w] = kWireNever;
      continue;
    }
    if (!value.is_number_unsigned() || value.get<uint64_t>() > (uint64_t{1} << 40))
      return bad(at, "is " + value.dump() + "; expected a size in bytes up to 1 TiB, or \"never\"");
    t->wire_min_bytes[w] = static_cast<int64_t>(value.get<uint64_t>());
  }
  return tparSuccess;
}

tparResult_t entryFromJson(const nlohmann::json& e, size_t index, TuningEntry* out) {
  const std::string at = "entries[" + std::to_string(index) + "]";
  if (!e.is_object()) return bad(at, "is not an object");
  TuningEntry entry;
  std::string dtype;
  TPAR_TRY(getString(e, "dtype", at + ".dtype", true, &dtype));
  if (!dtypeFromKey(dtype, &entry.dtype))
    return bad(at + ".dtype", "is '" + dtype + "'; expected float32, float16 or bfloat16");

  auto mb = e.find("max_bytes");
  if (mb == e.end()) return bad(at + ".max_bytes", "is missing");
  if (!mb->is_number_integer()) return bad(at + ".max_bytes", "is " + mb->dump() + ", not a whole number");
  if (!mb->is_number_unsigned() || mb->get<uint64_t>() == 0)
    return bad(at + ".max_bytes", "is " + mb->dump() + "; expected a positive size");
  entry.max_bytes = mb->get<uint64_t>();

  std::string algo;
  TPAR_TRY(getString(e, "algo", at + ".algo", true, &algo));
  if (!planAlgoFromName(algo, &entry.plan))
    return bad(at + ".algo", "is '" + algo + "'; expected one of " + planAlgoNames());

  int64_t v = 0;
  TPAR_TRY(getInt(e, "active_blocks", at + ".active_blocks", 0, kernels::kMaxBlocks, &v));
  entry.plan.active_blocks = static_cast<int>(v);
  TPAR_TRY(getInt(e, "threads", at + ".threads", 0, kernels::kMaxThreads, &v));
  if (!validThreads(v))
    return bad(at + ".threads", "is " + std::to_string(v) + "; expected 0 or a multiple of 32 in 64.." +
                                    std::to_string(kernels::kMaxThreads));
  entry.plan.threads = static_cast<int>(v);
  // Optional (tables written before the pipelined two-shot have none): 0 = built-in.
  if (e.find("steps") != e.end()) {
    TPAR_TRY(getInt(e, "steps", at + ".steps", 0, kMaxPlanSteps, &v));
    entry.plan.steps = static_cast<int>(v);
  }
  if (e.find("pull") != e.end()) {
    TPAR_TRY(getInt(e, "pull", at + ".pull", 0, 1, &v));
    entry.plan.pull = v != 0;
  }

  // "us" and "default_us" are informational and optional; when present they are real
  // measurements.
  TPAR_TRY(getMicroseconds(e, "us", at + ".us", &entry.us));
  TPAR_TRY(getMicroseconds(e, "default_us", at + ".default_us", &entry.default_us));
  *out = entry;
  return tparSuccess;
}

// A signature can be anything the topology module makes of the machine; only a plain one is
// put into a file name as it is, anything else as a hash of it.
std::string fileNamePart(const std::string& signature) {
  bool plain = !signature.empty() && signature.size() <= 64 && signature[0] != '.';
  for (char c : signature) {
    plain &= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '-' || c == '_' || c == '.';
  }
  if (plain) return signature;
  const uint64_t h = fnv1a(signature.data(), signature.size());
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, h);
  return buf;
}

// mkdir -p. Succeeds when the directory exists already.
bool makeDirs(const std::string& dir, std::string* why) {
  if (dir.empty()) return true;
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      *why = "cannot create directory " + prefix + ": " + std::strerror(errno);
      return false;
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *why = dir + " is not a directory";
    return false;
  }
  return true;
}

}  // namespace

const char* fallbackReason(kernels::Algo a, const TunerContext& ctx) {
  if (!algorithm(a).needs_islands || ctx.hierarchical_ok) return nullptr;
  return ctx.islands <= 1 ? "one island" : "islands of unequal size";
}

TuningTable singlePlanTable(const TunerContext& ctx, const Plan& plan) {
  TuningTable t;
  t.signature = ctx.signature;
  t.nranks = ctx.nranks;
  for (int d = 0; d < tparNumDataTypes; ++d) {
    TuningEntry e;
    e.max_bytes = std::numeric_limits<uint64_t>::max();
    e.dtype = static_cast<tparDataType_t>(d);
    e.plan = plan;
    t.entries.push_back(e);
  }
  return t;
}

const char* planAlgoName(const Plan& p) { return p.nccl ? "nccl" : algoName(p.algo); }

bool planAlgoFromName(const std::string& name, Plan* out) {
  if (name == "nccl") {
    out->nccl = true;
    return true;
  }
  out->nccl = false;
  return algoFromName(name, &out->algo);
}

namespace {

// The launch shape of a plan whose receive regions are in host memory, where every waiting
// warp polls across the link and those polls queue (NOTE [flag lines]). Chosen from `tpar tune
// --transport host` runs with 2, 4 and 8 ranks (the tables are in docs/PERFORMANCE.md,
// "Host-staged transport"):
//  * pipelined: published once in the sender's own region (pull), which beat pushing at
//    48 KiB and up with 4 and 8 ranks and tied with 2; about one block per 8 KiB that a rank
//    sends, at most 32 / (ranks sharing a GPU: their polling warps and fences add up there)
//    and 8; steps of about 48 KiB per block, since each step costs two fenced hand-offs. With
//    one rank per GPU that gives 8 blocks, which only a run with one rank per GPU can confirm.
//    Ranks sharing a GPU, narrower: NOTE [narrow pipelined calls on a shared GPU] below, and
//    shorter steps (NOTE [shorter pipelined steps on a shared GPU]) except for a wire format's
//    plan (`for_wire`).
//  * twoshot-ll: one block when 8 or more ranks share a GPU, two otherwise.
//  * pull variants (their flags or lines are polled per block): about one block per 16 KiB of a
//    rank's chunk (with 8 ranks at 12 KiB, 32 blocks were several times slower than one).
// Other algorithms keep the kernels' own shape.
Plan hostShape(Plan p, uint64_t bytes, const TunerContext& ctx, bool for_wire = false) {
  const uint64_t n = static_cast<uint64_t>(std::max(ctx.nranks, 1));
  if (p.algo == kernels::Algo::kPipelined) {
    const uint64_t pushed = bytes / n * (n - 1);
    const uint64_t sharing = static_cast<uint64_t>(std::max(ctx.ranks_per_gpu, 1));
    // NOTE [narrow pipelined calls on a shared GPU]
    // From 3 ranks sharing a GPU, up to 384 KiB: at most 4 blocks of 256 threads. In `tpar tune
    // --transport host` with 3, 4, 5 and 8 ranks on one GPU, 4 x 256 ran ahead of 6 or 8
    // blocks of 512 at most sizes from 96 to 384 KiB, and did so as the default against the
    // wider shape, except with 3 ranks at 120 and 128 KiB, where 8 blocks stay ahead for reasons
    // not found (docs/PERFORMANCE.md, "Narrow pipelined calls and longer pushes on a shared
    // GPU"): fewer polling warps on the one link. Two ranks keep 8 blocks, which ran ahead of 4
    // there; above 384 KiB the sweeps chose 8 blocks again.
    const bool narrow = sharing > 1 && n >= 3 && bytes <= kSharedHostNarrowPipelinedMaxBytes;
    // NOTE [wide pipelined calls of two ranks on one GPU]
    // Two ranks sharing a GPU, from 1 MiB: the cap of 8 goes, leaving 32 / 2 = 16 blocks each.
    // Their 16 blocks together do not keep the link busy in both directions: `tpar tune
    // --transport host` with 2 ranks on one GPU chose 16 blocks at 512 KiB, 2 and 8 MiB, and
    // 16 blocks (with shorter steps) ran up to 15 % faster from 2 MiB as defaults in the same
    // run, slower at 512 KiB (docs/PERFORMANCE.md, "Host-staged shapes re-checked with the
    // current kernels", and "Sixteen pipelined blocks for two ranks on one GPU"). More ranks
    // sharing the GPU already fill it with 8 blocks or fewer each.
    const bool wide_pair = sharing > 1 && n == 2 && bytes >= kSharedHostPairWidePipelinedMinBytes;
    const uint64_t cap = std::min<uint64_t>(std::max<uint64_t>(32 / sharing, 1),
                                            narrow ? 4 : wide_pair ? 16 : 8);
    // NOTE [shorter pipelined steps on a shared GPU]
    // From 4 ranks sharing a GPU, above the narrow sizes up to 1 MiB: 256 threads and steps of
    // about 24 KiB per block instead of 48, blocks as before. `tpar tune --transport host` with
    // 3, 4 and 5 ranks on one GPU chose 8 blocks of 256 with more steps at 512 KiB and 1 MiB,
    // and as the default against the shape before it, same run, the shape ran ahead with 4, 5
    // and 8 ranks at every size from 512 KiB to 1 MiB; with 3 ranks it was behind at 1 MiB, so
    // 3 ranks keep the longer steps (docs/PERFORMANCE.md, "Shorter pipelined steps and a wider
    // wire grid on a shared GPU"). A wire format's plan keeps the longer steps: its kernel was
    // not measured with these.
    const bool mid = !for_wire && sharing > 1 && n >= 4 && !narrow &&
                     bytes <= kSharedHostMidPipelinedMaxBytes;
    const uint64_t blocks = std::min<uint64_t>(std::max<uint64_t>(pushed / (8u << 10), 1), cap);
    p.active_blocks = static_cast<int>(blocks);
    if (narrow || mid) p.threads = 256;
    // NOTE [short pipelined steps for two ranks on one GPU]
    // Two ranks sharing a GPU with their 16 blocks from 1 MiB, lossless: steps of about 16 KiB
    // per block instead of 48 (at most 16 steps, so from 16 MiB nothing changes). With 2
    // virtual ranks on one H200, host transport, they ran faster from 1 to 16 MiB than the
    // longer steps in the same run, and even at 64 MiB (docs/PERFORMANCE.md, "The shape of a
    // piece timed", two-rank lossless steps): more steps keep both directions of the link busy
    // through more of the call. The wire formats' plan keeps its own steps.
    const uint64_t step_bytes = mid                       ? 24u << 10
                                : wide_pair && !for_wire ? 16u << 10
                                                         : 48u << 10;
    p.steps = static_cast<int>(
        std::min<uint64_t>(std::max<uint64_t>(pushed / blocks / step_bytes, 1), 16));
    p.pull = true;
  } else if (p.algo == kernels::Algo::kTwoShotLL) {
    p.active_blocks = ctx.ranks_per_gpu >= 8 ? 1 : 2;
  } else if (p.algo == kernels::Algo::kOneShotPull || p.algo == kernels::Algo::kTwoShotPull) {
    const uint64_t blocks = bytes / (n * (16u << 10));
    p.active_blocks = static_cast<int>(std::min<uint64_t>(std::max<uint64_t>(blocks, 1), 32));
  }
  return p;
}

}  // namespace

uint64_t defaultOneShotMaxBytes(int nranks) {
  if (nranks <= 2) return 256u << 10;
  if (nranks <= 4) return 64u << 10;
  return 32u << 10;
}

Plan defaultPlan(uint64_t bytes, tparDataType_t dtype, const TunerContext& ctx,
                 int64_t one_shot_max_bytes) {
  (void)dtype;  // the built-in thresholds are in bytes; only a measured table tells dtypes apart
  Plan p;       // active_blocks = threads = 0: the kernels size themselves from the work
  if (ctx.host_transport) {
    // Every byte crosses a GPU's PCIe link to host memory and back (NOTE [host regions]), and
    // every flag costs a system-scope fence and a polled round trip (NOTE [flag lines]). Two
    // ranks, small messages: one-shot pull, a single round trip. Then two-shot LL, whose data
    // carries its own epoch (no fences, twice the bytes), then the pipelined two-shot. The
    // crossovers follow the tune runs of docs/PERFORMANCE.md ("Host-staged transport").
    const uint64_t n = static_cast<uint64_t>(std::max(ctx.nranks, 1));
    // NOTE [small host calls on a shared GPU]
    // Virtual ranks on one GPU (one PCIe link for all of them), small calls: every rank pushes
    // its input into each peer's region and polls its own region (sentinel protocol), with two
    // blocks of 512 threads up to 4 ranks (one-shot) and one block of 256 from 5 ranks on
    // (two-shot: one-shot's (n-1)-fold pushes grow too large). `tpar tune --transport host`
    // chose these at 12 KiB with 2, 4 and 8 ranks sharing one GPU, ahead of the defaults before
    // them in the same run; as defaults against the previous ones, same run, 4 to 12 KiB: ahead
    // at 3, 4, 5 and 8 ranks, and at 2 ranks at 12 KiB but behind the one-shot pull at 4 and
    // 8 KiB, which two ranks therefore keep up to 8 KiB (docs/PERFORMANCE.md, "Small calls of
    // ranks sharing a GPU as defaults"). One rank per GPU was not measured: ranks on their own
    // GPUs keep the defaults below until a run with one rank per GPU measures them.
    // TPAR_ONESHOT_MAX_BYTES turns the rule off (the one-shot pull limit).
    if (ctx.ranks_per_gpu > 1 && n > 1 && one_shot_max_bytes < 0 &&
        bytes <= kSharedHostSmallMaxBytes && !(n == 2 && bytes <= kSharedHostPairPullMaxBytes)) {
      const bool one_shot = n <= 4;
      p.algo = one_shot ? kernels::Algo::kOneShot : kernels::Algo::kTwoShot;
      p.active_blocks = one_shot ? 2 : 1;
      p.threads = one_shot ? 512 : 256;
      return p;
    }
    // NOTE [push calls on a shared GPU]
    // Ranks sharing a GPU, past the small calls: the push kernels of the small calls again,
    // with few blocks of 512 threads. Each rank writes its data into the peers' regions (posted
    // writes over the link, which nothing waits on) and polls its own, where the pulls below
    // read across the link and wait a round trip per read. `tpar tune --transport host` over 1
    // to 8 blocks of 256 and 512 threads, twice on one H200, chose the push one-shot with two
    // blocks up to 64 KiB with 2 ranks and up to 40 KiB with 3, the push two-shot with two blocks
    // up to 96 KiB with 3 and 4 ranks and with one block up to 40 KiB with 8, each ahead of the
    // defaults before it (one-shot pull, two-shot LL, two-shot pull, pipelined) in the same runs
    // (docs/PERFORMANCE.md, "Push calls for ranks sharing a GPU on the host"). The next run
    // carried two ranks on with the push two-shot of four blocks to 128 KiB (ahead of the
    // pipelined two-shot from 96 KiB, even at 80), and 5 ranks with one block to 40 KiB and two
    // to 64 KiB, ahead of two-shot LL and the pipelined two-shot there, as defaults against the
    // ones before ("Narrow pipelined calls and longer pushes on a shared GPU"). 6 and 7 ranks
    // take 5 ranks' lines unmeasured; one rank per GPU keeps the lines below.
    // TPAR_ONESHOT_MAX_BYTES turns it off.
    if (ctx.ranks_per_gpu > 1 && n > 1 && one_shot_max_bytes < 0 &&
        bytes > kSharedHostSmallMaxBytes) {
      const uint64_t push_max = n == 2   ? kSharedHostPairTwoShotMaxBytes
                                : n <= 4 ? kSharedHostPushMaxBytes
                                : n < 8  ? kSharedHostMidPushMaxBytes
                                         : kSharedHostWidePushMaxBytes;
      if (bytes <= push_max) {
        const bool one_shot = (n == 2 && bytes <= kSharedHostPairPushMaxBytes) ||
                              (n == 3 && bytes <= kSharedHostTrioOneShotMaxBytes);
        p.algo = one_shot ? kernels::Algo::kOneShot : kernels::Algo::kTwoShot;
        p.active_blocks = n == 2 && !one_shot                   ? 4
                          : n <= 4 || bytes > kSharedHostWidePushMaxBytes ? 2
                                                                           : 1;
        p.threads = 512;
        return p;
      }
    }
    // NOTE [two-shot LL on a shared GPU]
    // Ranks sharing a GPU, past the push: two-shot LL sends every byte twice (data and epoch in
    // one line) over the one link all of them share, and the push above now covers its sizes
    // for every group size. Eight or more ranks run the two-shot pull up to 384 KiB (its one
    // block ahead of the pipelined two-shot at every size from 24 to 112 KiB in two runs,
    // docs/PERFORMANCE.md, "The flag-line pull as a default"; its one to three blocks from 128
    // to 384 KiB by a little in two runs, "Push calls for ranks sharing a GPU on the host"),
    // then the pipelined two-shot. Fewer ranks keep the lines of one rank per GPU past the push
    // (the pipelined two-shot, narrower up to 384 KiB: hostShape). TPAR_ONESHOT_MAX_BYTES turns
    // the rule off.
    const bool shared = ctx.ranks_per_gpu > 1 && one_shot_max_bytes < 0;
    const uint64_t limit = one_shot_max_bytes >= 0 ? static_cast<uint64_t>(one_shot_max_bytes)
                           : n <= 2                ? kHostOneShotPullMaxBytes
                                                   : 0;
    const bool wide = shared && n >= 8;
    p.algo = bytes <= limit || n <= 1                     ? kernels::Algo::kOneShotPull
             : wide && bytes <= kSharedHostWidePullMaxBytes ? kernels::Algo::kTwoShotPull
             : !wide && bytes <= kHostLLMaxBytes          ? kernels::Algo::kTwoShotLL
                                                          : kernels::Algo::kPipelined;
    return hostShape(p, bytes, ctx);
  }
  // NOTE [small calls of ranks on one GPU]
  // Every rank on one GPU, exchanging in its memory (up to 8 ranks): the peers' data is in the
  // same L2 and HBM, so reading it (one-shot pull, each rank publishes its input once) costs no
  // more than having it pushed, and saves the sentinel resets. `tpar tune --transport p2p` on
  // one H200 chose one-shot pull at 12 and 112 KiB with 3 to 8 ranks, ahead of the push
  // kernels' defaults in the same run, and two-shot again at 384 KiB for 4 and 8
  // (docs/PERFORMANCE.md, "Small calls of ranks on one GPU"). Two ranks, whose kernels are
  // sized for two (makeKernelSet), run the push one-shot as fast as the pull or faster up to
  // 128 KiB and ahead of two-shot up to 3 MiB (in two runs each), even with it at 4 MiB (same
  // document, "Kernels sized for small groups", "One-shot pull over flag lines, and the
  // small-group defaults run" and "The flag-line pull as a default"). Groups across GPUs never
  // take the rule: there a pull is a read over the link, each a round trip.
  // TPAR_ONESHOT_MAX_BYTES turns it off.
  const bool one_gpu = ctx.ranks_per_gpu >= ctx.nranks && ctx.nranks >= 2 && ctx.nranks <= 8 &&
                       one_shot_max_bytes < 0;
  // NOTE [one-shot pull to 512 KiB for three and four ranks on one GPU]
  // With a whole pull area (NOTE [a whole pull area for ranks on one GPU] in comm/comm.cc) a
  // one-shot pull past 256 KiB is one launch, not several. Four virtual ranks on one H200 then
  // ran it ahead of two-shot at 256 and 384 KiB and behind at 1 MiB, three ahead at 256 KiB and
  // even at 384 KiB (docs/PERFORMANCE.md, "A whole pull area by default"); as the default to
  // 512 KiB against the line at 384 KiB, four ranks ran ahead at 512 KiB and three a little
  // ahead (same document, "Hand-offs at GPU scope for ranks on one GPU"). Eight, whose pull
  // reads seven peers' whole inputs, stay behind at 384 KiB.
  const uint64_t pull_max = ctx.whole_pull && ctx.nranks <= 4 ? kOneGpuSmallGroupPullMaxBytes
                                                              : kOneGpuPullMaxBytes;
  if (one_gpu && ctx.nranks > 2 && bytes <= pull_max) {
    p.algo = kernels::Algo::kOneShotPull;
    // NOTE [a narrow one-shot pull for tiny calls of a few ranks on one GPU]
    // The pull's own grid is the wide grid of ranks sharing a GPU, far more threads than a tiny
    // call has 16-byte vectors, and every block waits on every peer's flag. `tpar tune
    // --transport p2p` with 4 virtual ranks on one H200 chose 8 blocks of 128 threads at 12 KiB
    // (one thread per vector and a little more), ahead of the default in the search and in
    // `tpar bench` with its table; with 8 ranks every shape of 1024 threads or more was even.
    // As the default it ran faster at 3, 4 and 5 ranks from 4 to 16 KiB and even at 32 KiB;
    // 6 and 7 ranks were not timed and keep the wide grid (docs/PERFORMANCE.md, "Pieces of one
    // length timed alone, the no-regression check and FlashInfer in GPU memory", and "A narrow
    // one-shot pull for tiny calls").
    if (ctx.nranks <= 5 && bytes <= kOneGpuTinyPullMaxBytes) {
      p.active_blocks = kOneGpuTinyPullBlocks;
      p.threads = kOneGpuTinyPullThreads;
    }
    return p;
  }
  // NOTE [two-shot pull for large calls of ranks on one GPU]
  // Every rank on one GPU, 3 or more, with a pull area that takes a whole piece (NOTE [a whole
  // pull area for ranks on one GPU] in comm/comm.cc): large calls go to the two-shot pull. Each
  // rank publishes its input once, reads its chunk from every peer where it was published, and
  // nothing is reset; the sentinel two-shot stores into every peer's region and every reader
  // writes its sentinels back. With virtual ranks on one H200 the pull ran ahead of the
  // two-shot with 8 ranks from 1 MiB, with 5 to 7 ranks from 2 MiB and with 3 and 4 ranks from
  // 4 MiB, behind below those sizes and with 2 ranks (docs/PERFORMANCE.md, "The two-shot pull in
  // GPU memory with a pull area for the whole call" and "A whole pull area by default"); 7
  // ranks forced ahead at 1 MiB in two runs, then as the default from 1 MiB in a third
  // ("Hand-offs at GPU scope for ranks on one GPU").
  // Groups across GPUs never take the rule: there every read of the pull crosses the link.
  if (one_gpu && ctx.whole_pull && ctx.nranks > 2 &&
      bytes >= (ctx.nranks >= 7   ? kOneGpuWideTwoShotPullMinBytes
                : ctx.nranks >= 5 ? kOneGpuMidTwoShotPullMinBytes
                                  : kOneGpuTwoShotPullMinBytes)) {
    p.algo = kernels::Algo::kTwoShotPull;
    return p;
  }
  const uint64_t one_shot_limit = one_shot_max_bytes >= 0 ? static_cast<uint64_t>(one_shot_max_bytes)
                                  : one_gpu && ctx.nranks == 2 ? kOneGpuPairOneShotMaxBytes
                                                               : defaultOneShotMaxBytes(ctx.nranks);
  // Small messages are latency-bound: one crossing beats two even though it moves (n-1)x the
  // bytes. One rank has nothing to exchange either way.
  if (bytes <= one_shot_limit || ctx.nranks <= 1) {
    p.algo = kernels::Algo::kOneShot;
    // Ranks sharing a GPU get a wider grid for large calls (NOTE [wide grid for shared GPUs]);
    // small ones are faster with 32 blocks, which leave fewer flags to wait on.
    if (ctx.ranks_per_gpu > 1 && bytes <= kSharedGpuNarrowMaxBytes)
      p.active_blocks = kDefaultGridBlocks;
    return p;
  }
  const int worst = ctx.worst_link;
  if (worst >= static_cast<int>(LinkClass::kAcrossNuma) && ctx.hierarchical_ok) {
    // The inter-socket link (~24 GB/s) is half a PCIe Gen5 hop and every byte crossing it
    // also crosses both root complexes: reduce inside each island first so that only one
    // partial sum per island crosses.
    p.algo = kernels::Algo::kHier;
    return p;
  }
  if (worst >= static_cast<int>(LinkClass::kSameHostBridge) && !ctx.hierarchical_ok &&
      ctx.nranks > 2 && bytes <= kStagedMaxBytes) {
    // Every peer-to-peer write between these GPUs passes through a root complex. Two-shot's
    // all-to-all pushes make n-1 streams converge on each GPU's port at once, and the root
    // complex's posted-write buffering collapses under that fan-in (the failure that makes
    // the engines' custom all-reduce slower than NCCL beyond two PCIe GPUs). Staged keeps
    // one inbound and one outbound stream per GPU and step.
    p.algo = kernels::Algo::kStaged;
    return p;
  }
  // Behind one switch (or with two ranks, where all-to-all is a single pair) the fan-in is
  // absorbed by the switch and two-shot's bandwidth-optimal traffic wins.
  p.algo = kernels::Algo::kTwoShot;
  return p;
}

int64_t wireMinBytes(int64_t configured, const TuningTable* table, int wire) {
  if (configured >= 0) return configured;
  if (table != nullptr && wire > tparWireNone && wire < tparNumWires &&
      table->wire_min_bytes[wire] >= 0)
    return table->wire_min_bytes[wire];
  return -1;
}

uint64_t wirePieceBytes(uint64_t bytes, uint64_t limit, int nranks, int wire, size_t esize) {
  const auto f = static_cast<kernels::WireFormat>(wire);
  const uint64_t block = kernels::wireKernelBlock(f) * esize;
  const uint64_t longest = kernels::wirePieceValues(f, std::max(nranks, 1), limit) * esize;
  // Longer calls: pieces of up to the longest length where it holds two lossless pieces or
  // more (INT4), else the lossless pieces (FP8, INT8; NOTE [wire pieces by the bytes that
  // travel]).
  return bytes <= longest || longest >= 2 * limit ? longest : limit / block * block;
}

Plan wirePlan(const Plan& plan, uint64_t bytes, tparDataType_t dtype, const TunerContext& ctx,
              tparAlgo_t forced, int wire, bool* applies, int64_t min_bytes) {
  *applies = false;
  const uint64_t least =
      min_bytes >= 0 ? static_cast<uint64_t>(min_bytes) : defaultWireMinBytes(ctx.nranks);
  if (wire <= tparWireNone || wire >= tparNumWires || plan.nccl || bytes < least ||
      (dtype != tparFloat16 && dtype != tparBfloat16))
    return plan;
  // A forced pipelined plan (selectPlan's, in its shape) carries the format on either transport.
  if (forced == tparAlgoPipelined) {
    *applies = true;
    return plan;
  }
  if (forced != tparAlgoAuto || !ctx.host_transport) return plan;
  *applies = true;
  // Auto: the lossless host shape's steps and direction, on every block of the grid, since
  // encoding and decoding is work for the SMs that the lossless kernel's few blocks do not do.
  Plan p;
  p.algo = kernels::Algo::kPipelined;
  // NOTE [wire shape per piece]
  // A call larger than a piece runs as pieces of one launch each (comm.cc), and each launch
  // runs the plan's steps: the formats' shape is the piece's, so a large call runs as its
  // pieces would alone. From the whole call's bytes, 2 ranks sharing a GPU ran 16 steps per
  // 8 MiB piece of 64 and 256 MiB calls, against 4 for an 8 MiB call, and those calls ran the
  // formats slower per byte than 8 MiB calls in the same run; with the steps set by hand, INT4
  // pieces of 8 MiB ran longer with 16 steps than with 4 (docs/PERFORMANCE.md,
  // "Wire formats: the shape of a piece"). The pieces of a format's call are of one length
  // (evenPieceBytes; comm.cc cuts them so): cut at the limit, a call a little over a multiple
  // of it ends in a short piece, and timed against one-length pieces at 2 and 4 ranks such calls
  // ran slower, at 8 ranks even (docs/PERFORMANCE.md, "Pieces of one length timed alone"). The
  // lossless plans keep the whole call's shape and pieces cut at the limit: their large calls
  // ran no slower per byte than 8 MiB ones.
  // The registry's block of the format (WireAlgorithm::block_values), which comm.cc cuts by.
  const uint64_t align =
      kernels::wireKernelBlock(static_cast<kernels::WireFormat>(wire)) * elementBytes(dtype);
  const uint64_t piece =
      ctx.piece_bytes == 0 ? 0
                           : wirePieceBytes(bytes, ctx.piece_bytes, ctx.nranks, wire,
                                            elementBytes(dtype));
  const uint64_t shaped = evenPieceBytes(bytes, piece, align);
  p = hostShape(p, shaped, ctx, /*for_wire=*/true);
  // NOTE [wire steps in powers of two]
  // The formats' kernel runs a power of two of steps: the lossless shape's count rounded down.
  // With 2 and 8 virtual ranks on one H200 the counts between powers of two (5 to 15: 2 ranks
  // at 8 and 16 MiB, 8 ranks from 1.5 to 3 MiB) ran far slower per byte than the powers on
  // either side, with every format; rounded down, those sizes ran faster and the others as
  // before, in the same run (docs/PERFORMANCE.md, "Wire formats: steps in powers of two"). This
  // is the dip at 8 ranks of the earlier runs. What the slow counts share is a step width that
  // is not a multiple of a warp's run of wire blocks; the kernel now aligns its steps to those
  // runs (NOTE [wire schedule in runs of a warp]), which covers the sizes a power of two did
  // not. At most kWireMaxSteps: fewer, wider steps hand off less often, and since a step too
  // wide for the staged scales runs as parts (NOTE [wire steps in parts that fit the staged
  // scales]) nothing holds a wide step back.
  int steps = 1;
  while (steps * 2 <= p.steps) steps *= 2;
  p.steps = std::min(steps, kWireMaxSteps);
  p.active_blocks = 0;
  p.threads = 0;  // the kernel's own block size on the whole grid, not the narrow lossless shape
  return p;
}

std::vector<uint64_t> defaultPlanBoundaries(const TunerContext& ctx, int64_t one_shot_max_bytes) {
  // Every size after which defaultPlan may pick another algorithm (keep in step with it).
  std::vector<uint64_t> b = {kStagedMaxBytes,          kHostOneShotPullMaxBytes,
                             kHostLLMaxBytes,          kSharedHostSmallMaxBytes,
                             kSharedHostPairPullMaxBytes, kSharedHostPairPushMaxBytes,
                             kSharedHostPairTwoShotMaxBytes,
                             kSharedHostPushMaxBytes,  kSharedHostTrioOneShotMaxBytes,
                             kSharedHostMidPushMaxBytes, kSharedHostWidePushMaxBytes,
                             kSharedHostWidePullMaxBytes,
                             kOneGpuPullMaxBytes,      kOneGpuPairOneShotMaxBytes,
                             kOneGpuSmallGroupPullMaxBytes,
                             kOneGpuWideTwoShotPullMinBytes - 1,
                             kOneGpuMidTwoShotPullMinBytes - 1,
                             kOneGpuTwoShotPullMinBytes - 1,
                             defaultOneShotMaxBytes(ctx.nranks)};
  if (one_shot_max_bytes >= 0) b.push_back(static_cast<uint64_t>(one_shot_max_bytes));
  return b;
}

Plan selectPlan(uint64_t bytes, tparDataType_t dtype, const TunerContext& ctx,
                const TuningTable* table, tparAlgo_t forced, int64_t one_shot_max_bytes) {
  Plan forced_plan;
  if (forced == tparAlgoNccl) {
    forced_plan.nccl = true;
    return forced_plan;
  }
  if (kernelAlgoOf(forced, &forced_plan.algo)) {
    forced_plan = runnable(forced_plan, ctx);
    // In host memory the host-memory kernels need few blocks (hostShape leaves the others
    // alone); elsewhere every kernel keeps its own shape.
    return ctx.host_transport ? hostShape(forced_plan, bytes, ctx) : forced_plan;
  }
  // A table measured on another machine or rank count says nothing about this one.
  if (table != nullptr && table->signature == ctx.signature && table->nranks == ctx.nranks) {
    const TuningEntry* last = nullptr;
    for (const TuningEntry& e : table->entries) {
      if (e.dtype != dtype) continue;
      last = &e;
      if (e.max_bytes >= bytes) break;
    }
    // Beyond the largest measured size the largest size's answer is the best evidence. Where
    // NCCL won but none is attached, the defaults decide (the table keeps no runner-up).
    if (last != nullptr && !(last->plan.nccl && !ctx.nccl)) return runnable(last->plan, ctx);
    // No entry for this dtype: the defaults, rather than another dtype's crossovers.
  }
  return defaultPlan(bytes, dtype, ctx, one_shot_max_bytes);
}

std::string tuningToJson(const TuningTable& table) {
  // Ordered keys: the file is meant to be read by people too.
  nlohmann::ordered_json j;
  j["format"] = kFormatTag;
  j["version"] = kFormatVersion;
  j["signature"] = table.signature;
  j["nranks"] = table.nranks;
  j["created"] = table.created;
  j["gpu"] = table.gpu;
  j["entries"] = nlohmann::ordered_json::array();
  for (const TuningEntry& e : table.entries) {
    nlohmann::ordered_json o;
    const char* key = dtypeKey(e.dtype);
    o["dtype"] = key != nullptr ? key : "unknown";
    o["max_bytes"] = e.max_bytes;
    o["algo"] = planAlgoName(e.plan);
    o["active_blocks"] = e.plan.active_blocks;
    o["threads"] = e.plan.threads;
    o["steps"] = e.plan.steps;
    o["pull"] = e.plan.pull ? 1 : 0;
    putMicroseconds(o, "us", e.us);
    putMicroseconds(o, "default_us", e.default_us);
    j["entries"].push_back(o);
  }
  nlohmann::ordered_json wire = nlohmann::ordered_json::object();
  for (int w = tparWireNone + 1; w < tparNumWires; ++w) {
    const int64_t b = table.wire_min_bytes[w];
    if (b == kWireNever) {
      wire[wireFormatName(w)] = "never";
    } else if (b >= 0) {
      wire[wireFormatName(w)] = b;
    }
  }
  if (!wire.empty()) j["wire_min_bytes"] = wire;
  return j.dump(2) + "\n";
}

tparResult_t tuningFromJson(const std::string& text, TuningTable* out) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // Any parser failure, including numbers too large for any type (out_of_range 406, found
    // by fuzzing): a bad file is ignored with a message, never an exception out of init.
    return setError(tparInvalidArgument, "tuning table: not valid JSON (%s)", e.what());
  }
  if (!j.is_object()) return bad("(top level)", "is not a JSON object");
  TuningTable t;
  std::string format;
  TPAR_TRY(getString(j, "format", "format", true, &format));
  if (format != kFormatTag) return bad("format", "is '" + format + "'; expected '" + kFormatTag + "'");
  int64_t v = 0;
  auto ver = j.find("version");
  if (ver == j.end()) return bad("version", "is missing");
  if (!ver->is_number_integer() || ver->get<int64_t>() != kFormatVersion) {
    return bad("version", "is " + ver->dump() + "; this library reads version " +
                              std::to_string(kFormatVersion) + " (re-run `tpar tune`)");
  }
  TPAR_TRY(getString(j, "signature", "signature", true, &t.signature));
  if (t.signature.empty()) return bad("signature", "is empty");
  TPAR_TRY(getInt(j, "nranks", "nranks", 1, TPAR_MAX_RANKS, &v));
  t.nranks = static_cast<int>(v);
  TPAR_TRY(getString(j, "created", "created", false, &t.created));
  TPAR_TRY(getString(j, "gpu", "gpu", false, &t.gpu));

  auto entries = j.find("entries");
  if (entries == j.end()) return bad("entries", "is missing");
  if (!entries->is_array()) return bad("entries", "is not an array");
  if (entries->empty()) return bad("entries", "is empty");
  std::map<int, uint64_t> previous;  // per dtype: the last max_bytes, to check the order
  for (size_t i = 0; i < entries->size(); ++i) {
    TuningEntry e;
    TPAR_TRY(entryFromJson((*entries)[i], i, &e));
    auto it = previous.find(e.dtype);
    if (it != previous.end() && e.max_bytes <= it->second) {
      return bad("entries[" + std::to_string(i) + "].max_bytes",
                 "is " + std::to_string(e.max_bytes) + ", not above the previous " +
                     dtypeKey(e.dtype) + " entry's " + std::to_string(it->second) +
                     " (sizes must ascend per dtype)");
    }
    previous[e.dtype] = e.max_bytes;
    t.entries.push_back(e);
  }
  TPAR_TRY(wireFromJson(j, &t));
  *out = std::move(t);
  return tparSuccess;
}

tparResult_t loadTuningFile(const std::string& path, const TunerContext& ctx, TuningTable* out) {
  // NOTE [user files]: TPAR_TUNING_FILE may name a FIFO or a device; neither may block init.
  std::string text;
  TPAR_TRY(readUserFile(path, "tuning file", static_cast<size_t>(kMaxFileBytes), &text));
  TuningTable t;
  if (tuningFromJson(text, &t) != tparSuccess) {
    const std::string why = lastError();
    return setError(tparInvalidArgument, "tuning file %s: %s", path.c_str(), why.c_str());
  }
  if (t.signature != ctx.signature || t.nranks != ctx.nranks) {
    return setError(tparInvalidArgument,
                    "tuning file %s was measured for topology '%s' with %d ranks; this group "
                    "is topology '%s' with %d ranks (re-run `tpar tune`)",
                    path.c_str(), t.signature.c_str(), t.nranks, ctx.signature.c_str(),
                    ctx.nranks);
  }
  t.source = path;
  *out = std::move(t);
  return tparSuccess;
}

tparResult_t saveTuningFile(const std::string& path, const TuningTable& table) {
  if (path.empty()) return setError(tparInvalidArgument, "tuning file path is empty");
  // Refuse to write what loadTuningFile would reject.
  const std::string text = tuningToJson(table);
  TuningTable check;
  if (tuningFromJson(text, &check) != tparSuccess) {
    const std::string why = lastError();
    return setError(tparInvalidArgument, "not saving %s: %s", path.c_str(), why.c_str());
  }
  // The rename below would replace a FIFO or a device node (as root, /dev/null) with the table.
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return setError(tparInvalidArgument, "not saving %s: it exists and is not a regular file",
                    path.c_str());
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash);
  std::string why;
  if (!makeDirs(dir, &why)) return setError(tparSystemError, "saving %s: %s", path.c_str(), why.c_str());
  // Temp file + rename in the same directory: a communicator starting while `tpar tune`
  // writes sees the old file or the new one, never half of one.
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = mkstemp(&tmp[0]);
  if (fd < 0) {
    return setError(tparSystemError, "saving %s: cannot create %s: %s", path.c_str(),
                    tmp.c_str(), std::strerror(errno));
  }
  fchmod(fd, 0644);  // mkstemp makes 0600; the table is not a secret
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return setError(tparSystemError, "saving %s: write failed: %s", path.c_str(),
                      std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return setError(tparSystemError, "saving %s: %s", path.c_str(), std::strerror(err));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return setError(tparSystemError, "saving %s: rename failed: %s", path.c_str(),
                    std::strerror(err));
  }
  return tparSuccess;
}

std::string tuningFilePathFrom(const TunerContext& ctx, const std::string& tuning_file,
                               const char* xdg_cache_home, const char* home) {
  if (!tuning_file.empty()) return tuning_file;
  std::string dir;
  // The XDG base directory spec says to ignore a relative XDG_CACHE_HOME.
  if (xdg_cache_home != nullptr && xdg_cache_home[0] == '/') {
    dir = std::string(xdg_cache_home) + "/tpar";
  } else if (home != nullptr && home[0] != '\0') {
    dir = std::string(home) + "/.cache/tpar";
  } else {
    return "";
  }
  return dir + "/tuning-" + fileNamePart(ctx.signature) + "-" + std::to_string(ctx.nranks) +
         ".json";
}

std::string tuningFilePath(const TunerContext& ctx) {
  const Env* env = nullptr;
  std::string file;
  // processEnv records a parse failure as this thread's last error; the communicator has
  // reported it already, so keep the caller's text and fall back to the default location.
  const std::string saved = lastError();
  if (processEnv(&env) == tparSuccess) file = env->tuning_file;
  else setError(tparSuccess, "%s", saved.c_str());
  // XDG_CACHE_HOME and HOME belong to the desktop and the shell, not to tpar: they are not in
  // tpar's registry and are read where they are used.
  return tuningFilePathFrom(ctx, file, std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"));
}

}  // namespace tpar
