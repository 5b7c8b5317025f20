/*
 * What libtpar_nccl.so (the NCCL drop-in, docs/nccl_shim.md) adds to NCCL's API: counters that
 * show where all-reduces went, and the route a call would take. Find the functions with dlsym
 * (they exist only when the shim is the process's NCCL), e.g. from Python:
 *   lib = ctypes.CDLL("libtpar_nccl.so")   # the copy already loaded
 *   lib.tparShimGetStats(None, ctypes.byref(stats))
 */
#ifndef TPAR_NCCL_SHIM_H_
#define TPAR_NCCL_SHIM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where an ncclAllReduce went: tpar, or NCCL for the reason named. */
typedef enum {
  tparShimRouteTpar = 0,
  tparShimRouteDisabled = 1,   /* TPAR_SHIM_DISABLE=1 */
  tparShimRouteInGroup = 2,    /* inside ncclGroupStart/ncclGroupEnd */
  tparShimRouteNoTparComm = 3, /* the communicator has no tpar communicator (see the log) */
  tparShimRouteDatatype = 4,   /* not float16, bfloat16 or float32 */
  tparShimRouteOp = 5,         /* not sum, max or min */
  tparShimRouteEmpty = 6,      /* count 0 */
  tparShimRouteTooLarge = 7,   /* above TPAR_SHIM_MAX_BYTES */
  tparShimRouteTunedNccl = 8,  /* tpar's tuning table gives the size to NCCL */
  tparShimNumRoutes = 9
} tparShimRoute_t;

typedef struct {
  /* All-reduces by route, counted when issued (a call captured into a CUDA graph counts once,
   * however often the graph replays). */
  uint64_t calls[tparShimNumRoutes];
  uint64_t commsWithTpar;    /* communicators created with a tpar communicator */
  uint64_t commsPassThrough; /* communicators created without one */
} tparShimStats_t;

/* Counters of one communicator (an ncclComm_t made through the shim and not yet destroyed), or
 * with comm NULL of the whole process since the shim was loaded. 0 on success; -1 when `out`
 * is NULL or `comm` is unknown. */
int tparShimGetStats(void* comm, tparShimStats_t* out);

/* "tpar", "disabled", "in-group", "no-tpar-comm", "datatype", "op", "empty", "too-large",
 * "tuned-nccl"; "unknown" otherwise. */
const char* tparShimRouteName(int route);

/* The route an ncclAllReduce of `count` elements of `datatype` (ncclDataType_t) with `op`
 * (ncclRedOp_t) on `comm` would take if this thread issued it now. Counts nothing. */
int tparShimQueryRoute(void* comm, size_t count, int datatype, int op);

/* The real NCCL the shim forwards to: its file, or NULL when none was found (then
 * ncclGetLastError(NULL) says what was tried). Loads it if needed. */
const char* tparShimNcclPath(void);

/* For tpar itself (NOTE [shim recursion]): the real NCCL's dlopen handle with *path set to its
 * file, or NULL with *path set to why there is none. */
void* tparShimRealNccl(const char** path);

#ifdef __cplusplus
}
#endif

#endif /* TPAR_NCCL_SHIM_H_ */
