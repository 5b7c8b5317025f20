#!/usr/bin/env python3
"""torch.distributed.all_reduce latency, with libtpar_nccl.so or without it.

One run per configuration, one process per GPU:
    torchrun --nproc-per-node 2 nccl_shim/tests/torch_shim_bench.py --label nccl --json nccl.json
    LD_PRELOAD=build/nccl_shim/libtpar_nccl.so torchrun --nproc-per-node 2 \\
        nccl_shim/tests/torch_shim_bench.py --label shim --shim build/nccl_shim/libtpar_nccl.so \\
        --json shim.json
then the comparison (no GPU needed):
    nccl_shim/tests/torch_shim_bench.py --merge nccl.json shim.json -o shim-bench.json

Each size (bf16 sum by default): the result checked once against a float64 reference, then
timed as a CUDA graph of --iters in-place all-reduces replayed --reps times (time per call =
replay time / iters), and eagerly (--iters calls issued from Python between two events); the
slowest rank's time is reported. With --shim the route the shim gave the size is recorded.
The JSON names the GPU, the driver, the commit, the command line and the relevant environment.
The merge prints both runs side by side with shim/NCCL ratios and marks sizes where the shim
is more than 2 % slower in graph mode.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from shim_py_common import ShimCounters, parse_size, route_of


def sizes_from(args):
    if args.sizes:
        return [parse_size(s) for s in args.sizes.split(",")]
    out, s = [], parse_size(args.begin)
    while s <= parse_size(args.end):
        out.append(s)
        s *= 2
    return out


def driver_version():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.split()
        return out[0] if out else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def commit_id(given):
    if given:
        return given
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=here,
                              capture_output=True, text=True, timeout=30).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run(args):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
    import torch
    import torch.distributed as dist

    rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    counters = ShimCounters(args.shim) if args.shim else None
    dist.init_process_group("nccl", device_id=device)
    world = dist.get_world_size()
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[args.dtype]
    esize = torch.tensor([], dtype=dtype).element_size()
    rows = []

    def slowest(us):
        t = torch.tensor([us], device=device, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    for nbytes in sizes_from(args):
        count = max(1, nbytes // esize)
        buf = torch.empty(count, dtype=dtype, device=device)
        # Small integers: the sum over up to 16 ranks is exact in every dtype and order.
        buf.fill_(float(rank % 4 + 1))
        want = float(sum(r % 4 + 1 for r in range(world)))
        before = counters.calls() if counters else None
        dist.all_reduce(buf)
        torch.cuda.synchronize()
        route = route_of(before, counters.calls()) if counters else None
        wrong = int((buf.float() != want).sum().item())
        # Graph timing (values stop mattering: in place, they keep growing).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            dist.all_reduce(buf)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=side):
            for _ in range(args.iters):
                dist.all_reduce(buf)
        g.replay()
        torch.cuda.synchronize()
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.reps):
            g.replay()
        end.record()
        torch.cuda.synchronize()
        graph_us = slowest(start.elapsed_time(end) * 1000.0 / (args.iters * args.reps))
        del g
        # Eager timing: the host issues every call.
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        for _ in range(args.iters * args.reps):
            dist.all_reduce(buf)
        end.record()
        torch.cuda.synchronize()
        eager_us = slowest(start.elapsed_time(end) * 1000.0 / (args.iters * args.reps))
        row = {"bytes": count * esize, "count": count, "dtype": args.dtype, "graph_us": graph_us,
               "eager_us": eager_us, "wrong": wrong}
        if route is not None:
            row["route"] = route
        rows.append(row)
        if rank == 0:
            print(f"{args.label:10s} {row['bytes']:>10d} B  graph {graph_us:9.2f} us  "
                  f"eager {eager_us:9.2f} us  {wrong} wrong  {route or ''}", flush=True)
        del buf
    if rank == 0 and args.json:
        env = {k: v for k, v in os.environ.items()
               if k.startswith(("TPAR_", "NCCL_", "TORCH_NCCL", "CUDA_VISIBLE")) or k == "LD_PRELOAD"}
        with open(args.json, "w") as f:
            json.dump({"tool": "torch_shim_bench", "label": args.label, "torch": torch.__version__,
                       "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                       "gpu": torch.cuda.get_device_name(device), "driver": driver_version(),
                       "commit": commit_id(args.commit), "ranks": world,
                       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "command": " ".join([sys.executable] + sys.argv), "env": env,
                       "iters": args.iters, "reps": args.reps, "rows": rows}, f, indent=1)
    dist.destroy_process_group()
    return 0 if all(r["wrong"] == 0 for r in rows) else 1


def merge(args):
    runs = []
    for path in args.merge:
        with open(path) as f:
            runs.append(json.load(f))
    base = runs[0]
    by_size = [{r["bytes"]: r for r in run["rows"]} for run in runs]
    header = f"{'bytes':>10s}" + "".join(
        f"  {run['label'] + ' graph':>16s} {run['label'] + ' eager':>16s}" for run in runs)
    ratios = "".join(f"  {run['label'] + '/' + base['label']:>14s}" for run in runs[1:])
    print(f"# {base['gpu']}, {base['ranks']} ranks, driver {base['driver']}, commit {base['commit']}")
    print(header + ratios + "  (graph-mode ratios; '!' marks > 2 % slower)")
    rows, slower = [], []
    for nbytes in sorted(by_size[0]):
        line = f"{nbytes:>10d}"
        row = {"bytes": nbytes}
        for run, sizes in zip(runs, by_size):
            r = sizes.get(nbytes)
            if r is None:
                line += f"  {'-':>16s} {'-':>16s}"
                continue
            line += f"  {r['graph_us']:16.2f} {r['eager_us']:16.2f}"
            row[run["label"]] = r
        for run, sizes in zip(runs[1:], by_size[1:]):
            r, b = sizes.get(nbytes), by_size[0][nbytes]
            if r is None:
                continue
            ratio = r["graph_us"] / b["graph_us"]
            row[f"ratio_{run['label']}"] = ratio
            mark = "!" if ratio > 1.02 else " "
            if ratio > 1.02:
                slower.append(f"{run['label']} at {nbytes} B: {ratio:.3f}x ({r.get('route', '?')})")
            line += f"  {ratio:13.3f}{mark}"
        rows.append(row)
        print(line)
    print("slower than " + base["label"] + " by more than 2 %: " + ("; ".join(slower) or "none"))
    with open(args.output, "w") as f:
        json.dump({"tool": "torch_shim_bench --merge", "runs": runs, "rows": rows,
                   "slower_than_base": slower, "command": " ".join([sys.executable] + sys.argv)},
                  f, indent=1)
    return 0


def merge_model(args):
    """Two records of `tpar.check model`: the first with PyTorch's NCCL, the second with
    libtpar_nccl.so preloaded. The model step timed on torch.distributed (its nccl column) is
    compared: the shim must not make it slower by more than 2 %."""
    runs = []
    for path in args.merge_model:
        with open(path) as f:
            runs.append(json.load(f))
    base, shim = runs
    print(f"# {base['gpu']}, {base['ranks']} ranks, driver {base['driver']}, commit {base['commit']}"
          f"; model {base['config']}")
    print(f"{'tokens':>6s} {'AR bytes':>9s} {'nccl step us':>13s} {'shim step us':>13s} "
          f"{'shim/nccl':>10s}  ('!' marks > 2 % slower)")
    rows, slower = [], []
    shim_by_tokens = {t["tokens"]: t for t in shim["timing"]}
    for b in base["timing"]:
        s = shim_by_tokens.get(b["tokens"])
        if s is None:
            continue
        ratio = s["nccl_step_us"] / b["nccl_step_us"]
        mark = "!" if ratio > 1.02 else " "
        if ratio > 1.02:
            slower.append(f"{b['tokens']} tokens: {ratio:.3f}x")
        rows.append({"tokens": b["tokens"], "all_reduce_bytes": b["all_reduce_bytes"],
                     "nccl_step_us": b["nccl_step_us"], "shim_step_us": s["nccl_step_us"],
                     "ratio": ratio})
        print(f"{b['tokens']:>6d} {b['all_reduce_bytes']:>9d} {b['nccl_step_us']:>13.1f} "
              f"{s['nccl_step_us']:>13.1f} {ratio:>9.3f}{mark}")
    checks_ok = all(r.get("passed") for r in runs)
    print("slower than NCCL by more than 2 %: " + ("; ".join(slower) or "none")
          + ("" if checks_ok else "; a run's correctness checks FAILED"))
    with open(args.output, "w") as f:
        json.dump({"tool": "torch_shim_bench --merge-model", "runs": runs, "rows": rows,
                   "slower_than_base": slower, "checks_passed": checks_ok,
                   "command": " ".join([sys.executable] + sys.argv)}, f, indent=1)
    return 0 if checks_ok and rows else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="run", help="name of this configuration in the JSON")
    ap.add_argument("--shim", default="", help="libtpar_nccl.so, when preloaded: record routes")
    ap.add_argument("-b", "--begin", default="1K")
    ap.add_argument("-e", "--end", default="64M")
    ap.add_argument("--sizes", default="", help="comma-separated sizes instead of -b/-e")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--iters", type=int, default=20, help="calls per captured graph")
    ap.add_argument("--reps", type=int, default=20, help="graph replays timed")
    ap.add_argument("--commit", default=os.environ.get("TPAR_COMMIT", ""))
    ap.add_argument("--json", default="", help="where to write this run")
    ap.add_argument("--merge", nargs="+", help="JSON files of runs; the first is the baseline")
    ap.add_argument("--merge-model", nargs=2, metavar=("NCCL_JSON", "SHIM_JSON"),
                    help="two records of `tpar.check model`, without and with the shim preloaded")
    ap.add_argument("-o", "--output", default="shim-bench.json", help="merged JSON (--merge)")
    args = ap.parse_args()
    if args.merge_model:
        return merge_model(args)
    return merge(args) if args.merge else run(args)


if __name__ == "__main__":
    sys.exit(main())
