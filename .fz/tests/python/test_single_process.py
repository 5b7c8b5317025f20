"""One process, several ranks (Communicator.init_all): on one GPU as virtual ranks, or one rank
per GPU. Every rank's call is issued on its own stream before any is waited for; inputs and
outputs are made before the first call, so that no kernel of torch is loaded for the first time
while an all-reduce waits (the lazy-loading deadlock that tpar.h describes)."""
import pytest
import torch

import tpar
from helpers import DTYPES, fresh, poisoned_like, reference, same_bits

pytestmark = pytest.mark.gpu


def make_comms(nranks, devices=None, **config):
    if devices is None:
        devices = [0] * nranks
    config.setdefault("allow_shared_device", True)
    config.setdefault("timeout_ms", 20000)
    return tpar.Communicator.init_all(devices, config=config)


def run_round(comms, inputs, outs, op, streams):
    for c, x, y, s in zip(comms, inputs, outs, streams):
        with torch.cuda.stream(s):
            c.all_reduce(x, out=y, op=op)
    for s in streams:
        s.synchronize()


@pytest.fixture(scope="module")
def virtual4():
    comms = make_comms(4)
    yield comms
    for c in comms:
        c.close()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("n", [1, 5, 4099, 300_000])
def test_virtual_ranks_match_the_exact_reference(virtual4, dtype, op, n):
    g = torch.Generator(device="cuda").manual_seed(hash((n, op, str(dtype))) % (1 << 31))
    inputs = [fresh(n, dtype, "cuda", g) for _ in virtual4]
    saved = [x.clone() for x in inputs]
    outs = [poisoned_like(x) for x in inputs]
    streams = [torch.cuda.Stream() for _ in virtual4]
    torch.cuda.synchronize()
    run_round(virtual4, inputs, outs, op, streams)
    ref = reference(saved, op)
    for r, y in enumerate(outs):
        assert same_bits(y, ref), f"rank {r} differs from the fp32 rank-order reference"
        assert same_bits(inputs[r], saved[r]), f"rank {r}'s input changed in an out-of-place call"


def test_in_place_and_ops_in_one_graph(virtual4):
    n = 10_000
    g = torch.Generator(device="cuda").manual_seed(7)
    xs = [fresh(n, torch.bfloat16, "cuda", g) for _ in virtual4]
    streams = [torch.cuda.Stream() for _ in virtual4]
    graphs = [torch.cuda.CUDAGraph() for _ in virtual4]
    torch.cuda.synchronize()
    # Capture every rank's call (each on its own stream) before replaying any graph.
    for c, x, s, gr in zip(virtual4, xs, streams, graphs):
        with torch.cuda.graph(gr, stream=s):
            torch.ops.tpar.all_reduce_(x, c.handle, "sum")
    for _ in range(3):
        fill = [fresh(n, torch.bfloat16, "cuda", g) for _ in virtual4]
        for x, f in zip(xs, fill):
            x.copy_(f)
        torch.cuda.synchronize()
        for gr, s in zip(graphs, streams):
            with torch.cuda.stream(s):
                gr.replay()
        torch.cuda.synchronize()
        ref = reference(fill, "sum")
        for x in xs:
            assert same_bits(x, ref)


def test_kernel_count_includes_graph_replays():
    import random
    comms = make_comms(2)
    eager, replays = random.randint(1, 9), random.randint(1, 9)
    xs = [torch.ones(4096, device="cuda") for _ in comms]
    streams = [torch.cuda.Stream() for _ in comms]
    graphs = [torch.cuda.CUDAGraph() for _ in comms]
    torch.cuda.synchronize()
    assert [c.kernel_count() for c in comms] == [0, 0]
    for _ in range(eager):
        run_round(comms, xs, xs, "sum", streams)
    for c, x, s, gr in zip(comms, xs, streams, graphs):
        with torch.cuda.graph(gr, stream=s):
            torch.ops.tpar.all_reduce_(x, c.handle, "sum")
    for _ in range(replays):
        for gr, s in zip(graphs, streams):
            with torch.cuda.stream(s):
                gr.replay()
    torch.cuda.synchronize()
    assert [c.kernel_count() for c in comms] == [eager + replays] * 2
    for c in comms:
        c.close()


def test_query_describes_the_group(virtual4):
    info = virtual4[2].query()
    assert info["rank"] == 2 and info["nranks"] == 4 and info["cuda_device"] == 0
    assert info["transport"] == "same-device"
    assert virtual4[2].select_algorithm(12 * 1024) in tpar.algorithm_names()
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert virtual4[2].select_algorithm(12 * 1024, dtype) in tpar.algorithm_names()
    with pytest.raises(TypeError, match="dtype torch.int32"):
        virtual4[2].select_algorithm(4096, torch.int32)


