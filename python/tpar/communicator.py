"""tpar.Communicator: one rank's handle on a tpar communicator, made from a torch ProcessGroup.

Tensors are passed to the library as (device pointer, element count, dtype code) together with
the raw handle of the caller's current CUDA stream: the call only enqueues work on that stream,
so it is legal inside ``torch.cuda.graph`` capture and replays with no host work.
"""
from __future__ import annotations

import collections.abc
import threading
from typing import Any, Iterable, Mapping, Optional, Union

from . import _C
from ._errors import Result, TparArgumentError, TparError, check, raise_for

# Live communicators by handle, for the torch ops (they carry the handle as an int).
_LIVE: dict = {}
_LIVE_LOCK = threading.Lock()

_OPS = {"sum": 0, "max": 1, "min": 2}
_TRANSPORTS = {"auto": 0, "host": 1, "p2p": 2}
# tparWire_t: compressed wire formats of large float16/bfloat16 calls (docs/WIRE.md), opt-in.
_WIRES = {"none": 0, "fp8": 1, "int8": 2, "int4": 3}
# "bf16" names the lossless format too (a 16-bit call travels in its own bits), as TPAR_WIRE and
# `tpar bench --wire` take it.
_WIRE_ALIASES = {"bf16": "none"}
_CONFIG_KEYS = ("timeout_ms", "algorithm", "max_bytes_per_call", "transport", "allow_shared_device",
                "wire")


def _torch():
    import torch  # imported on first use: `import tpar` works without torch

    return torch


_dtype_codes: Optional[dict] = None


def dtype_code(dtype) -> Optional[int]:
    """tparDataType_t of a torch dtype, or None when tpar does not reduce it."""
    global _dtype_codes
    if _dtype_codes is None:
        torch = _torch()
        _dtype_codes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
    return _dtype_codes.get(dtype)


def op_code(op) -> int:
    """tparRedOp_t of "sum"/"max"/"min" (or torch.distributed.ReduceOp.SUM/MAX/MIN)."""
    code = _OPS.get(op) if isinstance(op, str) else None
    if code is None and not isinstance(op, str):
        name = getattr(op, "name", None) or str(op).rsplit(".", 1)[-1]
        code = _OPS.get(str(name).lower())
    if code is None:
        raise TparArgumentError(f"op {op!r} is not one of 'sum', 'max', 'min'")
    return code


def algorithm_names() -> list:
    """The names tpar gives its algorithms (index = tparAlgo_t)."""
    names = []
    for i in range(64):
        n = _C.algo_name(i)
        if n == "unknown":
            break
        names.append(n)
    return names


def _config_args(config: Optional[Mapping[str, Any]]) -> dict:
    """tparConfig_t fields from a dict; anything unknown or out of range is named."""
    out = {}
    if config is None:
        return out
    if not isinstance(config, Mapping):
        raise TparArgumentError(f"config must be a dict of {', '.join(_CONFIG_KEYS)}, not {type(config).__name__}")
    for key, value in config.items():
        if key not in _CONFIG_KEYS:
            raise TparArgumentError(f"config key {key!r} is not one of {', '.join(_CONFIG_KEYS)}")
        if key == "algorithm":
            if isinstance(value, str):
                names = algorithm_names()
                if value not in names:
                    raise TparArgumentError(f"config['algorithm'] {value!r} is not one of {', '.join(names)}")
                value = names.index(value)
        elif key == "transport":
            if isinstance(value, str):
                if value not in _TRANSPORTS:
                    raise TparArgumentError(f"config['transport'] {value!r} is not one of auto, host, p2p")
                value = _TRANSPORTS[value]
        elif key == "wire":
            if isinstance(value, str):
                name = _WIRE_ALIASES.get(value.lower(), value.lower())
                if name not in _WIRES:
                    raise TparArgumentError(f"config['wire'] {value!r} is not one of {', '.join(_WIRES)} "
                                            "(or bf16, the same as none)")
                value = _WIRES[name]
            elif isinstance(value, int) and not isinstance(value, bool) and value >= len(_WIRES):
                raise TparArgumentError(f"config['wire'] = {value} is not a tparWire_t (0..{len(_WIRES) - 1})")
        elif key == "allow_shared_device":
            value = 1 if value else 0
        if isinstance(value, bool) or not isinstance(value, int):
            raise TparArgumentError(f"config[{key!r}] must be an integer, not {value!r}")
        if value < 0:
            raise TparArgumentError(f"config[{key!r}] = {value} is negative")
        out[key] = value
    return out


