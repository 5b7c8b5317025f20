"""vLLM's all-reduce + RMSNorm fusion ending in tpar's fused kernel (written against vLLM 0.33.0;
docs/integration.md, "Fused all-reduce + RMSNorm").

vLLM fuses ``tensor_model_parallel_all_reduce`` followed by its RMSNorm IR ops in the compile
pass ``AllReduceFusionPass`` (``compilation.pass_config.fuse_allreduce_rms``), whose replacement
is FlashInfer's NVLink kernel. With the plugin on, :func:`install` points vLLM's name
``AllReduceFusionPass`` at :class:`TparAllReduceFusionPass`: for a tensor-parallel group that tpar
serves it registers the same patterns (with and without a residual) with
``torch.ops.tpar.vllm_all_reduce_add_rms_norm`` as the replacement, and vLLM's static FP8 and
NVFP4 quantized patterns with ``torch.ops.tpar.vllm_all_reduce_add_rms_norm_fp8`` and
``..._nvfp4`` (the quantized copy and r, no unquantized out); for any other group
(vLLM's own custom all-reduce kept on NVLink, tpar off) it is vLLM's own pass, built from the
same config. :func:`install` also makes the fusion vLLM's default at -O2 and -O3 wherever
tensor parallelism runs on CUDA (vLLM's default asks for FlashInfer and sm90/sm100, which tpar
does not need); ``-cc.pass_config.fuse_allreduce_rms=false`` still turns it off.

At run time the op asks the group's custom all-reduce: when tpar's adapter takes the call it
runs tparAllReduceAddRmsNorm, otherwise (a message above the adapter's limit, an adapter that
is off) the group's own all-reduce followed by vLLM's RMSNorm ops, the unfused sequence.
"""
from __future__ import annotations

import logging
from typing import Optional, Tuple

import torch

from . import logger
from ._adapter import EngineAllReduce

# The pass's lines go where vLLM's own are seen: vLLM configures only its "vllm" logger.
engine_log = logging.getLogger("vllm.tpar")

_PASS_MODULE = "vllm.compilation.passes.fusion.allreduce_rms_fusion"
_PASS_MANAGER = "vllm.compilation.passes.pass_manager"
_CONFIG_MODULE = "vllm.config.vllm"

# vLLM's own AllReduceFusionPass and enable_allreduce_rms_fusion, as install() found them.
original_pass = None
original_enable = None


# ---- the op ---------------------------------------------------------------------------------


def _coordinator(group_name: str):
    from vllm.distributed import parallel_state

    ref = parallel_state._groups.get(group_name)
    group = ref() if ref is not None else None
    if group is None:
        raise ValueError(f"tpar: vLLM group {group_name!r} is not found (destroyed, or never made)")
    return group


def _adapter_of(group) -> Optional[EngineAllReduce]:
    ca = getattr(getattr(group, "device_communicator", None), "ca_comm", None)
    return ca if isinstance(ca, EngineAllReduce) and not ca.disabled else None


