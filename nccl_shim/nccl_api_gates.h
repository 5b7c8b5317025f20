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

// The argument list of a row without its parentheses: TPAR_NCCL_UNPAREN (a, b) is a, b.
#define TPAR_NCCL_UNPAREN(...) __VA_ARGS__

#endif  // TPAR_NCCL_SHIM_NCCL_API_GATES_H_