def _device_index(device) -> int:
    torch = _torch()
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        try:
            dev = torch.device(device)
        except (TypeError, RuntimeError) as e:
            raise TparArgumentError(f"device {device!r} is not a CUDA device ({e})") from None
        if dev.type != "cuda":
            raise TparArgumentError(f"device {device!r} is not a CUDA device")
        index = dev.index if dev.index is not None else torch.cuda.current_device()
    count = torch.cuda.device_count()
    if not 0 <= index < count:
        raise TparArgumentError(f"device {device!r} is not one of this process's {count} CUDA devices")
    return index


def _raw_stream_getter():
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


def get_unique_id() -> bytes:
    """A fresh id for Communicator.from_unique_id (call on one process, send to every rank)."""
    rc, uid = _C.get_unique_id()
    check(rc)
    return uid


def _exchange_unique_id(group, rank: int, how: str, device_index: int) -> bytes:
    """Rank 0 of `group` makes the id and sends it over the group.

    how="tensor": a uint8 tensor broadcast (on the CPU for a gloo group, on the GPU otherwise);
    how="object": torch.distributed.broadcast_object_list. A failure on rank 0 is sent too, so
    that no rank waits for an id that never comes.
    """
    torch = _torch()
    import torch.distributed as dist

    backend = str(dist.get_backend(group))
    if how == "auto":
        how = "tensor" if "gloo" in backend else "object"
    if how not in ("tensor", "object"):
        raise TparArgumentError(f"id_exchange {how!r} is not one of 'auto', 'tensor', 'object'")
    src = dist.get_global_rank(group, 0) if group is not None else 0
    uid, failure = b"", ""
    if rank == 0:
        try:
            uid = get_unique_id()
        except TparError as e:
            failure = str(e)
    nbytes = _C.UNIQUE_ID_BYTES
    if how == "tensor":
        dev = torch.device("cpu") if "gloo" in backend else torch.device("cuda", device_index)
        buf = torch.zeros(nbytes + 1, dtype=torch.uint8, device=dev)
        if rank == 0 and not failure:
            buf[0] = 1
            buf[1:] = torch.frombuffer(bytearray(uid), dtype=torch.uint8).to(dev)
        dist.broadcast(buf, src=src, group=group)
        data = bytes(buf.cpu().tolist())
        ok, uid = data[0] == 1, data[1:]
    else:
        payload = [(uid, failure)]
        dev = None if "gloo" in backend else torch.device("cuda", device_index)
        dist.broadcast_object_list(payload, src=src, group=group, device=dev)
        uid, failure = payload[0]
        ok = not failure and len(uid) == nbytes
    if not ok:
        raise TparError(Result.REMOTE_ERROR, f"rank 0 could not create the unique id: {failure or 'unknown'}")
    return uid


