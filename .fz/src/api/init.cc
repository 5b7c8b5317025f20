// The init entry points behind tparCommInitRank(Config) and tparCommInitAll(Config): the
// communicator's creation (src/comm/create.cc), logged as it starts and ends (api_log.h) and
// guarded so that no exception leaves the C API.
#include <chrono>
#include <string>

#include "api/api_guard.h"
#include "api/api_log.h"
#include "api/init_internal.h"
#include "base/log.h"
#include "comm/create.h"

using namespace tpar;

namespace {

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// The init entry points, logged (api_log.h): start, then completion or the failure.
tparResult_t tpar::initRankLogged(const char* call, tparComm_t* comm, int nranks,
                                  const tparUniqueId& id, int rank, const tparConfig_t* config) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) (void)cudaGetLastError();
  LogScope scope(rank, device);
  logInitStart(call, rank, nranks);
  const auto t0 = std::chrono::steady_clock::now();
  const tparResult_t res = guarded([&] { return createComm(comm, nranks, id, rank, config); });
  if (res == tparSuccess) logInitDone(*comm, msSince(t0));
  else logInitFailed(call, res, rank, nranks);
  return res;
}

tparResult_t tpar::initAllLogged(const char* call, tparComm_t* comms, int ndev, const int* devlist,
                                       const tparConfig_t* config, const std::string& topo_file) {
  logInitStart(call, -1, ndev);
  const auto t0 = std::chrono::steady_clock::now();
  const tparResult_t res =
      guarded([&] { return createComms(comms, ndev, devlist, config, topo_file); });
  if (res == tparSuccess) {
    const double ms = msSince(t0);
    for (int i = 0; i < ndev; ++i) logInitDone(comms[i], ms);
  } else {
    logInitFailed(call, res, -1, ndev);
  }
  return res;
}

tparResult_t tpar::commInitAllWithTopologyFile(tparComm_t* comms, int ndev, const int* devlist,
                                               const tparConfig_t* config,
                                               const std::string& topo_file) {
  return initAllLogged("tparCommInitAllConfig", comms, ndev, devlist, config, topo_file);
}
