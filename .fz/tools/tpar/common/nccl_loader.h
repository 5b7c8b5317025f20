// NCCL, loaded at run time: the CLI compares against whatever NCCL the machine has (the one a
// serving engine would use), and still runs where there is none. The loader is the library's
// (comm/nccl_route.h, through api/internal.h), so that the command and tparCommSetNcclComm load
// the same copy.
#ifndef TPAR_TOOLS_NCCL_LOADER_H_
#define TPAR_TOOLS_NCCL_LOADER_H_

#include "api/internal.h"

namespace tpar_cli {

using tpar::kNcclBfloat16;
using tpar::kNcclFloat16;
using tpar::kNcclFloat32;
using tpar::kNcclMax;
using tpar::kNcclMin;
using tpar::kNcclSum;
using tpar::loadNccl;
using tpar::NcclComm;
using tpar::NcclDataType;
using tpar::NcclLib;
using tpar::NcclRedOp;
using tpar::NcclUniqueId;
using tpar::ncclVersionString;

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_NCCL_LOADER_H_