@torch.library.custom_op("tpar::vllm_all_reduce_add_rms_norm", mutates_args=())
def vllm_all_reduce_add_rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float,
                                 residual: Optional[torch.Tensor], group_name: str
                                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(out, r) for vLLM group `group_name`: r = residual + all_reduce(input) (the sum without a
    residual), out = rms_norm(r) * weight; `residual` is only read."""
    group = _coordinator(group_name)
    adapter = _adapter_of(group)
    if adapter is not None and adapter.takes_fused(input, weight, residual):
        return adapter.all_reduce_add_rms_norm(input, weight, eps, residual)
    out, r = _unfused(group, input, weight, eps, residual)
    return out, r


@vllm_all_reduce_add_rms_norm.register_fake
def _fake(input, weight, eps, residual, group_name):
    return torch.empty_like(input), torch.empty_like(input)


def _takes_quant(adapter, input, weight, residual, quant: str) -> bool:
    return (adapter is not None and input.dtype in (torch.float16, torch.bfloat16)
            and (quant != "nvfp4" or input.shape[-1] % 16 == 0)
            and adapter.takes_fused(input, weight, residual))


def _unfused(group, input, weight, eps, residual):
    """(y, r) of the group's own all-reduce followed by vLLM's norm ops."""
    import vllm.ir.ops

    reduced = group._all_reduce_out_place(input)
    if residual is None:
        return vllm.ir.ops.rms_norm(reduced, weight, eps), reduced
    return vllm.ir.ops.fused_add_rms_norm(reduced, residual, weight, eps)


@torch.library.custom_op("tpar::vllm_all_reduce_add_rms_norm_fp8", mutates_args=())
def vllm_all_reduce_add_rms_norm_fp8(input: torch.Tensor, weight: torch.Tensor, eps: float,
                                     residual: Optional[torch.Tensor], scale: torch.Tensor,
                                     group_name: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """(q, r): r as in vllm_all_reduce_add_rms_norm, q = e4m3(rms_norm(r) * weight / scale)
    (float8_e4m3fn; `scale` vLLM's static per-tensor scale), no unquantized out."""
    group = _coordinator(group_name)
    adapter = _adapter_of(group)
    if _takes_quant(adapter, input, weight, residual, "fp8_static"):
        q, r, _ = adapter.all_reduce_add_rms_norm_quant(input, weight, eps, residual,
                                                        "fp8_static", scale)
        return q, r
    from vllm import _custom_ops

    y, r = _unfused(group, input, weight, eps, residual)
    q, _ = _custom_ops.scaled_fp8_quant(y.reshape(-1, y.shape[-1]), scale)
    return q.view(y.shape), r


@vllm_all_reduce_add_rms_norm_fp8.register_fake
def _fake_fp8(input, weight, eps, residual, scale, group_name):
    return torch.empty_like(input, dtype=torch.float8_e4m3fn), torch.empty_like(input)


def _nvfp4_scale_shape(input) -> Tuple[int, int]:
    """vLLM's NVFP4 block-scale tensor (int32, 4 e4m3 scales each) for `input`'s rows."""
    hidden = input.shape[-1]
    rows = input.numel() // hidden
    return (rows + 127) // 128 * 128, (hidden // 16 + 3) // 4


@torch.library.custom_op("tpar::vllm_all_reduce_add_rms_norm_nvfp4", mutates_args=())
def vllm_all_reduce_add_rms_norm_nvfp4(input: torch.Tensor, weight: torch.Tensor, eps: float,
                                       residual: Optional[torch.Tensor],
                                       global_scale: torch.Tensor, group_name: str
                                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, r, block_scale): r as in vllm_all_reduce_add_rms_norm, q and block_scale the NVFP4
    quantization of rms_norm(r) * weight as vLLM's scaled_fp4_quant lays them out (q uint8
    [rows, hidden / 2], block_scale int32 in the swizzled layout), no unquantized out."""
    group = _coordinator(group_name)
    adapter = _adapter_of(group)
    if _takes_quant(adapter, input, weight, residual, "nvfp4"):
        return adapter.all_reduce_add_rms_norm_quant(input, weight, eps, residual, "nvfp4",
                                                     global_scale)
    from vllm import _custom_ops

    y, r = _unfused(group, input, weight, eps, residual)
    q, block_scale = _custom_ops.scaled_fp4_quant(y, global_scale, is_sf_swizzled_layout=True)
    return q, r, block_scale.view(torch.int32)


@vllm_all_reduce_add_rms_norm_nvfp4.register_fake
def _fake_nvfp4(input, weight, eps, residual, global_scale, group_name):
    rows = input.numel() // input.shape[-1]
    q = input.new_empty((rows, input.shape[-1] // 2), dtype=torch.uint8)
    return q, torch.empty_like(input), input.new_empty(_nvfp4_scale_shape(input),
                                                       dtype=torch.int32)


# ---- the pass -------------------------------------------------------------------------------


def _dtypes_match(match) -> bool:
    """The fused kernel takes a weight of the input's dtype (a Gemma-style fp32 weight + 1 stays
    with vLLM's unfused ops)."""
    norm_ops = (torch.ops.vllm_ir.rms_norm.default, torch.ops.vllm_ir.fused_add_rms_norm.default)
    for node in match.nodes:
        if node.target not in norm_ops:
            continue
        x = node.args[0]
        weight = node.args[1] if node.target == norm_ops[0] else node.args[2]
        if isinstance(x, torch.fx.Node) and isinstance(weight, torch.fx.Node):
            return x.meta["val"].dtype == weight.meta["val"].dtype
    return True


