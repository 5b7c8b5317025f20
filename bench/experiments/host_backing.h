// Where a buffer of pinned host memory comes from, for bench/experiments/host_link.cu's
// --backing: the question whether the GPU moves the same bytes per second through every kind
// of pinned memory (docs/PERFORMANCE.md, "Which pinned memory the host link is measured on").
// tpar's receive regions are a memfd registered with cudaHostRegister (NOTE [host regions] in
// src/transport/host_region.h), in pages of 4 KiB unless the system gives shared memory huge
// pages; the link probes behind the `phys` floors, and the peer's regions, use cudaHostAlloc.
//   hostalloc  cudaHostAlloc(mapped), the driver's own pages
//   memfd      a memfd, mapped shared, first touched by the CPU, cudaHostRegister: tpar's regions
//   memfd-thp  the same with madvise(MADV_HUGEPAGE) before the first touch: 2 MiB pages where
//              /sys/kernel/mm/transparent_hugepage/shmem_enabled allows (advise, within_size,
//              always)
//   anon-thp   anonymous private memory with MADV_HUGEPAGE, registered (no file: one process)
//   hugetlb    a memfd of 2 MiB huge pages (MFD_HUGETLB): needs pages reserved in
//              /proc/sys/vm/nr_hugepages
//   cumem      cuMemCreate pinned on the GPU's host NUMA node (the allocation granularity, 2 MiB
//              on the machines seen), exportable as a file descriptor, mapped for the GPU and
//              the CPU
// Each is first touched by the CPU (every byte written) before the GPU sees it.
#ifndef TPAR_BENCH_EXPERIMENTS_HOST_BACKING_H_
#define TPAR_BENCH_EXPERIMENTS_HOST_BACKING_H_

#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace host_backing {

inline const char* const kNames[] = {"hostalloc", "memfd", "memfd-thp", "anon-thp", "hugetlb",
                                     "cumem"};

inline bool known(const std::string& name) {
  for (const char* n : kNames)
    if (name == n) return true;
  return false;
}

struct Buf {
  std::string backing;
  char* host = nullptr;  // the CPU's address
  char* dev = nullptr;   // the GPU's address (the same under unified addressing)
  size_t bytes = 0;      // asked for
  size_t mapped = 0;     // mapped (rounded up to the backing's page)
  int fd = -1;
  bool registered = false;
  CUmemGenericAllocationHandle handle = 0;
};

// The driver API functions cumem needs, from the runtime's entry points (no link to libcuda).
struct CuMem {
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemSetAccess) access = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemAddressFree) free = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;

  std::string load() {
    struct Sym {
      const char* name;
      void** slot;
    } syms[] = {{"cuMemGetAllocationGranularity", reinterpret_cast<void**>(&granularity)},
                {"cuMemCreate", reinterpret_cast<void**>(&create)},
                {"cuMemAddressReserve", reinterpret_cast<void**>(&reserve)},
                {"cuMemMap", reinterpret_cast<void**>(&map)},
                {"cuMemSetAccess", reinterpret_cast<void**>(&access)},
                {"cuMemUnmap", reinterpret_cast<void**>(&unmap)},
                {"cuMemAddressFree", reinterpret_cast<void**>(&free)},
                {"cuMemRelease", reinterpret_cast<void**>(&release)},
                {"cuDeviceGetAttribute", reinterpret_cast<void**>(&attribute)}};
    for (const Sym& s : syms) {
      cudaDriverEntryPointQueryResult q{};
      if (cudaGetDriverEntryPointByVersion(s.name, s.slot, 12000, cudaEnableDefault, &q) !=
              cudaSuccess ||
          q != cudaDriverEntryPointSuccess || *s.slot == nullptr) {
        (void)cudaGetLastError();
        return std::string("driver entry point ") + s.name + " not found";
      }
    }
    return "";
  }
};

// Loaded once; `loaded` is "" or why not.
inline CuMem& cuMem(std::string* loaded) {
  static CuMem cu;
  static const std::string why = cu.load();
  *loaded = why;
  return cu;
}

