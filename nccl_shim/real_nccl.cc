#include "real_nccl.h"

#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <sys/stat.h>

#include <set>

#include "core/log.h"
#include "core/nccl_route.h"  // ncclVersionString
#include "settings.h"

namespace tpar {
namespace shim {
namespace {

// RTLD_DEEPBIND keeps the real NCCL's references to its own exported functions inside it: with
// the shim preloaded, the global scope would otherwise bind them to the shim's functions of the
// same names. AddressSanitizer's runtime refuses the flag; sanitized builds are CPU tests,
// whose stand-in NCCL never calls its own exports.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kDeepBind = 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int kDeepBind = 0;
#else
constexpr int kDeepBind = RTLD_DEEPBIND;
#endif
#else
constexpr int kDeepBind = RTLD_DEEPBIND;
#endif

const char* const kApiNames[] = {
#define TPAR_NCCL_FORWARD(ret, name, params, args) #name,
#define TPAR_NCCL_OWN(ret, name, params, args) #name,
#include "nccl_api.def"
#undef TPAR_NCCL_FORWARD
#undef TPAR_NCCL_OWN
};
static_assert(sizeof(kApiNames) / sizeof(kApiNames[0]) == kApiCount, "one name per row");

std::string dirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::string baseOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::vector<std::string> loadedObjects() {
  std::vector<std::string> out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name != nullptr && info->dlpi_name[0] == '/')
          static_cast<std::vector<std::string>*>(data)->push_back(info->dlpi_name);
        return 0;
      },
      &out);
  return out;
}

// The directories the dynamic loader searches for the program's libraries: LD_LIBRARY_PATH,
// the program's run path, then the system's defaults.
std::vector<std::string> loaderDirs() {
  std::vector<std::string> out;
  void* program = dlopen(nullptr, RTLD_NOW);
  if (program == nullptr) return out;
  Dl_serinfo size;
  if (dlinfo(program, RTLD_DI_SERINFOSIZE, &size) == 0 && size.dls_size >= sizeof(Dl_serinfo)) {
    std::vector<char> buf(size.dls_size);
    auto* info = reinterpret_cast<Dl_serinfo*>(buf.data());
    *info = size;
    if (dlinfo(program, RTLD_DI_SERINFOSIZE, info) == 0 &&
        dlinfo(program, RTLD_DI_SERINFO, info) == 0) {
      for (unsigned i = 0; i < info->dls_cnt; ++i) out.push_back(info->dls_serpath[i].dls_name);
    }
  }
  dlclose(program);
  return out;
}

std::vector<std::string> systemDirs() {
  std::vector<std::string> dirs = {
      "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
      "/usr/local/lib",            "/usr/local/cuda/lib64",      "/usr/local/cuda/lib"};
  const char* patterns[] = {
      "/usr/local/cuda-*/lib64",
      "/usr/local/cuda-*/lib",
      "/usr/local/cuda*/targets/*/lib",
      "/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib",
      "/usr/local/lib/python3*/site-packages/nvidia/nccl/lib",
      "/usr/lib/python3*/dist-packages/nvidia/nccl/lib",
  };
  for (const char* p : patterns) {
    glob_t g;
    if (glob(p, 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) dirs.push_back(g.gl_pathv[i]);
    }
    globfree(&g);
  }
  return dirs;
}

// This library: its file (by inode) and its handle, so that no candidate is the shim itself.
struct Self {
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
  void* handle = nullptr;
};

Self findSelf() {
  Self self;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&realNccl), &info) != 0 && info.dli_fname != nullptr) {
    self.path = info.dli_fname;
    struct stat st;
    if (stat(self.path.c_str(), &st) == 0) {
      self.dev = st.st_dev;
      self.ino = st.st_ino;
    }
    self.handle = dlopen(self.path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    // Only compared, never used: the reference taken above is given back at once.
    if (self.handle != nullptr) dlclose(self.handle);
  }
  return self;
}

// Opens one candidate; null with `note` set when it is not a usable real NCCL.
void* openCandidate(const Candidate& c, const Self& self, std::string* note) {
  if (c.path.find('/') != std::string::npos) {
    struct stat st;
    if (stat(c.path.c_str(), &st) != 0) {
      *note = "does not exist";
      return nullptr;
    }
    // NOTE [user files] (src/core/user_file.h): dlopen of a FIFO waits for a writer, forever.
    if (!S_ISREG(st.st_mode)) {
      *note = "is not a regular file";
      return nullptr;
    }
    if (st.st_dev == self.dev && st.st_ino == self.ino) {
      *note = "is libtpar_nccl.so itself";
      return nullptr;
    }
  }
  void* h = dlopen(c.path.c_str(), RTLD_NOW | RTLD_LOCAL | kDeepBind);
  if (h == nullptr) {
    const char* e = dlerror();
    *note = e != nullptr ? e : "does not load";
    return nullptr;
  }
  if (h == self.handle) {
    *note = "opens libtpar_nccl.so itself";
  } else if (dlsym(h, "tparShimRealNccl") != nullptr) {
    *note = "is another copy of libtpar_nccl.so";
  } else if (dlsym(h, "ncclAllReduce") == nullptr) {
    *note = "has no ncclAllReduce";
  } else {
    return h;
  }
  dlclose(h);
  return nullptr;
}