class Communicator:
    """One rank of a tpar communicator over the ranks of a torch.distributed ProcessGroup.

    ``Communicator(group)`` is collective over ``group`` (default: the world group): rank 0 makes
    the unique id and sends it over the group, then every rank connects. ``device`` is the CUDA
    device of this rank (default: the current one); ``config`` a dict of ``timeout_ms``,
    ``algorithm`` (e.g. "auto", "oneshot", "twoshot"), ``max_bytes_per_call``, ``transport``
    ("auto", "host", "p2p"), ``allow_shared_device`` and ``wire`` ("none" or "bf16", "fp8", "int8", "int4":
    a lossy compressed wire format for large float16/bfloat16 calls, docs/WIRE.md). ``wire=``
    may also be given as a keyword.
    """

    def __init__(self, group=None, device=None, config: Optional[Mapping[str, Any]] = None, *,
                 id_exchange: str = "auto", wire: Optional[str] = None):
        torch = _torch()
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise TparError(Result.INVALID_USAGE,
                            "torch.distributed is not initialized: call init_process_group first "
                            "(or use Communicator.from_unique_id)")
        if group is None:
            group = dist.group.WORLD
        if wire is not None:
            if config is not None and "wire" in config:
                raise TparArgumentError("wire given twice: as a keyword and in config")
            config = dict(config or {}, wire=wire)
        args = _config_args(config)
        index = _device_index(device)
        rank = dist.get_rank(group)
        size = dist.get_world_size(group)
        if rank < 0:
            raise TparArgumentError("this process is not a member of group")
        uid = _exchange_unique_id(group, rank, id_exchange, index)
        self._init(uid, rank, size, index, args)
        self.group = group

    @classmethod
    def from_unique_id(cls, unique_id: bytes, rank: int, world_size: int, device=None,
                       config: Optional[Mapping[str, Any]] = None) -> "Communicator":
        """Rank `rank` of `world_size`, from an id made by tpar.get_unique_id() on one process."""
        if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != _C.UNIQUE_ID_BYTES:
            raise TparArgumentError(f"unique_id must be {_C.UNIQUE_ID_BYTES} bytes from tpar.get_unique_id()")
        self = cls.__new__(cls)
        self._init(bytes(unique_id), rank, world_size, _device_index(device), _config_args(config))
        self.group = None
        return self

    @classmethod
    def init_all(cls, devices: Iterable, config: Optional[Mapping[str, Any]] = None) -> list:
        """One communicator per device, all in this process (rank i on devices[i])."""
        if isinstance(devices, (str, bytes)) or not isinstance(devices, collections.abc.Iterable):
            raise TparArgumentError(f"devices must be a list of CUDA devices, not {type(devices).__name__}")
        indices = [_device_index(d) for d in devices]
        if not indices:
            raise TparArgumentError("devices is empty: init_all makes one communicator per device")
        rc, handles = _C.comm_init_all(indices, **_config_args(config))
        check(rc)
        comms = []
        for rank, (h, index) in enumerate(zip(handles, indices)):
            c = cls.__new__(cls)
            c._adopt(h, rank, len(indices), index)
            c.group = None
            comms.append(c)
        return comms

    def _init(self, uid: bytes, rank: int, size: int, index: int, args: dict) -> None:
        if not isinstance(rank, int) or not isinstance(size, int) or not 0 <= rank < size:
            raise TparArgumentError(f"rank {rank!r} is not in 0..world_size-1 (world_size {size!r})")
        rc, handle = _C.comm_init_rank(size, uid, rank, index, **args)
        check(rc)
        self._adopt(handle, rank, size, index)

    def _adopt(self, handle: int, rank: int, size: int, index: int) -> None:
        torch = _torch()
        self._handle = handle
        self.rank = rank
        self.world_size = size
        self.device = torch.device("cuda", index)
        self._index = index
        self._stream = _raw_stream_getter()
        self._is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
        with _LIVE_LOCK:
            _LIVE[handle] = self

    # ---- the call -------------------------------------------------------------------------

    @property
    def handle(self) -> int:
        """The tparComm_t as an integer (what the torch ops take); 0 once closed."""
        return self._handle

    def all_reduce(self, tensor, out=None, op="sum"):
        """Reduces `tensor` over the ranks; in place when `out` is None or `tensor` itself.

        Returns the tensor holding the result. Every rank gets bitwise-identical values.
        """
        if self._is_compiling():
            from . import ops

            if out is None or out is tensor:
                ops.all_reduce_(tensor, self, op)
                return tensor
            out.copy_(ops.all_reduce(tensor, self, op))
            return out
        handle = self._handle
        if not handle:
            raise TparError(Result.INVALID_USAGE, "the communicator is closed")
        # Every refusal comes before any GPU work, and names the argument.
        code = dtype_code(getattr(tensor, "dtype", None))
        if code is None:
            _refuse(tensor, "tensor")
        try:
            contiguous = tensor.is_contiguous()
        except RuntimeError:  # a sparse tensor has no strides; torch's own text would escape
            _refuse_layout(tensor, "tensor")
            raise
        if not contiguous:
            _refuse_layout(tensor, "tensor")
            raise TparArgumentError("tensor is not contiguous")
        if out is None:
            out = tensor
        elif out is not tensor:
            _check_out(tensor, out)
        opc = _OPS.get(op) if op.__class__ is str else None
        if opc is None:
            opc = op_code(op)
        if tensor.get_device() != self._index:
            raise TparArgumentError(f"tensor is on {tensor.device}, the communicator on cuda:{self._index}")
        rc = _C.all_reduce(handle, tensor.data_ptr(), out.data_ptr(), tensor.numel(), code, opc,
                           self._stream(self._index))
        if rc:
            raise_for(rc, handle)
        return out

    def all_reduce_add_rms_norm(self, input, weight, eps: float = 1e-6, residual=None, *,
                                out=None, residual_out=None, quant=None, quant_out=None,
                                scale=None, block_scale=None):
        """All-reduce (sum) of `input` over the ranks, then the residual add and RMSNorm in the
        same kernel (tparAllReduceAddRmsNorm, docs/FUSED.md):

            r = residual + sum(input)  (the sum alone without a residual)
            out = rmsnorm(r) * weight  with eps

        `input` is [..., hidden] (float16, bfloat16 or float32; hidden a multiple of 8 up to
        16384), `weight` [hidden] of the same dtype, `residual` like `input` or None. r goes to
        `residual_out` when given, else back into `residual` (in place). `out` defaults to a new
        tensor; it may be `input`. Returns (out, r's tensor: residual_out, else residual, else
        None). Every rank gets bitwise-identical values.

        `quant` adds a quantized copy of out for the next GEMM (float16/bfloat16 inputs; tpar.h,
        tparNormQuant_t): "fp8_per_token" (e4m3 into `quant_out` [..., hidden] of
        torch.float8_e4m3fn or uint8, one float32 scale per row written into `scale`
        [tokens]), "fp8_static" (the given float32 scale `scale` [1]) or "nvfp4" (e2m1 pairs
        into `quant_out` [..., hidden / 2] uint8, e4m3 block scales into `block_scale` in vLLM's
        swizzled layout, `scale` [1] the global scale). With `quant`, out=False writes no
        unquantized out (then r needs `residual` or `residual_out`; the result's out is None)."""
        if self._is_compiling():
            if quant is not None:
                raise TparArgumentError("quant: the quantized outputs are not traceable yet; "
                                        "call all_reduce_add_rms_norm outside torch.compile")
            return self._fused_compiled(input, weight, eps, residual, out, residual_out)
        handle = self._handle
        if not handle:
            raise TparError(Result.INVALID_USAGE, "the communicator is closed")
        no_out = out is False
        if no_out:
            if quant is None:
                raise TparArgumentError("out=False: without quant there would be no output")
            if residual is None and residual_out is None:
                raise TparArgumentError("out=False needs residual or residual_out (r waits "
                                        "there for its norm)")
            out = None
        code, tokens, hidden = _check_fused(input, weight, residual, out, residual_out,
                                            self._index)
        q = _check_quant(input, tokens, hidden, quant, quant_out, scale, block_scale)
        if out is None and not no_out:
            out = _torch().empty_like(input, memory_format=_torch().contiguous_format)
        eps = _check_eps(eps)
        rc = _C.all_reduce_add_rms_norm(
            handle, input.data_ptr(), 0 if residual is None else residual.data_ptr(),
            weight.data_ptr(), 0 if out is None else out.data_ptr(),
            0 if residual_out is None else residual_out.data_ptr(), tokens, hidden, eps, code,
            self._stream(self._index), q, 0 if quant_out is None else quant_out.data_ptr(),
            0 if scale is None else scale.data_ptr(),
            0 if block_scale is None else block_scale.data_ptr())
        if rc:
            raise_for(rc, handle)
        return out, (residual_out if residual_out is not None else residual)

    def _fused_compiled(self, input, weight, eps, residual, out, residual_out):
        # Under torch.compile: the functional op, its results copied where the caller asked, so
        # the traced program has the eager method's effects.
        from . import ops

        y, r = ops.all_reduce_add_rms_norm(input, weight, eps, residual, self)
        if out is not None:
            out.copy_(y)
            y = out
        if residual_out is not None:
            residual_out.copy_(r)
            return y, residual_out
        if residual is not None:
            residual.copy_(r)
            return y, residual
        return y, None

    # ---- state ------------------------------------------------------------------------------

    def kernel_count(self) -> int:
        """The all-reduce kernels this rank has completed since its creation, eager calls and
        CUDA-graph replays alike (modulo 2**32; tparCommGetKernelCount). Waits for a 4-byte copy
        from the GPU: not while a stream is being captured in global mode."""
        rc, kernels = _C.comm_get_kernel_count(self._live_handle())
        check(rc, self._handle)
        return kernels

    def check_async_error(self) -> None:
        """Raises TparError when a kernel of this communicator recorded an error (a peer that
        never arrived within timeout_ms, ranks that disagreed on a call, an abort)."""
        rc, err = _C.comm_get_async_error(self._live_handle())
        check(rc, self._handle)
        if err:
            text = _C.last_error(self._handle)
            if not text:
                text = (f"{_C.error_string(err)}: recorded by this communicator's kernels; the "
                        "communicator only accepts close() or abort() now")
            raise TparError(err, text)

    def query(self) -> dict:
        """tparCommQuery as a dict (transport, topology, launch shape, limits)."""
        rc, info = _C.comm_query(self._live_handle())
        check(rc, self._handle)
        return info

    def select_algorithm(self, nbytes: int, dtype=None) -> str:
        """The algorithm a call of `nbytes` of `dtype` (a torch dtype: float32, float16 or
        bfloat16; None: bfloat16) would use ("nccl" when it goes to NCCL)."""
        if dtype is None:
            code = 2
        else:
            code = dtype_code(dtype)
            if code is None:
                raise TypeError(f"select_algorithm: dtype {dtype} is not float32, float16 or "
                                "bfloat16")
        rc, name = _C.comm_select_algorithm(self._live_handle(), int(nbytes), code)
        check(rc, self._handle)
        return name

    def attach_nccl(self, nccl) -> None:
        """Attaches an NCCL communicator of the same ranks, so that sizes a tuning table measured
        faster on NCCL go there. `nccl` is a raw ncclComm_t (int), an object with a ``comm``
        attribute holding one (vLLM's PyNcclCommunicator), a torch ProcessGroup whose NCCL
        backend exposes its communicator, or None to detach."""
        ptr = _nccl_pointer(nccl, self._index)
        rc = _C.comm_set_nccl_comm(self._live_handle(), ptr)
        check(rc, self._handle)

    def close(self) -> None:
        """Waits for this communicator's work, then frees it. Idempotent."""
        handle = self._release()
        if handle:
            check(_C.comm_destroy(handle))

    def abort(self) -> None:
        """Makes waiting kernels give up at once, then frees the communicator. Idempotent."""
        handle = self._release()
        if handle:
            check(_C.comm_abort(handle))

    def _release(self) -> int:
        handle = getattr(self, "_handle", 0)
        self._handle = 0
        with _LIVE_LOCK:
            _LIVE.pop(handle, None)
        return handle

    def _live_handle(self) -> int:
        if not self._handle:
            raise TparError(Result.INVALID_USAGE, "the communicator is closed")
        return self._handle

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:  # peers may be waiting for a call this rank will never make
            self.abort()

    def __repr__(self) -> str:
        state = "closed" if not self._handle else f"handle=0x{self._handle:x}"
        return f"tpar.Communicator(rank={self.rank}, world_size={self.world_size}, device={self.device}, {state})"