def serves_tp_group() -> Tuple[bool, str]:
    """(True, why) when the tensor-parallel group's custom all-reduce is tpar's adapter and on."""
    from vllm.distributed.parallel_state import get_tp_group

    group = get_tp_group()
    if group.world_size <= 1:
        return False, "tensor parallelism of 1"
    if _adapter_of(group) is None:
        return False, f"group {group.unique_name}'s custom all-reduce is not tpar"
    return True, f"group {group.unique_name} ({group.world_size} ranks)"


def _pass_base():
    from vllm.compilation.passes.vllm_inductor_pass import VllmPatternMatcherPass

    return VllmPatternMatcherPass


class _Factory(type):
    """Constructing TparAllReduceFusionPass gives vLLM's own pass where tpar does not serve the
    group, so the pass manager needs no change."""

    def __call__(cls, config):
        ok, why = serves_tp_group()
        if not ok and original_pass is not None:
            engine_log.debug("tpar: vLLM's all-reduce + RMSNorm fusion is its own here: %s", why)
            return original_pass(config)
        return _TparPass.make(config, ok, why)


class TparAllReduceFusionPass(metaclass=_Factory):
    """What vLLM's pass manager builds under the name AllReduceFusionPass (see the module)."""


class _TparPass:
    """Built on first use: vLLM's pass classes are imported only then."""

    cls = None

    @classmethod
    def make(cls, config, ok: bool, why: str):
        if cls.cls is None:
            cls.cls = _define_pass(_pass_base())
        return cls.cls(config, ok, why)


