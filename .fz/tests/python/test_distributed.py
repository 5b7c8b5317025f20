"""Real ranks, one process per GPU, under torchrun:

    torchrun --nproc-per-node 2 -m pytest -q -rs tests/python/test_distributed.py

Every process runs the same tests in the same order (each test is collective). Results are
checked bitwise against the fp32 rank-order reference built from every rank's input, compared
with torch.distributed.all_reduce (NCCL) within rounding, and compared bitwise across ranks."""
import datetime
import os

import pytest
import torch
import torch.distributed as dist

import tpar
from helpers import DTYPES, fresh, poisoned_like, reference, same_bits

pytestmark = [pytest.mark.gpu, pytest.mark.dist]

# 1 element to 64 MiB, odd counts included (tails of every kernel).
SIZES_BYTES = [4, 12, 1000, 12 * 1024, 112 * 1024 + 6, 1 << 20, (4 << 20) + 2, 16 << 20, 64 << 20]
TOL = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 1e-5}


class World:
    def __init__(self):
        self.rank = int(os.environ["RANK"])
        self.size = int(os.environ["WORLD_SIZE"])
        self.local = int(os.environ["LOCAL_RANK"])
        self.device = torch.device("cuda", self.local)
        torch.cuda.set_device(self.device)
        dist.init_process_group("nccl", device_id=self.device, timeout=datetime.timedelta(seconds=120))
        self.gloo = dist.new_group(backend="gloo")

    def gather(self, t):
        """Every rank's tensor, in rank order (NCCL all_gather)."""
        parts = [torch.empty_like(t) for _ in range(self.size)]
        dist.all_gather(parts, t.contiguous())
        return parts


@pytest.fixture(scope="session")
def world():
    w = World()
    yield w
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="session")
def comm(world):
    c = tpar.Communicator(world.gloo)
    yield c
    c.close()


def generator(world, *key):
    return torch.Generator(device=world.device).manual_seed(hash((world.rank,) + key) % (1 << 31))


def check_result(world, inputs_local, out, op, dtype):
    everyone = world.gather(inputs_local)
    ref = reference(everyone, op)
    assert same_bits(out, ref), "result differs from the fp32 rank-order reference"
    # The same bits on every rank.
    outs = world.gather(out)
    for r, o in enumerate(outs):
        assert same_bits(o, outs[0]), f"rank {r} holds other bits than rank 0"