def lookup(handle: int) -> Communicator:
    """The live communicator with this handle (what the torch ops receive)."""
    comm = _LIVE.get(handle)
    if comm is None:
        raise TparArgumentError(f"comm {handle:#x} is not a live tpar communicator (closed, or never made)")
    return comm


def _refuse(tensor, name: str) -> None:
    torch = _torch()
    if not isinstance(tensor, torch.Tensor):
        raise TparArgumentError(f"{name} must be a torch.Tensor, not {type(tensor).__name__}")
    raise TparArgumentError(f"{name} has dtype {tensor.dtype}; tpar reduces float32, float16 and bfloat16")


def _refuse_layout(tensor, name: str) -> None:
    torch = _torch()
    if tensor.layout != torch.strided:
        raise TparArgumentError(f"{name} has layout {tensor.layout}; tpar reduces dense (strided) tensors")


def _check_out(tensor, out) -> None:
    if dtype_code(getattr(out, "dtype", None)) is None:
        _refuse(out, "out")
    _refuse_layout(out, "out")
    if out.dtype != tensor.dtype:
        raise TparArgumentError(f"out has dtype {out.dtype}, tensor {tensor.dtype}")
    if out.numel() != tensor.numel():
        raise TparArgumentError(f"out has {out.numel()} elements, tensor {tensor.numel()}")
    if out.get_device() != tensor.get_device():
        raise TparArgumentError(f"out is on {out.device}, tensor on {tensor.device}")
    if not out.is_contiguous():
        raise TparArgumentError("out is not contiguous")


