// Which rows of nccl_api.def the nccl.h at hand can express: a row whose types the header lacks
// would not compile. The build-time export check (check_exports.cmake) catches the opposite, a
// function the header declares that no row exports.
#ifndef TPAR_NCCL_SHIM_NCCL_API_GATES_H_
#define TPAR_NCCL_SHIM_NCCL_API_GATES_H_

#include <nccl.h>

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 11, 0)
#define TPAR_NCCL_HAS_PREMUL 1  // ncclScalarResidence_t
#else
#define TPAR_NCCL_HAS_PREMUL 0
#endif

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
#define TPAR_NCCL_HAS_CONFIG 1  // ncclConfig_t
#else
#define TPAR_NCCL_HAS_CONFIG 0
#endif

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 22, 0)
#define TPAR_NCCL_HAS_SIM_INFO 1  // ncclSimInfo_t
#else
#define TPAR_NCCL_HAS_SIM_INFO 0
#endif

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
#define TPAR_NCCL_HAS_WINDOW 1  // ncclWindow_t
#else
#define TPAR_NCCL_HAS_WINDOW 0
#endif

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0) && __has_include(<nccl_device.h>)
#include <nccl_device.h>
#define TPAR_NCCL_HAS_DEVICE_API 1  // ncclTeam_t, ncclDevComm_t, ...
#else
#define TPAR_NCCL_HAS_DEVICE_API 0
#endif

// A row for a function that arrived within a patch release is compiled only where the headers
// at hand declare it: nccl_shim/CMakeLists.txt defines TPAR_NCCL_DECLARES_<name> to 1 for each
// such row whose function the headers declare (the rest expand to 0).
#define TPAR_NCCL_DECLARES(name) TPAR_NCCL_DECLARES_##name

// NCCL's parameter API (ncclParamBind, ncclParamGet*, ...): exported from 2.30.3 on and declared
// by nccl.h from 2.30.4 on; 2.30.3 declares it in a header of its own (param/param/c_api.h) that
// nccl.h does not include. The shim declares the functions itself as NCCL does, so that a shim
// built against any 2.30 nccl.h forwards them (a C function may be declared twice alike).
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
#define TPAR_NCCL_HAS_PARAM_API 1
extern "C" {
ncclResult_t ncclParamBind(struct ncclParamHandle** out, const char* key);
ncclResult_t ncclParamGetI8(struct ncclParamHandle* h, int8_t* out);
ncclResult_t ncclParamGetI16(struct ncclParamHandle* h, int16_t* out);
ncclResult_t ncclParamGetI32(struct ncclParamHandle* h, int32_t* out);
ncclResult_t ncclParamGetI64(struct ncclParamHandle* h, int64_t* out);
ncclResult_t ncclParamGetU8(struct ncclParamHandle* h, uint8_t* out);
ncclResult_t ncclParamGetU16(struct ncclParamHandle* h, uint16_t* out);
ncclResult_t ncclParamGetU32(struct ncclParamHandle* h, uint32_t* out);
ncclResult_t ncclParamGetU64(struct ncclParamHandle* h, uint64_t* out);
ncclResult_t ncclParamGetStr(struct ncclParamHandle* h, const char** out);
ncclResult_t ncclParamGet(struct ncclParamHandle* h, void* out, int maxLen, int* len);
ncclResult_t ncclParamGetParameter(const char* key, const char** value, int* valueLen);
ncclResult_t ncclParamGetAllParameterKeys(const char*** table, int* tableLen);
void ncclParamDumpAll(void);
}
#else
#define TPAR_NCCL_HAS_PARAM_API 0
#endif

#if TPAR_NCCL_HAS_DEVICE_API
// Two functions NCCL exports from 2.29.7 on, as part of its API (each with its p-alias), that no
// header of its Linux packages declares (2.30 declares them in a header for Windows only). The
// shim forwards them like every other (NOTE [unknown NCCL functions] in real_nccl.h), declared
// here with the signature NCCL gives them where the headers lack them; the handles, reached only
// through the pointer, are left incomplete, which C passes alike.
#if TPAR_NCCL_DECLARES(ncclGinOutboxCreateRequirement)
typedef ncclGinOutboxHandle tparShimGinOutboxHandle;
#else
struct tparShimGinOutboxHandle;
extern "C" ncclResult_t ncclGinOutboxCreateRequirement(int nBlocks, int size_log2,
                                                       tparShimGinOutboxHandle* outHandle,
                                                       ncclDevResourceRequirements_t* outReq);
#endif
#if TPAR_NCCL_DECLARES(ncclGinInboxA2ACreateRequirement)
typedef ncclGinInboxA2AHandle tparShimGinInboxA2AHandle;
#else
struct tparShimGinInboxA2AHandle;
extern "C" ncclResult_t ncclGinInboxA2ACreateRequirement(ncclTeam_t peers, int nBlocks,
                                                         int size_log2,
                                                         tparShimGinInboxA2AHandle* outHandle,
                                                         ncclDevResourceRequirements_t* outReq);
#endif
#endif

// The argument list of a row without its parentheses: TPAR_NCCL_UNPAREN (a, b) is a, b.
#define TPAR_NCCL_UNPAREN(...) __VA_ARGS__

#endif  // TPAR_NCCL_SHIM_NCCL_API_GATES_H_
