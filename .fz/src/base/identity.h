// Who a rank is, in terms other ranks can compare: one host, one process.
//
// NOTE [identity]
// "Same host" is the hostname plus the kernel's boot id (/proc/sys/kernel/random/boot_id):
// the hostname alone repeats across machines and survives a reboot, the boot id is new at every
// boot. A boot id that cannot be read is an error, never silently left out: a hash without it
// would differ from the hash of a process that could read it, and the two would be told they
// run on different machines (this happened when the descriptor table was full).
// "Same process" is the same host, the same PID namespace (device and inode of
// /proc/self/ns/pid) and the same pid. Two containers of one pod can both be pid 1; by pid
// alone they would be taken for one process and use each other's raw pointers. NCCL builds its
// host hash from the same two parts and its pid hash from the pid and the PID namespace link.
// This file is the only place either is computed.
#ifndef TPAR_BASE_IDENTITY_H_
#define TPAR_BASE_IDENTITY_H_

#include <cstdint>

#include "tpar/tpar.h"

namespace tpar {

// Plain bytes: it travels between ranks inside the structs of the bootstrap rounds.
struct ProcessIdentity {
  uint64_t host;           // hostIdentity()
  uint64_t pid_namespace;  // device and inode of /proc/self/ns/pid, hashed
  int32_t pid;             // getpid(), as seen inside pid_namespace
  int32_t reserved;        // zero
};

// The host identity of this machine boot. The boot id is read once per process and kept;
// failing to read it (no /proc, descriptor table full) fails with tparSystemError naming the
// file and the reason.
tparResult_t hostIdentity(uint64_t* out);

// This process: hostIdentity(), its PID namespace and pid. A kernel without PID namespaces
// (no /proc/self/ns/pid) gives pid_namespace 0 for every process, which then compare equal.
tparResult_t processIdentity(ProcessIdentity* out);

inline bool sameHost(const ProcessIdentity& a, const ProcessIdentity& b) { return a.host == b.host; }
inline bool samePidNamespace(const ProcessIdentity& a, const ProcessIdentity& b) {
  return sameHost(a, b) && a.pid_namespace == b.pid_namespace;
}
inline bool sameProcess(const ProcessIdentity& a, const ProcessIdentity& b) {
  return samePidNamespace(a, b) && a.pid == b.pid;
}

// The host identity of a hostname and boot id text (what hostIdentity hashes), for tests.
uint64_t hostIdentityOf(const char* hostname, const char* boot_id);

}  // namespace tpar

#endif  // TPAR_BASE_IDENTITY_H_
