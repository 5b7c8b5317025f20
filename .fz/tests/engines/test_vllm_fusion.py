"""vLLM 0.33's all-reduce + RMSNorm fusion with tpar's plugin (tpar/integrations/vllm_fusion.py):
the plugin puts tpar's pass where vLLM's pass manager builds AllReduceFusionPass and makes the
fusion vLLM's -O2 default wherever tensor parallelism runs on CUDA; for a group tpar serves, a
toy layer's graph, after vLLM's post-grad pass manager, calls tpar's fused op in place of each
all-reduce + RMSNorm, and computes what the unfused graph computes; for a group tpar does not
serve, vLLM's own pass is built. vLLM's code from its wheel; the platform is a CUDA stand-in of
compute capability 9.0 (no GPU here), and the group the one of conftest.py."""
import logging
import os
import types
import weakref

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (scripts/engine-fusion-check.sh "
                                          "installs its wheel)")
pytest.importorskip("vllm._C_stable_libtorch",
                    reason="vLLM's kernel library does not load (it needs libcuda.so.1; the "
                           "script puts the CUDA toolkit's stub on LD_LIBRARY_PATH)")

import vllm.platforms as _platforms  # noqa: E402
from vllm.platforms.cuda import CudaPlatform  # noqa: E402
from vllm.platforms.interface import DeviceCapability  # noqa: E402


class StandInPlatform(CudaPlatform):
    """CUDA as vLLM asks it, answered without a GPU: one sm_90 device per rank of the group."""

    @classmethod
    def get_device_capability(cls, device_id=0):
        return DeviceCapability(9, 0)

    @classmethod
    def device_count(cls):
        return 2

    @classmethod
    def get_device_name(cls, device_id=0):
        return "stand-in"


_platforms._current_platform = StandInPlatform()
os.environ["TPAR_ENGINE_PLUGIN"] = "1"

import vllm.config.vllm as vllm_config_module  # noqa: E402
import vllm.ir.ops  # noqa: E402
from vllm.compilation.passes.inductor_pass import pass_context  # noqa: E402
from vllm.config import VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.config.utils import Range  # noqa: E402
from vllm.distributed import parallel_state, tensor_model_parallel_all_reduce  # noqa: E402
from vllm.distributed.parallel_state import GroupCoordinator  # noqa: E402

from conftest import fp8_static, stand_in_adapter, unfused_reference  # noqa: E402
from tpar.integrations import vllm as tpar_vllm  # noqa: E402
from tpar.integrations import vllm_fusion  # noqa: E402

EPS = 1e-6
FUSED = "tpar.vllm_all_reduce_add_rms_norm.default"
FUSED_FP8 = "tpar.vllm_all_reduce_add_rms_norm_fp8.default"
FUSED_NVFP4 = "tpar.vllm_all_reduce_add_rms_norm_nvfp4.default"


class StandInGroup:
    """vLLM's tensor-parallel GroupCoordinator as the fusion sees it (two ranks)."""

    world_size = 2
    rank_in_group = 0
    unique_name = "tp:0"
    use_custom_op_call = True
    cpu_group = None
    all_reduce = GroupCoordinator.all_reduce  # vLLM's own: emits torch.ops.vllm.all_reduce

    def __init__(self, ca_comm):
        self.device_communicator = types.SimpleNamespace(ca_comm=ca_comm)

    def _all_reduce_out_place(self, x):
        return (2 * x.float()).to(x.dtype)


@pytest.fixture(scope="module")
def plugin():
    tpar_vllm.register()
    assert vllm_fusion.original_pass is not None, "the plugin did not install the fusion"
    yield


@pytest.fixture
def group(plugin, monkeypatch):
    """A TP group whose custom all-reduce is tpar's adapter (set .device_communicator.ca_comm
    to change that)."""
    g = StandInGroup(stand_in_adapter())
    monkeypatch.setattr(parallel_state, "_TP", g)
    monkeypatch.setitem(parallel_state._groups, g.unique_name, weakref.ref(g))
    return g


