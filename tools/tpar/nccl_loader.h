// NCCL, loaded at run time: the CLI compares against whatever NCCL the machine has (the one a
// serving engine would use), and still runs where there is none.
#ifndef TPAR_TOOLS_NCCL_LOADER_H_
#define TPAR_TOOLS_NCCL_LOADER_H_

#include <cstddef>
#include <string>

#include <cuda_runtime_api.h>

namespace tpar_cli {

// The few NCCL types used here, with NCCL's stable ABI values.
using NcclComm = struct ncclComm*;
struct NcclUniqueId {
  char internal[128];
};
enum NcclDataType { kNcclFloat16 = 6, kNcclFloat32 = 7, kNcclBfloat16 = 9 };
enum NcclRedOp { kNcclSum = 0 };

struct NcclLib {
  int (*getVersion)(int*) = nullptr;
  const char* (*getErrorString)(int) = nullptr;
  int (*getUniqueId)(NcclUniqueId*) = nullptr;
  int (*commInitAll)(NcclComm*, int, const int*) = nullptr;
  int (*commInitRank)(NcclComm*, int, NcclUniqueId, int) = nullptr;
  int (*commDestroy)(NcclComm) = nullptr;
  int (*commGetAsyncError)(NcclComm, int*) = nullptr;
  int (*allReduce)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  int (*groupStart)() = nullptr;
  int (*groupEnd)() = nullptr;
  int version = 0;       // e.g. 22809
  std::string path;      // the file that was loaded
};

// Loads NCCL once per process: $TPAR_NCCL_LIBRARY, then libnccl.so.2 on the loader's path,
// then the copies that CUDA and PyTorch installations carry. nullptr with `why` filled when
// none loads.
const NcclLib* loadNccl(std::string* why);

// "2.28.9" for 22809.
std::string ncclVersionString(int code);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_NCCL_LOADER_H_
