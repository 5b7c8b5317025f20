#!/usr/bin/env python3
"""PyTorch's NCCL process group, unmodified, on libtpar_nccl.so.

Run one process per GPU with the shim preloaded:
    LD_PRELOAD=build/nccl_shim/libtpar_nccl.so torchrun --nproc-per-node 2 \\
        nccl_shim/tests/torch_shim_check.py --shim build/nccl_shim/libtpar_nccl.so

With one process (--nproc-per-node 1) the group has one rank, which tpar leaves to NCCL: every
call must then pass through the shim to the real NCCL and come back exact.

Checks, on every rank:
  * torch.distributed.all_reduce of bfloat16, float16 and float32 (sum; max and min for some
    sizes), 1 element to 64 MiB, eager and captured in a torch.cuda.graph (replayed with fresh
    inputs): every rank's output is bitwise equal to rank 0's and within tolerance of a float64
    reference; where tpar ran it, bitwise equal to the fp32 sum in rank order rounded once;
  * the shim's counters (tparShimGetStats): which route each call took. Calls up to
    TPAR_SHIM_MAX_BYTES (default 8 MiB) must go to tpar (or to NCCL where a tuning table says
    so: TPAR_TUNING_FILE), larger ones to NCCL; avg and int32 go to NCCL;
  * all_gather_into_tensor, reduce_scatter_tensor, broadcast and barrier still give exact results.
With --disabled (TPAR_SHIM_DISABLE=1 set) every call must go to NCCL unnoticed by the counters.
Prints one line per check and "torch_shim_check: PASS ..." or "... FAIL ..."; exit status 1 on a
failure. --json writes every check.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from shim_py_common import ROUTES, ShimCounters, parse_size, route_of  # noqa: E402


def make_inputs(world, count, dtype, device, seed):
    """Every rank's input, made on every rank from the same seeds."""
    out = []
    for r in range(world):
        g = torch.Generator(device=device)
        g.manual_seed(seed * 131 + r)
        out.append(torch.randn(count, generator=g, device=device, dtype=torch.float32).to(dtype))
    return out


def references(inputs, op):
    """(rank-order fp32 result rounded once, float64 result)."""
    dtype = inputs[0].dtype
    acc = inputs[0].float()
    ref64 = inputs[0].double()
    for t in inputs[1:]:
        if op == "sum":
            acc = acc + t.float()
            ref64 = ref64 + t.double()
        elif op == "max":
            acc = torch.maximum(acc, t.float())
            ref64 = torch.maximum(ref64, t.double())
        else:
            acc = torch.minimum(acc, t.float())
            ref64 = torch.minimum(ref64, t.double())
    return acc.to(dtype), ref64


def tolerance(dtype, world):
    eps = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}[dtype]
    return eps * (world + 1)


def same_bits(a, b):
    view = torch.int16 if a.element_size() == 2 else torch.int32
    return torch.equal(a.view(view), b.view(view))