def _check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TparArgumentError(f"eps must be a number, not {type(eps).__name__}")
    eps = float(eps)
    if not (eps >= 0.0) or eps == float("inf"):
        raise TparArgumentError(f"eps {eps} is not a finite value >= 0")
    return eps


def _check_fused(input, weight, residual, out, residual_out, device_index: Optional[int]):
    """(dtype code, tokens, hidden) of a fused call, after every check that names an argument
    (the library checks again; these come first so that the names are the caller's)."""
    code = dtype_code(getattr(input, "dtype", None))
    if code is None:
        _refuse(input, "input")
    _refuse_layout(input, "input")
    if input.dim() < 1:
        raise TparArgumentError("input is a scalar; it must be [..., hidden]")
    hidden = input.shape[-1]
    tokens = input.numel() // hidden if hidden else 0
    if hidden % 8 != 0 or not 8 <= hidden <= 16384:
        raise TparArgumentError(f"input has hidden size {hidden} (its last dimension); it must "
                                "be a multiple of 8 in 8..16384")
    if not input.is_contiguous():
        raise TparArgumentError("input is not contiguous")
    if device_index is not None and input.get_device() != device_index:
        raise TparArgumentError(f"input is on {input.device}, the communicator on "
                                f"cuda:{device_index}")
    if dtype_code(getattr(weight, "dtype", None)) is None:
        _refuse(weight, "weight")
    _refuse_layout(weight, "weight")
    if weight.dtype != input.dtype:
        raise TparArgumentError(f"weight has dtype {weight.dtype}, input {input.dtype}")
    if tuple(weight.shape) != (hidden,):
        raise TparArgumentError(f"weight has shape {tuple(weight.shape)}, not ({hidden},)")
    if not weight.is_contiguous():
        raise TparArgumentError("weight is not contiguous")
    if weight.get_device() != input.get_device():
        raise TparArgumentError(f"weight is on {weight.device}, input on {input.device}")
    for name, t in (("residual", residual), ("out", out), ("residual_out", residual_out)):
        if t is None:
            continue
        if dtype_code(getattr(t, "dtype", None)) is None:
            _refuse(t, name)
        _refuse_layout(t, name)
        if t.dtype != input.dtype:
            raise TparArgumentError(f"{name} has dtype {t.dtype}, input {input.dtype}")
        if t.shape != input.shape:
            raise TparArgumentError(f"{name} has shape {tuple(t.shape)}, input "
                                    f"{tuple(input.shape)}")
        if not t.is_contiguous():
            raise TparArgumentError(f"{name} is not contiguous")
        if t.get_device() != input.get_device():
            raise TparArgumentError(f"{name} is on {t.device}, input on {input.device}")
    return code, tokens, hidden


