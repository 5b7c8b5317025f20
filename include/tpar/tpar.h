/*
 * tpar: all-reduce for tensor-parallel inference on PCIe-only and non-P2P GPU servers.
 *
 * The API is shaped like NCCL's so that its users know it: opaque communicators, one result
 * enum, a versioned config struct with an initializer macro, a per-thread last-error string and
 * a per-communicator asynchronous error.
 *
 * Thread safety: different communicators may be used from different threads concurrently. One
 * communicator must not be used by two threads at once.
 *
 * Streams and CUDA graphs: tparAllReduce only enqueues work on the caller's stream and may be
 * captured into a CUDA graph; a captured graph can be replayed any number of times with no host
 * work per replay. The caller's buffers never need registering.
 *
 * Ordering: the calls of one communicator must run one after another on the GPU, in the order
 * they were issued, and in the same order on every rank: issue them on one stream (or order
 * the streams you use with events, and replay graphs that contain them in issue order). Every
 * call counts an epoch that the next call builds on, so two calls of one communicator running
 * at the same time corrupt each other's receive slots. tpar cannot check this (a graph may be
 * replayed on any stream), so it is the caller's rule, like NCCL's.
 *
 * Agreement: tparCommInitRank exchanges every setting that shapes a call on the GPU
 * (TPAR_MAX_BLOCKS, TPAR_THREADS, the forced algorithm, TPAR_ONESHOT_MAX_BYTES, the tuning table
 * in use, maxBytesPerCall, TPAR_EPOCH_START) and fails with tparInvalidUsage, naming the
 * setting, when ranks differ; the grid is the largest every rank's GPU can host. Calls carry
 * their datatype, op, algorithm, count and NCCL attachment in a header that each rank checks.
 */
#ifndef TPAR_TPAR_H_
#define TPAR_TPAR_H_

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The one place the version is written: CMakeLists.txt (and through it tparConfigVersion.cmake,
 * tpar.pc, the soname) and pyproject.toml (the Python package) read these three lines. */
#define TPAR_MAJOR 0
#define TPAR_MINOR 1
#define TPAR_PATCH 0
#define TPAR_VERSION_CODE (TPAR_MAJOR * 10000 + TPAR_MINOR * 100 + TPAR_PATCH)

/* Marks the functions libtpar.so exports; the library is built with hidden visibility, so
 * nothing else leaves it. */
#ifndef TPAR_API
#if defined(__GNUC__) || defined(__clang__)
#define TPAR_API __attribute__((visibility("default")))
#else
#define TPAR_API
#endif
#endif

/* The largest number of ranks in one communicator. */
#define TPAR_MAX_RANKS 16

typedef enum {
  tparSuccess = 0,
  tparUnhandledCudaError = 1, /* a CUDA call failed; the last-error text names it */
  tparSystemError = 2,        /* an OS call failed (socket, memory, thread) */
  tparInternalError = 3,      /* a bug in tpar */
  tparInvalidArgument = 4,    /* a bad argument; the text names it; nothing was changed */
  tparInvalidUsage = 5,       /* a valid call at the wrong time, or ranks that disagree */
  tparRemoteError = 6,        /* a peer failed or aborted */
  tparInProgress = 7,         /* reserved for non-blocking initialization */
  tparTimeout = 8,            /* a wait exceeded the communicator's timeout */
  tparNumResults = 9
} tparResult_t;

typedef enum { tparFloat32 = 0, tparFloat16 = 1, tparBfloat16 = 2, tparNumDataTypes = 3 } tparDataType_t;

typedef enum { tparSum = 0, tparMax = 1, tparMin = 2, tparNumOps = 3 } tparRedOp_t;

/* Algorithms; tparAlgoAuto lets the communicator choose (tuning table, else built-in defaults).
 * Staged: two-shot whose pushes follow a rotation, one outbound and one inbound peer per rank
 * and step. Hierarchical: reduce inside each island of the topology, exchange partial sums
 * between islands, broadcast inside the island (needs equal-sized islands; otherwise two-shot).
 * The pull variants publish each rank's data once in its own receive region and let every peer
 * read it there: they win where reads cost less than writes, above all when the regions live in
 * host memory (one write serves every reader). Nccl: hand the call to the NCCL communicator
 * attached with tparCommSetNcclComm (auto does so only for sizes a tuning table measured
 * faster there). Pipelined: two-shot that moves plain data in steps, each step announced by a
 * flag line the receiver polls in its own region, so that reads and writes share the link;
 * made for receive regions in host memory, where auto uses it (publishing each piece once). TwoShotLL: two-shot whose
 * pushes carry the call's epoch in every 8 bytes, so that no flag or fence is needed: one
 * hand-off per phase at twice the bytes; auto uses it for small messages in host memory. */
typedef enum {
  tparAlgoAuto = 0,
  tparAlgoOneShot = 1,
  tparAlgoTwoShot = 2,
  tparAlgoStaged = 3,
  tparAlgoHierarchical = 4,
  tparAlgoOneShotPull = 5,
  tparAlgoTwoShotPull = 6,
  tparAlgoNccl = 7, /* the NCCL communicator given with tparCommSetNcclComm */
  tparAlgoPipelined = 8,
  tparAlgoTwoShotLL = 9,
  tparNumAlgos = 10
} tparAlgo_t;

/* Compressed wire formats for large all-reduces (docs/WIRE.md): opt-in, never the default. A
 * format sends each block of values (128 for FP8, 32 for INT8 and INT4) as one code per value and
 * one bf16 scale, accumulates in fp32, and gives every rank the same bits; it applies to float16
 * and bfloat16 calls of the pipelined schedule from the size where it was measured to win
 * (float32 calls stay lossless). */
typedef enum {
  tparWireNone = 0, /* lossless (the default) */
  tparWireFp8 = 1,  /* FP8 e4m3 codes */
  tparWireInt8 = 2, /* 8-bit integer codes */
  tparWireInt4 = 3, /* 4-bit integer codes */
  tparNumWires = 4
} tparWire_t;

/* How a communicator reaches its peers' receive regions. */
typedef enum {
  tparTransportSameDevice = 0, /* every rank on one GPU ("virtual ranks", tests) */
  tparTransportPeerAccess = 1, /* one process, several GPUs with CUDA peer access */
  tparTransportCudaIpc = 2,    /* several processes, CUDA IPC handles */
  tparTransportMixed = 3,      /* a mix of the above between different pairs */
  tparTransportHost = 4        /* receive regions in pinned host memory mapped into every GPU:
                                  no peer-to-peer needed (host-staged) */
} tparTransport_t;

typedef struct tparComm* tparComm_t;

#define TPAR_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[TPAR_UNIQUE_ID_BYTES];
} tparUniqueId;

/*
 * Versioned configuration. Always initialize with TPAR_CONFIG_INITIALIZER, then set the fields
 * you care about; a field left at its initializer value takes the environment variable (see
 * docs/env.md) or the built-in default.
 */
typedef struct {
  size_t size;      /* sizeof(tparConfig_t), set by the initializer */
  uint32_t magic;   /* set by the initializer */
  uint32_t version; /* TPAR_VERSION_CODE, set by the initializer */
  /* Largest message one kernel launch handles; larger calls are split into pieces of this size
   * (a call with a compressed wire format is one launch while its codes and scales fit this many
   * bytes, docs/WIRE.md). The receive workspace is sized from it, fixed at init: 4 x this in GPU
   * memory; 8 x in pinned host memory with the host transport, and in GPU memory with 3 or more
   * ranks all on one GPU in one process. 0 = default (8 MiB). */
  size_t maxBytesPerCall;
  /* Bound on every wait inside a collective, in milliseconds, at most 86400000 (24 hours).
   * 0 = default (TPAR_TIMEOUT_MS). */
  int64_t timeoutMs;
  /* Force an algorithm for every call; tparAlgoAuto (default) chooses by size. -1 = env. */
  int algorithm;
  /* 1: several ranks may share one GPU ("virtual ranks", for tests); 0: refuse; -1 = env. */
  int allowSharedDevice;
  /* Where receive regions live. 0: auto (GPU memory with peer access or CUDA IPC; pinned host
   * memory when some pair of GPUs cannot reach each other peer-to-peer); 1: always pinned host
   * memory (tparTransportHost); 2: always GPU memory (fail when P2P is missing); -1 = env
   * TPAR_TRANSPORT. Every rank must pass the same value. */
  int transport;
  /* Compressed wire format (tparWire_t) for large float16/bfloat16 calls; tparWireNone keeps
   * every call lossless; -1 = env TPAR_WIRE. Every rank must pass the same value. */
  int wire;
} tparConfig_t;

#define TPAR_CONFIG_MAGIC 0x74706172u /* "tpar" */
#define TPAR_CONFIG_UNDEF_INT (-1)
#define TPAR_CONFIG_INITIALIZER                                                         \
  {                                                                                     \
    sizeof(tparConfig_t), TPAR_CONFIG_MAGIC, TPAR_VERSION_CODE, 0, 0, TPAR_CONFIG_UNDEF_INT, \
        TPAR_CONFIG_UNDEF_INT, TPAR_CONFIG_UNDEF_INT, TPAR_CONFIG_UNDEF_INT             \
  }

/* Static text for a result code. Never NULL. */
TPAR_API const char* tparGetErrorString(tparResult_t result);

/* Details of the last failure on this thread (or, with a non-NULL comm, on that communicator).
 * Never NULL; empty when nothing failed. */
TPAR_API const char* tparGetLastError(tparComm_t comm);

/* The library's version as TPAR_VERSION_CODE. */
TPAR_API tparResult_t tparGetVersion(int* version);

/*
 * Creates an id for tparCommInitRank. Call it on one process and pass the bytes to every rank
 * (any channel). It starts a rendezvous service on this process, reachable from processes of
 * this host, which ends once every rank has connected or after the bootstrap timeout.
 *
 * The id holds a random secret: whoever holds the id can join the group (as a rank that has
 * not arrived yet), so pass it only to the ranks. The service and each rank prove to each other
 * that they hold it without sending it; only processes of the user that called this function
 * may join, unless TPAR_BOOTSTRAP_ALLOW_OTHER_USERS=1 (docs/RELIABILITY.md, trust boundaries).
 */
TPAR_API tparResult_t tparGetUniqueId(tparUniqueId* uniqueId);

/*
 * Creates a communicator for `rank` of `nranks` on the current CUDA device. Collective: every
 * rank must call it, each with the same id. Blocks until all ranks have arrived (or the
 * bootstrap timeout passes). *comm is written only on success.
 */
TPAR_API tparResult_t tparCommInitRank(tparComm_t* comm, int nranks, tparUniqueId uniqueId, int rank);
TPAR_API tparResult_t tparCommInitRankConfig(tparComm_t* comm, int nranks, tparUniqueId uniqueId,
                                             int rank, const tparConfig_t* config);

/*
 * Creates `ndev` communicators in this process, rank i on CUDA device devlist[i] (devlist NULL:
 * devices 0..ndev-1). A device may appear more than once only when config->allowSharedDevice is
 * 1 (or TPAR_ALLOW_SHARED_DEVICE=1); those "virtual ranks" run as concurrent kernels on one GPU.
 * config may be NULL. comms[] is written only on success.
 *
 * One host thread driving several ranks launches each rank's kernel in turn: an eager call
 * (outside a CUDA graph) waits for all of those launches, so for latency run one process per
 * GPU (tparCommInitRank), as serving engines do, or capture the calls in a CUDA graph.
 *
 * Virtual ranks and other work. The all-reduce of one rank spins on the GPU until every other
 * rank of the call has arrived, holding its blocks, so one thread driving virtual ranks must
 * keep three rules:
 *  - Launch every rank's all-reduce of a call before any host call that can wait for the GPU:
 *    cudaMalloc/cudaFree, a synchronize, the first launch of a kernel that is not loaded yet
 *    (lazy module loading, the CUDA 12+ default), a library's first use of a shape (cuBLAS
 *    chooses and loads a kernel), a graph's first launch. Such a call made after rank 0's
 *    all-reduce and before rank 1's waits for rank 0, which waits for rank 1: a deadlock that
 *    the timeout reports as tparTimeout. Issue work phase by phase: the compute of every rank,
 *    then the all-reduce of every rank, as an NCCL group would.
 *  - Load your own kernels before the first all-reduce (launch each once, or
 *    cudaFuncGetAttributes, or CUDA_MODULE_LOADING=EAGER); tpar loads its own at init.
 *  - Kernels of yours on a virtual rank's stream run on the multiprocessors that the other
 *    ranks' waiting all-reduces leave free. tpar sizes the grid so that at least one stays
 *    free, enough for kernels whose blocks each fit one multiprocessor, but not for kernels
 *    launched in clusters (cuBLAS's GEMMs on Hopper and newer), which need several at once:
 *    behind such compute, hold each rank's all-reduce until every rank has finished its
 *    compute (an arrival gate, as `tpar verify` does), or lower TPAR_MAX_BLOCKS.
 * One process per GPU (tparCommInitRank) has none of these hazards: a call that waits for its
 * GPU waits only for work whose peers are launched by other processes, and a rank's own
 * compute precedes its all-reduce on its own GPU. Several processes on one GPU under MPS share
 * its multiprocessors as virtual ranks do.
 */
TPAR_API tparResult_t tparCommInitAll(tparComm_t* comms, int ndev, const int* devlist);
TPAR_API tparResult_t tparCommInitAllConfig(tparComm_t* comms, int ndev, const int* devlist,
                                            const tparConfig_t* config);

/* Waits for the communicator's outstanding work, then frees it. NULL is accepted (no-op). */
TPAR_API tparResult_t tparCommDestroy(tparComm_t comm);

/* Makes every kernel of this communicator that is still waiting give up at once (they record
 * tparRemoteError), waits for them, then frees the communicator. NULL is accepted (no-op).
 * The handle is invalid afterwards, whatever the result.
 *
 * It returns within the communicator's timeout even when the GPU stays busy: it can release
 * tpar's own kernels, but not other work, such as an ncclAllReduce routed through this
 * communicator that waits for a peer that never joins it, or a kernel of yours that never
 * ends. Then it returns tparTimeout, and the communicator's memory is freed later, once the GPU
 * is idle (tpar's kernels queued behind that work still need it). Abort a stuck NCCL call with
 * ncclCommAbort on its NCCL communicator. */
TPAR_API tparResult_t tparCommAbort(tparComm_t comm);

/* The first error recorded by this communicator's kernels (tparTimeout, tparInvalidUsage for
 * ranks that disagreed on a call, tparRemoteError after an abort), or tparSuccess. Reads host
 * memory only: it never blocks. After an asynchronous error the communicator only accepts
 * tparCommDestroy or tparCommAbort. */
TPAR_API tparResult_t tparCommGetAsyncError(tparComm_t comm, tparResult_t* asyncError);

/* How many all-reduce kernels this rank of the communicator has completed since its init, eager
 * launches and CUDA-graph replays alike, modulo 2^32 (tpar counts its kernels on the GPU; a
 * call usually launches one, none when it goes to NCCL, several when it is split). Kernels
 * still running are not counted. It reads 4 bytes of GPU memory through a stream of its own and
 * waits for that copy: not while any thread captures a stream in cudaStreamCaptureModeGlobal
 * (PyTorch's default), which forbids such a copy; call it between steps or before destroying
 * the communicator. */
TPAR_API tparResult_t tparCommGetKernelCount(tparComm_t comm, uint64_t* kernels);

TPAR_API tparResult_t tparCommCount(tparComm_t comm, int* count);
TPAR_API tparResult_t tparCommUserRank(tparComm_t comm, int* rank);
TPAR_API tparResult_t tparCommCuDevice(tparComm_t comm, int* device);

/*
 * Sums (or max/min) `count` elements of `sendbuff` over all ranks into `recvbuff` on every rank.
 * In place when sendbuff == recvbuff; otherwise the two ranges must not overlap. Both must be
 * device-accessible from the communicator's GPU and aligned to the element size. Every rank gets
 * bitwise-identical results: elements are accumulated in fp32 in rank order and rounded once.
 * Every rank must issue the same sequence of calls with the same count, datatype and op; a
 * mismatch is reported as tparInvalidUsage (asynchronously). count == 0 is a no-op.
 */
TPAR_API tparResult_t tparAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    tparDataType_t datatype, tparRedOp_t op, tparComm_t comm,
                                    cudaStream_t stream);

/*
 * Fused all-reduce + residual add + RMSNorm (docs/FUSED.md): for each of `tokens` rows of
 * `hidden` elements of `input` (datatype `datatype`), the sum over all ranks, as tparAllReduce
 * with tparSum gives it; then r = residual + sum (or the sum alone without a residual), written
 * to residual_out, or back into residual when residual_out is NULL; then
 * out = rmsnorm(r) * weight with `eps`:
 *   r = round(residual + sum) (added in fp32);  inv = 1 / sqrt(mean(r^2) + eps);
 *   out = round(round(r * inv) * weight)
 * in the order of the serving engines' add + RMSNorm kernels, so that the result is that of
 * tparAllReduce followed by their kernel. One kernel per call (larger calls split by whole
 * rows); every rank gets the same bits. The residual is the same on every rank, as tensor
 * parallelism keeps it: a row may be normalized by one rank for all (two-shot, docs/FUSED.md),
 * with that rank's residual; where `residual` is `input` each rank adds its own (and the ranks'
 * results differ). `hidden` is a multiple of 8 up to 16384. `input` may be
 * `residual`, `residual_out` or `out`, and `residual_out` may be `residual`; no other two
 * buffers may overlap. Without a residual, residual_out (if given) receives the plain sum. The
 * buffers are device memory of the communicator's GPU aligned to their elements (16 bytes is
 * faster). Every rank must issue the same sequence of calls with the same tokens, hidden and
 * datatype (a mismatch is reported as tparInvalidUsage, asynchronously). tokens == 0 is a no-op.
 */