def make_config(tp=2):
    cfg = VllmConfig()
    cfg.parallel_config.tensor_parallel_size = tp
    cfg.compilation_config.pass_config.fuse_allreduce_rms = True
    cfg.model_config = types.SimpleNamespace(dtype=torch.bfloat16, get_hidden_size=lambda: 64,
                                             using_transformers_backend=lambda: False)
    return cfg


def layer(x1, x2, residual, w1, w2):
    """Two all-reduces, each followed by one of vLLM's norms, as a decoder layer has them."""
    h = tensor_model_parallel_all_reduce(x1)
    y, r = vllm.ir.ops.fused_add_rms_norm(h, residual, w1, EPS)
    z = tensor_model_parallel_all_reduce(x2 + y)
    return vllm.ir.ops.rms_norm(z, w2, EPS), r, z


def inputs(tokens=5, hidden=64, device="cpu"):
    g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))

    def t(*shape):
        return torch.randn(*shape, generator=g).to(torch.bfloat16).to(device)

    return [t(tokens, hidden), t(tokens, hidden), t(tokens, hidden), t(hidden), t(hidden)]


def eager_unfused(group, args):
    """`layer` run eagerly (vLLM's all_reduce op has only a CUDA kernel: the group's own
    out-of-place all-reduce is called directly, as vLLM does without its custom op)."""
    group.use_custom_op_call = False
    try:
        return layer(*args)
    finally:
        del group.use_custom_op_call


def traced_and_fused(cfg, fn=None, make_inputs=None):
    """(the post-grad graph of `fn` (default `layer`), the same graph after vLLM's post-grad
    pass manager). Traced under `cfg`, as vLLM traces a model: its quant matcher emits the form
    (custom op or native) the config asks for."""
    import torch._inductor.pattern_matcher as pm
    from torch._subclasses.fake_tensor import FakeTensorMode
    from vllm.compilation.passes.pass_manager import PostGradPassManager

    fn = fn or layer
    make_inputs = make_inputs or (lambda: inputs(device="cuda"))
    with set_current_vllm_config(cfg):
        with FakeTensorMode():
            fake = make_inputs()
            before = pm.fwd_only(fn, fake)
            after = pm.fwd_only(fn, fake)
    manager = PostGradPassManager()
    with set_current_vllm_config(cfg), pass_context(Range(start=1, end=8192)):
        manager.configure(cfg)
        manager(after.graph)
    after.recompile()
    return before, after, manager