_QUANTS = {"fp8_per_token": 1, "fp8_static": 2, "nvfp4": 3}


def _check_quant(input, tokens: int, hidden: int, quant, quant_out, scale, block_scale) -> int:
    """tparNormQuant_t of `quant` (0: none), after the checks that name the caller's argument."""
    if quant is None:
        for name, t in (("quant_out", quant_out), ("scale", scale), ("block_scale", block_scale)):
            if t is not None:
                raise TparArgumentError(f"{name} is given without quant")
        return 0
    code = _QUANTS.get(quant) if isinstance(quant, str) else None
    if code is None:
        raise TparArgumentError(f"quant {quant!r} is not one of {', '.join(_QUANTS)}")
    torch = _torch()
    if input.dtype not in (torch.float16, torch.bfloat16):
        raise TparArgumentError(f"quant {quant!r} needs a float16 or bfloat16 input, not "
                                f"{input.dtype}")
    fp4 = quant == "nvfp4"
    if fp4 and hidden % 16 != 0:
        raise TparArgumentError(f"quant 'nvfp4' needs a hidden size that is a multiple of 16, "
                                f"not {hidden}")
    blocks = hidden // 16
    need = {"quant_out": tokens * hidden // (2 if fp4 else 1),
            "scale": 4 * (tokens if quant == "fp8_per_token" else 1)}
    if fp4:
        need["block_scale"] = (tokens + 127) // 128 * 128 * ((blocks + 3) // 4) * 4
    given = {"quant_out": quant_out, "scale": scale, "block_scale": block_scale}
    for name, t in given.items():
        if name not in need:
            if t is not None:
                raise TparArgumentError(f"{name} is not used by quant {quant!r}")
            continue
        if not isinstance(t, torch.Tensor):
            raise TparArgumentError(f"{name} must be a torch.Tensor for quant {quant!r}")
        if name == "scale" and t.dtype != torch.float32:
            raise TparArgumentError(f"scale has dtype {t.dtype}; it must be float32")
        if not t.is_contiguous():
            raise TparArgumentError(f"{name} is not contiguous")
        if t.get_device() != input.get_device():
            raise TparArgumentError(f"{name} is on {t.device}, input on {input.device}")
        nbytes = t.numel() * t.element_size()
        if nbytes < need[name]:
            raise TparArgumentError(f"{name} holds {nbytes} bytes; quant {quant!r} of "
                                    f"{tokens} x {hidden} needs {need[name]}")
    return code


