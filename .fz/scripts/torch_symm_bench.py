#!/usr/bin/env python3
"""All-reduce through PyTorch symmetric memory (one-shot and two-shot), for comparison with
`tpar bench` on the same machine.

Run one process per GPU:
    torchrun --nproc-per-node 8 scripts/torch_symm_bench.py --sizes 1K,4K,...,64M --json out.json

Each size: bf16 sum, the result checked once against the expected value, then timed as a CUDA
graph of --iters calls replayed --reps times (time per call = replay time / iters; the slowest
rank's time is reported, as tpar bench does). NVLink multicast stays off
(TORCH_SYMM_MEM_DISABLE_MULTICAST=1), so only the peer-pointer kernels run. Sizes a kernel
refuses (it raises) are recorded as skipped with the reason.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._symmetric_memory as symm_mem  # noqa: E402


def parse_size(text):
    units = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    num = t.rstrip("KMGB")
    return int(num) * units[t[len(num):].rstrip("B") or ""]


def time_graph(fn, iters, reps):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm up outside the graph
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    dist.barrier()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / (iters * reps)  # microseconds per call


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1K,4K,16K,64K,256K,1M,4M,16M,64M")
    ap.add_argument("--iters", type=int, default=20, help="calls per captured graph")
    ap.add_argument("--reps", type=int, default=10, help="graph replays timed")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    world = dist.get_world_size()
    group_name = dist.group.WORLD.group_name
    rows = []
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        count = max(1, size // 2)
        buf = symm_mem.empty(count, dtype=torch.bfloat16, device=device)
        symm_mem.rendezvous(buf, group_name)
        # Small integers: the bf16 sum over up to 16 ranks is exact whatever the order.
        fill = float(rank % 4 + 1)
        want = float(sum(r % 4 + 1 for r in range(world)))
        for algo in ("one_shot", "two_shot"):
            row = {"backend": "torch-symm:" + algo, "bytes": count * 2, "ranks": world}
            try:
                if algo == "one_shot":
                    def call():
                        return torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group_name)
                else:
                    def call():
                        return torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", group_name)
                buf.fill_(fill)
                torch.cuda.synchronize()
                dist.barrier()
                out = call()
                torch.cuda.synchronize()
                wrong = int((out.float() != want).sum().item())
                row["wrong"] = wrong
                # Timing: the in-place variant keeps summing into buf; values stop mattering.
                us = time_graph(call, args.iters, args.reps)
                t = torch.tensor([us], device=device)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                row["us"] = float(t.item())
            except Exception as e:  # a size or rank count the kernel does not support
                row["skipped"] = str(e).splitlines()[0][:200]
            rows.append(row)
            if rank == 0:
                if "skipped" in row:
                    print(f"{row['backend']:24s} {row['bytes']:>10d} skipped: {row['skipped']}")
                else:
                    print(f"{row['backend']:24s} {row['bytes']:>10d} {row['us']:10.2f} us "
                          f"{row['wrong']} wrong")
                sys.stdout.flush()
        del buf
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"tool": "torch_symm_bench", "torch": torch.__version__,
                       "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                       "gpu": torch.cuda.get_device_name(device), "ranks": world,
                       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "command": " ".join(sys.argv), "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
