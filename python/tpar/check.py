"""Checks and measurements of the Python path on real ranks (one process per GPU, torchrun):

    torchrun --nproc-per-node 2 -m tpar.check model    --json out.json   # tensor-parallel Llama
    torchrun --nproc-per-node 2 -m tpar.check overhead --json out.json   # host cost, graph us

`model` builds a Llama-architecture decoder from `transformers` with random weights from a fixed
seed, splits its attention and MLP column/row-parallel by hand (two all-reduces per layer, as
the engines do), and checks that the final hidden states are bitwise equal on every rank and
close to the unsplit model; then it times one decode step of 1, 8 and 64 tokens under CUDA
graphs with tpar, with torch.distributed (NCCL) and with no all-reduce at all (compute only).
With `--wire fp8 int8 int4` it also runs each compressed wire format (docs/WIRE.md) and reports
its relative error against the lossless path and fp32; its ranks must agree bit for bit. With
`--fused` it also runs the decoder as the engines' fusion passes do, each all-reduce and the
residual add + RMSNorm after it in one call (tpar.ops.all_reduce_add_rms_norm, docs/FUSED.md):
bitwise equal ranks, close to the unsplit model by the same bound, and timed beside the rest.
With more processes than GPUs the ranks share GPUs over gloo (World), without the NCCL rows.

`overhead` measures the CPU time an eager Communicator.all_reduce adds over the C call
(10,000 calls each, the stream held by an earlier kernel so that launches never wait for the
GPU), and the per-call time of CUDA-graph replays of torch.ops.tpar.all_reduce_, to compare
with `tpar bench` at the same sizes.

Rank 0 prints a table and writes the JSON record (GPU, driver, versions, command, results).
"""
from __future__ import annotations

import argparse
import json
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist

import tpar


# ---- the world ---------------------------------------------------------------------------

class World:
    """The ranks of torchrun. With more processes on a node than GPUs, ranks share GPUs
    (local rank modulo the GPU count: virtual ranks, as `tpar bench` runs them on one GPU); NCCL
    refuses two ranks on one GPU, so then the world is gloo only and the NCCL rows are left out
    (`shared_gpu` in the record)."""

    def __init__(self):
        if "LOCAL_RANK" not in os.environ:
            raise SystemExit("run under torchrun: torchrun --nproc-per-node N -m tpar.check ...")
        self.rank = int(os.environ["RANK"])
        self.size = int(os.environ["WORLD_SIZE"])
        self.local = int(os.environ["LOCAL_RANK"])
        gpus = torch.cuda.device_count()
        if gpus < 1:
            raise SystemExit("tpar.check needs a CUDA GPU: torch.cuda.device_count() is 0")
        local_size = int(os.environ.get("LOCAL_WORLD_SIZE", self.size))
        self.shared = local_size > gpus
        self.device = torch.device("cuda", self.local % gpus)
        torch.cuda.set_device(self.device)
        timeout = datetime.timedelta(seconds=120)
        if self.shared:
            # tpar refuses ranks on one GPU unless asked (they are virtual ranks, for tests).
            os.environ.setdefault("TPAR_ALLOW_SHARED_DEVICE", "1")
            dist.init_process_group("gloo", timeout=timeout)
            self.gloo = dist.group.WORLD
        else:
            dist.init_process_group("nccl", device_id=self.device, timeout=timeout)
            self.gloo = dist.new_group(backend="gloo")

    def log(self, *args):
        if self.rank == 0:
            print(*args, flush=True)

    def gather(self, t):
        if self.shared:  # gloo gathers host tensors
            parts = [torch.empty_like(t, device="cpu") for _ in range(self.size)]
            dist.all_gather(parts, t.contiguous().cpu(), group=self.gloo)
            return [p.to(self.device) for p in parts]
        parts = [torch.empty_like(t) for _ in range(self.size)]
        dist.all_gather(parts, t.contiguous())
        return parts

    def all_true(self, flag):
        """Whether `flag` holds on every rank."""
        x = torch.tensor([1 if flag else 0], device="cpu" if self.shared else self.device)
        dist.all_reduce(x, op=dist.ReduceOp.MIN, group=self.gloo if self.shared else None)
        return bool(x.item())