inline std::string errnoText(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

inline std::string registerBuf(Buf* b) {
  const cudaError_t e =
      cudaHostRegister(b->host, b->mapped, cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("cudaHostRegister: ") + cudaGetErrorString(e);
  }
  b->registered = true;
  void* d = nullptr;
  if (cudaHostGetDevicePointer(&d, b->host, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return "cudaHostGetDevicePointer failed";
  }
  b->dev = static_cast<char*>(d);
  return "";
}

inline std::string allocCuMem(int device, Buf* b) {
  std::string loaded;
  CuMem& cu = cuMem(&loaded);
  if (!loaded.empty()) return loaded;
  int numa = -1;
  if (cu.attribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device) != CUDA_SUCCESS || numa < 0)
    numa = 0;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  prop.location.id = numa;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  if (cu.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || gran == 0)
    return "cuMemGetAllocationGranularity for host NUMA memory failed (not supported here?)";
  b->mapped = (b->bytes + gran - 1) / gran * gran;
  if (cu.create(&b->handle, b->mapped, &prop, 0) != CUDA_SUCCESS) {
    b->handle = 0;
    return "cuMemCreate of pinned host NUMA memory failed";
  }
  CUdeviceptr va = 0;
  if (cu.reserve(&va, b->mapped, gran, 0, 0) != CUDA_SUCCESS) return "cuMemAddressReserve failed";
  b->host = b->dev = reinterpret_cast<char*>(va);
  if (cu.map(va, b->mapped, 0, b->handle, 0) != CUDA_SUCCESS) return "cuMemMap failed";
  CUmemAccessDesc acc[2]{};
  acc[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc[0].location.id = device;
  acc[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  acc[1].location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  acc[1].location.id = numa;
  acc[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (cu.access(va, b->mapped, acc, 2) != CUDA_SUCCESS) return "cuMemSetAccess failed";
  return "";
}

// Allocates `bytes` of `backing` for CUDA device `device` and writes `fill` into every byte.
// Returns "" or why it could not (the backing is then not available here).
inline std::string alloc(const std::string& backing, size_t bytes, int device, int fill, Buf* b) {
  *b = Buf();
  b->backing = backing;
  b->bytes = b->mapped = bytes;
  std::string why;
  if (backing == "hostalloc") {
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
      (void)cudaGetLastError();
      return "cudaHostAlloc failed";
    }
    b->host = b->dev = static_cast<char*>(p);
  } else if (backing == "memfd" || backing == "memfd-thp" || backing == "hugetlb") {
    const bool huge = backing == "hugetlb";
    const size_t page = huge ? size_t(2) << 20 : 4096;
    b->mapped = (bytes + page - 1) / page * page;
    b->fd = static_cast<int>(syscall(SYS_memfd_create, "tpar-host-link",
                                     MFD_CLOEXEC | (huge ? MFD_HUGETLB | MFD_HUGE_2MB : 0)));
    if (b->fd < 0) return errnoText("memfd_create");
    if (ftruncate(b->fd, static_cast<off_t>(b->mapped)) != 0) return errnoText("ftruncate");
    void* p = mmap(nullptr, b->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
    // A huge-page file maps only with enough pages reserved; failing here, not at the touch.
    if (p == MAP_FAILED) return errnoText(huge ? "mmap (huge pages reserved?)" : "mmap");
    b->host = static_cast<char*>(p);
    if (backing == "memfd-thp" && madvise(p, b->mapped, MADV_HUGEPAGE) != 0)
      return errnoText("madvise(MADV_HUGEPAGE)");
  } else if (backing == "anon-thp") {
    // Huge pages only cover whole aligned 2 MiB spans: map a span more, keep the aligned part.
    const size_t huge = size_t(2) << 20;
    b->mapped = (bytes + huge - 1) / huge * huge;
    void* p = mmap(nullptr, b->mapped + huge, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return errnoText("mmap");
    char* raw = static_cast<char*>(p);
    char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + huge - 1) &
                                            ~uintptr_t(huge - 1));
    if (aligned > raw) munmap(raw, aligned - raw);
    if (raw + huge > aligned) munmap(aligned + b->mapped, raw + huge - aligned);
    b->host = aligned;
    if (madvise(aligned, b->mapped, MADV_HUGEPAGE) != 0) return errnoText("madvise(MADV_HUGEPAGE)");
  } else if (backing == "cumem") {
    why = allocCuMem(device, b);
    if (!why.empty()) return why;
  } else {
    return "unknown backing '" + backing + "'";
  }
  std::memset(b->host, fill, b->mapped);
  if (b->dev == nullptr) why = registerBuf(b);
  return why;
}

inline void release(Buf* b) {
  if (b->backing == "hostalloc") {
    if (b->host) cudaFreeHost(b->host);
  } else if (b->backing == "cumem") {
    std::string loaded;
    CuMem& cu = cuMem(&loaded);
    if (loaded.empty() && b->host) {
      cu.unmap(reinterpret_cast<CUdeviceptr>(b->host), b->mapped);
      cu.free(reinterpret_cast<CUdeviceptr>(b->host), b->mapped);
    }
    if (loaded.empty() && b->handle) cu.release(b->handle);
  } else {
    if (b->registered) cudaHostUnregister(b->host);
    if (b->host) munmap(b->host, b->mapped);
    if (b->fd >= 0) close(b->fd);
  }
  (void)cudaGetLastError();
  *b = Buf();
}

// What the kernel says of the pages under [p, p + bytes): the mappings' page sizes and how much
// of them is mapped by 2 MiB pages (/proc/self/smaps: AnonHugePages, ShmemPmdMapped,
// FilePmdMapped, and the hugetlb lines), in words.
inline std::string pageState(const void* p, size_t bytes) {
  const unsigned long lo = reinterpret_cast<unsigned long>(p), hi = lo + bytes;
  std::ifstream in("/proc/self/smaps");
  if (!in) return "smaps not readable";
  std::string line;
  bool inside = false;
  unsigned long rss = 0, pmd = 0, hugetlb = 0, kpage = 0;
  int vmas = 0;
  while (std::getline(in, line)) {
    unsigned long a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &a, &b) == 2 && line.find(':') > line.find(' ')) {
      inside = a < hi && b > lo;
      vmas += inside;
      continue;
    }
    if (!inside) continue;
    std::istringstream f(line);
    std::string key;
    unsigned long kb = 0;
    f >> key >> kb;
    if (key == "Rss:") rss += kb;
    else if (key == "AnonHugePages:" || key == "ShmemPmdMapped:" || key == "FilePmdMapped:")
      pmd += kb;
    else if (key == "Shared_Hugetlb:" || key == "Private_Hugetlb:") hugetlb += kb;
    else if (key == "KernelPageSize:") kpage = kb;
  }
  char out[256];
  if (vmas == 0) return "no mapping of the CPU's page tables covers it (a driver mapping?)";
  std::snprintf(out, sizeof(out),
                "%d mapping(s), kernel page %lu KiB, resident %.1f MiB, of it mapped by 2 MiB "
                "pages %.1f MiB, hugetlb %.1f MiB",
                vmas, kpage, rss / 1024.0, pmd / 1024.0, hugetlb / 1024.0);
  return out;
}

}  // namespace host_backing

#endif  // TPAR_BENCH_EXPERIMENTS_HOST_BACKING_H_
