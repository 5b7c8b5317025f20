"""The object both engines call as their custom all-reduce.

vLLM's CudaCommunicator and SGLang's GroupCoordinator use the same small protocol: read
``disabled``, ask ``should_custom_ar(t)``, call ``custom_all_reduce(t)`` (out of place: a new
tensor, or None to fall back to NCCL), and enter ``capture()`` around CUDA-graph capture. tpar
needs no buffer registration for graphs (its kernels read the caller's input in place and keep
their epochs on the GPU), so ``capture()`` only tracks state, and calls made while warming up
for a capture reduce for real.

Which custom all-reduce a group gets is decided once, collectively, from what every rank
reports (:func:`decide`): a group across machines gets none (NCCL), a group whose GPUs are all
joined by NVLink keeps the engine's own class (unless TPAR_ENGINE_NVLINK=1), any other group
gets tpar.
"""
from __future__ import annotations

import contextlib
import logging
import socket
import sys
from typing import NamedTuple, Optional, Sequence

from .. import _C
from ..communicator import Communicator, dtype_code
from .._errors import TparError
from . import ENV_NVLINK, check_settings, logger, max_bytes, nvlink_forced

_DEFAULT_MAX_SIZE = 8 * 1024 * 1024  # both engines' default for their own custom all-reduce
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def host_identity() -> str:
    """This machine as tpar's rendezvous tells machines apart (NOTE [identity] in
    src/base/identity.h): the host name and the boot id."""
    try:
        with open(_BOOT_ID) as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


# ---- NVLink ---------------------------------------------------------------------------------


class GpuLinks(NamedTuple):
    """One GPU as NVML sees it: its PCI bus id and the bus ids of the GPUs it reaches over
    NVLink (directly or through NVSwitches). ``nvlink`` is None when that is unknown, and
    ``why`` says why."""

    bus_id: str
    nvlink: Optional[tuple]
    why: str = ""


def _bus_id(text) -> str:
    """A PCI bus id in one spelling ("0000001a:00.0", NVML's "00000000:1A:00.0" and torch's
    numbers all compare equal after this)."""
    if isinstance(text, bytes):
        text = text.decode()
    domain, bus, rest = text.strip().split(":")
    dev, _, fn = rest.partition(".")
    return f"{int(domain, 16):08x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{int(fn or '0', 16)}"


def _pynvml():
    """NVML's Python binding: the nvidia-ml-py package (both engines depend on it), else the copy
    vLLM vendors; None when neither is there."""
    try:
        import pynvml

        return pynvml
    except ImportError:
        pass
    if "vllm" in sys.modules:
        try:
            from vllm.third_party import pynvml  # type: ignore[import-not-found]

            return pynvml
        except ImportError:
            pass
    return None


