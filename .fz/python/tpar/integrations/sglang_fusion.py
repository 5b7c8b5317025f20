"""SGLang's all-reduce + residual + RMSNorm fusion ending in tpar's fused kernel (written against
SGLang 0.5.23; docs/integration.md, "Fused all-reduce + RMSNorm").

SGLang fuses the all-reduce that completes a layer's output with the next residual add and
RMSNorm when ``flashinfer_ar_fusion_applies(batch_size)`` (in
``sglang.srt.layers.layer_boundary.residual.add_norm``, imported by name into the layer
boundary's ``exit`` and ``fusions.allreduce``) says so: then the norm's
``forward_with_allreduce_fusion`` imports ``flashinfer_allreduce_residual_rmsnorm`` from
``sglang.srt.layers.flashinfer_comm_fusion`` on every call and, when that returns (None, None),
runs the all-reduce and its own add + norm instead. SGLang offers no other hook, so
:func:`install` replaces those two names:

- ``flashinfer_ar_fusion_applies``: true where tpar serves the attention tensor-parallel group
  (no DP attention, no CuTe-DSL fusion, batch within SGLang's bound), whatever the GPU and
  whether FlashInfer is installed; else SGLang's own answer.
- ``flashinfer_allreduce_residual_rmsnorm``: for a group whose custom all-reduce is tpar's
  adapter and a call it takes (the same test as a plain all-reduce, plus the fused shape
  rules), ``torch.ops.tpar.sglang_all_reduce_add_rms_norm``: the norm and a new residual
  tensor, the given residual only read, as SGLang's FlashInfer wrapper returns them; anything
  else goes to SGLang's function, FlashInfer or its (None, None).
"""
from __future__ import annotations

import sys
from typing import Optional, Tuple

import torch

from . import logger
from ._adapter import EngineAllReduce

_FUSION_MODULE = "sglang.srt.layers.flashinfer_comm_fusion"
_APPLIES_MODULE = "sglang.srt.layers.layer_boundary.residual.add_norm"
# Modules that import flashinfer_ar_fusion_applies by name.
_APPLIES_USERS = ("sglang.srt.layers.layer_boundary.exit",
                  "sglang.srt.layers.layer_boundary.fusions.allreduce")

# SGLang's own functions, as install() found them.
original_fused = None
original_applies = None


def _group(use_attn_tp_group: bool):
    from sglang.srt.layers.flashinfer_comm_fusion import resolve_fusion_group

    return resolve_fusion_group(use_attn_tp_group=use_attn_tp_group)[2]


def _adapter(use_attn_tp_group: bool) -> Optional[EngineAllReduce]:
    try:
        group = _group(use_attn_tp_group)
    except Exception:  # noqa: BLE001 - no group yet: not tpar's call
        return None
    ca = getattr(group, "ca_comm", None)
    return ca if isinstance(ca, EngineAllReduce) and not ca.disabled else None


@torch.library.custom_op("tpar::sglang_all_reduce_add_rms_norm", mutates_args=())
def sglang_all_reduce_add_rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float,
                                   residual: torch.Tensor, use_attn_tp_group: bool
                                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(norm, new residual) over SGLang's attention-TP group (or the MoE reduction group): the
    residual is only read."""
    adapter = _adapter(use_attn_tp_group)
    if adapter is None:
        raise RuntimeError("tpar: the group's custom all-reduce is no longer tpar's")
    adapter.check_async_error()
    return adapter.all_reduce_add_rms_norm(input, weight, eps, residual)


@sglang_all_reduce_add_rms_norm.register_fake
def _fake(input, weight, eps, residual, use_attn_tp_group):
    return torch.empty_like(input), torch.empty_like(input)


def flashinfer_allreduce_residual_rmsnorm(input_tensor, residual, weight, eps=1e-6,
                                          max_token_num=2048, use_oneshot=None,
                                          trigger_completion_at_end=False, fp32_acc=True,
                                          use_attn_tp_group=True):
    """SGLang's function of this name, taken by tpar where tpar serves the group (see the
    module); the same arguments and results."""
    adapter = _adapter(use_attn_tp_group)
    if adapter is not None and adapter.fits_fused(input_tensor, weight, residual):
        return torch.ops.tpar.sglang_all_reduce_add_rms_norm(input_tensor, weight, eps,
                                                             residual, use_attn_tp_group)
    if original_fused is None:
        return None, None
    return original_fused(input_tensor=input_tensor, residual=residual, weight=weight, eps=eps,
                          max_token_num=max_token_num, use_oneshot=use_oneshot,
                          trigger_completion_at_end=trigger_completion_at_end, fp32_acc=fp32_acc,
                          use_attn_tp_group=use_attn_tp_group)


def _tpar_applies(batch_size: int) -> bool:
    """Whether SGLang's layer boundary should plan the fused path for tpar (see the module)."""
    if _adapter(True) is None:
        return False
    add_norm = sys.modules.get(_APPLIES_MODULE)
    from sglang.srt.layers.dp_attention import is_dp_attention_enabled

    if is_dp_attention_enabled():
        return False
    cutedsl = getattr(add_norm, "uses_cutedsl_ar_fusion", None)
    if cutedsl is not None and cutedsl():
        return False
    bound = getattr(add_norm, "FUSE_ALLREDUCE_MAX_BATCH_SIZE", 2048)
    return 0 < batch_size <= bound


def flashinfer_ar_fusion_applies(batch_size: int):
    """SGLang's function of this name: true where tpar takes the fusion, else SGLang's answer."""
    if _tpar_applies(batch_size):
        return True
    return original_applies(batch_size) if original_applies is not None else False


def install() -> bool:
    """Replaces the two names (see the module). Idempotent; False (and one warning) where this
    SGLang lacks them."""
    global original_fused, original_applies
    import importlib

    try:
        fusion = importlib.import_module(_FUSION_MODULE)
        add_norm = importlib.import_module(_APPLIES_MODULE)
        users = [importlib.import_module(m) for m in _APPLIES_USERS]
    except Exception as e:  # noqa: BLE001 - the all-reduce plugin works without the fusion
        logger.warning("tpar: SGLang's all-reduce + RMSNorm fusion stays SGLang's: %s", e)
        return False
    fused = getattr(fusion, "flashinfer_allreduce_residual_rmsnorm", None)
    applies = getattr(add_norm, "flashinfer_ar_fusion_applies", None)
    if fused is None or applies is None:
        logger.warning("tpar: SGLang's all-reduce + RMSNorm fusion stays SGLang's: this SGLang "
                       "has no flashinfer_allreduce_residual_rmsnorm or "
                       "flashinfer_ar_fusion_applies")
        return False
    if fused is not flashinfer_allreduce_residual_rmsnorm:
        original_fused = fused
        fusion.flashinfer_allreduce_residual_rmsnorm = flashinfer_allreduce_residual_rmsnorm
    if applies is not flashinfer_ar_fusion_applies:
        original_applies = applies
    for module in (add_norm, *users):
        if getattr(module, "flashinfer_ar_fusion_applies", None) is original_applies:
            module.flashinfer_ar_fusion_applies = flashinfer_ar_fusion_applies
    return True