def _define_pass(base):
    import torch._inductor.pattern_matcher as pm
    from torch._inductor.pattern_matcher import PatternMatcherPass

    class _Pass(base):
        def __init__(self, config, ok: bool, why: str):
            super().__init__(config)
            self.disabled = True
            self.pass_name = "TparAllReduceFusionPass"
            if not ok:
                engine_log.info("tpar: vLLM's all-reduce + RMSNorm fusion is off: %s", why)
                return
            self.patterns = PatternMatcherPass(pass_name="tpar_all_reduce_fusion_pass")
            self._register()
            self.disabled = False
            engine_log.info("tpar: vLLM's all-reduce + RMSNorm fusion ends in tpar's fused "
                            "kernel for %s", why)

        def _register(self):
            from vllm.compilation.passes.inductor_pass import enable_fake_mode

            enable_fake_mode(self._register_patterns)()

        def _register_patterns(self):
            import vllm.ir.ops
            from vllm.distributed import tensor_model_parallel_all_reduce
            from vllm.distributed.parallel_state import get_tp_group

            group_name = get_tp_group().unique_name
            dtype, device = self.model_dtype, self.device
            op = torch.ops.tpar.vllm_all_reduce_add_rms_norm.default

            def empty(*shape):
                return torch.empty(*shape, dtype=dtype, device=device)

            def patterns(eps):
                # A closure per epsilon: the matcher takes every parameter for a pattern input.
                def with_residual(residual, input, weight):
                    reduced = tensor_model_parallel_all_reduce(input)
                    out, r = vllm.ir.ops.fused_add_rms_norm(reduced, residual, weight, eps)
                    return out, r

                def with_residual_fused(residual, input, weight):
                    out, r = op(input, weight, eps, residual, group_name)
                    return out, r

                def with_residual_out(residual, input, weight):
                    return with_residual(residual, input, weight)[0]

                def with_residual_out_fused(residual, input, weight):
                    return with_residual_fused(residual, input, weight)[0]

                def without_residual(input, weight):
                    reduced = tensor_model_parallel_all_reduce(input)
                    return vllm.ir.ops.rms_norm(reduced, weight, eps), reduced

                def without_residual_fused(input, weight):
                    out, r = op(input, weight, eps, None, group_name)
                    return out, r

                three = [empty(5, 16), empty(5, 16), empty(16)]
                return [(with_residual, with_residual_fused, three),
                        # The last layer's norm: the residual is not used again.
                        (with_residual_out, with_residual_out_fused, three),
                        (without_residual, without_residual_fused, [empty(5, 16), empty(16)])]

            def quant_patterns(eps):
                # vLLM's static FP8 and NVFP4 patterns (its own quant matcher and op), ending in
                # tpar's op that writes only the quantized copy and r.
                from torch._higher_order_ops.auto_functionalize import auto_functionalized
                from vllm.compilation.passes.fusion.matcher_utils import MatcherQuantFP8
                from vllm.model_executor.layers.quantization.utils.quant_utils import (
                    kFp8StaticTensorSym,
                )

                fp8 = torch.ops.tpar.vllm_all_reduce_add_rms_norm_fp8.default
                fp4 = torch.ops.tpar.vllm_all_reduce_add_rms_norm_nvfp4.default
                quant = MatcherQuantFP8(kFp8StaticTensorSym)
                _, scale = quant.inputs()

                def fp8_residual(residual, input, weight, scale):
                    reduced = tensor_model_parallel_all_reduce(input)
                    y, r = vllm.ir.ops.fused_add_rms_norm(reduced, residual, weight, eps)
                    q, _ = quant(y, scale)
                    return q, r

                def fp8_residual_fused(residual, input, weight, scale):
                    q, r = fp8(input, weight, eps, residual, scale, group_name)
                    return q, r

                def fp8_first(input, weight, scale):
                    reduced = tensor_model_parallel_all_reduce(input)
                    q, _ = quant(vllm.ir.ops.rms_norm(reduced, weight, eps), scale)
                    return q, reduced

                def fp8_first_fused(input, weight, scale):
                    q, r = fp8(input, weight, eps, None, scale, group_name)
                    return q, r

                found = [(fp8_residual, fp8_residual_fused,
                          [empty(5, 16), empty(5, 16), empty(16), scale]),
                         (fp8_first, fp8_first_fused, [empty(5, 16), empty(16), scale])]
                fp4_quant = getattr(torch.ops._C, "scaled_fp4_quant", None)
                if fp4_quant is None:  # a vLLM built without NVFP4
                    return found

                def fp4_residual(quant_result, residual, input, output_scale, weight, g):
                    reduced = tensor_model_parallel_all_reduce(input)
                    y, r = vllm.ir.ops.fused_add_rms_norm(reduced, residual, weight, eps)
                    at = auto_functionalized(fp4_quant.out, input=y, input_scale=g,
                                             is_sf_swizzled_layout=True, output=quant_result,
                                             output_scale=output_scale)
                    return at[1], r, at[2]

                def fp4_residual_fused(quant_result, residual, input, output_scale, weight, g):
                    q, r, block_scale = fp4(input, weight, eps, residual, g, group_name)
                    return q, r, block_scale

                def fp4_first(input, quant_result, weight, g, output_scale):
                    reduced = tensor_model_parallel_all_reduce(input)
                    y = vllm.ir.ops.rms_norm(reduced, weight, eps)
                    at = auto_functionalized(fp4_quant.out, input=y, input_scale=g,
                                             is_sf_swizzled_layout=True, output=quant_result,
                                             output_scale=output_scale)
                    return at[1], reduced, at[2]

                def fp4_first_fused(input, quant_result, weight, g, output_scale):
                    q, r, block_scale = fp4(input, weight, eps, None, g, group_name)
                    return q, r, block_scale

                def tensor(*shape, dt):
                    return torch.empty(*shape, dtype=dt, device=device)

                packed = tensor(16, 8, dt=torch.uint8)
                scales = tensor(128, 4, dt=torch.int32)
                g = tensor(1, 1, dt=torch.float32)
                found += [(fp4_residual, fp4_residual_fused,
                           [packed, empty(16, 16), empty(16, 16), scales, empty(16), g]),
                          (fp4_first, fp4_first_fused,
                           [empty(16, 16), packed, empty(16), g, scales])]
                return found

            for eps in (1e-5, 1e-6):
                # The quantized patterns first: each contains an unquantized one.
                for pattern, replacement, inputs in quant_patterns(eps):
                    pm.register_replacement(pattern, replacement, inputs, pm.fwd_only,
                                            self.patterns, extra_check=_dtypes_match)
                for pattern, replacement, inputs in patterns(eps):
                    pm.register_replacement(pattern, replacement, inputs, pm.fwd_only,
                                            self.patterns, extra_check=_dtypes_match)
                # Several epsilons: the matcher would otherwise keep only the first.
                torch._inductor.pattern_matcher._seen_patterns.clear()

        def is_applicable_for_range(self, compile_range) -> bool:
            # Any number of tokens: the op falls back to the unfused sequence where the adapter
            # does not take the call, and tpar splits larger calls by whole rows.
            return not self.disabled

        def __call__(self, graph) -> None:
            if self.disabled:
                return
            self.matched_count = self.patterns.apply(graph)
            engine_log.debug("tpar: %d all-reduce + RMSNorm sequences fused", self.matched_count)

        def uuid(self) -> str:
            # Inductor's cache key: this file's text (the patterns and the op live here).
            with open(__file__, encoding="utf-8") as f:
                return self.hash_source(f.read())

    return _Pass


