"""SGLang 0.5.23's all-reduce + residual + RMSNorm fusion with tpar's plugin
(tpar/integrations/sglang_fusion.py): the plugin replaces the two names SGLang's layer boundary
and its norms look up; for a group tpar serves, RMSNorm.forward_with_allreduce_fusion runs
tpar's fused op (eagerly, and as the only call of a torch.compile(fullgraph=True) graph),
leaves the residual it was given as it was, and computes what SGLang's own unfused path
computes; a call tpar declines takes SGLang's own path. SGLang's code from its wheel; the
group is the stand-in of conftest.py, reached through the two functions SGLang asks for its
groups (resolve_fusion_group, get_parallel)."""
import os
import types

import pytest
import torch

pytest.importorskip("sglang", reason="SGLang is not installed (scripts/engine-fusion-check.sh "
                                     "installs its wheel)")
os.environ["TPAR_ENGINE_PLUGIN"] = "1"

import sglang.srt.distributed as sglang_distributed  # noqa: E402
import sglang.srt.layers.flashinfer_comm_fusion as fusion_module  # noqa: E402
import sglang.srt.layers.layernorm as layernorm  # noqa: E402

from conftest import stand_in_adapter, unfused_reference  # noqa: E402
from tpar.integrations import sglang_fusion  # noqa: E402

EPS = 1e-6
FUSED = "tpar.sglang_all_reduce_add_rms_norm"


@pytest.fixture(scope="module")
def installed():
    assert sglang_fusion.install()
    import importlib

    modules = [importlib.import_module(m) for m in (sglang_fusion._APPLIES_MODULE,
                                                    *sglang_fusion._APPLIES_USERS)]
    return modules


class SglangsOwn:
    """SGLang's flashinfer_allreduce_residual_rmsnorm as the plugin found it is a custom op with
    a CUDA kernel only; here it answers as it does on a machine without FlashInfer, (None,
    None), and records its arguments."""

    def __init__(self):
        self.calls = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return None, None


@pytest.fixture
def group(installed, monkeypatch):
    """Attention-TP group of two whose custom all-reduce is tpar's adapter."""
    monkeypatch.setattr(sglang_fusion, "original_fused", SglangsOwn())
    g = types.SimpleNamespace(ca_comm=stand_in_adapter(), world_size=2, rank_in_group=0)
    found = (2, 0, g)
    parallel = types.SimpleNamespace(attn_tp_size=2, moe_ep_size=1, moe_tp_size=2)
    # Constants captured by the lambdas: torch.compile traces these calls.
    monkeypatch.setattr(fusion_module, "resolve_fusion_group",
                        lambda use_attn_tp_group: found)
    monkeypatch.setattr(layernorm, "get_parallel", lambda: parallel)
    # SGLang's own fallback all-reduce over that group.
    monkeypatch.setattr(sglang_distributed, "attention_tensor_model_parallel_all_reduce",
                        lambda x: (2 * x.float()).to(x.dtype))
    return g


def norm_and_inputs(tokens=5, hidden=64):
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    norm = layernorm.RMSNorm(hidden, eps=EPS).to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(hidden, generator=gen))
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    residual = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    return norm, x, residual


def test_install_replaces_every_name_sglang_looks_up(installed):
    assert (fusion_module.flashinfer_allreduce_residual_rmsnorm
            is sglang_fusion.flashinfer_allreduce_residual_rmsnorm)
    for module in installed:
        assert module.flashinfer_ar_fusion_applies is sglang_fusion.flashinfer_ar_fusion_applies, \
            module.__name__


def test_the_boundary_plans_the_fusion_for_a_tpar_group(group, installed, monkeypatch):
    add_norm = installed[0]
    import sglang.srt.layers.dp_attention as dp

    monkeypatch.setattr(dp, "is_dp_attention_enabled", lambda: False)
    monkeypatch.setattr(add_norm, "uses_cutedsl_ar_fusion", lambda: False)
    monkeypatch.setattr(sglang_fusion, "original_applies", lambda batch: "sglang's own")
    bound = add_norm.FUSE_ALLREDUCE_MAX_BATCH_SIZE
    assert add_norm.flashinfer_ar_fusion_applies(1) is True
    assert add_norm.flashinfer_ar_fusion_applies(bound) is True
    assert add_norm.flashinfer_ar_fusion_applies(bound + 1) == "sglang's own"
    assert add_norm.flashinfer_ar_fusion_applies(0) == "sglang's own"
    monkeypatch.setattr(dp, "is_dp_attention_enabled", lambda: True)
    assert add_norm.flashinfer_ar_fusion_applies(4) == "sglang's own"
    monkeypatch.setattr(dp, "is_dp_attention_enabled", lambda: False)
    group.ca_comm = None  # SGLang's own custom all-reduce
    assert add_norm.flashinfer_ar_fusion_applies(4) == "sglang's own"


def test_the_norm_runs_tpars_fused_op_and_keeps_the_residual(group, bf16_close):
    norm, x, residual = norm_and_inputs()
    kept = residual.clone()
    out, r = norm.forward_with_allreduce_fusion(x, residual)
    assert group.ca_comm.fused_calls == 1 and group.ca_comm.comm.calls == 1
    assert torch.equal(residual, kept), "the residual SGLang passed was written"
    want_out, want_r = unfused_reference(x, kept, norm.weight.data, EPS)
    assert torch.equal(out, want_out) and torch.equal(r, want_r)
    # SGLang's own unfused path on the same group, for the same inputs.
    group.ca_comm.disabled = True
    own_out, own_r = norm.forward_with_allreduce_fusion(x, kept.clone())
    assert group.ca_comm.comm.calls == 1 and len(sglang_fusion.original_fused.calls) == 1
    bf16_close(out, own_out)
    assert torch.equal(r, own_r)


def test_a_compiled_layer_calls_only_tpars_op(group):
    norm, x, residual = norm_and_inputs()
    seen = []

    def backend(gm, inputs):
        seen.append(gm)
        return gm.forward

    def layer(x, residual):
        return norm.forward_with_allreduce_fusion(x, residual)

    out, r = torch.compile(layer, fullgraph=True, backend=backend)(x, residual)
    calls = [str(n.target) for n in seen[0].graph.nodes if n.op == "call_function"]
    assert FUSED in calls and not [c for c in calls if "all_reduce" in c and c != FUSED], calls
    want_out, want_r = unfused_reference(x, residual, norm.weight.data, EPS)
    assert torch.equal(out, want_out) and torch.equal(r, want_r)


def test_a_call_tpar_declines_takes_sglangs_own_path(group):
    norm, x, residual = norm_and_inputs()
    group.ca_comm = stand_in_adapter(max_size=64)  # every call above the adapter's limit
    out, r = norm.forward_with_allreduce_fusion(x, residual.clone())
    assert group.ca_comm.comm.calls == 0
    # SGLang's own function got the call, with SGLang's arguments.
    (call,) = sglang_fusion.original_fused.calls
    assert call["input_tensor"] is x and call["eps"] == EPS and call["use_attn_tp_group"]
    group.ca_comm.disabled = True
    own_out, own_r = norm.forward_with_allreduce_fusion(x, residual.clone())
    assert torch.equal(out, own_out) and torch.equal(r, own_r)
