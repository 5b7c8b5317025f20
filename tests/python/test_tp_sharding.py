"""The hand-made tensor-parallel split of `python -m tpar.check model`, checked on the CPU in
float64: two ranks as two threads whose all-reduce sums their partial results, against the
unsplit decoder. Wrong slicing (heads, GQA groups, MLP columns) shows as a large error."""
import threading

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tpar.check import Decoder, decode_inputs, llama_config, rel_err  # noqa: E402


class ThreadAllReduce:
    """An all-reduce of `tp` threads: each contributes its tensor, each gets the sum (in rank
    order, so that the result is the same on every thread)."""

    def __init__(self, tp):
        self.tp = tp
        self.parts = [None] * tp
        self.barrier = threading.Barrier(tp)

    def for_rank(self, rank):
        def reduce(y):
            self.parts[rank] = y.clone()
            self.barrier.wait()
            total = self.parts[0].clone()
            for p in self.parts[1:]:
                total += p
            self.barrier.wait()
            y.copy_(total)
            return y

        return reduce


def unsplit_case(cfg, tokens, seed):
    """Inputs of `tokens` sequences and the unsplit decoder's output for them, in float64 on
    the CPU (the weights from seed 11, as every shard below draws them)."""
    h, pos = decode_inputs(cfg, tokens, torch.device("cpu"), torch.float64, seed=seed)
    with torch.no_grad():
        full = Decoder(cfg, torch.device("cpu"), torch.float64, seed=11)
        want = full(h, full.rotary(h, pos))
    return h, pos, want


def run_ranks(tp, forward):
    """forward(rank) on `tp` threads at once (their all-reduces meet), the outputs in rank
    order; each must agree with the first bit for bit."""
    outs = [None] * tp

    def run(r):
        with torch.no_grad():
            outs[r] = forward(r)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(tp)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(o is not None for o in outs)
    for o in outs:
        assert torch.equal(o, outs[0])
    return outs


@pytest.mark.parametrize("tp, heads, kv_heads", [(2, 8, 2), (4, 8, 4), (2, 4, 4)])
def test_split_model_equals_the_unsplit_one(tp, heads, kv_heads):
    cfg = llama_config(hidden=64, layers=2, heads=heads, kv_heads=kv_heads, inter=96)
    dev, dtype = torch.device("cpu"), torch.float64
    h, pos, want = unsplit_case(cfg, 5, seed=3)
    reducer = ThreadAllReduce(tp)
    with torch.no_grad():
        shards = [Decoder(cfg, dev, dtype, seed=11).shard(r, tp, reducer.for_rank(r)) for r in range(tp)]
    for o in run_ranks(tp, lambda r: shards[r](h, shards[r].rotary(h, pos))):
        assert rel_err(o, want) < 1e-12


def test_a_wrong_split_is_detected():
    cfg = llama_config(hidden=64, layers=1, heads=8, kv_heads=2, inter=96)
    dev, dtype = torch.device("cpu"), torch.float64
    h, pos, want = unsplit_case(cfg, 3, seed=5)
    with torch.no_grad():
        # Rank 0's half alone, no all-reduce: must be far from the unsplit result.
        half = Decoder(cfg, dev, dtype, seed=11).shard(0, 2, lambda y: y)
        got = half(h, half.rotary(h, pos))
    assert rel_err(got, want) > 1e-2


def reference_add_norm(y, weight, eps, residual):
    """The residual add and RMSNorm after an all-reduce as the unfused Llama layer computes
    them: the add in the datatype, then the norm in fp32 (as the layer's norm, whatever the
    datatype) rounded back before the weight's multiply. (tpar's fused call takes the variance
    before the residual's rounding, docs/FUSED.md; these tests check the decoder's order of
    calls, not that rounding.)"""
    r = residual + y
    x = r.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(r.dtype), r


@pytest.mark.parametrize("layers", [1, 3])
def test_fused_forward_is_the_forward_with_each_add_and_norm_moved_into_the_call(layers):
    """`tpar.check model --fused` runs the decoder as the engines' fusion passes do. One rank,
    bfloat16 on the CPU: with the fused call written out as the layer computes it, every bit of
    the output is the unfused decoder's; a norm taken from the wrong place (each is drawn
    with its own values) or a residual dropped would show."""
    cfg = llama_config(hidden=64, layers=layers, heads=8, kv_heads=2, inter=96)
    dev, dtype = torch.device("cpu"), torch.bfloat16
    h, pos = decode_inputs(cfg, 5, dev, dtype, seed=7)
    calls = []

    def add_norm(y, weight, eps, residual):
        calls.append(weight)
        return reference_add_norm(y, weight, eps, residual)

    with torch.no_grad():
        model = Decoder(cfg, dev, dtype, seed=13)
        pe = model.rotary(h, pos)
        want = model(h, pe)
        got = model.fused_forward(h, pe, add_norm)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    # Two calls per layer, each with the norm that follows its all-reduce.
    norms = []
    for i, layer in enumerate(model.layers):
        norms.append(layer.post_attention_layernorm.weight)
        norms.append(model.layers[i + 1].input_layernorm.weight if i + 1 < layers
                     else model.norm.weight)
    assert len(calls) == 2 * layers
    assert all(c is n for c, n in zip(calls, norms))


