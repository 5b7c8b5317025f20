"""tpar as vLLM's custom all-reduce (written against vLLM 0.33.0; docs/integration.md).

vLLM's CudaCommunicator imports ``CustomAllreduce`` from
``vllm.distributed.device_communicators.custom_all_reduce`` inside its constructor, for the
tensor-parallel group only, unless ``--disable-custom-all-reduce`` is given, and builds it with
keywords only: ``CustomAllreduce(group=, device=, symm_mem_enabled=, register_graph_buffers=)``.
The plugin ``register`` (entry point ``vllm.general_plugins``, loaded by every vLLM process
before its communicators are built) points that name at :class:`VllmAllReduce` when
TPAR_ENGINE_PLUGIN=1, and keeps vLLM's class in :data:`original_class`: on a group whose GPUs
are all joined by NVLink, constructing VllmAllReduce returns vLLM's own object, built from the
same arguments. vLLM tries FlashInfer's all-reduce before the custom one; the plugin turns that off
unless VLLM_ALLREDUCE_USE_FLASHINFER is set explicitly. The all-reduce + RMSNorm fusion of vLLM's
compiler ends in tpar's fused kernel for the groups tpar serves (:mod:`.vllm_fusion`).
"""
from __future__ import annotations

import os

from . import check_settings, enabled, logger
from ._adapter import EngineAllReduce

_MODULE = "vllm.distributed.device_communicators.custom_all_reduce"

# vLLM's own CustomAllreduce, as register() found it (None until then).
original_class = None


class VllmAllReduce(EngineAllReduce):
    """Takes vLLM's constructor arguments: (group, device, max_size=8 MiB, ..., symm_mem_enabled,
    *, register_graph_buffers); the ones about vLLM's own buffers are accepted and ignored."""

    engine = "vLLM"
    engine_logger = "vllm"
    max_size_inclusive = False  # `<`: vLLM's own rule for its custom all-reduce

    @classmethod
    def engine_class(cls, group, device):
        return original_class


def register() -> None:
    """vLLM general-plugin entry point; a no-op unless TPAR_ENGINE_PLUGIN=1. Idempotent."""
    global original_class
    if not enabled():
        return
    check_settings()
    import importlib

    module = importlib.import_module(_MODULE)
    current = getattr(module, "CustomAllreduce", None)
    if current is VllmAllReduce:
        return
    original_class = current
    module.CustomAllreduce = VllmAllReduce
    os.environ.setdefault("VLLM_ALLREDUCE_USE_FLASHINFER", "0")
    logger.info("tpar: vLLM's custom all-reduce is tpar (TPAR_ENGINE_PLUGIN=1)")
    from . import vllm_fusion

    vllm_fusion.install()
