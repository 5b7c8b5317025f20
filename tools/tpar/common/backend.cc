#include "tools/tpar/common/backend.h"

#include <dlfcn.h>

#include <cstdio>
#include <utility>

#include "api/internal.h"
#include "tools/tpar/common/cli_options.h"
#include "tools/tpar/common/nccl_loader.h"

namespace tpar_cli {
namespace {

std::string toHex(const char* bytes, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kDigits[(static_cast<unsigned char>(bytes[i]) >> 4) & 15];
    s += kDigits[static_cast<unsigned char>(bytes[i]) & 15];
  }
  return s;
}

}  // namespace

bool fromHex(const std::string& hex, char* bytes, size_t n) {
  if (hex.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = hex[2 * i + k];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else return false;
    }
    bytes[i] = static_cast<char>(v);
  }
  return true;
}

namespace {

class TparBackend : public Backend {
 public:
  TparBackend(tparAlgo_t algo, int transport, int64_t timeout_ms, std::string topo_file, int wire)
      : algo_(algo), transport_(transport), timeout_ms_(timeout_ms),
        topo_file_(std::move(topo_file)), wire_(wire) {}
  ~TparBackend() override {
    for (tparComm_t c : comms_) tparCommDestroy(c);
    for (NcclComm c : nccl_comms_) nccl_->commDestroy(c);
  }
  std::string name() const override {
    const std::string base =
        algo_ == tparAlgoAuto ? "tpar" : std::string("tpar:") + tparAlgoName(algo_);
    return wire_ == TPAR_CONFIG_UNDEF_INT ? base : base + "+" + wireOptionName(wire_);
  }
  std::string init(const std::vector<int>& devs) override {
    tparConfig_t cfg = config();
    for (size_t i = 0; i < devs.size(); ++i)
      for (size_t j = i + 1; j < devs.size(); ++j)
        if (devs[i] == devs[j]) cfg.allowSharedDevice = 1;
    comms_.assign(devs.size(), nullptr);
    const int n = static_cast<int>(devs.size());
    const tparResult_t res =
        topo_file_.empty()
            ? tparCommInitAllConfig(comms_.data(), n, devs.data(), &cfg)
            : tpar::commInitAllWithTopology(comms_.data(), n, devs.data(), &cfg, topo_file_);
    if (res != tparSuccess) {
      comms_.clear();
      return std::string("tparCommInitAll: ") + tparGetLastError(nullptr);
    }
    attachNccl(devs);
    return "";
  }
  std::string initRank(int nranks, int rank, const std::string& id_hex, int dev) override {
    tparUniqueId id;
    if (!fromHex(id_hex, id.internal, sizeof(id.internal))) return "bad unique id";
    tparConfig_t cfg = config();
    cfg.allowSharedDevice = 1;  // several processes on one GPU are a test setup, not an error
    if (cudaSetDevice(dev) != cudaSuccess) return "cudaSetDevice failed";
    tparComm_t c = nullptr;
    if (tparCommInitRankConfig(&c, nranks, id, rank, &cfg) != tparSuccess)
      return std::string("tparCommInitRank: ") + tparGetLastError(nullptr);
    comms_.assign(1, c);
    return "";
  }
  std::string allReduce(const std::vector<const void*>& send, const std::vector<void*>& recv,
                        size_t count, tparDataType_t dtype, tparRedOp_t op,
                        const std::vector<cudaStream_t>& streams) override {
    // Calls routed to NCCL from one thread for several ranks must form one NCCL group.
    if (!nccl_comms_.empty()) nccl_->groupStart();
    std::string err;
    for (size_t r = 0; r < comms_.size() && err.empty(); ++r) {
      if (tparAllReduce(send[r], recv[r], count, dtype, op, comms_[r], streams[r]) !=
          tparSuccess) {
        err = std::string("tparAllReduce: ") + tparGetLastError(comms_[r]);
      }
    }
    if (!nccl_comms_.empty()) {
      const int rc = nccl_->groupEnd();
      if (rc != 0 && err.empty()) err = std::string("ncclGroupEnd: ") + nccl_->getErrorString(rc);
    }
    return err;
  }
  std::string allReduceAddRmsNorm(const std::vector<const void*>& input,
                                  const std::vector<tparAddRmsNormArgs_t>& args,
                                  tparDataType_t dtype,
                                  const std::vector<cudaStream_t>& streams) override {
    for (size_t r = 0; r < comms_.size(); ++r) {
      if (tparAllReduceAddRmsNorm(input[r], &args[r], dtype, comms_[r], streams[r]) !=
          tparSuccess) {
        return std::string("tparAllReduceAddRmsNorm: ") + tparGetLastError(comms_[r]);
      }
    }
    return "";
  }
  std::string asyncError() override {
    for (size_t r = 0; r < comms_.size(); ++r) {
      tparResult_t e = tparSuccess;
      tparCommGetAsyncError(comms_[r], &e);
      if (e != tparSuccess) return "rank " + std::to_string(r) + ": " + tparGetErrorString(e);
    }
    return "";
  }
  std::string chosen(size_t bytes) override {
    if (comms_.empty()) return "";
    tparAlgo_t a = tparAlgoAuto;
    tparCommSelectAlgorithm(comms_[0], bytes, &a);
    return tparAlgoName(a);
  }
  std::string wireVariant(size_t bytes, tparDataType_t dtype) override {
    if (comms_.empty()) return "";
    const char* v = tpar::commWireVariant(comms_[0], bytes, dtype);
    return v != nullptr ? v : "";
  }
  std::string transport() override {
    tparCommInfo_t info;
    if (comms_.empty() || tparCommQuery(comms_[0], &info) != tparSuccess) return "";
    return tparTransportName(info.transport);
  }
  bool info(tparCommInfo_t* out) override {
    return !comms_.empty() && tparCommQuery(comms_[0], out) == tparSuccess;
  }
  std::string fallback() override {
    if (comms_.empty()) return "";
    const tpar::Fallback f = tpar::commForcedFallback(comms_[0]);
    if (f.why == nullptr) return "";
    return std::string(tpar::algoName(f.runs)) + " (" + f.why + ")";
  }

