// Fuzz target for the tuning table reader, tpar::tuningFromJson (src/tuner/tuner.h).
//
// A tuning file is read at every communicator init from a path the user controls, so any bytes
// must give either a table that follows docs/TUNING.md's rules or tparInvalidArgument with a
// message. A table that was accepted must also survive tuningToJson and a second read
// unchanged: that is the path `tpar tune` takes when it keeps another dtype's entries from an
// existing file, and saveTuningFile refuses to write what it cannot read back.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <string>

#include "base/error.h"
#include "fuzz_check.h"
#include "tuner/tuner.h"

namespace {

using tpar_fuzz::fail;

tparResult_t readTable(const std::string& text, tpar::TuningTable* out) {
  tpar::clearError();
  // An exception escaping it fails communicator init with tparInternalError (the C API's
  // catch-all) where a bad file only deserves a warning, and ends `tpar tune`.
  try {
    return tpar::tuningFromJson(text, out);
  } catch (const std::exception& e) {
    fail("tuningFromJson threw %s", e.what());
  }
}

bool validThreads(int t) { return t == 0 || (t >= 64 && t <= 512 && t % 32 == 0); }

// The field rules of docs/TUNING.md, for a table the reader accepted.
void checkRules(const tpar::TuningTable& t) {
  if (t.signature.empty()) fail("accepted a table with an empty signature");
  if (t.nranks < 1 || t.nranks > TPAR_MAX_RANKS) fail("accepted nranks %d", t.nranks);
  if (t.entries.empty()) fail("accepted a table without entries");
  std::map<int, uint64_t> previous;
  for (size_t i = 0; i < t.entries.size(); ++i) {
    const tpar::TuningEntry& e = t.entries[i];
    if (e.dtype < 0 || e.dtype >= tparNumDataTypes)
      fail("entries[%zu].dtype %d is not a tparDataType_t", i, static_cast<int>(e.dtype));
    if (e.max_bytes == 0) fail("entries[%zu].max_bytes is 0", i);
    auto it = previous.find(e.dtype);
    if (it != previous.end() && e.max_bytes <= it->second)
      fail("entries[%zu].max_bytes does not ascend within its dtype", i);
    previous[e.dtype] = e.max_bytes;
    if (e.plan.active_blocks < 0 || e.plan.active_blocks > 1024)
      fail("entries[%zu].active_blocks %d outside 0..1024", i, e.plan.active_blocks);
    if (!validThreads(e.plan.threads))
      fail("entries[%zu].threads %d is not 0 or a multiple of 32 in 64..512", i, e.plan.threads);
    if (!std::isfinite(e.us) || e.us < 0) fail("entries[%zu].us %g", i, e.us);
  }
}

// "us" is written rounded to the nanosecond (it is for people, never used to choose), so it may
// move by half a nanosecond; every other field must come back exactly.
bool sameUs(double a, double b) { return std::fabs(a - b) <= 0.0005 + 1e-12 * std::fabs(a); }

void checkSame(const tpar::TuningTable& a, const tpar::TuningTable& b) {
  if (a.signature != b.signature) fail("round trip changed the signature");
  if (a.nranks != b.nranks) fail("round trip changed nranks %d -> %d", a.nranks, b.nranks);
  if (a.created != b.created) fail("round trip changed 'created'");
  if (a.gpu != b.gpu) fail("round trip changed 'gpu'");
  if (a.entries.size() != b.entries.size())
    fail("round trip changed the entry count %zu -> %zu", a.entries.size(), b.entries.size());
  for (size_t i = 0; i < a.entries.size(); ++i) {
    const tpar::TuningEntry& x = a.entries[i];
    const tpar::TuningEntry& y = b.entries[i];
    if (x.dtype != y.dtype) fail("round trip changed entries[%zu].dtype", i);
    if (x.max_bytes != y.max_bytes) fail("round trip changed entries[%zu].max_bytes", i);
    if (x.plan.algo != y.plan.algo) fail("round trip changed entries[%zu].algo", i);
    if (x.plan.nccl != y.plan.nccl) fail("round trip changed entries[%zu] to or from nccl", i);
    if (x.plan.active_blocks != y.plan.active_blocks)
      fail("round trip changed entries[%zu].active_blocks", i);
    if (x.plan.threads != y.plan.threads) fail("round trip changed entries[%zu].threads", i);
    if (!sameUs(x.us, y.us))
      fail("round trip changed entries[%zu].us %.17g -> %.17g", i, x.us, y.us);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tpar::TuningTable first;
  const tparResult_t result = readTable(text, &first);
  if (result != tparSuccess) {
    if (result != tparInvalidArgument)
      fail("tuningFromJson returned %d; expected tparSuccess or tparInvalidArgument",
           static_cast<int>(result));
    if (tpar::lastError().empty()) fail("tuningFromJson failed with an empty last error");
    return 0;
  }
  checkRules(first);

  std::string written;
  try {
    written = tpar::tuningToJson(first);
  } catch (const std::exception& e) {
    fail("tuningToJson threw %s", e.what());
  }
  tpar::TuningTable second;
  if (readTable(written, &second) != tparSuccess)
    fail("tuningFromJson rejects what tuningToJson wrote: %s\n--- written:\n%s",
         tpar::lastError().c_str(), written.c_str());
  checkSame(first, second);
  return 0;
}
