#include "real_nccl.h"

#include <dlfcn.h>
#include <elf.h>
#include <glob.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "api/internal.h"
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
    // NOTE [user files] (src/base/user_file.h): dlopen of a FIFO waits for a writer, forever.
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

// Reads exactly `size` bytes at `offset` of `fd`; false on a short read.
bool readAt(int fd, uint64_t offset, size_t size, void* out) {
  auto* p = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t n = pread(fd, p, size, static_cast<off_t>(offset));
    if (n <= 0) return false;
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The dynamic symbol table of an open ELF64 file of this machine's byte order: its defined,
// global or weak, visible functions.
bool elfFunctions(int fd, uint64_t file_size, std::vector<std::string>* out, std::string* why) {
  Elf64_Ehdr eh;
  if (!readAt(fd, 0, sizeof(eh), &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    *why = "not an ELF file";
    return false;
  }
  const bool little = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != (little ? ELFDATA2LSB : ELFDATA2MSB)) {
    *why = "not a 64-bit ELF file of this machine's byte order";
    return false;
  }
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 ||
      eh.e_shoff + uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr) > file_size) {
    *why = "no section headers";
    return false;
  }
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  if (!readAt(fd, eh.e_shoff, sh.size() * sizeof(Elf64_Shdr), sh.data())) {
    *why = "its section headers cannot be read";
    return false;
  }
  // Bounds a section: inside the file and of a sane size (a symbol table of 64 MiB is far
  // beyond any NCCL's).
  auto fits = [&](const Elf64_Shdr& s) {
    return s.sh_offset <= file_size && s.sh_size <= file_size - s.sh_offset &&
           s.sh_size <= (64u << 20);
  };
  for (const Elf64_Shdr& dyn : sh) {
    if (dyn.sh_type != SHT_DYNSYM) continue;
    if (dyn.sh_link >= sh.size() || !fits(dyn) || !fits(sh[dyn.sh_link]) ||
        dyn.sh_entsize != sizeof(Elf64_Sym)) {
      *why = "its dynamic symbol table is malformed";
      return false;
    }
    const Elf64_Shdr& str = sh[dyn.sh_link];
    std::vector<Elf64_Sym> syms(dyn.sh_size / sizeof(Elf64_Sym));
    std::string names(str.sh_size, '\0');
    if (!readAt(fd, dyn.sh_offset, syms.size() * sizeof(Elf64_Sym), syms.data()) ||
        !readAt(fd, str.sh_offset, names.size(), &names[0])) {
      *why = "its dynamic symbol table cannot be read";
      return false;
    }
    for (const Elf64_Sym& sym : syms) {
      const int type = ELF64_ST_TYPE(sym.st_info), bind = ELF64_ST_BIND(sym.st_info);
      const int vis = ELF64_ST_VISIBILITY(sym.st_other);
      if ((type != STT_FUNC && type != STT_GNU_IFUNC) || (bind != STB_GLOBAL && bind != STB_WEAK) ||
          sym.st_shndx == SHN_UNDEF || (vis != STV_DEFAULT && vis != STV_PROTECTED) ||
          sym.st_name >= names.size())
        continue;
      out->push_back(names.c_str() + sym.st_name);
    }
    return true;
  }
  *why = "it has no dynamic symbol table";
  return false;
}

// The process stops here (or warns, when allowed) if `real` exports API functions the shim
// does not know (NOTE [unknown NCCL functions]).
void checkKnown(RealNccl* real, const ShimSettings& settings) {
  std::vector<std::string> exported;
  std::string why;
  if (!exportedFunctions(real->path, &exported, &why)) {
    TPAR_WARN("libtpar_nccl.so cannot list the functions of %s (%s), so it cannot check that it "
              "forwards all of them", real->path.c_str(), why.c_str());
    return;
  }
  real->unknown = unknownToShim(ncclApiOf(exported));
  if (real->unknown.empty()) return;
  std::string names;
  for (const std::string& n : real->unknown) names += (names.empty() ? "" : ", ") + n;
  const std::string text =
      "libtpar_nccl.so forwards to NCCL " + ncclVersionString(real->version) + " at " + real->path +
      ", which exports " + std::to_string(real->unknown.size()) +
      " function(s) this libtpar_nccl.so does not: " + names +
      ". A program looking them up here would find them missing (vLLM then turns its NCCL "
      "wrapper off). Use a libtpar_nccl.so built against this NCCL's nccl.h, point "
      "TPAR_NCCL_LIBRARY at an NCCL it knows, or set TPAR_SHIM_ALLOW_UNKNOWN_NCCL=1 to run anyway";
  if (settings.allow_unknown_nccl) {
    TPAR_WARN("%s (TPAR_SHIM_ALLOW_UNKNOWN_NCCL=1: running anyway)", text.c_str());
    return;
  }
  // Written directly, whatever TPAR_DEBUG says: the process ends on the next line.
  std::fprintf(stderr, "tpar: fatal: %s.\n", text.c_str());
  std::fflush(stderr);
  std::abort();
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
    checkKnown(&real, settings);
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

bool exportedFunctions(const std::string& path, std::vector<std::string>* out, std::string* error) {
  out->clear();
  int fd = -1;
  {
    // The caller's last tpar error survives (this runs inside the shim's own calls).
    const KeepLastError keep;
    if (openUserFile(path, UserFileMode::kRead, "NCCL library", &fd) != tparSuccess) {
      *error = tparGetLastError(nullptr);
      return false;
    }
  }
  struct stat st;
  const bool ok = fstat(fd, &st) == 0 && elfFunctions(fd, static_cast<uint64_t>(st.st_size), out, error);
  close(fd);
  return ok;
}

std::vector<std::string> ncclApiOf(const std::vector<std::string>& exported) {
  const std::set<std::string> all(exported.begin(), exported.end());
  std::vector<std::string> api;
  for (const std::string& name : all) {
    if (name.rfind("nccl", 0) == 0 && all.count("p" + name) != 0) api.push_back(name);
  }
  return api;
}

std::vector<std::string> unknownToShim(const std::vector<std::string>& api) {
  const std::set<std::string> known(std::begin(kApiNames), std::end(kApiNames));
  std::vector<std::string> out;
  for (const std::string& name : api) {
    if (known.count(name) == 0) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

// NOTE [unknown NCCL functions]: when the shim is loaded into a process that already holds an
// NCCL, the real one is loaded (and checked) at once, before any program can look a function up.
__attribute__((constructor)) void checkAtLoad() {
  bool nccl_loaded = false;
  for (const std::string& obj : loadedObjects()) {
    if (baseOf(obj).rfind("libnccl.so", 0) == 0) nccl_loaded = true;
  }
  if (nccl_loaded) (void)realNccl();
}

}  // namespace

}  // namespace shim
}  // namespace tpar