def machine_record(command):
    props = torch.cuda.get_device_properties(0)
    driver = "unknown"
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.split("\n")[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "gpu": props.name,
        "gpus_visible": torch.cuda.device_count(),
        "driver": driver,
        "cuda_runtime": torch.version.cuda,
        "torch": torch.__version__,
        "nccl": ".".join(str(x) for x in torch.cuda.nccl.version()),
        "tpar": tpar.__version__,
        "commit": os.environ.get("TPAR_GIT_COMMIT", "unknown"),
        "host": platform.node(),
        "command": command,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def time_graph(world, graph, stream, replays, calls_per_replay=1):
    """Median microseconds per call over `replays` timed replays (one untimed first); the ranks
    start each replay together (a barrier over the CPU group, no GPU work)."""
    with torch.cuda.stream(stream):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier(group=world.gloo)
        with torch.cuda.stream(stream):
            start.record()
            graph.replay()
            stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0 / calls_per_replay)
    return statistics.median(times)


# ---- the tensor-parallel model -------------------------------------------------------------

class RowParallel(torch.nn.Module):
    """A row-parallel linear layer: this rank's columns of the weight, then the all-reduce."""

    def __init__(self, linear, rank, tp, reduce):
        super().__init__()
        cols = linear.in_features // tp
        self.weight = torch.nn.Parameter(linear.weight[:, rank * cols:(rank + 1) * cols].detach().clone())
        self.reduce = reduce

    def forward(self, x):
        return self.reduce(torch.nn.functional.linear(x, self.weight))


def column_slice(linear, rank, tp, rows):
    """Keeps this rank's rows of a column-parallel linear layer (rows = output features)."""
    part = linear.out_features // tp
    assert part * tp == linear.out_features and part % rows == 0
    sel = slice(rank * part, (rank + 1) * part)
    new = torch.nn.Linear(linear.in_features, part, bias=linear.bias is not None,
                          device=linear.weight.device, dtype=linear.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(linear.weight[sel])
        if linear.bias is not None:
            new.bias.copy_(linear.bias[sel])
    return new


def llama_config(hidden, layers, heads, kv_heads, inter):
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, num_hidden_layers=layers, vocab_size=128,
                      max_position_embeddings=4096, rms_norm_eps=1e-5)
    cfg._attn_implementation = "eager"
    return cfg