def targets(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_the_plugin_installs_the_pass_and_the_default(plugin):
    from vllm.compilation.passes.fusion import allreduce_rms_fusion

    assert allreduce_rms_fusion.AllReduceFusionPass is vllm_fusion.TparAllReduceFusionPass
    for level in ("OPTIMIZATION_LEVEL_02", "OPTIMIZATION_LEVEL_03"):
        entry = getattr(vllm_config_module, level)["compilation_config"]["pass_config"]
        assert entry["fuse_allreduce_rms"] is vllm_fusion._enable_default, level
    cfg = VllmConfig()
    cfg.parallel_config.tensor_parallel_size = 2
    assert vllm_fusion._enable_default(cfg)
    cfg.parallel_config.tensor_parallel_size = 1
    assert not vllm_fusion._enable_default(cfg)


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_a_tpar_group_gets_tpars_pass_and_its_graph_calls_the_fused_op(group):
    # The line goes to vLLM's logger family (vLLM's own handler; it does not propagate).
    seen = Lines()
    log = logging.getLogger("vllm.tpar")
    log.addHandler(seen)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        before, after, manager = traced_and_fused(make_config())
    finally:
        log.removeHandler(seen)
        log.setLevel(level)
    assert "tpar: vLLM's all-reduce + RMSNorm fusion ends in tpar's fused kernel for group " \
           "tp:0 (2 ranks)" in seen.lines
    assert "TparAllReduceFusionPass" in [p.pass_name for p in manager.passes]
    assert targets(before).count("vllm.all_reduce.default") == 2
    names = targets(after)
    assert names.count(FUSED) == 2, names
    assert not [n for n in names if n.startswith(("vllm.all_reduce", "vllm_ir."))], names


def test_a_group_tpar_does_not_serve_gets_vllms_own_pass(group):
    group.device_communicator.ca_comm = None  # vLLM's own custom all-reduce, or none
    before, after, manager = traced_and_fused(make_config())
    assert vllm_fusion.original_pass.__name__ in [type(p).__name__ for p in manager.passes]
    assert FUSED not in targets(after)
    assert targets(after).count("vllm.all_reduce.default") == 2


def test_the_fused_graph_computes_what_the_unfused_graph_computes(group, bf16_close):
    _, after, _ = traced_and_fused(make_config())
    args = inputs()
    adapter = group.device_communicator.ca_comm
    residual_before = args[2].clone()
    out, r, z = after(*args)
    assert adapter.comm.calls == 2 and adapter.fused_calls == 2
    assert torch.equal(args[2], residual_before), "the residual input was written"
    # Both calls against the float64 sequence of the stand-in group.
    y1, r1 = unfused_reference(args[0], args[2], args[3], EPS)
    assert torch.equal(r, r1)
    out2, z2 = unfused_reference(args[1] + y1, None, args[4], EPS)
    assert torch.equal(z, z2) and torch.equal(out, out2)
    # And each call against vLLM's own norm ops given the same all-reduced values (a chain of
    # the two would carry the first call's last-place differences into the second's sum).
    s1 = (2 * args[0].float()).to(torch.bfloat16)
    want_y1, want_r1 = vllm.ir.ops.fused_add_rms_norm(s1, args[2].clone(), args[3], EPS)
    bf16_close(y1, want_y1)
    bf16_close(r, want_r1)
    bf16_close(out, vllm.ir.ops.rms_norm(z, args[4], EPS))


def test_a_call_the_adapter_declines_runs_the_unfused_sequence_exactly(group):
    _, after, _ = traced_and_fused(make_config())
    adapter = stand_in_adapter(max_size=64)  # smaller than one call: every call declined
    group.device_communicator.ca_comm = adapter
    args = inputs()
    got = after(*args)
    assert adapter.comm.calls == 0 and adapter.fused_calls == 0
    want = eager_unfused(group, args)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


# ---- the quantized patterns: vLLM's static FP8 and NVFP4 ---------------------------------------


def fp8_quant():
    """vLLM's static per-tensor FP8 quantization as its models emit it (its pattern matcher's
    own object, so the test's graph has the form vLLM's patterns look for)."""
    from vllm.compilation.passes.fusion.matcher_utils import MatcherQuantFP8
    from vllm.model_executor.layers.quantization.utils.quant_utils import kFp8StaticTensorSym

    return MatcherQuantFP8(kFp8StaticTensorSym)


def fp8_layer(x1, x2, residual, w1, w2, scale):
    """Two all-reduces, each followed by one of vLLM's norms whose output only feeds the FP8
    quantization for the next GEMM (a norm output used elsewhere too keeps its own node, and
    the unquantized pattern takes it)."""
    quant = fp8_quant()
    h = tensor_model_parallel_all_reduce(x1)
    y, r = vllm.ir.ops.fused_add_rms_norm(h, residual, w1, EPS)
    q1, _ = quant(y, scale)
    z = tensor_model_parallel_all_reduce(x2)
    q2, _ = quant(vllm.ir.ops.rms_norm(z, w2, EPS), scale)
    return q1, r, q2, z


def fp8_inputs(device="cpu"):
    value = 0.002 + int.from_bytes(os.urandom(2), "little") / 65536 * 0.01  # |y| / 448 or so
    scale = torch.tensor([value], dtype=torch.float32, device=device)
    return inputs(device=device) + [scale]


def test_static_fp8_quantization_after_the_norm_ends_in_tpars_fp8_op(group):
    before, after, _ = traced_and_fused(make_config(), fp8_layer,
                                        lambda: fp8_inputs(device="cuda"))
    names_before = targets(before)
    assert names_before.count("vllm.all_reduce.default") == 2
    # vLLM's quantization, native or its custom op as the config asks: every node after the
    # norms' in the unfused graph.
    first_norm = min(i for i, n in enumerate(names_before) if n.startswith("vllm_ir."))
    quant_ops = {n for n in names_before[first_norm:]
                 if not n.startswith(("vllm.", "vllm_ir.", "<built-in"))} - {"aten.add.Tensor"}
    assert quant_ops, names_before  # the layer does quantize
    names = targets(after)
    assert names.count(FUSED_FP8) == 2, names
    assert FUSED not in names, names
    assert not [n for n in names if n.startswith(("vllm.all_reduce", "vllm_ir."))], names
    assert not [n for n in names if n in quant_ops], names


def test_the_fp8_graph_computes_the_unfused_sequence_then_vllms_static_quantization(group):
    _, after, _ = traced_and_fused(make_config(), fp8_layer, lambda: fp8_inputs(device="cuda"))
    args = fp8_inputs()
    adapter = group.device_communicator.ca_comm
    residual_before = args[2].clone()
    q1, r, q2, z = after(*args)
    assert adapter.comm.calls == 2 and adapter.fused_calls == 2
    assert torch.equal(args[2], residual_before), "the residual input was written"
    assert q1.dtype == q2.dtype == torch.float8_e4m3fn and q1.shape == args[0].shape
    y1, r1 = unfused_reference(args[0], args[2], args[3], EPS)
    assert torch.equal(r, r1)
    out2, z2 = unfused_reference(args[1], None, args[4], EPS)
    assert torch.equal(z, z2)
    scale = args[5]
    assert torch.equal(q1.view(torch.uint8), fp8_static(y1, scale).view(torch.uint8))
    assert torch.equal(q2.view(torch.uint8), fp8_static(out2, scale).view(torch.uint8))


def nvfp4_layer(x1, x2, residual, w1, w2, g, packed1, scales1, packed2, scales2):
    """`layer` with each norm's output quantized to NVFP4 by vLLM's scaled_fp4_quant (the
    functional form its graphs hold after functionalization)."""
    from torch._higher_order_ops.auto_functionalize import auto_functionalized

    op = torch.ops._C.scaled_fp4_quant.out
    h = tensor_model_parallel_all_reduce(x1)
    y, r = vllm.ir.ops.fused_add_rms_norm(h, residual, w1, EPS)
    a = auto_functionalized(op, input=y, input_scale=g, is_sf_swizzled_layout=True,
                            output=packed1, output_scale=scales1)
    z = tensor_model_parallel_all_reduce(x2)
    b = auto_functionalized(op, input=vllm.ir.ops.rms_norm(z, w2, EPS), input_scale=g,
                            is_sf_swizzled_layout=True, output=packed2, output_scale=scales2)
    return a[1], a[2], r, b[1], b[2], z


def test_nvfp4_quantization_after_the_norm_ends_in_tpars_nvfp4_op(group):
    if not hasattr(torch.ops._C, "scaled_fp4_quant"):
        pytest.skip("this vLLM has no scaled_fp4_quant")
    tokens, hidden = 5, 64

    def make():
        def t(*shape, dt):
            return torch.empty(*shape, dtype=dt, device="cuda")

        return (inputs(tokens, hidden, device="cuda")
                + [t(1, 1, dt=torch.float32),
                   t(tokens, hidden // 2, dt=torch.uint8), t(128, 1, dt=torch.int32),
                   t(tokens, hidden // 2, dt=torch.uint8), t(128, 1, dt=torch.int32)])

    before, after, _ = traced_and_fused(make_config(), nvfp4_layer, make)
    assert targets(before).count("vllm.all_reduce.default") == 2
    names = targets(after)
    assert names.count(FUSED_NVFP4) == 2, names
    assert FUSED not in names, names
    assert not [n for n in names if n.startswith(("vllm.all_reduce", "vllm_ir."))], names
    assert not [n for n in names if "scaled_fp4_quant" in n or "auto_functionalized" in n], names