class Checker:
    def __init__(self, args, shim, rank, world, device):
        self.args, self.shim, self.rank, self.world, self.device = args, shim, rank, world, device
        self.rows, self.failures = [], []
        self.limit = parse_size(os.environ.get("TPAR_SHIM_MAX_BYTES", "8M"))
        self.tuned = bool(os.environ.get("TPAR_TUNING_FILE"))

    def record(self, row, problems):
        row["ok"] = not problems
        if problems:
            row["problems"] = problems
            self.failures.append(f"{row['what']}: {'; '.join(problems)}")
        self.rows.append(row)
        if self.rank == 0:
            extra = "" if not problems else "  <-- " + "; ".join(problems)
            print(f"{row['what']:48s} route {row.get('route', '-'):12s}{extra}", flush=True)

    def expected_route(self, nbytes, dtype, op):
        if self.args.disabled:
            return {"none"}
        if self.world == 1:  # a group of one rank gets no tpar communicator: all of it is NCCL's
            return {"no-tpar-comm"}
        if op == "avg" or dtype not in (torch.bfloat16, torch.float16, torch.float32):
            return {"op" if op == "avg" else "datatype"}
        if nbytes > self.limit:
            return {"too-large"}
        return {"tpar", "tuned-nccl"} if self.tuned else {"tpar"}

    def all_reduce(self, dtype, count, op, graph, seed):
        nbytes = count * torch.tensor([], dtype=dtype).element_size()
        what = f"all_reduce {str(dtype)[6:]:8s} {op:3s} {nbytes:>10d} B {'graph' if graph else 'eager'}"
        inputs = make_inputs(self.world, count, dtype, self.device, seed)
        rank_order, ref64 = references(inputs, op)
        red = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op]
        t = torch.full((count,), float("nan"), dtype=dtype, device=self.device)
        before = self.shim.calls() if self.shim else None
        if graph:
            t.copy_(inputs[self.rank])
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=side):
                dist.all_reduce(t, op=red)
            after = self.shim.calls() if self.shim else None
            # Replay with fresh inputs: the graph must compute, not repeat a captured result.
            inputs = make_inputs(self.world, count, dtype, self.device, seed + 1000)
            rank_order, ref64 = references(inputs, op)
            t.copy_(inputs[self.rank])
            g.replay()
        else:
            t.copy_(inputs[self.rank])
            dist.all_reduce(t, op=red)
            after = self.shim.calls() if self.shim else None
        torch.cuda.synchronize()
        row = {"what": what, "dtype": str(dtype), "bytes": nbytes, "op": op, "graph": graph}
        problems = []
        if self.shim:
            row["route"] = route_of(before, after)
            if row["route"] not in self.expected_route(nbytes, dtype, op):
                problems.append(f"route {row['route']}, expected {sorted(self.expected_route(nbytes, dtype, op))}")
        first = t.clone()
        dist.broadcast(first, src=0)
        if not same_bits(t, first):
            problems.append("differs from rank 0's bits")
        if torch.isnan(t.float()).any():
            problems.append("NaN in the output")
        err = (t.double() - ref64).abs() / ref64.abs().clamp_min(1.0)
        row["max_rel_err"] = float(err.max())
        if row["max_rel_err"] > tolerance(dtype, self.world):
            problems.append(f"error {row['max_rel_err']:.3g} above tolerance")
        if row.get("route") == "tpar" and not same_bits(t, rank_order):
            problems.append("not the fp32 rank-order result tpar computes")
        if self.world == 1 and not same_bits(t, inputs[0]):
            problems.append("a one-rank all-reduce must return its input bit for bit")
        self.record(row, problems)

    def nccl_only(self, what, fn):
        """A collective that is not tpar's, or an op/datatype tpar leaves to NCCL."""
        before = self.shim.calls() if self.shim else None
        problems = fn()
        torch.cuda.synchronize()
        row = {"what": what}
        if self.shim:
            after = self.shim.calls()
            row["route"] = route_of(before, after)
        self.record(row, problems)


