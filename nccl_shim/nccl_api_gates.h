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

// ncclGinBarrierCreateRequirement and its handle type appeared within 2.28: the build looks for
// the declaration in the headers (nccl_shim/CMakeLists.txt).
#if TPAR_NCCL_HAS_DEVICE_API && defined(TPAR_NCCL_DECLARES_GIN_BARRIER) && TPAR_NCCL_DECLARES_GIN_BARRIER
#define TPAR_NCCL_HAS_GIN_BARRIER 1
#else
#define TPAR_NCCL_HAS_GIN_BARRIER 0
#endif

// The argument list of a row without its parentheses: TPAR_NCCL_UNPAREN (a, b) is a, b.
#define TPAR_NCCL_UNPAREN(...) __VA_ARGS__

#endif  // TPAR_NCCL_SHIM_NCCL_API_GATES_H_