def gpu_links(device_index: int) -> GpuLinks:
    """NVLink of this rank's GPU, from NVML: the GPUs for which NVML reports NVLink P2P status
    OK, as the engines' own NVLink checks ask it. Never raises: a failure makes the links
    unknown, and an unknown link counts as no NVLink."""
    try:
        import torch

        p = torch.cuda.get_device_properties(device_index)
        bus = _bus_id(f"{p.pci_domain_id:x}:{p.pci_bus_id:x}:{p.pci_device_id:x}.0")
    except Exception as e:  # noqa: BLE001 - any failure only makes the links unknown
        return GpuLinks("", None, f"no PCI bus id for cuda:{device_index} ({e})")
    nvml = _pynvml()
    if nvml is None:
        return GpuLinks(bus, None, "pynvml (nvidia-ml-py) is not installed")
    try:
        nvml.nvmlInit()
    except Exception as e:  # noqa: BLE001
        return GpuLinks(bus, None, f"NVML did not start ({e})")
    try:
        handles = {}
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            handles[_bus_id(nvml.nvmlDeviceGetPciInfo(h).busId)] = h
        me = handles.get(bus)
        if me is None:
            return GpuLinks(bus, None, f"NVML does not list the GPU at {bus}")
        linked = []
        for other, h in handles.items():
            if other == bus:
                continue
            try:
                status = nvml.nvmlDeviceGetP2PStatus(me, h, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
            except nvml.NVMLError:
                continue
            if status == nvml.NVML_P2P_STATUS_OK:
                linked.append(other)
        return GpuLinks(bus, tuple(sorted(linked)))
    except Exception as e:  # noqa: BLE001
        return GpuLinks(bus, None, f"NVML: {e}")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def all_nvlink(links: Sequence[GpuLinks]) -> tuple:
    """(True, why) when every pair of these GPUs (rank order) is joined by NVLink, as both ends
    report it; else (False, the first pair that is not, or the rank that could not tell)."""
    for r, link in enumerate(links):
        if link.nvlink is None:
            return False, f"NVLink unknown on rank {r}: {link.why}"
    for i, a in enumerate(links):
        for j in range(i + 1, len(links)):
            b = links[j]
            if b.bus_id not in a.nvlink or a.bus_id not in b.nvlink:
                return False, (f"ranks {i} and {j} ({a.bus_id}, {b.bus_id}) are not joined by "
                               "NVLink")
    return True, f"every pair of the group's {len(links)} GPUs is joined by NVLink"


# ---- the choice -----------------------------------------------------------------------------


class Choice(NamedTuple):
    """Which custom all-reduce a group gets: "tpar", "engine" (the engine's own class) or
    "nccl" (none: the engine uses NCCL); the same on every rank of the group."""

    use: str
    reason: str
    rank: int
    world_size: int


def choose(peers: Sequence[tuple], rank: int) -> Choice:
    """The choice from what every rank sent (see :func:`decide`): a function of `peers` alone,
    so every rank that received the same list makes the same choice."""
    n = len(peers)
    hosts = list(dict.fromkeys(p[0] for p in peers))
    if len(hosts) > 1:
        return Choice("nccl", f"the group spans {len(hosts)} machines and tpar connects the GPUs "
                      "of one", rank, n)
    nvlink, why = all_nvlink([GpuLinks(*p[1:4]) for p in peers])
    forced = [r for r, p in enumerate(peers) if p[4]]
    if nvlink and not forced:
        return Choice("engine", why, rank, n)
    if nvlink:
        return Choice("tpar", f"{why}, and {ENV_NVLINK}=1 asks for tpar", rank, n)
    return Choice("tpar", why, rank, n)


def _device_index(device) -> int:
    import torch

    if isinstance(device, int) and not isinstance(device, bool):
        return device
    if device is None:
        return torch.cuda.current_device()
    dev = torch.device(device)
    return dev.index if dev.index is not None else torch.cuda.current_device()


def decide(group, device) -> Choice:
    """Collective over `group` (the engine's CPU group): every rank sends its host identity,
    its GPU's NVLink and whether TPAR_ENGINE_NVLINK is set, in one all_gather_object, and
    chooses from the gathered list (:func:`choose`). A group tpar cannot take by its size is
    refused before any collective (every rank knows the size)."""
    import torch.distributed as dist

    check_settings()  # a malformed variable fails here, on every rank, before the gather
    world_size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if world_size < 2 or world_size > _C.MAX_RANKS:
        return Choice("nccl", f"tpar takes 2..{_C.MAX_RANKS} ranks", rank, world_size)
    mine = (host_identity(), *gpu_links(_device_index(device)), nvlink_forced())
    peers = [None] * world_size
    dist.all_gather_object(peers, mine, group=group)
    return choose(peers, rank)


def _group_and_device(args: tuple, kwargs: dict) -> tuple:
    """(group, device) from the engine's constructor arguments, keyword or positional."""
    group = kwargs["group"] if "group" in kwargs else (args[0] if args else None)
    device = kwargs["device"] if "device" in kwargs else (args[1] if len(args) > 1 else None)
    return group, device


# ---- the adapter ----------------------------------------------------------------------------


class EngineAllReduce:
    """tpar behind the engines' custom all-reduce interface.

    Construction is collective over ``group`` (the engine passes its CPU/gloo group of the
    tensor-parallel ranks). Where :func:`decide` picks the engine's own class, constructing this
    class returns an object of that class, built from the same arguments. Any failure leaves
    ``disabled`` True and is logged: the engine then uses NCCL, as it does when its own custom
    all-reduce cannot run.
    """

    engine = "engine"
    # The engine's own logger family: a child of it reaches the handlers the engine configures
    # (vLLM configures only "vllm"; SGLang the root), so the status line is seen where the
    # engine's own lines are.
    engine_logger = "tpar"
    # Whether a message of exactly max_size bytes still goes to the custom all-reduce: each
    # engine's own rule for its own custom all-reduce.
    max_size_inclusive = True
    # Choices made ahead of construction (SGLang's dispatcher decides before the engine builds
    # the class it returned): id(group) -> (group, Choice).
    _decided: dict = {}

    @classmethod
    def engine_class(cls, group, device):
        """The class the engine would have built for this group, or None where not known (the
        plugin did not register, or this is no engine's adapter)."""
        return None

    @classmethod
    def _logger(cls) -> logging.Logger:
        name = cls.engine_logger
        return logging.getLogger(name if name == "tpar" else name + ".tpar")

    @classmethod
    def _log_handed_back(cls, choice: Choice) -> None:
        cls._logger().info("tpar: %s custom all-reduce left to %s's own for rank %d/%d: %s "
                           "(%s=1 makes it tpar)", cls.engine, cls.engine, choice.rank,
                           choice.world_size, choice.reason, ENV_NVLINK)

    def __new__(cls, *args, **kwargs):
        group, device = _group_and_device(args, kwargs)
        entry = EngineAllReduce._decided.pop(id(group), None)
        choice = entry[1] if entry is not None and entry[0] is group else decide(group, device)
        if choice.use == "engine":
            own = cls.engine_class(group, device)
            if own is not None:
                cls._log_handed_back(choice)
                return own(*args, **kwargs)
            choice = choice._replace(use="tpar", reason=f"{choice.reason}, but {cls.engine}'s "
                                     "own class is not known here (the plugin did not register)")
        self = super().__new__(cls)
        self._choice = choice
        return self

    def __init__(self, group, device, max_size: int = _DEFAULT_MAX_SIZE, *_engine_args,
                 **_engine_options):
        self._reset(max_size)
        self.group = group
        choice = self.__dict__.pop("_choice", None) or decide(group, device)
        self.world_size, self.rank = choice.world_size, choice.rank
        if choice.use == "nccl":
            if self.world_size < 2 or self.world_size > _C.MAX_RANKS:
                self.log.info("tpar: %s custom all-reduce off for %d ranks (%s)", self.engine,
                              self.world_size, choice.reason)
            else:
                # A group across machines: tpar's rendezvous would fail on the far ranks at
                # once and keep rank 0 waiting out the bootstrap timeout. Ask first, as the
                # engines' own custom all-reduce does, and hand the group back to the engine.
                self.log.warning("tpar: %s custom all-reduce off for rank %d/%d: %s; NCCL is "
                                 "used instead", self.engine, self.rank, self.world_size,
                                 choice.reason)
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
                      "messages %s %d bytes; %s", self.engine, self.rank, self.world_size,
                      info["cuda_device"], info["transport"],
                      "up to" if self.max_size_inclusive else "below", self.max_size,
                      choice.reason)

    def _reset(self, max_size: int = _DEFAULT_MAX_SIZE) -> None:
        """Every attribute the engines read, in the state of an adapter that takes nothing."""
        self.disabled = True
        self.comm: Optional[Communicator] = None
        self.max_size = max_bytes(max_size)
        # Paths that assume the engine's own NVLink buffers must stay off.
        self.fully_connected = False
        self.mnnvl_lamport_ag_multicast_ptr = 0
        self._IS_CAPTURING = False
        self.calls = 0  # all-reduces run from Python, captured ones included
        self.fused_calls = 0  # of those, the fused all-reduce + residual add + RMSNorm calls
        self.captured = 0  # of those, the ones captured into a CUDA graph
        self.failed = False
        self.rank, self.world_size = 0, 0
        self.log = self._logger()

    # ---- what the engines call --------------------------------------------------------------

    def should_custom_ar(self, inp) -> bool:
        # The engines ask this before every all-reduce of the group that runs from Python
        # (every one outside a CUDA-graph replay), whether tpar takes it or not: the place
        # where an error that a replayed kernel recorded reaches the engine.
        if self.disabled:
            return False
        self.check_async_error()
        return self._fits(inp)

    def _fits(self, inp) -> bool:
        """Whether the all-reduce of `inp` goes to tpar, from the tensor's metadata alone."""
        if self.disabled or dtype_code(inp.dtype) is None:
            return False
        nbytes = inp.numel() * inp.element_size()
        fits = nbytes <= self.max_size if self.max_size_inclusive else nbytes < self.max_size
        return 0 < nbytes and fits and inp.is_contiguous()

    def fits_fused(self, inp, weight, residual=None) -> bool:
        """Whether the fused all-reduce + residual add + RMSNorm of `inp` goes to tpar, from
        the tensors' metadata alone (no call into the library, so a compiler can trace it): the
        all-reduce's bytes as for a plain call, and a shape tparAllReduceAddRmsNorm takes
        (contiguous, hidden a multiple of 8 up to 16384, weight [hidden] and residual like the
        input, of its dtype). The same answer on every rank for the same shapes."""
        if not self._fits(inp) or inp.dim() < 1:
            return False
        hidden = inp.shape[-1]
        if hidden % 8 != 0 or not 8 <= hidden <= 16384:
            return False
        if (weight.dtype != inp.dtype or tuple(weight.shape) != (hidden,)
                or not weight.is_contiguous()):
            return False
        return residual is None or (residual.dtype == inp.dtype and residual.shape == inp.shape
                                    and residual.is_contiguous())

    def takes_fused(self, inp, weight, residual=None) -> bool:
        """fits_fused, after the check for an error the kernels recorded (as should_custom_ar)."""
        if self.disabled:
            return False
        self.check_async_error()
        return self.fits_fused(inp, weight, residual)

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
        if self._IS_CAPTURING and torch.cuda.is_current_stream_capturing():
            self.captured += 1
        return out

    def all_reduce_add_rms_norm(self, inp, weight, eps: float, residual=None):
        """(out, r) in new tensors: r = residual + the sum over the group (the sum without a
        residual), out = rmsnorm(r) * weight; `residual` is only read."""
        import torch

        r = torch.empty_like(inp)
        out, _ = self.comm.all_reduce_add_rms_norm(inp, weight, eps, residual, residual_out=r)
        self.calls += 1
        self.fused_calls += 1
        if self._IS_CAPTURING and torch.cuda.is_current_stream_capturing():
            self.captured += 1
        return out, r

    def all_reduce_add_rms_norm_quant(self, inp, weight, eps: float, residual, quant: str,
                                      scale):
        """(quantized out, r, block scales or None) in new tensors for the next GEMM, without
        the unquantized out: quant "fp8_static" (float8_e4m3fn like `inp`, `scale` the
        per-tensor scale) or "nvfp4" (uint8 [..., hidden / 2] and the e4m3 block scales in
        vLLM's swizzled layout as int32 [rows padded to 128, blocks / 4], padding zero; `scale`
        the global scale). `residual` is only read."""
        import torch

        hidden = inp.shape[-1]
        rows = inp.numel() // hidden
        r = torch.empty_like(inp)
        block_scale = None
        if quant == "nvfp4":
            q = torch.empty((rows, hidden // 2), dtype=torch.uint8, device=inp.device)
            blocks = hidden // 16
            block_scale = torch.zeros(((rows + 127) // 128 * 128, (blocks + 3) // 4),
                                      dtype=torch.int32, device=inp.device)
        else:
            q = torch.empty(inp.shape, dtype=torch.float8_e4m3fn, device=inp.device)
        self.comm.all_reduce_add_rms_norm(inp, weight, eps, residual, out=False, residual_out=r,
                                          quant=quant, quant_out=q, scale=scale.reshape(-1),
                                          block_scale=block_scale)
        self.calls += 1
        self.fused_calls += 1
        if self._IS_CAPTURING and torch.cuda.is_current_stream_capturing():
            self.captured += 1
        return q, r, block_scale

    def check_async_error(self) -> None:
        """Raises TparError when a kernel of this communicator recorded an error: a peer that
        never arrived within the timeout, ranks that disagreed on a call, an abort. Reads a
        word in host memory that the kernels write (tparCommGetAsyncError): no device
        synchronization, legal during graph capture.

        Kernels replayed from a CUDA graph cannot fail a call: after such an error every later
        kernel of the communicator returns at once and leaves its output unwritten, so the
        engine must not take another step."""
        comm = self.comm
        if comm is None:
            return
        try:
            comm.check_async_error()
        except TparError as e:
            text = (f"tpar: {self.engine}'s custom all-reduce failed on rank {self.rank}/"
                    f"{self.world_size}: {e.message}. Steps run since then (CUDA-graph replays "
                    f"included) may hold wrong values, and the communicator takes no more "
                    f"calls: the engine must stop (abort) and restart.")
            if not self.failed:
                self.failed = True
                self.log.error("%s", text)
            raise TparError(e.result, text) from e

    @contextlib.contextmanager
    def capture(self):
        self.check_async_error()
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
        comm, self.comm = getattr(self, "comm", None), None
        self.disabled = True
        if comm is not None:
            # The GPU counts the kernels that ran, graph replays included; Python sees only
            # the calls it made (eager, or captured once into a graph).
            try:
                kernels = "%d" % comm.kernel_count()
            except Exception as e:  # noqa: BLE001 - the line is still worth printing
                kernels = "an unknown number of (%s)" % e
            getattr(self, "log", logger).info(
                "tpar: %s custom all-reduce closed: %s all-reduce kernels ran on the GPU, graph "
                "replays included; %d all-reduces called from Python (%d fused with the "
                "residual add and RMSNorm), %d of them captured into CUDA graphs", self.engine,
                kernels, self.calls, self.fused_calls, self.captured)
            comm.close()

    def __del__(self):
        # The engines drop the object without closing it; closing frees the GPU workspace and is
        # not collective, so it is safe here.
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass
