// What a process holds, read from /proc and the CUDA runtime, to show that creating and
// destroying communicators (or losing a peer) leaves nothing behind: open descriptors, threads,
// mappings of shared-memory files and of the NVIDIA device files (pinned host memory), locked
// and pinned pages, and the GPU's free memory. Used by the leak tests (one process) and by the
// multi-process worker that survives a killed peer.
#ifndef TPAR_TESTS_MULTIPROCESS_RESOURCE_CHECK_H_
#define TPAR_TESTS_MULTIPROCESS_RESOURCE_CHECK_H_

#include <cuda_runtime_api.h>
#include <dirent.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tpar_test {

struct ResourceSnapshot {
  std::map<int, std::string> fds;            // descriptor -> what it points at
  std::set<int> threads;                     // task ids of this process
  long vm_lck_kb = -1;                       // /proc/self/status VmLck (mlock'ed pages)
  long vm_pin_kb = -1;                       // VmPin (pages pinned by the kernel for devices)
  size_t memfd_maps = 0, memfd_bytes = 0;    // mappings of memfd/shm files (host regions)
  size_t nvidia_maps = 0, nvidia_bytes = 0;  // mappings of /dev/nvidia* (pinned host memory)
  size_t maps = 0;                           // every mapping (reported, not compared)
  bool has_device = false;
  size_t device_free = 0, device_total = 0;  // cudaMemGetInfo: the whole GPU, every process
};

inline std::vector<std::string> listDir(const char* path) {
  std::vector<std::string> names;
  DIR* d = opendir(path);
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  return names;
}

// Files in /dev/shm whose name contains "tpar" (any case).
inline std::set<std::string> tparShmFiles() {
  std::set<std::string> out;
  for (const std::string& name : listDir("/dev/shm")) {
    std::string lower;
    for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.find("tpar") != std::string::npos) out.insert(name);
  }
  return out;
}

inline long statusKb(const std::string& status, const char* key) {
  const size_t at = status.find(std::string("\n") + key + ":");
  if (at == std::string::npos) return -1;
  return std::strtol(status.c_str() + at + std::string(key).size() + 2, nullptr, 10);
}

// `with_device`: also read cudaMemGetInfo (creates a CUDA context if there is none).
inline ResourceSnapshot takeSnapshot(bool with_device) {
  ResourceSnapshot s;
  for (const std::string& name : listDir("/proc/self/fd")) {
    const int fd = std::atoi(name.c_str());
    char target[512] = {};
    const std::string link = "/proc/self/fd/" + name;
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    // The directory listing itself holds one descriptor, gone once listDir returns.
    if (n < 0) continue;
    s.fds[fd] = std::string(target, static_cast<size_t>(n));
  }
  for (const std::string& name : listDir("/proc/self/task"))
    s.threads.insert(std::atoi(name.c_str()));
  std::ifstream st("/proc/self/status");
  std::stringstream ss;
  ss << "\n" << st.rdbuf();
  s.vm_lck_kb = statusKb(ss.str(), "VmLck");
  s.vm_pin_kb = statusKb(ss.str(), "VmPin");
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    ++s.maps;
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &lo, &hi) != 2) continue;
    const size_t bytes = static_cast<size_t>(hi - lo);
    if (line.find("/memfd:") != std::string::npos || line.find("/dev/shm/") != std::string::npos) {
      ++s.memfd_maps;
      s.memfd_bytes += bytes;
    } else if (line.find("/dev/nvidia") != std::string::npos) {
      ++s.nvidia_maps;
      s.nvidia_bytes += bytes;
    }
  }
  if (with_device) {
    s.has_device = cudaMemGetInfo(&s.device_free, &s.device_total) == cudaSuccess;
    if (!s.has_device) (void)cudaGetLastError();
  }
  return s;
}