def test_a_rank_that_never_calls_gives_a_timeout_not_a_hang():
    comms = make_comms(2, timeout_ms=500)
    x = torch.ones(1024, device="cuda")
    torch.cuda.synchronize()
    comms[0].all_reduce(x)  # rank 1 never calls
    torch.cuda.synchronize()
    with pytest.raises(tpar.TparError) as info:
        comms[0].check_async_error()
    assert info.value.result == tpar.Result.TIMEOUT
    with pytest.raises(tpar.TparError):
        comms[0].all_reduce(x)  # a failed communicator refuses further calls
    for c in comms:
        c.abort()


def test_wrong_device_tensor_is_refused_before_gpu_work():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs: a tensor on another GPU than the communicator's")
    comms = make_comms(2)
    x = torch.randn(8, device="cuda:1")
    before = x.clone()
    with pytest.raises(tpar.TparArgumentError, match="cuda:1"):
        comms[0].all_reduce(x)
    assert torch.equal(x, before)
    for c in comms:
        c.close()


# ---- the fused all-reduce + residual add + RMSNorm ------------------------------------------


def fused_inputs(nranks, tokens, hidden, dtype):
    import os

    g = torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))
    xs = [fresh(tokens * hidden, dtype, "cuda", g).view(tokens, hidden) for _ in range(nranks)]
    residual = (4 * fresh(tokens * hidden, torch.float32, "cuda", g)).to(dtype).view(tokens, hidden)
    weight = (1 + 0.25 * fresh(hidden, torch.float32, "cuda", g)).to(dtype)
    return xs, residual, weight


def fused_reference(xs, residual, weight, eps):
    """(out in float64, r exactly): s as the plain all-reduce rounds it, r = round(float(residual)
    + float(s)), out = r / sqrt(mean(z^2) + eps) * weight from the unrounded z."""
    s = reference(xs, "sum")
    z = s.float() + (residual.float() if residual is not None else 0)
    r = z.to(s.dtype)
    inv = torch.rsqrt(z.double().pow(2).mean(-1, keepdim=True) + eps)
    return r.double() * inv * weight.double(), r