@pytest.mark.parametrize("tp", [2, 4])
def test_fused_split_model_equals_the_unsplit_one(tp):
    """The fused forward of `tp` ranks (threads whose add_norm first sums their partial
    results), in float64, against the unsplit decoder's plain forward."""
    cfg = llama_config(hidden=64, layers=2, heads=8, kv_heads=4, inter=96)
    dev, dtype = torch.device("cpu"), torch.float64
    h, pos, want = unsplit_case(cfg, 5, seed=3)
    reducer = ThreadAllReduce(tp)
    with torch.no_grad():
        # The row-parallel layers hand back partial sums; the fused call reduces them.
        shards = [Decoder(cfg, dev, dtype, seed=11).shard(r, tp, lambda y: y) for r in range(tp)]

    def fused(r):
        reduce = reducer.for_rank(r)

        def add_norm(y, weight, eps, residual):
            return reference_add_norm(reduce(y), weight, eps, residual)

        return shards[r].fused_forward(h, shards[r].rotary(h, pos), add_norm)

    for o in run_ranks(tp, fused):
        assert rel_err(o, want) < 1e-12
    # Without the all-reduce, rank 0's partial sums alone are far from it.
    with torch.no_grad():
        alone = shards[0].fused_forward(h, shards[0].rotary(h, pos), reference_add_norm)
    assert rel_err(alone, want) > 1e-2


def test_check_takes_the_wire_formats_and_refuses_others(monkeypatch, capsys):
    """`tpar.check model --wire ...` parses the formats (then asks for torchrun, which this
    process is not under) and refuses a format tpar does not have, naming the option."""
    from tpar import check

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(SystemExit) as e:
        check.main(["model", "--wire", "fp8", "int8", "int4", "none"])
    assert "torchrun" in str(e.value)
    with pytest.raises(SystemExit) as e:
        check.main(["model", "--fused", "--wire", "int8"])
    assert "torchrun" in str(e.value)
    with pytest.raises(SystemExit) as e:
        check.main(["model", "--wire", "fp9"])
    assert e.value.code == 2
    assert "--wire" in capsys.readouterr().err


@pytest.mark.parametrize("gpus, local_world, shared", [(1, 2, True), (2, 2, False), (1, 1, False),
                                                        (2, 4, True)])
def test_check_world_shares_gpus_over_gloo_when_ranks_outnumber_them(monkeypatch, gpus,
                                                                     local_world, shared):
    """More local ranks than GPUs: `tpar.check` runs them on shared GPUs (local rank modulo the
    count) over gloo alone, since NCCL refuses two ranks on one GPU; else one GPU per rank over
    NCCL with a gloo group beside it."""
    from tpar import check

    local = local_world - 1
    calls = []
    monkeypatch.setenv("LOCAL_RANK", str(local))
    monkeypatch.setenv("RANK", str(local))
    monkeypatch.setenv("WORLD_SIZE", str(local_world))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world))
    monkeypatch.delenv("TPAR_ALLOW_SHARED_DEVICE", raising=False)
    monkeypatch.setattr(check.torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(check.torch.cuda, "set_device", lambda d: calls.append(("device", d)))
    monkeypatch.setattr(check.dist, "init_process_group",
                        lambda backend, **kw: calls.append(("init", backend)))
    monkeypatch.setattr(check.dist, "new_group", lambda backend: calls.append(("group", backend)))
    w = check.World()
    assert w.shared is shared
    assert w.device == torch.device("cuda", local % gpus)
    assert ("init", "gloo" if shared else "nccl") in calls
    assert (("group", "gloo") in calls) is (not shared)
    # tpar allows ranks on one GPU only when asked: the shared world asks, the other does not.
    assert (check.os.environ.get("TPAR_ALLOW_SHARED_DEVICE") == "1") is shared


def test_check_world_without_a_gpu_says_so(monkeypatch):
    from tpar import check

    for k, v in {"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(check.torch.cuda, "device_count", lambda: 0)
    with pytest.raises(SystemExit) as e:
        check.World()
    assert "GPU" in str(e.value)
