"""The object both engines call as their custom all-reduce.

vLLM's CudaCommunicator and SGLang's GroupCoordinator use the same small protocol: read
``disabled``, ask ``should_custom_ar(t)``, call ``custom_all_reduce(t)`` (out of place: a new
tensor, or None to fall back to NCCL), and enter ``capture()`` around CUDA-graph capture. tpar
needs no buffer registration for graphs (its kernels read the caller's input in place and keep
their epochs on the GPU), so ``capture()`` only tracks state, and calls made while warming up
for a capture reduce for real.
"""
from __future__ import annotations

import contextlib
import logging
import socket
from typing import Optional

from .. import _C
from ..communicator import Communicator, dtype_code
from .._errors import TparError
from . import logger, max_bytes

_DEFAULT_MAX_SIZE = 8 * 1024 * 1024  # both engines' default for their own custom all-reduce
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def host_identity() -> str:
    """This machine as tpar's rendezvous tells machines apart (NOTE [identity] in
    src/core/identity.h): the host name and the boot id."""
    try:
        with open(_BOOT_ID) as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def hosts_of(group) -> list:
    """The distinct machines of `group`'s ranks, in rank order (collective over `group`)."""
    import torch.distributed as dist

    ids = [None] * dist.get_world_size(group)
    dist.all_gather_object(ids, host_identity(), group=group)
    return list(dict.fromkeys(ids))


class EngineAllReduce:
    """tpar behind the engines' custom all-reduce interface.

    Construction is collective over ``group`` (the engine passes its CPU/gloo group of the
    tensor-parallel ranks). Any failure leaves ``disabled`` True and is logged: the engine then
    uses NCCL, as it does when its own custom all-reduce cannot run.
    """

    engine = "engine"
    # The engine's own logger family: a child of it reaches the handlers the engine configures
    # (vLLM configures only "vllm"; SGLang the root), so the status line is seen where the
    # engine's own lines are.
    engine_logger = "tpar"
    # Whether a message of exactly max_size bytes still goes to the custom all-reduce: each
    # engine's own rule for its own custom all-reduce.
    max_size_inclusive = True

    def __init__(self, group, device, max_size: int = _DEFAULT_MAX_SIZE, **_engine_options):
        import torch.distributed as dist

        self.disabled = True
        self.group = group
        self.comm: Optional[Communicator] = None
        self.max_size = max_bytes(max_size)
        # Paths that assume the engine's own NVLink buffers must stay off.
        self.fully_connected = False
        self.mnnvl_lamport_ag_multicast_ptr = 0
        self._IS_CAPTURING = False
        self.calls = 0
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.log = logging.getLogger(
            "tpar" if self.engine_logger == "tpar" else self.engine_logger + ".tpar")
        if self.world_size < 2 or self.world_size > _C.MAX_RANKS:
            self.log.info("tpar: %s custom all-reduce off for %d ranks (tpar takes 2..%d)",
                          self.engine, self.world_size, _C.MAX_RANKS)
            return
        # A group across machines: tpar's rendezvous would fail on the far ranks at once and
        # keep rank 0 waiting out the bootstrap timeout. Ask first, as the engines' own custom
        # all-reduce does, and hand the group back to the engine.
        hosts = hosts_of(group)
        if len(hosts) > 1:
            self.log.warning("tpar: %s custom all-reduce off for rank %d/%d: the group spans %d "
                             "machines and tpar connects the GPUs of one; NCCL is used instead",
                             self.engine, self.rank, self.world_size, len(hosts))
            return
        try:
            self.comm = Communicator(group, device=device)
        except TparError as e:
            self.log.warning("tpar: %s custom all-reduce off for rank %d/%d, NCCL is used "
                             "instead: %s", self.engine, self.rank, self.world_size, e)
            return
        self.disabled = False
        info = self.comm.query()
        self.log.info("tpar: %s custom all-reduce on for rank %d/%d (cuda:%d, %s transport), "
                      "messages %s %d bytes", self.engine, self.rank, self.world_size,
                      info["cuda_device"], info["transport"],
                      "up to" if self.max_size_inclusive else "below", self.max_size)

    def should_custom_ar(self, inp) -> bool:
        if self.disabled or dtype_code(inp.dtype) is None:
            return False
        nbytes = inp.numel() * inp.element_size()
        fits = nbytes <= self.max_size if self.max_size_inclusive else nbytes < self.max_size
        return 0 < nbytes and fits and inp.is_contiguous()

    def custom_all_reduce(self, inp):
        """The reduced values in a new tensor, or None where NCCL should take the call."""
        if not self.should_custom_ar(inp):
            return None
        return self.all_reduce(inp)

    def all_reduce(self, inp, *, out=None, registered: bool = False):
        import torch

        if out is None:
            out = torch.empty_like(inp)
        self.comm.all_reduce(inp, out=out)
        self.calls += 1
        return out

    @contextlib.contextmanager
    def capture(self):
        self._IS_CAPTURING = True
        try:
            yield
        finally:
            self._IS_CAPTURING = False

    def register_graph_buffers(self) -> None:
        """Nothing to register: graph replays need no host work."""

    # The engines also ask their custom all-reduce for these; None means "use NCCL".
    def should_custom_all_gather(self, inp) -> bool:
        return False

    def custom_all_gather(self, inp):
        return None

    def custom_reduce_scatter(self, inp):
        return None

    def close(self) -> None:
        comm, self.comm = self.comm, None
        self.disabled = True
        if comm is not None:
            getattr(self, "log", logger).info("tpar: %s custom all-reduce closed after %d calls",
                                              self.engine, self.calls)
            comm.close()

    def __del__(self):
        # The engines drop the object without closing it; closing frees the GPU workspace and is
        # not collective, so it is safe here.
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass
