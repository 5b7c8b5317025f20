#!/usr/bin/env python3
"""libtpar_nccl.so loaded by path, as vLLM's pynccl (VLLM_NCCL_SO_PATH) and SGLang
(SGLANG_NCCL_SO_PATH) load NCCL: ctypes.CDLL of the file in a process where PyTorch has loaded
its own NCCL already, then NCCL's C API called with tensors' pointers and the current stream.

    torchrun --nproc-per-node 2 nccl_shim/tests/pynccl_shim_check.py \\
        --shim build/nccl_shim/libtpar_nccl.so

Checks on every rank: the shim forwards to the NCCL PyTorch loaded (one NCCL per process);
ncclAllReduce of bfloat16 sums, eager and captured in a torch.cuda.graph (replayed with fresh
inputs), equals the fp32 sum in rank order rounded once, bitwise on every rank; the shim's
counters show tpar took the calls up to TPAR_SHIM_MAX_BYTES and NCCL the larger ones. Prints
"pynccl_shim_check: PASS" or "... FAIL"; exit status 1 on a failure.
"""
import argparse
import ctypes
import faulthandler
import gc
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402  (loads PyTorch's own NCCL)
import torch.distributed as dist  # noqa: E402

from shim_py_common import ShimCounters, parse_size, route_of  # noqa: E402

NCCL_BFLOAT16, NCCL_SUM = 9, 0


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def load(path):
    lib = ctypes.CDLL(path)  # RTLD_LOCAL, as the engines do
    lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId,
                                     ctypes.c_int]
    lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclGetLastError.argtypes = [ctypes.c_void_p]
    lib.ncclGetLastError.restype = ctypes.c_char_p
    return lib


def check(lib, rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: {lib.ncclGetErrorString(rc).decode()}: "
                           f"{(lib.ncclGetLastError(None) or b'').decode()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shim", required=True)
    ap.add_argument("--sizes", default="2,1024,12288,65536,1048576,16777216")
    args = ap.parse_args()
    # A hang prints every thread's stack (and the run's timeout ends it) instead of staying silent.
    faulthandler.dump_traceback_later(240, exit=True)
    rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    lib = load(args.shim)
    failures = []
    counters = ShimCounters(lib)
    real = counters.nccl_path() or ""
    loaded = [l.split()[-1] for l in open("/proc/self/maps") if "libnccl.so" in l]
    if not real or os.path.realpath(real) not in {os.path.realpath(p) for p in loaded}:
        failures.append(f"the shim forwards to {real!r}, not to the NCCL PyTorch loaded")

    uid = UniqueId()
    if rank == 0:
        check(lib, lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    box = [bytes(uid.internal)]
    dist.broadcast_object_list(box, src=0)
    ctypes.memmove(uid.internal, box[0], 128)
    comm = ctypes.c_void_p()
    check(lib, lib.ncclCommInitRank(ctypes.byref(comm), world, uid, rank), "ncclCommInitRank")

    limit = parse_size(os.environ.get("TPAR_SHIM_MAX_BYTES", "8M"))
    graphs = []  # every captured graph, destroyed before the communicator (below)
    for graph in (False, True):
        for nbytes in [int(s) for s in args.sizes.split(",")]:
            count = max(1, nbytes // 2)
            gens = []
            for r in range(world):
                g = torch.Generator(device=device)
                g.manual_seed(1000 * nbytes + r + (7 if graph else 0))
                gens.append(torch.randn(count, generator=g, device=device).to(torch.bfloat16))
            want = gens[0].float()
            for t in gens[1:]:
                want = want + t.float()
            want = want.to(torch.bfloat16)
            inp, out = gens[rank].clone(), torch.full_like(gens[rank], float("nan"))
            before = counters.calls()
            if graph:
                cg = torch.cuda.CUDAGraph()
                graphs.append(cg)
                with torch.cuda.graph(cg):
                    check(lib, lib.ncclAllReduce(inp.data_ptr(), out.data_ptr(), count,
                                                 NCCL_BFLOAT16, NCCL_SUM, comm,
                                                 torch.cuda.current_stream().cuda_stream),
                          "ncclAllReduce (capture)")
                cg.replay()
            else:
                check(lib, lib.ncclAllReduce(inp.data_ptr(), out.data_ptr(), count, NCCL_BFLOAT16,
                                             NCCL_SUM, comm, torch.cuda.current_stream().cuda_stream),
                      "ncclAllReduce")
            torch.cuda.synchronize()
            route = route_of(before, counters.calls())
            expected = "tpar" if count * 2 <= limit else "too-large"
            what = f"{'graph' if graph else 'eager'} {count * 2} B"
            if route != expected:
                failures.append(f"{what}: route {route}, expected {expected}")
            if not torch.equal(out.view(torch.int16), want.view(torch.int16)):
                failures.append(f"{what}: not the fp32 rank-order sum on rank {rank}")
            if rank == 0:
                print(f"{what:20s} route {route}", flush=True)
    if counters.read()[1] == 0:
        failures.append("the communicator got no tpar communicator (run with TPAR_DEBUG=info)")
    # NCCL's ncclCommDestroy waits until every CUDA graph that captured one of its calls is
    # destroyed (the sizes above the shim's limit went to NCCL inside a graph): release them
    # first, as an engine must with plain NCCL too.
    torch.cuda.synchronize()
    cg = None
    graphs.clear()
    gc.collect()
    check(lib, lib.ncclCommDestroy(comm), "ncclCommDestroy")
    for f in failures:
        print(f"FAILED on rank {rank}: {f}", flush=True)
    failed = torch.tensor([len(failures)])
    dist.all_reduce(failed)
    if rank == 0:
        verdict = "PASS" if int(failed.item()) == 0 else "FAIL"
        print(f"pynccl_shim_check: {verdict} (shim forwarding to {real}, {world} ranks, "
              f"{int(failed.item())} failures)", flush=True)
    dist.destroy_process_group()
    return 0 if int(failed.item()) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