@pytest.mark.parametrize("with_residual", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_call_matches_the_reference_and_ranks_agree(virtual4, with_residual, dtype):
    tokens, hidden, eps = 8, 4096, 1e-6
    xs, residual, weight = fused_inputs(len(virtual4), tokens, hidden, dtype)
    want_out, want_r = fused_reference(xs, residual if with_residual else None, weight, eps)
    saved = [x.clone() for x in xs]
    residuals = [residual.clone() if with_residual else None for _ in virtual4]
    outs = [poisoned_like(x) for x in xs]
    r_outs = [poisoned_like(x) for x in xs]
    streams = [torch.cuda.Stream() for _ in virtual4]
    torch.cuda.synchronize()
    for c, x, res, y, r, s in zip(virtual4, xs, residuals, outs, r_outs, streams):
        with torch.cuda.stream(s):
            got = c.all_reduce_add_rms_norm(x, weight, eps, res, out=y, residual_out=r)
            assert got[0] is y and got[1] is r
    torch.cuda.synchronize()
    for rank in range(len(virtual4)):
        assert same_bits(outs[rank], outs[0]) and same_bits(r_outs[rank], r_outs[0]), rank
        assert same_bits(xs[rank], saved[rank]), "the input changed"
        if with_residual:
            assert same_bits(residuals[rank], residual), "residual_out given: residual written"
    assert same_bits(r_outs[0], want_r)
    # out = round(round(r * inv) * w): two roundings of the datatype (u each, relative to out),
    # and inv from an fp32 sum of `hidden` squares (at most hidden * 2^-24 relative); one u more
    # of slack for fp32's own rounding of the products.
    u = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11
    err = (outs[0].double() - want_out).abs()
    bound = (3 * u + hidden * 2.0 ** -24) * want_out.abs()
    assert bool((err <= bound).all()), f"max error {err.max().item()}"


def test_fused_functional_op_in_a_graph_and_in_place_residual(virtual4):
    tokens, hidden, eps = 3, 7168, 1e-5
    comms = virtual4[:4]
    xs, residual, weight = fused_inputs(len(comms), tokens, hidden, torch.bfloat16)
    want_out, want_r = fused_reference(xs, residual, weight, eps)
    streams = [torch.cuda.Stream() for _ in comms]
    graphs = [torch.cuda.CUDAGraph() for _ in comms]
    results = [None] * len(comms)
    torch.cuda.synchronize()
    for i, (c, x, s, gr) in enumerate(zip(comms, xs, streams, graphs)):
        with torch.cuda.graph(gr, stream=s):
            results[i] = torch.ops.tpar.all_reduce_add_rms_norm(x, weight, eps, residual, c.handle)
    for gr, s in zip(graphs, streams):
        with torch.cuda.stream(s):
            gr.replay()
    torch.cuda.synchronize()
    for out, r in results:
        assert same_bits(r, want_r) and same_bits(out, results[0][0])
    # The mutating op writes r back into each rank's residual.
    residuals = [residual.clone() for _ in comms]
    outs = [torch.empty_like(x) for x in xs]
    for c, x, res, y, s in zip(comms, xs, residuals, outs, streams):
        with torch.cuda.stream(s):
            torch.ops.tpar.all_reduce_add_rms_norm_(x, weight, eps, res, y, c.handle)
    torch.cuda.synchronize()
    for res, y in zip(residuals, outs):
        assert same_bits(res, want_r) and same_bits(y, results[0][0])


def test_fused_bad_arguments_are_named_before_gpu_work(virtual4):
    c = virtual4[0]
    x = torch.zeros(2, 12, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(tpar.TparArgumentError, match="hidden size 12"):
        c.all_reduce_add_rms_norm(x, torch.zeros(12, dtype=torch.bfloat16, device="cuda"))
    x = torch.zeros(2, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(tpar.TparArgumentError, match="weight has dtype"):
        c.all_reduce_add_rms_norm(x, torch.zeros(64, device="cuda"))
    with pytest.raises(tpar.TparArgumentError, match="residual_out has shape"):
        c.all_reduce_add_rms_norm(x, torch.zeros(64, dtype=torch.bfloat16, device="cuda"),
                                  residual_out=torch.zeros(3, 64, dtype=torch.bfloat16,
                                                           device="cuda"))
    with pytest.raises(tpar.TparArgumentError, match="eps"):
        c.all_reduce_add_rms_norm(x, torch.zeros(64, dtype=torch.bfloat16, device="cuda"),
                                  eps=float("nan"))


def test_fused_fp8_per_token_output_matches_torchs_quantization(virtual4):
    tokens, hidden, eps = 5, 4096, 1e-6
    xs, residual, weight = fused_inputs(len(virtual4), tokens, hidden, torch.bfloat16)
    outs = [poisoned_like(x) for x in xs]
    r_outs = [poisoned_like(x) for x in xs]
    qs = [torch.full((tokens, hidden), 0xEE, dtype=torch.uint8, device="cuda") for _ in xs]
    scales = [torch.full((tokens,), float("nan"), device="cuda") for _ in xs]
    streams = [torch.cuda.Stream() for _ in virtual4]
    torch.cuda.synchronize()
    for c, x, y, r, q, sc, s in zip(virtual4, xs, outs, r_outs, qs, scales, streams):
        with torch.cuda.stream(s):
            c.all_reduce_add_rms_norm(x, weight, eps, residual, out=y, residual_out=r,
                                      quant="fp8_per_token", quant_out=q, scale=sc)
    torch.cuda.synchronize()
    y = outs[0].float()
    # The scale as vLLM's kernel computes it, max / 448 correctly rounded: tensor by tensor
    # (torch divides a CUDA tensor by a Python number as a multiplication by its reciprocal,
    # which can differ in the last bit).
    amax = y.abs().amax(-1)
    want_scale = torch.clamp(amax / torch.full_like(amax, 448.0), min=1.0 / (448.0 * 512.0))
    want_q = (y / want_scale[:, None]).to(torch.float8_e4m3fn).view(torch.uint8)
    for q, sc in zip(qs, scales):
        assert torch.equal(sc, want_scale)
        assert torch.equal(q, want_q)


def test_fused_quant_arguments_are_named(virtual4):
    c = virtual4[0]
    x = torch.zeros(2, 64, dtype=torch.bfloat16, device="cuda")
    w = torch.ones(64, dtype=torch.bfloat16, device="cuda")
    q = torch.zeros(2, 64, dtype=torch.uint8, device="cuda")
    with pytest.raises(tpar.TparArgumentError, match="quant 'int4'"):
        c.all_reduce_add_rms_norm(x, w, quant="int4", quant_out=q)
    with pytest.raises(tpar.TparArgumentError, match="scale must be a torch.Tensor"):
        c.all_reduce_add_rms_norm(x, w, quant="fp8_static", quant_out=q)
    with pytest.raises(tpar.TparArgumentError, match="quant_out holds 64 bytes"):
        c.all_reduce_add_rms_norm(x, w, quant="fp8_per_token", quant_out=q[:1],
                                  scale=torch.zeros(2, device="cuda"))
    with pytest.raises(tpar.TparArgumentError, match="out=False needs residual"):
        c.all_reduce_add_rms_norm(x, w, out=False, quant="fp8_static", quant_out=q,
                                  scale=torch.ones(1, device="cuda"))