def other_collectives(c, world, rank, device):
    def gather():
        mine = torch.arange(1000, device=device, dtype=torch.float32) + 1000 * rank
        out = torch.empty(1000 * world, device=device, dtype=torch.float32)
        dist.all_gather_into_tensor(out, mine)
        want = torch.cat([torch.arange(1000, device=device, dtype=torch.float32) + 1000 * r
                          for r in range(world)])
        return [] if torch.equal(out, want) else ["wrong all_gather result"]

    def scatter():
        inp = torch.arange(1000 * world, device=device, dtype=torch.float32) * (rank + 1)
        out = torch.empty(1000, device=device, dtype=torch.float32)
        dist.reduce_scatter_tensor(out, inp)
        scale = world * (world + 1) // 2
        want = torch.arange(1000 * rank, 1000 * (rank + 1), device=device, dtype=torch.float32) * scale
        return [] if torch.equal(out, want) else ["wrong reduce_scatter result"]

    def bcast():
        t = torch.full((4097,), float(rank + 5), device=device, dtype=torch.bfloat16)
        dist.broadcast(t, src=world - 1)
        return [] if bool((t == float(world + 4)).all()) else ["wrong broadcast result"]

    def barrier():
        dist.barrier()
        return []

    def avg():
        t = torch.full((1000,), float(2 * rank), device=device, dtype=torch.float32)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        return [] if bool((t == float(world - 1)).all()) else ["wrong avg result"]

    def int_sum():
        t = torch.arange(1000, device=device, dtype=torch.int32) * (rank + 1)
        dist.all_reduce(t)
        want = torch.arange(1000, device=device, dtype=torch.int32) * (world * (world + 1) // 2)
        return [] if torch.equal(t, want) else ["wrong int32 sum"]

    c.nccl_only("all_gather_into_tensor", gather)
    c.nccl_only("reduce_scatter_tensor", scatter)
    c.nccl_only("broadcast", bcast)
    c.nccl_only("barrier", barrier)
    c.nccl_only("all_reduce avg (NCCL's)", avg)
    c.nccl_only("all_reduce int32 sum (NCCL's)", int_sum)
    for row in c.rows[-2:]:
        want = {"all_reduce avg (NCCL's)": "op", "all_reduce int32 sum (NCCL's)": "datatype"}
        expected = ("none" if c.args.disabled else "no-tpar-comm" if world == 1
                    else want[row["what"]])
        if "route" in row and row["route"] != expected:
            row["ok"] = False
            c.failures.append(f"{row['what']}: route {row['route']}, expected {expected}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shim", required=True, help="path of libtpar_nccl.so (also in LD_PRELOAD)")
    ap.add_argument("--sizes", default="2,1K,4K,12K,64K,256K,1M,4M,8M,16M,64M",
                    help="message sizes in bytes; each is also run at one element")
    ap.add_argument("--disabled", action="store_true", help="TPAR_SHIM_DISABLE=1 is set")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    if args.shim not in os.environ.get("LD_PRELOAD", ""):
        print("torch_shim_check: LD_PRELOAD does not name the shim", file=sys.stderr)
        return 2
    shim = ShimCounters(args.shim)
    dist.init_process_group("nccl", device_id=device)
    world = dist.get_world_size()
    c = Checker(args, shim, rank, world, device)
    if rank == 0:
        print(f"# torch {torch.__version__}, NCCL {torch.cuda.nccl.version()} reported through the "
              f"shim, real NCCL {shim.nccl_path()}, {world} ranks on {torch.cuda.get_device_name(device)}",
              flush=True)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    seed = 1
    for graph in (False, True):
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            esize = torch.tensor([], dtype=dtype).element_size()
            counts = sorted({1} | {max(1, s // esize) for s in sizes})
            for count in counts:
                ops = ["sum"] + (["max", "min"] if count in (1, 4096 // esize, (1 << 20) // esize) else [])
                for op in ops:
                    seed += 1
                    c.all_reduce(dtype, count, op, graph, seed)
    other_collectives(c, world, rank, device)
    calls, with_tpar, passing = shim.read()
    summary = {ROUTES[i]: calls[i] for i in range(len(ROUTES)) if calls[i]}
    if not args.disabled and world > 1 and calls[0] == 0:
        c.failures.append("no all-reduce went through tpar")
    if not args.disabled and world > 1 and with_tpar == 0:
        c.failures.append("no communicator got a tpar communicator (run with TPAR_DEBUG=info)")
    if not args.disabled and world == 1 and (with_tpar or not passing or calls[0]):
        c.failures.append("a group of one rank must pass through to NCCL, every call of it")
    if args.disabled and (sum(calls) or with_tpar or passing):
        c.failures.append("TPAR_SHIM_DISABLE=1, yet the shim counted calls or communicators")
    failed = torch.tensor([len(c.failures)], device=device)
    dist.all_reduce(failed)
    verdict = "PASS" if int(failed.item()) == 0 else "FAIL"
    if rank == 0:
        print(f"# counters on rank 0: {summary}; communicators with tpar {with_tpar}, "
              f"passing through {passing}")
        for f in c.failures:
            print("FAILED:", f)
        print(f"torch_shim_check: {verdict} ({len(c.rows)} checks on {world} ranks, "
              f"{int(failed.item())} failures on all ranks)", flush=True)
    elif c.failures:
        for f in c.failures:
            print(f"FAILED on rank {rank}:", f, flush=True)
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"tool": "torch_shim_check", "verdict": verdict, "torch": torch.__version__,
                       "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                       "real_nccl": shim.nccl_path(), "gpu": torch.cuda.get_device_name(device),
                       "ranks": world, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "command": " ".join(sys.argv), "counters": summary, "rows": c.rows,
                       "failures": c.failures}, f, indent=1)
    dist.destroy_process_group()
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