def _nccl_pointer(nccl, device_index: int) -> int:
    if nccl is None:
        return 0
    if isinstance(nccl, int) and not isinstance(nccl, bool):
        return nccl
    inner = getattr(nccl, "comm", None)
    if inner is not None:  # vLLM's PyNcclCommunicator holds a ctypes ncclComm_t
        value = getattr(inner, "value", inner)
        if isinstance(value, int):
            return value
    torch = _torch()
    get_backend = getattr(nccl, "_get_backend", None)
    if get_backend is not None:
        try:
            backend = get_backend(torch.device("cuda", device_index))
        except RuntimeError as e:
            raise TparArgumentError(f"nccl: the group has no CUDA backend ({e})") from None
        comm_ptr = getattr(backend, "_comm_ptr", None)
        if comm_ptr is None:
            raise TparArgumentError("nccl: this torch's NCCL process group does not expose its "
                                    "communicator (_comm_ptr); pass the ncclComm_t as an int")
        ptr = comm_ptr()
        if not ptr:
            # torch creates its NCCL communicator at the first collective.
            import torch.distributed as dist

            probe = torch.zeros(1, device=torch.device("cuda", device_index))
            dist.all_reduce(probe, group=nccl)
            torch.cuda.synchronize(device_index)
            ptr = comm_ptr()
        if not ptr:
            raise TparArgumentError("nccl: the process group has no NCCL communicator yet")
        return ptr
    raise TparArgumentError(f"nccl must be an ncclComm_t (int), an object with .comm, a ProcessGroup or "
                            f"None, not {type(nccl).__name__}")


def all_reduce(tensor, comm: Communicator, out=None, op="sum"):
    """tpar.all_reduce(t, comm): Communicator.all_reduce as a function."""
    return comm.all_reduce(tensor, out=out, op=op)
