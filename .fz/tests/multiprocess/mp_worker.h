// What the modes of the multi-process worker (tests/multiprocess/mp_worker.cc, which documents
// every mode) share across its source files.
#ifndef TPAR_TESTS_MULTIPROCESS_MP_WORKER_H_
#define TPAR_TESTS_MULTIPROCESS_MP_WORKER_H_

#include <string>

#include "tpar/tpar.h"

namespace tpar_test {

// Prints "mp_worker <pid>: what: detail" to stderr and returns 1 (the worker's failure status).
int fail(const char* what, const std::string& detail);

// A unique id from the hex text the parent passes (idHex); false when it is not one.
bool parseId(const std::string& hex, tparUniqueId* id);

bool fileExists(const std::string& path);

// Polls for `path` at most `timeout_s`.
bool waitForFile(const std::string& path, int timeout_s);

// Written under a temporary name and renamed, so a reader never sees half of it.
void writeFileAtomically(const std::string& path, const std::string& text);

// Mode `nccl-abort` (tests/multiprocess/mp_worker_nccl.cc).
int ncclAbortMode(int argc, char** argv);

}  // namespace tpar_test

#endif  // TPAR_TESTS_MULTIPROCESS_MP_WORKER_H_
