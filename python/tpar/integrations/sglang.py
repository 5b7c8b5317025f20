"""tpar as SGLang's custom all-reduce (written against SGLang 0.5.23; docs/integration.md).

SGLang's GroupCoordinator asks ``dispatch_custom_allreduce(group, device)`` in
``sglang.srt.distributed.device_communicators.custom_all_reduce`` (imported inside its
constructor) for the class of ``ca_comm``, unless ``--disable-custom-all-reduce`` is given. The
plugin ``register`` (entry point ``sglang.srt.plugins``, loaded first in every scheduler
process) makes that function return :class:`SglangAllReduce` when TPAR_ENGINE_PLUGIN=1.
"""
from __future__ import annotations

from . import enabled, logger
from ._adapter import EngineAllReduce

_MODULE = "sglang.srt.distributed.device_communicators.custom_all_reduce"


class SglangAllReduce(EngineAllReduce):
    """Takes SGLang's constructor arguments (group, device, max_size=8 MiB)."""

    engine = "SGLang"
    engine_logger = "sglang"
    max_size_inclusive = True  # `<=`: SGLang's own rule for its custom all-reduce


def dispatch_custom_allreduce(group=None, device=None):
    return SglangAllReduce


def register() -> None:
    """SGLang general-plugin entry point; a no-op unless TPAR_ENGINE_PLUGIN=1. Idempotent."""
    if not enabled():
        return
    import importlib

    module = importlib.import_module(_MODULE)
    if getattr(module, "dispatch_custom_allreduce", None) is dispatch_custom_allreduce:
        return
    module.dispatch_custom_allreduce = dispatch_custom_allreduce
    logger.info("tpar: SGLang's custom all-reduce is tpar (TPAR_ENGINE_PLUGIN=1)")