@pytest.mark.parametrize("how", ["tensor", "object"])
@pytest.mark.parametrize("over", ["gloo", "nccl"])
def test_unique_id_travels_both_ways(world, how, over):
    group = world.gloo if over == "gloo" else dist.group.WORLD
    with tpar.Communicator(group, id_exchange=how) as c:
        x = torch.full((100,), float(world.rank + 1), device=world.device)
        c.all_reduce(x)
        torch.cuda.synchronize()
        assert torch.all(x == world.size * (world.size + 1) / 2)
        assert c.query()["nranks"] == world.size


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nbytes", SIZES_BYTES)
def test_matches_reference_and_nccl(world, comm, dtype, nbytes):
    esize = torch.empty(0, dtype=dtype).element_size()
    n = max(1, nbytes // esize)
    g = generator(world, n, str(dtype))
    x = fresh(n, dtype, world.device, g)
    saved = x.clone()
    # Out of place.
    out = poisoned_like(x)
    comm.all_reduce(x, out=out)
    torch.cuda.synchronize()
    assert same_bits(x, saved), "the input changed in an out-of-place call"
    check_result(world, saved, out, "sum", dtype)
    # Against NCCL: the same sum up to rounding (NCCL's order and rounding differ).
    nccl = saved.clone()
    dist.all_reduce(nccl)
    scale = out.float().abs().max().clamp_min(1.0)
    assert (out.float() - nccl.float()).abs().max() <= TOL[dtype] * scale * world.size
    # In place, fresh inputs.
    y = fresh(n, dtype, world.device, g)
    y_saved = y.clone()
    r = comm.all_reduce(y)
    torch.cuda.synchronize()
    assert r is y
    check_result(world, y_saved, y, "sum", dtype)


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_and_min_are_exact(world, comm, op):
    g = generator(world, op)
    x = fresh(70_001, torch.bfloat16, world.device, g)
    out = poisoned_like(x)
    comm.all_reduce(x, out=out, op=op)
    torch.cuda.synchronize()
    check_result(world, x, out, op, torch.bfloat16)


def test_ops_inside_a_cuda_graph_replayed_100_times(world, comm):
    n = 56 * 1024  # 112 KiB of bf16
    g = generator(world, "graph")
    x = fresh(n, torch.bfloat16, world.device, g)
    z = fresh(n, torch.bfloat16, world.device, g)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    # Warm up outside the capture on the capturing stream, as torch recommends.
    with torch.cuda.stream(stream):
        torch.ops.tpar.all_reduce(x, comm.handle, "sum")
        torch.ops.tpar.all_reduce_(z, comm.handle, "sum")
    torch.cuda.synchronize()
    with torch.cuda.graph(graph, stream=stream):
        y = torch.ops.tpar.all_reduce(x, comm.handle, "sum")
        torch.ops.tpar.all_reduce_(z, comm.handle, "sum")
    for i in range(100):
        fx, fz = fresh(n, torch.bfloat16, world.device, g), fresh(n, torch.bfloat16, world.device, g)
        x.copy_(fx)
        z.copy_(fz)
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        if i % 10 == 0 or i == 99:  # every replay is reduced; every tenth is checked fully
            check_result(world, fx, y, "sum", torch.bfloat16)
            check_result(world, fz, z, "sum", torch.bfloat16)
        else:
            assert not torch.isnan(y).any()
    comm.check_async_error()


def test_torch_compile_fullgraph_with_the_op(world, comm):
    w = torch.randn(256, 512, generator=generator(world, "w"), device=world.device, dtype=torch.bfloat16)

    def row_parallel(x):
        y = x @ w
        y = torch.ops.tpar.all_reduce(y, comm.handle, "sum")
        return y * 2

    compiled = torch.compile(row_parallel, fullgraph=True)
    x = torch.randn(8, 256, generator=generator(world, "x"), device=world.device, dtype=torch.bfloat16)
    got = compiled(x)
    torch.cuda.synchronize()
    partial = x @ w
    expect = reference(world.gather(partial), "sum") * 2
    assert same_bits(got, expect)
    outs = world.gather(got)
    assert all(same_bits(o, outs[0]) for o in outs)


def test_bad_input_raises_and_changes_nothing(world, comm):
    x = torch.randn(64, device=world.device)
    before = x.clone()
    cases = [
        (lambda: comm.all_reduce(x.view(8, 8).t()), "not contiguous"),
        (lambda: comm.all_reduce(x.to(torch.int32)), "dtype"),
        (lambda: comm.all_reduce(x, out=torch.empty(63, device=world.device)), "63 elements"),
        (lambda: comm.all_reduce(x, op="prod"), "op"),
        (lambda: comm.all_reduce(x.cpu()), "cpu"),
    ]
    if torch.cuda.device_count() > 1:
        other = torch.device("cuda", (world.local + 1) % torch.cuda.device_count())
        cases.append((lambda: comm.all_reduce(x.to(other)), str(other)))
    for call, text in cases:
        with pytest.raises(tpar.TparArgumentError, match=text):
            call()
    torch.cuda.synchronize()
    assert torch.equal(x, before)
    comm.check_async_error()  # nothing reached the GPU, the group is still in step
    y = torch.ones(16, device=world.device)
    comm.all_reduce(y)
    torch.cuda.synchronize()
    assert torch.all(y == world.size)


def test_a_rank_that_never_calls_gives_a_timeout_not_a_hang(world):
    c = tpar.Communicator(world.gloo, config={"timeout_ms": 1000})
    x = torch.ones(4096, device=world.device)
    if world.rank == 0:
        c.all_reduce(x)  # nobody else calls
        torch.cuda.synchronize()
        with pytest.raises(tpar.TparError) as info:
            c.check_async_error()
        assert info.value.result == tpar.Result.TIMEOUT
        with pytest.raises(tpar.TparError):
            c.all_reduce(x)
    dist.barrier(group=world.gloo)
    c.abort()


def test_query_and_nccl_attachment(world, comm):
    info = comm.query()
    assert info["rank"] == world.rank and info["nranks"] == world.size
    assert info["cuda_device"] == world.local
    assert not info["nccl_attached"]
    with tpar.Communicator(world.gloo, config={"algorithm": "nccl"}) as routed:
        routed.attach_nccl(dist.group.WORLD)
        assert routed.query()["nccl_attached"]
        assert routed.select_algorithm(1 << 20) == "nccl"
        x = torch.full((1000,), float(world.rank + 1), device=world.device)
        routed.all_reduce(x)
        torch.cuda.synchronize()
        assert torch.all(x == world.size * (world.size + 1) / 2)
        routed.attach_nccl(None)
        assert not routed.query()["nccl_attached"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_engine_adapter_as_the_engine_drives_it(world, engine):
    from tpar.integrations.sglang import SglangAllReduce
    from tpar.integrations.vllm import VllmAllReduce

    cls = VllmAllReduce if engine == "vllm" else SglangAllReduce
    kwargs = {"symm_mem_enabled": False, "register_graph_buffers": True} if engine == "vllm" else {}
    ca = cls(group=world.gloo, device=world.device, **kwargs)
    assert not ca.disabled
    g = generator(world, engine)
    x = fresh(4096, torch.bfloat16, world.device, g)
    assert ca.should_custom_ar(x)
    assert not ca.should_custom_ar(torch.empty(16 << 20, dtype=torch.bfloat16, device=world.device))
    out = ca.custom_all_reduce(x)
    torch.cuda.synchronize()
    check_result(world, x, out, "sum", torch.bfloat16)
    # Graph capture as the engines do it: warm-up calls and the capture inside capture().
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with ca.capture():
        with torch.cuda.stream(stream):
            warm = ca.custom_all_reduce(x)
        torch.cuda.synchronize()
        check_result(world, x, warm, "sum", torch.bfloat16)
        with torch.cuda.graph(graph, stream=stream):
            captured = ca.custom_all_reduce(x)
    for _ in range(5):
        f = fresh(4096, torch.bfloat16, world.device, g)
        x.copy_(f)
        graph.replay()
        torch.cuda.synchronize()
        check_result(world, f, captured, "sum", torch.bfloat16)
    assert ca.calls >= 3
    ca.close()
    assert ca.disabled and ca.custom_all_reduce(x) is None
