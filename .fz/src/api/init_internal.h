// Init entry points behind the C API (src/api/init.cc), and one for the `tpar` command only (it
// links the static library): not part of the C API, not exported from libtpar.so.
#ifndef TPAR_API_INIT_INTERNAL_H_
#define TPAR_API_INIT_INTERNAL_H_

#include <string>

#include "tpar/tpar.h"

namespace tpar {

// The init entry points, logged (api_log.h): `call` names the C function in the log lines.
// Each runs inside guarded() (api_guard.h), so no exception leaves it.
tparResult_t initRankLogged(const char* call, tparComm_t* comm, int nranks, const tparUniqueId& id,
                            int rank, const tparConfig_t* config);
tparResult_t initAllLogged(const char* call, tparComm_t* comms, int ndev, const int* devlist,
                           const tparConfig_t* config, const std::string& topo_file = "");

// tparCommInitAllConfig with the topology read from the hwloc XML file `topo_file` (its first
// ndev GPUs, virtual ranks take the file's islands), as TPAR_TOPO_FILE gives it, without
// touching the environment, which is read once per process: `tpar doctor` checks the
// hierarchical kernel on a fixture with islands next to the machine's own topology.
tparResult_t commInitAllWithTopologyFile(tparComm_t* comms, int ndev, const int* devlist,
                                         const tparConfig_t* config, const std::string& topo_file);

}  // namespace tpar

#endif  // TPAR_API_INIT_INTERNAL_H_