class Decoder(torch.nn.Module):
    """The decoder layers and final norm of a Llama model, fed hidden states directly (the
    embedding and LM head are not tensor-parallel all-reduce work)."""

    def __init__(self, cfg, device, dtype, seed):
        super().__init__()
        from transformers.models.llama.modeling_llama import (LlamaDecoderLayer, LlamaRMSNorm,
                                                              LlamaRotaryEmbedding)

        with torch.device("meta"):
            layers = [LlamaDecoderLayer(cfg, layer_idx=i) for i in range(cfg.num_hidden_layers)]
            norm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.layers = torch.nn.ModuleList(layers).to_empty(device=device)
        self.norm = norm.to_empty(device=device)
        # Same seed, same device kind: the same weights on every rank, drawn in fp32.
        g = torch.Generator(device=device).manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight") or "layernorm" in name:
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g, device=device))
                else:
                    p.copy_(torch.randn(p.shape, generator=g, device=device) * (p.shape[-1] ** -0.5))
        self.to(dtype)
        # Made after the cast, so that its frequencies stay in fp32 as in a loaded model.
        self.rotary = LlamaRotaryEmbedding(cfg).to(device)
        self.eval()

    def shard(self, rank, tp, reduce):
        """Column-parallel q/k/v and gate/up, row-parallel o and down (an all-reduce each)."""
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            hd = attn.head_dim
            attn.q_proj = column_slice(attn.q_proj, rank, tp, hd)
            attn.k_proj = column_slice(attn.k_proj, rank, tp, hd)
            attn.v_proj = column_slice(attn.v_proj, rank, tp, hd)
            attn.o_proj = RowParallel(attn.o_proj, rank, tp, reduce)
            mlp.gate_proj = column_slice(mlp.gate_proj, rank, tp, 1)
            mlp.up_proj = column_slice(mlp.up_proj, rank, tp, 1)
            mlp.down_proj = RowParallel(mlp.down_proj, rank, tp, reduce)
        return self

    def forward(self, h, position_embeddings):
        for layer in self.layers:
            out = layer(h, attention_mask=None, position_embeddings=position_embeddings)
            h = out[0] if isinstance(out, tuple) else out
        return self.norm(h)

    def fused_forward(self, h, position_embeddings, add_norm):
        """The same decoder as vLLM's and SGLang's fusion passes run it: each row-parallel
        layer's all-reduce, the residual add after it and the RMSNorm after that in one call,
        `add_norm(y, weight, eps, residual) -> (rmsnorm(residual + all_reduce(y)) * weight,
        residual + all_reduce(y))`, the norm being the next one in the layer order (the layer's
        post-attention norm, the next layer's input norm, the final norm last). The row-parallel
        layers must hand back their partial sums (their own reduce a no-op)."""
        layers = list(self.layers)
        residual = h
        x = layers[0].input_layernorm(h)
        for i, layer in enumerate(layers):
            a = layer.self_attn(hidden_states=x, position_embeddings=position_embeddings,
                                attention_mask=None)[0]
            post = layer.post_attention_layernorm
            x, residual = add_norm(a, post.weight, post.variance_epsilon, residual)
            m = layer.mlp(x)
            nxt = layers[i + 1].input_layernorm if i + 1 < len(layers) else self.norm
            x, residual = add_norm(m, nxt.weight, nxt.variance_epsilon, residual)
        return x


def decode_inputs(cfg, tokens, device, dtype, seed):
    """One decode step of `tokens` sequences: hidden states [tokens, 1, hidden], positions."""
    g = torch.Generator(device=device).manual_seed(seed)
    h = torch.randn(tokens, 1, cfg.hidden_size, generator=g, device=device).to(dtype)
    pos = torch.randint(0, 2048, (tokens, 1), generator=g, device=device)
    return h, pos


