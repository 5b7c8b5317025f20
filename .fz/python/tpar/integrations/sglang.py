"""tpar as SGLang's custom all-reduce (written against SGLang 0.5.23; docs/integration.md).

SGLang's GroupCoordinator asks ``dispatch_custom_allreduce(group=, device=)`` in
``sglang.srt.distributed.device_communicators.custom_all_reduce`` (imported inside its
constructor) for the class of ``ca_comm``, unless ``--disable-custom-all-reduce`` is given, and
builds that class with ``(group=, device=)``. The plugin ``register`` (entry point
``sglang.srt.plugins``, loaded first in every scheduler process) replaces that function when
TPAR_ENGINE_PLUGIN=1 and keeps SGLang's in :data:`original_dispatch`. The replacement decides
for the group (collectively: every rank of the group calls it): on a group whose GPUs are all
joined by NVLink it returns what SGLang's own dispatcher returns for the same arguments, so
SGLang builds its own class exactly as without the plugin; otherwise :class:`SglangAllReduce`.
SGLang's all-reduce + residual + RMSNorm fusion ends in tpar's fused kernel for the groups tpar
serves (:mod:`.sglang_fusion`).
"""
from __future__ import annotations

from . import check_settings, enabled, logger
from ._adapter import EngineAllReduce, decide

_MODULE = "sglang.srt.distributed.device_communicators.custom_all_reduce"

# SGLang's own dispatch_custom_allreduce, as register() found it (None until then).
original_dispatch = None


class SglangAllReduce(EngineAllReduce):
    """Takes SGLang's constructor arguments (group, device, max_size=8 MiB)."""

    engine = "SGLang"
    engine_logger = "sglang"
    max_size_inclusive = True  # `<=`: SGLang's own rule for its custom all-reduce

    @classmethod
    def engine_class(cls, group, device):
        return None if original_dispatch is None else original_dispatch(group=group, device=device)


def dispatch_custom_allreduce(group=None, device=None):
    """Collective over `group`: SGLang's own choice where the group's GPUs are all joined by
    NVLink, else SglangAllReduce (which then builds from this decision, not a second one)."""
    choice = decide(group, device)
    if choice.use == "engine" and original_dispatch is not None:
        SglangAllReduce._log_handed_back(choice)
        return original_dispatch(group=group, device=device)
    if choice.use == "engine":
        choice = choice._replace(use="tpar", reason=f"{choice.reason}, but SGLang's own "
                                 "dispatcher is not known here (the plugin did not register)")
    EngineAllReduce._decided[id(group)] = (group, choice)
    return SglangAllReduce


def register() -> None:
    """SGLang general-plugin entry point; a no-op unless TPAR_ENGINE_PLUGIN=1. Idempotent."""
    global original_dispatch
    if not enabled():
        return
    check_settings()
    import importlib

    module = importlib.import_module(_MODULE)
    current = getattr(module, "dispatch_custom_allreduce", None)
    if current is dispatch_custom_allreduce:
        return
    original_dispatch = current
    module.dispatch_custom_allreduce = dispatch_custom_allreduce
    logger.info("tpar: SGLang's custom all-reduce is tpar (TPAR_ENGINE_PLUGIN=1)")
    from . import sglang_fusion

    sglang_fusion.install()