RealNccl load() {
  RealNccl real;
  const ShimSettings& settings = shimSettings();
  const Self self = findSelf();
  std::string tried;
  for (const Candidate& c :
       ncclCandidates(settings.nccl_library, loadedObjects(), loaderDirs(), systemDirs())) {
    std::string note;
    void* h = openCandidate(c, self, &note);
    if (h == nullptr) {
      // Absent files of the search are not worth a line; the configured one is.
      if (note != "does not exist" || !settings.nccl_library.empty())
        tried += "\n  " + c.path + " (" + c.how + "): " + note;
      continue;
    }
    real.handle = h;
    real.how = c.how;
    for (int i = 0; i < kApiCount; ++i) real.fns[i] = dlsym(h, kApiNames[i]);
    Dl_info info;
    const void* any = real.fns[static_cast<int>(Api::k_ncclAllReduce)];
    real.path = dladdr(any, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : c.path;
    using GetVersion = ncclResult_t (*)(int*);
    if (auto get = reinterpret_cast<GetVersion>(real.fns[static_cast<int>(Api::k_ncclGetVersion)]))
      get(&real.version);
    TPAR_INFO(kLogNccl, "libtpar_nccl.so (%s): forwarding to NCCL %s at %s (found: %s)", self.path.c_str(),
              ncclVersionString(real.version).c_str(), real.path.c_str(), real.how.c_str());
    return real;
  }
  real.error = settings.nccl_library.empty()
                   ? "libtpar_nccl.so found no NCCL to forward to; set TPAR_NCCL_LIBRARY to the "
                     "real libnccl.so.2. Tried:" + tried
                   : "libtpar_nccl.so cannot use TPAR_NCCL_LIBRARY=" + settings.nccl_library +
                         ":" + tried;
  TPAR_WARN("%s", real.error.c_str());
  return real;
}

}  // namespace

const char* apiName(Api api) {
  const int i = static_cast<int>(api);
  return i >= 0 && i < kApiCount ? kApiNames[i] : "unknown";
}

// NOTE [finding NCCL]
// The real NCCL is, in order:
//   1. TPAR_NCCL_LIBRARY, when set, and nothing else (a library the user named is the one).
//   2. A libnccl.so* this process has loaded already, such as PyTorch's when an engine opens
//      the shim through VLLM_NCCL_SO_PATH or SGLANG_NCCL_SO_PATH: one NCCL per process.
//   3. PyTorch's wheel copy, ../../nvidia/nccl/lib/libnccl.so.2 from the directory of each
//      loaded object (libtorch_cuda.so lives in site-packages/torch/lib). Under LD_PRELOAD the
//      shim itself satisfies PyTorch's need for libnccl.so.2, so that copy is never loaded.
//   4. libnccl.so.2 in each directory the dynamic loader searches for the program's libraries
//      (LD_LIBRARY_PATH first, then the program's run path and the system's defaults).
//   5. libnccl.so.2 in the usual library directories, the CUDA installations'
//      (/usr/local/cuda*/lib64, lib) and the system Pythons' nvidia/nccl/lib.
//   6. The name libnccl.so.2, for the dynamic loader's own search (ld.so.cache).
// A candidate that is the shim (same file, same handle, or a library exporting
// tparShimRealNccl) is skipped.
std::vector<Candidate> ncclCandidates(const std::string& configured,
                                      const std::vector<std::string>& loaded,
                                      const std::vector<std::string>& loader_dirs,
                                      const std::vector<std::string>& system_dirs) {
  if (!configured.empty()) return {{configured, "TPAR_NCCL_LIBRARY"}};
  std::vector<Candidate> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& path, const std::string& how) {
    if (seen.insert(path).second) out.push_back({path, how});
  };
  for (const std::string& obj : loaded) {
    if (baseOf(obj).rfind("libnccl.so", 0) == 0) add(obj, "already loaded");
  }
  for (const std::string& obj : loaded) {
    add(dirOf(obj) + "/../../nvidia/nccl/lib/libnccl.so.2", "PyTorch wheel beside " + obj);
  }
  for (const std::string& d : loader_dirs) add(d + "/libnccl.so.2", "loader search path");
  for (const std::string& d : system_dirs) add(d + "/libnccl.so.2", "system directory");
  add("libnccl.so.2", "dynamic loader search");
  return out;
}

const RealNccl& realNccl() {
  static const RealNccl real = load();
  return real;
}

}  // namespace shim
}  // namespace tpar