def rel_err(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def run_model(world, args):
    from .ops import all_reduce_, all_reduce_add_rms_norm

    cfg = llama_config(args.hidden, args.layers, args.heads, args.kv_heads, args.intermediate)
    tp = world.size
    if args.heads % tp or args.kv_heads % tp or args.intermediate % tp:
        raise SystemExit(f"heads {args.heads}, kv heads {args.kv_heads} and intermediate "
                         f"{args.intermediate} must divide by the TP size {tp}")
    dtype = torch.bfloat16
    comm = tpar.Communicator(world.gloo)
    # --wire: a communicator per compressed format (docs/WIRE.md), whose outputs are compared
    # with the lossless path's and the fp32 reference's. A format applies only where its
    # communicator uses it (large calls: TPAR_TRANSPORT, the size), elsewhere it is lossless.
    wires = [w for w in dict.fromkeys(args.wire) if w not in ("none", "bf16")]
    wire_comms = {w: tpar.Communicator(world.gloo, wire=w) for w in wires}
    mode = {"name": "tpar"}

    def reduce(y):
        if mode["name"] == "tpar":
            return all_reduce_(y, comm)
        if mode["name"] in wire_comms:
            return all_reduce_(y, wire_comms[mode["name"]])
        if mode["name"] == "nccl":
            dist.all_reduce(y)
        return y  # "none" (compute only) and "fused" (add_norm reduces the partial sums)

    def add_norm(y, weight, eps, residual):
        return all_reduce_add_rms_norm(y, weight, eps, residual=residual, comm=comm)

    model = Decoder(cfg, world.device, dtype, args.seed).shard(world.rank, tp, reduce)

    def step(name, h, pe):
        mode["name"] = name
        return model.fused_forward(h, pe, add_norm) if name == "fused" else model(h, pe)
    results = {"config": {"hidden": args.hidden, "layers": args.layers, "heads": args.heads,
                          "kv_heads": args.kv_heads, "intermediate": args.intermediate,
                          "tp": tp, "dtype": "bfloat16", "all_reduces_per_step": 2 * args.layers},
               "checks": [], "timing": []}
    ok = True
    with torch.inference_mode():
        for tokens in args.tokens:
            h, pos = decode_inputs(cfg, tokens, world.device, dtype, args.seed + tokens)
            pe = model.rotary(h, pos)
            mode["name"] = "tpar"
            out_tpar = model(h, pe)
            torch.cuda.synchronize()
            outs = world.gather(out_tpar)
            agree = all(torch.equal(o.view(torch.int16), outs[0].view(torch.int16)) for o in outs)
            check = {"tokens": tokens, "ranks_bitwise_equal": agree}
            if not world.shared:
                mode["name"] = "nccl"
                check["tpar_vs_nccl_rel_err"] = rel_err(out_tpar, model(h, pe))
            if world.rank == 0:
                # The unsplit model on this GPU, in bf16 and in fp32 (the reference).
                full = Decoder(cfg, world.device, dtype, args.seed)
                # The same bf16 weights in fp32: the reference isolates arithmetic rounding.
                ref32 = Decoder(cfg, world.device, dtype, args.seed).float()
                out_full = full(h, full.rotary(h, pos))
                out_ref = ref32(h.float(), ref32.rotary(h.float(), pos))
                e_tp, e_full = rel_err(out_tpar, out_ref), rel_err(out_full, out_ref)
                check.update({"tp_vs_unsplit_bf16_rel_err": rel_err(out_tpar, out_full),
                              "tp_vs_fp32_rel_err": e_tp, "unsplit_bf16_vs_fp32_rel_err": e_full,
                              "tolerance": "tp_vs_fp32 <= 1.5 * unsplit_bf16_vs_fp32 + 1e-3"})
                check["close_to_unsplit"] = e_tp <= 1.5 * e_full + 1e-3
                del full, ref32
                torch.cuda.empty_cache()
            for w in wires:
                mode["name"] = w
                out_w = model(h, pe)
                torch.cuda.synchronize()
                outs_w = world.gather(out_w)
                w_agree = all(torch.equal(o.view(torch.int16), outs_w[0].view(torch.int16))
                              for o in outs_w)
                entry = {"wire": w, "ranks_bitwise_equal": w_agree,
                         "vs_lossless_rel_err": rel_err(out_w, out_tpar)}
                if world.rank == 0:
                    entry["vs_fp32_rel_err"] = rel_err(out_w, out_ref)
                check.setdefault("wire", []).append(entry)
                agree &= w_agree
                world.log(f"tokens {tokens:3d}, wire {w}: ranks bitwise equal {w_agree}; rel. "
                          f"error vs lossless {entry['vs_lossless_rel_err']:.2e}" +
                          (f", vs fp32 {entry['vs_fp32_rel_err']:.2e}" if world.rank == 0 else ""))
            if args.fused:
                out_f = step("fused", h, pe)
                torch.cuda.synchronize()
                outs_f = world.gather(out_f)
                f_agree = all(torch.equal(o.view(torch.int16), outs_f[0].view(torch.int16))
                              for o in outs_f)
                fused = {"ranks_bitwise_equal": f_agree, "vs_unfused_rel_err": rel_err(out_f, out_tpar)}
                if world.rank == 0:
                    e_f = rel_err(out_f, out_ref)
                    fused.update({"vs_fp32_rel_err": e_f, "close_to_unsplit": e_f <= 1.5 * e_full + 1e-3})
                check["fused"] = fused
                agree &= f_agree and fused.get("close_to_unsplit", True)
                world.log(f"tokens {tokens:3d}, fused: ranks bitwise equal {f_agree}; rel. error vs "
                          f"unfused {fused['vs_unfused_rel_err']:.2e}" +
                          (f", vs fp32 {fused['vs_fp32_rel_err']:.2e}" if world.rank == 0 else ""))
            ok &= world.all_true(check.get("close_to_unsplit", True) and agree)
            results["checks"].append(check)
            world.log(f"tokens {tokens:3d}: ranks bitwise equal {agree}; " + (
                f"rel. error vs fp32: TP {check['tp_vs_fp32_rel_err']:.2e}, unsplit bf16 "
                f"{check['unsplit_bf16_vs_fp32_rel_err']:.2e}; TP vs unsplit "
                f"{check['tp_vs_unsplit_bf16_rel_err']:.2e}" +
                (f"; tpar vs NCCL {check['tpar_vs_nccl_rel_err']:.2e}" if not world.shared else "")
                if world.rank == 0 else ""))

        # Ranks sharing a GPU time each other's kernels, and NCCL cannot run there.
        timed = [] if world.shared or args.no_timing else args.tokens
        if timed:
            world.log(f"{'tokens':>6} {'AR bytes':>9} {'tpar us':>9} {'nccl us':>9} {'none us':>9} "
                      f"{'tpar AR%':>8} {'nccl AR%':>8} {'speedup':>7}" +
                      (f" {'fused us':>9} {'vs tpar':>7}" if args.fused else ""))
        else:
            world.log("timing left out (" + ("ranks share a GPU" if world.shared else "--no-timing") + ")")
        for tokens in timed:
            h, pos = decode_inputs(cfg, tokens, world.device, dtype, args.seed + tokens)
            pe = model.rotary(h, pos)
            row = {"tokens": tokens, "all_reduce_bytes": tokens * args.hidden * 2}
            for name in ("tpar", "nccl", "none") + (("fused",) if args.fused else ()):
                stream = torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    for _ in range(3):
                        step(name, h, pe)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=stream):
                    step(name, h, pe)
                row[f"{name}_step_us"] = time_graph(world, graph, stream, args.replays)
                del graph
            for name in ("tpar", "nccl"):
                row[f"{name}_all_reduce_us"] = row[f"{name}_step_us"] - row["none_step_us"]
                row[f"{name}_all_reduce_share"] = row[f"{name}_all_reduce_us"] / row[f"{name}_step_us"]
            row["step_speedup_vs_nccl"] = row["nccl_step_us"] / row["tpar_step_us"]
            if args.fused:
                row["fused_step_speedup_vs_unfused"] = row["tpar_step_us"] / row["fused_step_us"]
            results["timing"].append(row)
            world.log(f"{tokens:6d} {row['all_reduce_bytes']:9d} {row['tpar_step_us']:9.1f} "
                      f"{row['nccl_step_us']:9.1f} {row['none_step_us']:9.1f} "
                      f"{100 * row['tpar_all_reduce_share']:7.1f}% {100 * row['nccl_all_reduce_share']:7.1f}% "
                      f"{row['step_speedup_vs_nccl']:6.2f}x" +
                      (f" {row['fused_step_us']:9.1f} {row['fused_step_speedup_vs_unfused']:6.2f}x"
                       if args.fused else ""))
    for c in [comm] + list(wire_comms.values()):
        c.check_async_error()
        c.close()
    results["passed"] = ok
    return results, ok


