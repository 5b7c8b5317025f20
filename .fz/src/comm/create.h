// Creating communicators: the work behind tparCommInitRank(Config) and
// tparCommInitAll(Config), without the C API's logging and exception guard (src/api/init.cc).
#ifndef TPAR_COMM_CREATE_H_
#define TPAR_COMM_CREATE_H_

#include <string>

#include "tpar/tpar.h"

namespace tpar {

// One rank of a group that meets through `id` (bootstrap): four init rounds, after which every
// rank has mapped every peer and all ranks agree on every call's shape (NOTE [agreement]).
tparResult_t createComm(tparComm_t* out, int nranks, const tparUniqueId& id, int rank,
                        const tparConfig_t* config);

// `ndev` ranks of this process, rank i on devlist[i] (or GPU i). `topo_file`, when not empty,
// replaces TPAR_TOPO_FILE.
tparResult_t createComms(tparComm_t* comms, int ndev, const int* devlist,
                         const tparConfig_t* config, const std::string& topo_file = "");

}  // namespace tpar

#endif  // TPAR_COMM_CREATE_H_