 private:
  // The communicators' configuration, as this backend was made (both init paths).
  tparConfig_t config() const {
    tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
    cfg.algorithm = algo_;
    cfg.transport = transport_;
    cfg.timeoutMs = timeout_ms_;
    cfg.wire = wire_;
    return cfg;
  }

  // tpar as deployed: where the tuning table (or TPAR_ALGO) sends sizes to NCCL, an NCCL
  // communicator of the same GPUs is attached, so that those sizes run (and are reported) as
  // NCCL. Without one, or on virtual ranks where NCCL cannot run, tpar's own choice runs.
  void attachNccl(const std::vector<int>& devs) {
    if (comms_.empty() || !tpar::wantsNccl(comms_[0])) return;
    std::string why;
    for (size_t i = 0; i < devs.size() && why.empty(); ++i)
      for (size_t j = i + 1; j < devs.size(); ++j)
        if (devs[i] == devs[j]) why = "NCCL cannot run two ranks on one GPU";
    const NcclLib* lib = why.empty() ? loadNccl(&why) : nullptr;
    std::vector<NcclComm> nc(devs.size(), nullptr);
    if (lib != nullptr) {
      const int rc = lib->commInitAll(nc.data(), static_cast<int>(devs.size()), devs.data());
      if (rc != 0) why = std::string("ncclCommInitAll: ") + lib->getErrorString(rc);
    }
    for (size_t r = 0; why.empty() && r < comms_.size(); ++r) {
      if (tparCommSetNcclComm(comms_[r], nc[r]) != tparSuccess)
        why = std::string("tparCommSetNcclComm: ") + tparGetLastError(comms_[r]);
    }
    if (!why.empty()) {
      for (tparComm_t c : comms_) tparCommSetNcclComm(c, nullptr);
      if (lib != nullptr)
        for (NcclComm c : nc)
          if (c != nullptr) lib->commDestroy(c);
      std::fprintf(stderr, "# %s: sizes are routed to NCCL (tuning table or TPAR_ALGO), but %s; "
                   "tpar's own choice runs instead (forced NCCL: the calls fail)\n",
                   name().c_str(), why.c_str());
      return;
    }
    nccl_ = lib;
    nccl_comms_ = nc;
  }