# ---- host cost and graph timing --------------------------------------------------------------

def run_overhead(world, args):
    comm = tpar.Communicator(world.gloo)
    stream = torch.cuda.current_stream()
    x = torch.randn(args.host_bytes // 2, device=world.device, dtype=torch.bfloat16)
    raw = tpar._C
    calls, batch = args.calls, args.batch
    # Hold the stream: a sleep kernel long enough for one batch of launches to be enqueued.
    sleep_cycles = int(args.hold_ms * 1e-3 * torch.cuda.get_device_properties(0).clock_rate * 1e3)
    py_ns, c_ns = 0, 0
    for _ in range(3):  # warm up both paths
        comm.all_reduce(x)
    torch.cuda.synchronize()
    for _ in range(calls // batch):
        dist.barrier(group=world.gloo)
        torch.cuda._sleep(sleep_cycles)
        t0 = time.perf_counter_ns()
        for _ in range(batch):
            comm.all_reduce(x)
        py_ns += time.perf_counter_ns() - t0
        torch.cuda.synchronize()
        dist.barrier(group=world.gloo)
        torch.cuda._sleep(sleep_cycles)
        rc, ns = raw.time_c_calls(comm.handle, x.data_ptr(), x.data_ptr(), x.numel(), 2, 0,
                                  stream.cuda_stream, batch)
        if rc:
            raise tpar.TparError(rc, raw.last_error(comm.handle))
        c_ns += ns
        torch.cuda.synchronize()
    n = (calls // batch) * batch
    host = {"calls": n, "batch": batch, "message_bytes": x.numel() * 2,
            "python_us_per_call": py_ns / n / 1000.0, "c_us_per_call": c_ns / n / 1000.0}
    host["python_overhead_us"] = host["python_us_per_call"] - host["c_us_per_call"]
    per_rank = [None] * world.size
    dist.all_gather_object(per_rank, host, group=world.gloo)
    world.log(f"host cost over {n} calls of {host['message_bytes']} bytes (stream held):")
    for r, h in enumerate(per_rank):
        world.log(f"  rank {r}: C {h['c_us_per_call']:.2f} us, Python {h['python_us_per_call']:.2f} us, "
                  f"added {h['python_overhead_us']:.2f} us")
    graph_rows = []
    world.log(f"{'bytes':>10} {'graph us/call':>14}")
    for nbytes in args.graph_bytes:
        y = torch.randn(nbytes // 2, device=world.device, dtype=torch.bfloat16)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            for _ in range(3):
                torch.ops.tpar.all_reduce_(y, comm.handle, "sum")
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            for _ in range(args.graph_calls):
                torch.ops.tpar.all_reduce_(y, comm.handle, "sum")
        us = time_graph(world, graph, s, args.replays, args.graph_calls)
        graph_rows.append({"bytes": nbytes, "graph_us_per_call": us})
        world.log(f"{nbytes:10d} {us:14.2f}")
        del graph
    comm.check_async_error()
    comm.close()
    ok = all(h["python_overhead_us"] <= args.max_overhead_us for h in per_rank)
    return {"host": per_rank, "graph": graph_rows, "max_overhead_us": args.max_overhead_us,
            "passed": ok}, ok


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tpar.check", description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["model", "overhead"])
    p.add_argument("--json", help="write the record here (rank 0)")
    p.add_argument("--tokens", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--intermediate", type=int, default=14336)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--wire", nargs="+", default=["none"], choices=["none", "bf16", "fp8", "int8", "int4"],
                   help="model: also run each compressed wire format and compare it with the "
                        "lossless path and fp32 (docs/WIRE.md)")
    p.add_argument("--fused", action="store_true",
                   help="model: also run each all-reduce fused with the residual add and RMSNorm "
                        "after it, as the engines' fusion passes do (docs/FUSED.md)")
    p.add_argument("--no-timing", action="store_true",
                   help="model: the checks only (ranks that share a GPU never time)")
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--calls", type=int, default=10000)
    p.add_argument("--batch", type=int, default=200, help="launches per held stream")
    p.add_argument("--hold-ms", type=float, default=5.0)
    p.add_argument("--host-bytes", type=int, default=12 * 1024)
    p.add_argument("--graph-bytes", type=int, nargs="+",
                   default=[12 * 1024, 112 * 1024, 384 * 1024, 1 << 20, 4 << 20])
    p.add_argument("--graph-calls", type=int, default=100)
    p.add_argument("--max-overhead-us", type=float, default=3.0)
    args = p.parse_args(argv)
    world = World()
    record = machine_record(" ".join(["torchrun", f"--nproc-per-node {world.size}", "-m tpar.check"] +
                                     (argv if argv is not None else sys.argv[1:])))
    record["ranks"] = world.size
    record["shared_gpu"] = world.shared
    if args.what == "model":
        results, ok = run_model(world, args)
    else:
        results, ok = run_overhead(world, args)
    record.update(results)
    if world.rank == 0:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(record, f, indent=2)
        print("PASS" if ok else "FAIL", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