struct LeakTolerance {
  size_t device_bytes = size_t(4) << 20;  // 2 MiB pages: small allocations round up
  size_t mapped_bytes = size_t(4) << 20;
  size_t mappings = 2;
  long locked_kb = 1024;
};

// What `after` holds that `before` did not, in words; empty when nothing leaked. Descriptors and
// threads are compared by identity (a new descriptor, or a number now pointing elsewhere, is a
// leak; one that closed is not), the rest by amount within `tol`.
inline std::string leaksSince(const ResourceSnapshot& before, const ResourceSnapshot& after,
                              const LeakTolerance& tol = {}) {
  std::ostringstream out;
  for (const auto& [fd, target] : after.fds) {
    auto it = before.fds.find(fd);
    if (it == before.fds.end() || it->second != target)
      out << "descriptor " << fd << " -> " << target << " is new; ";
  }
  size_t new_threads = 0;
  for (int tid : after.threads) new_threads += before.threads.count(tid) == 0;
  if (new_threads > 0) {
    out << new_threads << " new thread(s) (" << before.threads.size() << " before, "
        << after.threads.size() << " after); ";
  }
  if (after.memfd_maps > before.memfd_maps || after.memfd_bytes > before.memfd_bytes) {
    out << "shared-memory mappings " << before.memfd_maps << " (" << before.memfd_bytes << " B) -> "
        << after.memfd_maps << " (" << after.memfd_bytes << " B); ";
  }
  if (after.nvidia_maps > before.nvidia_maps + tol.mappings ||
      after.nvidia_bytes > before.nvidia_bytes + tol.mapped_bytes) {
    out << "NVIDIA device-file mappings (pinned host memory) " << before.nvidia_maps << " ("
        << before.nvidia_bytes << " B) -> " << after.nvidia_maps << " (" << after.nvidia_bytes
        << " B); ";
  }
  if (after.vm_lck_kb > before.vm_lck_kb + tol.locked_kb)
    out << "VmLck " << before.vm_lck_kb << " kB -> " << after.vm_lck_kb << " kB; ";
  if (after.vm_pin_kb > before.vm_pin_kb + tol.locked_kb)
    out << "VmPin " << before.vm_pin_kb << " kB -> " << after.vm_pin_kb << " kB; ";
  if (before.has_device && after.has_device &&
      after.device_free + tol.device_bytes < before.device_free) {
    out << "GPU free memory " << before.device_free << " B -> " << after.device_free << " B ("
        << (before.device_free - after.device_free) << " B less); ";
  }
  return out.str();
}

// One line for logs: the numbers compared above.
inline std::string describe(const ResourceSnapshot& s) {
  std::ostringstream out;
  out << s.fds.size() << " fds, " << s.threads.size() << " threads, " << s.maps << " mappings ("
      << s.memfd_maps << " shm " << s.memfd_bytes << " B, " << s.nvidia_maps << " nvidia "
      << s.nvidia_bytes << " B), VmLck " << s.vm_lck_kb << " kB, VmPin " << s.vm_pin_kb << " kB";
  if (s.has_device) out << ", GPU free " << (s.device_free >> 20) << " MiB";
  return out.str();
}

// GPU memory of exited processes (a killed peer) is returned by the driver shortly after they
// end: waits until free memory stops rising (two equal readings `step_ms` apart), at most
// `budget_ms`. Returns the last reading.
inline size_t settledFreeDeviceMemory(int budget_ms = 5000, int step_ms = 100) {
  size_t last = 0, total = 0;
  if (cudaMemGetInfo(&last, &total) != cudaSuccess) return 0;
  for (int waited = 0; waited < budget_ms; waited += step_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    size_t now = 0;
    if (cudaMemGetInfo(&now, &total) != cudaSuccess) return last;
    if (now == last) return now;
    last = now;
  }
  return last;
}

}  // namespace tpar_test

#endif  // TPAR_TESTS_MULTIPROCESS_RESOURCE_CHECK_H_
