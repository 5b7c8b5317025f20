"""tpar as vLLM's custom all-reduce (written against vLLM 0.33.0; docs/integration.md).

vLLM's CudaCommunicator imports ``CustomAllreduce`` from
``vllm.distributed.device_communicators.custom_all_reduce`` inside its constructor, for the
tensor-parallel group only, unless ``--disable-custom-all-reduce`` is given. The plugin
``register`` (entry point ``vllm.general_plugins``, loaded by every vLLM process before its
communicators are built) points that name at :class:`VllmAllReduce` when TPAR_ENGINE_PLUGIN=1.
vLLM tries FlashInfer's all-reduce before the custom one; the plugin turns that off unless
VLLM_ALLREDUCE_USE_FLASHINFER is set explicitly.
"""
from __future__ import annotations

import os

from . import enabled, logger
from ._adapter import EngineAllReduce

_MODULE = "vllm.distributed.device_communicators.custom_all_reduce"


class VllmAllReduce(EngineAllReduce):
    """Takes vLLM's constructor arguments: (group, device, max_size=8 MiB, ..., symm_mem_enabled,
    *, register_graph_buffers); the ones about vLLM's own buffers are accepted and ignored."""

    engine = "vLLM"
    engine_logger = "vllm"
    max_size_inclusive = False  # `<`: vLLM's own rule for its custom all-reduce


def register() -> None:
    """vLLM general-plugin entry point; a no-op unless TPAR_ENGINE_PLUGIN=1. Idempotent."""
    if not enabled():
        return
    import importlib

    module = importlib.import_module(_MODULE)
    if getattr(module, "CustomAllreduce", None) is VllmAllReduce:
        return
    module.CustomAllreduce = VllmAllReduce
    os.environ.setdefault("VLLM_ALLREDUCE_USE_FLASHINFER", "0")
    logger.info("tpar: vLLM's custom all-reduce is tpar (TPAR_ENGINE_PLUGIN=1)")