/*
 * A quantized copy of the fused call's `out` for the next GEMM (docs/FUSED.md, "What a call
 * computes"), from the values `out` holds (rounded to the datatype); float16 and bfloat16 only.
 *  - Fp8PerToken: FP8 e4m3 (satfinite) with one fp32 scale per row, written to scale[tokens]:
 *    scale = max(max|y| / 448, 1 / (448 * 512)), q = e4m3(y / scale) (vLLM's per-token FP8).
 *  - Fp8Static:   FP8 e4m3 with the given per-tensor scale scale[0]: q = e4m3(y / scale).
 *  - Nvfp4:       e2m1 values, two per byte (the first in the low nibble), with an e4m3 scale
 *    per 16 values, s = e4m3(g * max|block| / 6), q = e2m1(y * g / s) (0 where s is 0), g the
 *    global scale given in scale[0]; the block scales go to block_scale in the layout of vLLM's
 *    scaled_fp4_quant (the swizzled 128 x 4 tiles: scale b of row t at
 *    ((((t/128 * ceil(hidden/64) + b/4) * 32 + t%32) * 4 + (t%128)/32) * 4) + b%4, rows padded
 *    to a multiple of 128; the padding is not written). hidden a multiple of 16.
 * quant_out holds tokens * hidden bytes (FP8) or tokens * hidden / 2 (NVFP4). With a
 * quantized output `out` may be NULL (then only the quantized copy is written).
 */
typedef enum {
  tparNormQuantNone = 0,
  tparNormQuantFp8PerToken = 1,
  tparNormQuantFp8Static = 2,
  tparNormQuantNvfp4 = 3,
  tparNumNormQuants = 4
} tparNormQuant_t;

typedef struct {
  size_t size;        /* sizeof(tparAddRmsNormArgs_t); TPAR_ADD_RMS_NORM_ARGS_INITIALIZER sets it */
  size_t tokens;      /* rows */
  size_t hidden;      /* elements per row */
  void* residual;     /* [tokens, hidden] read; updated in place unless residual_out; NULL: none */
  const void* weight; /* [hidden] */
  void* out;          /* [tokens, hidden] */
  float eps;
  void* residual_out; /* [tokens, hidden] receives r; NULL: r goes back into residual (if any) */
  int quant;          /* tparNormQuant_t: a quantized copy of out (above); tparNormQuantNone */
  void* quant_out;    /* the quantized values */
  float* scale;       /* per-token scales written [tokens], or the given scale [1] */
  void* block_scale;  /* Nvfp4: the e4m3 block scales (swizzled, see above) */
} tparAddRmsNormArgs_t;
#define TPAR_ADD_RMS_NORM_ARGS_INITIALIZER \
  {sizeof(tparAddRmsNormArgs_t), 0, 0, NULL, NULL, NULL, 1e-6f, NULL, 0, NULL, NULL, NULL}

TPAR_API tparResult_t tparAllReduceAddRmsNorm(const void* input, const tparAddRmsNormArgs_t* args,
                                              tparDataType_t datatype, tparComm_t comm,
                                              cudaStream_t stream);

