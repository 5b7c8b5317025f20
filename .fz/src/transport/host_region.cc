#include "transport/host_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <cuda_runtime_api.h>

#include "base/error.h"
#include "base/log.h"
#include "topology/topology.h"

namespace tpar {
namespace {

// The seals a peer's region must carry (NOTE [host region trust] in transport/host_region.h).
constexpr int kRegionSeals = F_SEAL_GROW | F_SEAL_SHRINK;

int makeMemfd(const char* name) {
#ifdef SYS_memfd_create
  return static_cast<int>(syscall(SYS_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
#else
  errno = ENOSYS;
  return -1;
#endif
}

// Registers a mapping with CUDA and finds its device address.
tparResult_t registerMapping(HostRegion* r) {
  cudaError_t err =
      cudaHostRegister(r->host, r->bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return setError(tparUnhandledCudaError,
                    "cudaHostRegister of a %zu-byte host region failed: %s (pinned memory "
                    "limit? see `ulimit -l`)",
                    r->bytes, cudaGetErrorString(err));
  }
  r->registered = true;
  void* dev = nullptr;
  err = cudaHostGetDevicePointer(&dev, r->host, 0);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return setError(tparUnhandledCudaError, "cudaHostGetDevicePointer failed: %s",
                    cudaGetErrorString(err));
  }
  r->device = static_cast<char*>(dev);
  return tparSuccess;
}

tparResult_t mapFd(int fd, size_t bytes, HostRegion* r) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return setError(tparSystemError, "mmap of a %zu-byte host region failed: %s", bytes,
                    std::strerror(errno));
  }
  r->host = p;
  r->bytes = bytes;
  return tparSuccess;
}

}  // namespace

tparResult_t createHostRegion(size_t bytes, int cuda_device, void (*fill)(void*, size_t, void*),
                              void* fill_arg, HostRegion* out) {
  HostRegion r;
  auto fail = [&](tparResult_t res) {
    closeHostRegion(&r);
    return res;
  };
  r.fd = makeMemfd("tpar-region");
  if (r.fd < 0) return setError(tparSystemError, "memfd_create failed: %s", std::strerror(errno));
  if (ftruncate(r.fd, static_cast<off_t>(bytes)) != 0) {
    return fail(setError(tparSystemError, "sizing a %zu-byte host region failed: %s", bytes,
                         std::strerror(errno)));
  }
  // NOTE [host region trust]: its size is final from here on.
  if (fcntl(r.fd, F_ADD_SEALS, kRegionSeals | F_SEAL_SEAL) != 0) {
    return fail(setError(tparSystemError, "sealing a host region failed: %s",
                         std::strerror(errno)));
  }
  if (tparResult_t res = mapFd(r.fd, bytes, &r); res != tparSuccess) return fail(res);
  std::string why;
  if (!bindToGpuNumaNode(r.host, bytes, cuda_device, &why)) {
    TPAR_INFO(kLogTransport, "host region of GPU %d not bound to a NUMA node: %s", cuda_device,
              why.c_str());
  }
  // The first touch allocates the pages, on the bound node.
  fill(r.host, bytes, fill_arg);
  if (tparResult_t res = registerMapping(&r); res != tparSuccess) return fail(res);
  *out = r;
  return tparSuccess;
}

tparResult_t checkPeerRegionFd(int fd, size_t bytes, const char* what) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return setError(tparSystemError, "fstat of %s failed: %s", what, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return setError(tparInvalidUsage, "%s is not a tpar host region (not a memory file)", what);
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kRegionSeals) != kRegionSeals) {
    return setError(tparInvalidUsage,
                    "%s is not a tpar host region: %s (a host region is a memfd sealed against "
                    "resizing)",
                    what, seals < 0 ? "not a memfd (a file that cannot be sealed)"
                                    : "a memfd that can still be resized");
  }
  if (static_cast<uint64_t>(st.st_size) != bytes) {
    return setError(tparInvalidUsage,
                    "%s is not the expected host region: %llu bytes where %zu were published",
                    what, static_cast<unsigned long long>(st.st_size), bytes);
  }
  return tparSuccess;
}

tparResult_t openPeerHostRegion(int32_t pid, int32_t fd, size_t bytes, HostRegion* out) {
  HostRegion r;
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int local = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (local < 0) {
    return setError(tparSystemError,
                    "opening rank's host region %s failed: %s (processes of one communicator "
                    "must run as the same user and be allowed to open each other's files)",
                    path.c_str(), std::strerror(errno));
  }
  if (tparResult_t bad = checkPeerRegionFd(local, bytes, path.c_str()); bad != tparSuccess) {
    close(local);
    return bad;
  }
  const tparResult_t res = mapFd(local, bytes, &r);
  close(local);  // the mapping keeps the memory
  if (res != tparSuccess) return res;
  const tparResult_t reg = registerMapping(&r);
  if (reg != tparSuccess) {
    closeHostRegion(&r);
    return reg;
  }
  *out = r;
  return tparSuccess;
}

void closeHostRegion(HostRegion* r) {
  if (r->registered) {
    cudaHostUnregister(r->host);
    (void)cudaGetLastError();
  }
  if (r->host != nullptr) munmap(r->host, r->bytes);
  if (r->fd >= 0) close(r->fd);
  *r = HostRegion();
}

}  // namespace tpar