  tparAlgo_t algo_;
  int transport_;
  int64_t timeout_ms_;
  std::string topo_file_;
  int wire_;
  std::vector<tparComm_t> comms_;
  const NcclLib* nccl_ = nullptr;
  std::vector<NcclComm> nccl_comms_;
};

// ncclCommRegister / ncclCommDeregister (NCCL 2.19 and newer), looked up in the copy of NCCL
// that loadNccl loaded; nullptr when it has none.
struct NcclRegistration {
  int (*reg)(NcclComm, void*, size_t, void**) = nullptr;
  int (*dereg)(NcclComm, void*) = nullptr;
};

NcclRegistration ncclRegistration(const NcclLib* lib) {
  NcclRegistration r;
  void* h = dlopen(lib->path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return r;
  r.reg = reinterpret_cast<int (*)(NcclComm, void*, size_t, void**)>(dlsym(h, "ncclCommRegister"));
  r.dereg = reinterpret_cast<int (*)(NcclComm, void*)>(dlsym(h, "ncclCommDeregister"));
  dlclose(h);  // loadNccl's reference keeps it loaded
  if (r.reg == nullptr || r.dereg == nullptr) r = NcclRegistration{};
  return r;
}

class NcclBackend : public Backend {
 public:
  explicit NcclBackend(const NcclLib* lib) : lib_(lib) {}
  ~NcclBackend() override {
    for (const auto& [c, handle] : registered_) registration_.dereg(c, handle);
    for (NcclComm c : comms_) lib_->commDestroy(c);
  }
  std::string registerBuffers(const std::vector<std::vector<void*>>& bufs, size_t bytes) override {
    registration_ = ncclRegistration(lib_);
    if (registration_.reg == nullptr)
      return "NCCL " + ncclVersionString(lib_->version) + " has no ncclCommRegister (2.19+)";
    for (size_t r = 0; r < comms_.size() && r < bufs.size(); ++r) {
      for (void* p : bufs[r]) {
        void* handle = nullptr;
        const int rc = registration_.reg(comms_[r], p, bytes, &handle);
        if (rc != 0) return std::string("ncclCommRegister: ") + lib_->getErrorString(rc);
        registered_.emplace_back(comms_[r], handle);
      }
    }
    return "";
  }
  std::string name() const override { return "nccl"; }
  std::string init(const std::vector<int>& devs) override {
    for (size_t i = 0; i < devs.size(); ++i)
      for (size_t j = i + 1; j < devs.size(); ++j)
        if (devs[i] == devs[j])
          return "NCCL refuses two ranks on one GPU (duplicate GPU " + std::to_string(devs[i]) +
                 ")";
    comms_.assign(devs.size(), nullptr);
    const int rc = lib_->commInitAll(comms_.data(), static_cast<int>(devs.size()), devs.data());
    if (rc != 0) {
      comms_.clear();
      return std::string("ncclCommInitAll: ") + lib_->getErrorString(rc);
    }
    return "";
  }
  std::string initRank(int nranks, int rank, const std::string& id_hex, int dev) override {
    NcclUniqueId id;
    if (!fromHex(id_hex, id.internal, sizeof(id.internal))) return "bad unique id";
    if (cudaSetDevice(dev) != cudaSuccess) return "cudaSetDevice failed";
    NcclComm c = nullptr;
    const int rc = lib_->commInitRank(&c, nranks, id, rank);
    if (rc != 0) return std::string("ncclCommInitRank: ") + lib_->getErrorString(rc);
    comms_.assign(1, c);
    return "";
  }
  std::string allReduce(const std::vector<const void*>& send, const std::vector<void*>& recv,
                        size_t count, tparDataType_t dtype, tparRedOp_t op,
                        const std::vector<cudaStream_t>& streams) override {
    // One thread, several ranks: NCCL needs the calls grouped.
    lib_->groupStart();
    int first_error = 0;
    for (size_t r = 0; r < comms_.size(); ++r) {
      const int rc = lib_->allReduce(send[r], recv[r], count, tpar::ncclDataTypeOf(dtype),
                                     tpar::ncclRedOpOf(op), comms_[r], streams[r]);
      if (rc != 0 && first_error == 0) first_error = rc;
    }
    const int rc = lib_->groupEnd();
    if (first_error == 0) first_error = rc;
    return first_error ? std::string("ncclAllReduce: ") + lib_->getErrorString(first_error) : "";
  }
  std::string asyncError() override {
    for (size_t r = 0; r < comms_.size(); ++r) {
      int e = 0;
      lib_->commGetAsyncError(comms_[r], &e);
      if (e != 0) return "rank " + std::to_string(r) + ": " + lib_->getErrorString(e);
    }
    return "";
  }

 private:
  const NcclLib* lib_;
  std::vector<NcclComm> comms_;
  NcclRegistration registration_;
  std::vector<std::pair<NcclComm, void*>> registered_;
};

}  // namespace

std::unique_ptr<Backend> makeTparBackend(tparAlgo_t algo, int transport, int64_t timeout_ms,
                                         const std::string& topo_file, int wire) {
  return std::make_unique<TparBackend>(algo, transport, timeout_ms, topo_file, wire);
}

std::unique_ptr<Backend> makeNcclBackend(std::string* why) {
  const NcclLib* lib = loadNccl(why);
  if (lib == nullptr) return nullptr;
  return std::make_unique<NcclBackend>(lib);
}

std::string newUniqueId(const std::string& backend, std::string* id_hex) {
  if (backend.rfind("tpar", 0) == 0) {
    tparUniqueId id;
    if (tparGetUniqueId(&id) != tparSuccess)
      return std::string("tparGetUniqueId: ") + tparGetLastError(nullptr);
    *id_hex = toHex(id.internal, sizeof(id.internal));
    return "";
  }
  std::string why;
  const NcclLib* lib = loadNccl(&why);
  if (lib == nullptr) return why;
  NcclUniqueId id;
  const int rc = lib->getUniqueId(&id);
  if (rc != 0) return std::string("ncclGetUniqueId: ") + lib->getErrorString(rc);
  *id_hex = toHex(id.internal, sizeof(id.internal));
  return "";
}

const std::vector<std::string>& backendNames() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names = {"tpar"};
    for (int a = 0; a < tparNumAlgos; ++a) {
      if (a != tparAlgoAuto && a != tparAlgoNccl)
        names.push_back(std::string("tpar:") + tparAlgoName(static_cast<tparAlgo_t>(a)));
    }
    names.push_back("nccl");
    return names;
  }();
  return kNames;
}

