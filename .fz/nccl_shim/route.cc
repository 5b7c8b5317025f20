#include "route.h"

#include <nccl.h>

namespace tpar {
namespace shim {

const char* routeName(Route route) {
  switch (route) {
    case Route::kTpar: return "tpar";
    case Route::kDisabled: return "disabled";
    case Route::kInGroup: return "in-group";
    case Route::kNoTparComm: return "no-tpar-comm";
    case Route::kDatatype: return "datatype";
    case Route::kOp: return "op";
    case Route::kEmpty: return "empty";
    case Route::kTooLarge: return "too-large";
    case Route::kTunedNccl: return "tuned-nccl";
    default: return "unknown";
  }
}

bool tparDataTypeOfNccl(int nccl_datatype, tparDataType_t* out) {
  switch (nccl_datatype) {
    case ncclFloat16: *out = tparFloat16; return true;
    case ncclBfloat16: *out = tparBfloat16; return true;
    case ncclFloat32: *out = tparFloat32; return true;
    default: return false;
  }
}

bool tparRedOpOfNccl(int nccl_op, tparRedOp_t* out) {
  switch (nccl_op) {
    case ncclSum: *out = tparSum; return true;
    case ncclMax: *out = tparMax; return true;
    case ncclMin: *out = tparMin; return true;
    default: return false;
  }
}

}  // namespace shim
}  // namespace tpar
