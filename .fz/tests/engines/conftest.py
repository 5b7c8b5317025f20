"""The engines' all-reduce + RMSNorm fusion with tpar's plugin, on the CPU, with the engines' own
code (vLLM 0.33.0 and SGLang 0.5.23 from their wheels; scripts/engine-fusion-check.sh installs
them and runs each file in a process of its own). Where an engine is not importable its tests
are skipped, with the reason.

The group stand-in: no GPU and no second process here, so a tensor-parallel group of two is an
object with the coordinator's attributes whose all-reduce returns twice its input (two ranks
holding the same values), and tpar's adapter on it talks to a stand-in communicator that
computes the fused call in float64 (the sum, residual add and RMSNorm of docs/FUSED.md). The
engines' pattern matcher, passes, norms and compiled graphs are their own."""
import pytest
import torch

from tpar.integrations._adapter import EngineAllReduce


class StandInComm:
    """What tpar's adapter calls on its Communicator, computed on the CPU for two ranks that
    hold the same input: sum = 2 * input."""

    def __init__(self):
        self.calls = 0

    def check_async_error(self):
        pass

    def all_reduce_add_rms_norm(self, inp, weight, eps, residual=None, *, out=None,
                                residual_out=None, quant=None, quant_out=None, scale=None,
                                block_scale=None):
        self.calls += 1
        s = (2 * inp.double()).to(inp.dtype)  # what the plain all-reduce would have written
        z = s.double() + (residual.double() if residual is not None else 0)
        r = z.to(inp.dtype)
        inv = torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps)
        y = ((r.double() * inv).to(inp.dtype).double() * weight.double()).to(inp.dtype)
        if quant is not None:
            # Static FP8 only (the NVFP4 path is checked on a GPU): e4m3 of y / scale, saturated.
            assert quant == "fp8_static" and block_scale is None, quant
            quant_out.copy_(fp8_static(y, scale))
        if out is None:
            out = torch.empty_like(inp)
        if out is not False:
            out.copy_(y)
        target = residual_out if residual_out is not None else residual
        if target is not None:
            target.copy_(r)
        return (None if out is False else out), target


def fp8_static(y, scale):
    """e4m3 of y / scale (scale a float32 tensor of one element), saturated at 448."""
    return (y.float() / scale.float().reshape(())).clamp(-448, 448).to(torch.float8_e4m3fn)


def stand_in_adapter(max_size=8 << 20):
    """tpar's adapter, on, with a StandInComm (built without the collective decision)."""
    a = object.__new__(EngineAllReduce)
    a._reset(max_size)
    a.max_size = max_size
    a.disabled = False
    a.comm = StandInComm()
    a.world_size, a.rank = 2, 0
    return a


def unfused_reference(x, residual, weight, eps):
    """(out, r) of the unfused sequence over the stand-in group, in float64 then rounded as the
    stand-in rounds: the bound the engines' own norms meet against it is a few units of the
    datatype's last place."""
    comm = StandInComm()
    r = torch.empty_like(x)
    out, _ = comm.all_reduce_add_rms_norm(x, weight, eps, residual, residual_out=r)
    return out, r


@pytest.fixture
def bf16_close():
    def check(got, want):
        torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -6, atol=2 ** -6)

    return check