std::string backendNameList() {
  std::string list;
  for (const std::string& n : backendNames()) list += (list.empty() ? "" : ", ") + n;
  return list;
}

bool splitWireSuffix(const std::string& name, std::string* base, int* wire) {
  const size_t plus = name.rfind('+');
  if (plus == std::string::npos || !tpar::wireFromName(name.substr(plus + 1).c_str(), wire)) return false;
  *base = name.substr(0, plus);
  return true;
}

std::unique_ptr<Backend> makeBackend(const std::string& name, std::string* why,
                                     int tpar_transport, int64_t tpar_timeout_ms) {
  std::string base = name;
  int wire = TPAR_CONFIG_UNDEF_INT;
  const bool has_wire = splitWireSuffix(name, &base, &wire);
  if (base == "tpar") return makeTparBackend(tparAlgoAuto, tpar_transport, tpar_timeout_ms, "", wire);
  for (int a = 0; a < tparNumAlgos; ++a) {
    const tparAlgo_t algo = static_cast<tparAlgo_t>(a);
    if (algo != tparAlgoAuto && algo != tparAlgoNccl &&
        base == std::string("tpar:") + tparAlgoName(algo))
      return makeTparBackend(algo, tpar_transport, tpar_timeout_ms, "", wire);
  }
  if (has_wire) {
    if (why) *why = "backend '" + name + "': only tpar's backends take a wire format";
    return nullptr;
  }
  if (name == "nccl") return makeNcclBackend(why);
  if (why) *why = "unknown backend '" + name + "' (" + backendNameList() + ", nccl:p2p-sys, nccl:shm)";
  return nullptr;
}

}  // namespace tpar_cli
