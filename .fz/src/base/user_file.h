// Files whose path a user gives (a TPAR_* variable, a command-line flag): opened so that a
// path that is not a regular file is refused at once instead of blocking.
//
// NOTE [user files]
// open(2) of a FIFO waits for the other end, forever when nobody opens it; a character device
// may never end (or swallow the output); a directory is no file to read or write. So a path
// from a user is opened with O_NONBLOCK (a FIFO then opens at once for reading, or fails with
// ENXIO for writing without a reader), checked with fstat on the descriptor itself (nothing can
// be swapped in between the check and the use), and refused unless it is a regular file. Only
// then is O_NONBLOCK cleared and the file read, truncated or written. An output file that does
// not exist is created (0644); an existing one keeps its contents until it is written.
// Through here: the topology file (topology/xml_probe.cc), the tuning file, TPAR_DEBUG_FILE, the
// NCCL library tpar routes to, and the `tpar` command's output files. Two places check the same
// with stat, as they never open the path themselves: the NCCL shim's search before its dlopen,
// and saveTuningFile, whose rename would replace a FIFO or a device node.
#ifndef TPAR_BASE_USER_FILE_H_
#define TPAR_BASE_USER_FILE_H_

#include <cstddef>
#include <string>

#include "tpar/tpar.h"

namespace tpar {

enum class UserFileMode { kRead, kWrite };

// Opens `path` (NOTE [user files]); *fd receives a blocking O_CLOEXEC descriptor of a regular
// file, which the caller closes. `what` names where the path came from ("TPAR_DEBUG_FILE",
// "tuning file", "output file") and appears in every message with the path:
// tparInvalidArgument when the path is empty or not a regular file (saying what it is),
// tparSystemError when it cannot be opened (missing, no permission; with the system's reason).
tparResult_t openUserFile(const std::string& path, UserFileMode mode, const char* what, int* fd);

// Reads the whole regular file `path`, of at most max_bytes (tparInvalidArgument, naming both,
// when larger).
tparResult_t readUserFile(const std::string& path, const char* what, size_t max_bytes,
                          std::string* out);

// Makes `data` the whole content of the regular file `path`, creating it when missing.
// tparSystemError when a write fails part way.
tparResult_t writeUserFile(const std::string& path, const char* what, const std::string& data);

// Checks that `path` opens as a regular file for reading, for callers that hand the path to
// an opener of their own (dlopen).
tparResult_t checkUserFile(const std::string& path, const char* what);

}  // namespace tpar

#endif  // TPAR_BASE_USER_FILE_H_