# ---- installation ---------------------------------------------------------------------------


def _enable_default(cfg) -> bool:
    """vLLM's default for fuse_allreduce_rms, or on wherever tensor parallelism runs on CUDA
    (vLLM's own condition asks for FlashInfer on sm90/sm100)."""
    if original_enable is not None and original_enable(cfg):
        return True
    from vllm import envs
    from vllm.platforms import current_platform

    return (not envs.VLLM_BATCH_INVARIANT and current_platform.is_cuda()
            and cfg.parallel_config.tensor_parallel_size > 1)


def install() -> bool:
    """Points vLLM's AllReduceFusionPass and its -O2/-O3 default at tpar's. Idempotent; False
    (and one warning) where this vLLM lacks the names it replaces."""
    global original_pass, original_enable
    import importlib

    try:
        passes = importlib.import_module(_PASS_MODULE)
        config = importlib.import_module(_CONFIG_MODULE)
    except Exception as e:  # noqa: BLE001 - the all-reduce plugin works without the fusion
        logger.warning("tpar: vLLM's all-reduce + RMSNorm fusion stays vLLM's: %s", e)
        return False
    current = getattr(passes, "AllReduceFusionPass", None)
    enable = getattr(config, "enable_allreduce_rms_fusion", None)
    if current is None or enable is None:
        logger.warning("tpar: vLLM's all-reduce + RMSNorm fusion stays vLLM's: this vLLM has no "
                       "AllReduceFusionPass or enable_allreduce_rms_fusion")
        return False
    if current is not TparAllReduceFusionPass:
        original_pass = current
        passes.AllReduceFusionPass = TparAllReduceFusionPass
    if enable is not _enable_default:
        original_enable = enable
        config.enable_allreduce_rms_fusion = _enable_default
    for name in dir(config):
        levels = getattr(config, name)
        if not name.startswith("OPTIMIZATION_LEVEL_0") or not isinstance(levels, dict):
            continue
        pass_config = levels.get("compilation_config", {}).get("pass_config", {})
        if pass_config.get("fuse_allreduce_rms") is original_enable:
            pass_config["fuse_allreduce_rms"] = _enable_default
    import sys

    manager = sys.modules.get(_PASS_MANAGER)
    if manager is not None and getattr(manager, "AllReduceFusionPass", None) is original_pass:
        manager.AllReduceFusionPass = TparAllReduceFusionPass
    return True