/* What tparCommQuery reports. */
typedef struct {
  int rank;
  int nranks;
  int cudaDevice;
  tparTransport_t transport;
  size_t maxBytesPerCall;      /* one kernel launch handles at most this */
  size_t deviceMemoryBytes;    /* GPU memory this communicator holds, fixed at init */
  size_t hostMemoryBytes;      /* pinned host memory it holds */
  int64_t timeoutMs;
  int forcedAlgorithm;         /* tparAlgoAuto when the size picks */
  size_t oneShotMaxBytes;      /* every bfloat16 call up to this size runs a one-shot kernel
                                  (oneshot or oneshot-pull) under the plan this communicator
                                  follows (forced algorithm, tuning table, or the defaults of
                                  its transport and group); 0: not even the smallest; SIZE_MAX:
                                  every size */
  int blocksPerRank;           /* largest grid one call launches */
  int threadsPerBlock;
  int islands;                 /* groups of ranks with better links inside than between */
  int islandOfRank[TPAR_MAX_RANKS]; /* island index of each rank (islands in order of first rank) */
  char topologySignature[96];  /* keys tuning results; the same on every rank */
  int tuningTableLoaded;       /* 1 when a table measured by `tpar tune` is in use */
  int ncclAttached;            /* 1 when an NCCL communicator is attached (tparCommSetNcclComm) */
} tparCommInfo_t;

TPAR_API tparResult_t tparCommQuery(tparComm_t comm, tparCommInfo_t* info);

/*
 * Attaches an NCCL communicator (an ncclComm_t, passed as void* so that this header does not
 * need nccl.h) of the same ranks in the same order on the same GPUs, or detaches it (NULL).
 * Attaching is local to the rank (no other rank is asked); see below for what ranks that attach
 * differently get.
 * tpar does not own it: keep it alive while attached, and destroy (or abort) it yourself after
 * detaching it or destroying this communicator; tparCommAbort does not abort it.
 *
 * Calls are then routed to NCCL where a tuning table measured NCCL faster (without one
 * attached, those sizes use tpar's built-in choice), and every call when the algorithm is
 * forced to tparAlgoNccl (without one attached, such calls fail with tparInvalidUsage). A routed
 * call is one ncclAllReduce on the caller's stream, and may be captured into a CUDA graph like
 * any other; it follows NCCL's rules (accumulation order, no timeout) rather than tpar's.
 *
 * NCCL is loaded at run time (TPAR_NCCL_LIBRARY, else libnccl.so.2: the copy the process has
 * loaded already, if any); it must be the library that created ncclComm. Every rank must attach
 * (or detach) alike before its next tparAllReduce. Whether one is attached travels in the
 * header of every call that tpar's kernels run, so ranks that attached differently get
 * tparInvalidUsage from their next such call instead of a result. A call that one rank routes
 * to NCCL and another to tpar cannot be caught that way: the tpar side records tparTimeout
 * within the timeout, the NCCL side waits inside NCCL until its NCCL communicator is aborted
 * (ncclCommAbort); tparCommAbort still returns within the timeout (see there). When one thread drives several ranks (tparCommInitAll),
 * enclose the calls of all ranks in ncclGroupStart()/ncclGroupEnd(), as NCCL requires.
 *
 * Fails with tparInvalidArgument, naming the mismatch, when ncclComm is no usable NCCL
 * communicator or its rank count, rank or CUDA device differs from this communicator's, and
 * with tparInvalidUsage when NCCL cannot be loaded. On failure the previous attachment stays.
 */
TPAR_API tparResult_t tparCommSetNcclComm(tparComm_t comm, void* ncclComm);

/* The algorithm tparAllReduce would use for a bfloat16 message of `bytes` on this
 * communicator: tparAlgoNccl when the call goes to the attached NCCL communicator (or is forced
 * there and would fail for want of one). tparCommSelectAlgorithmForType with tparBfloat16. */
TPAR_API tparResult_t tparCommSelectAlgorithm(tparComm_t comm, size_t bytes, tparAlgo_t* algo);

/* The same for a message of `bytes` bytes of `datatype`: a tuning table has entries per
 * datatype, so the choice for float32 or float16 can differ from bfloat16's. Fails with
 * tparInvalidArgument, naming the argument and leaving *algo unchanged, when comm is NULL or
 * not a live communicator, datatype is no tparDataType_t, or algo is NULL. */
TPAR_API tparResult_t tparCommSelectAlgorithmForType(tparComm_t comm, size_t bytes,
                                                     tparDataType_t datatype, tparAlgo_t* algo);

/* Printable names for the enums; "unknown" for values out of range. */
TPAR_API const char* tparAlgoName(tparAlgo_t algo);
TPAR_API const char* tparTransportName(tparTransport_t transport);
TPAR_API const char* tparDataTypeName(tparDataType_t datatype);
TPAR_API const char* tparRedOpName(tparRedOp_t op);

#ifdef __cplusplus
}
#endif

#endif /* TPAR_TPAR_H_ */
