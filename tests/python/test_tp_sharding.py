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


@pytest.mark.parametrize("tp, heads, kv_heads", [(2, 8, 2), (4, 8, 4), (2, 4, 4)])
def test_split_model_equals_the_unsplit_one(tp, heads, kv_heads):
    cfg = llama_config(hidden=64, layers=2, heads=heads, kv_heads=kv_heads, inter=96)
    dev, dtype = torch.device("cpu"), torch.float64
    h, pos = decode_inputs(cfg, 5, dev, dtype, seed=3)
    with torch.no_grad():
        full = Decoder(cfg, dev, dtype, seed=11)
        want = full(h, full.rotary(h, pos))
        reducer = ThreadAllReduce(tp)
        shards = [Decoder(cfg, dev, dtype, seed=11).shard(r, tp, reducer.for_rank(r)) for r in range(tp)]
        outs = [None] * tp

        def run(r):
            with torch.no_grad():
                outs[r] = shards[r](h, shards[r].rotary(h, pos))

        threads = [threading.Thread(target=run, args=(r,)) for r in range(tp)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert all(o is not None for o in outs)
    for o in outs:
        assert torch.equal(o, outs[0])
        assert rel_err(o, want) < 1e-12


def test_a_wrong_split_is_detected():
    cfg = llama_config(hidden=64, layers=1, heads=8, kv_heads=2, inter=96)
    dev, dtype = torch.device("cpu"), torch.float64
    h, pos = decode_inputs(cfg, 3, dev, dtype, seed=5)
    with torch.no_grad():
        full = Decoder(cfg, dev, dtype, seed=11)
        want = full(h, full.rotary(h, pos))
        # Rank 0's half alone, no all-reduce: must be far from the unsplit result.
        half = Decoder(cfg, dev, dtype, seed=11).shard(0, 2, lambda y: y)
        got = half(h, half.rotary(h, pos))
    assert rel_err(got, want) > 1e-2


def test_check_takes_the_wire_formats_and_refuses_others(monkeypatch, capsys):
    """`tpar.check model --wire ...` parses the formats (then asks for torchrun, which this
    process is not under) and refuses a format tpar does not have, naming the option."""
    from tpar import check

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(SystemExit) as e:
        check.main(["model", "--wire", "fp8", "int8", "int4", "none"])
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
