"""torch.library custom ops, so that torch.compile(fullgraph=True) traces models that call tpar
and CUDA-graph capture records the call on the capturing stream.

    torch.ops.tpar.all_reduce(t, comm_handle, op)   -> new tensor (functional)
    torch.ops.tpar.all_reduce_(t, comm_handle, op)  -> None, reduces t in place (declared mutating)
    torch.ops.tpar.all_reduce_add_rms_norm(input, weight, eps, residual, comm_handle)
        -> (out, r): the fused all-reduce + residual add + RMSNorm (functional: r = residual +
           sum in a new tensor, the residual only read; without one, r is the plain sum)
    torch.ops.tpar.all_reduce_add_rms_norm_(input, weight, eps, residual, out, comm_handle)
        -> None: the same with r written back into residual and the norm into out (mutating)

The communicator travels as its integer handle (Communicator.handle); the fake implementations
only describe the output, so tracing needs no GPU and no communicator.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import communicator as _comm
from ._errors import TparArgumentError


def _handle_of(comm) -> int:
    if isinstance(comm, _comm.Communicator):
        return comm.handle
    if isinstance(comm, int) and not isinstance(comm, bool):
        return comm
    raise TparArgumentError(f"comm must be a tpar.Communicator or its handle, not {type(comm).__name__}")


def _check_fake(t: torch.Tensor, op: str) -> None:
    # The same refusals as the real call, so that a traced program fails where eager would.
    if _comm.dtype_code(t.dtype) is None:
        raise TparArgumentError(f"tensor has dtype {t.dtype}; tpar reduces float32, float16 and bfloat16")
    _comm.op_code(op)


@torch.library.custom_op("tpar::all_reduce", mutates_args=())
def _all_reduce(t: torch.Tensor, comm: int, op: str = "sum") -> torch.Tensor:
    out = torch.empty_like(t, memory_format=torch.contiguous_format)
    _comm.lookup(comm).all_reduce(t, out=out, op=op)
    return out


@_all_reduce.register_fake
def _all_reduce_fake(t: torch.Tensor, comm: int, op: str = "sum") -> torch.Tensor:
    _check_fake(t, op)
    return torch.empty_like(t, memory_format=torch.contiguous_format)


@torch.library.custom_op("tpar::all_reduce_", mutates_args=("t",))
def _all_reduce_(t: torch.Tensor, comm: int, op: str = "sum") -> None:
    _comm.lookup(comm).all_reduce(t, op=op)


@_all_reduce_.register_fake
def _all_reduce__fake(t: torch.Tensor, comm: int, op: str = "sum") -> None:
    _check_fake(t, op)


def _check_fused_fake(input, weight, eps, residual, out=None) -> None:
    _comm._check_fused(input, weight, residual, out, None, None)
    _comm._check_eps(eps)


@torch.library.custom_op("tpar::all_reduce_add_rms_norm", mutates_args=())
def _all_reduce_add_rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float,
                             residual: Optional[torch.Tensor], comm: int
                             ) -> Tuple[torch.Tensor, torch.Tensor]:
    r = torch.empty_like(input, memory_format=torch.contiguous_format)
    y, _ = _comm.lookup(comm).all_reduce_add_rms_norm(input, weight, eps, residual,
                                                      residual_out=r)
    return y, r


@_all_reduce_add_rms_norm.register_fake
def _all_reduce_add_rms_norm_fake(input, weight, eps, residual, comm):
    _check_fused_fake(input, weight, eps, residual)
    return (torch.empty_like(input, memory_format=torch.contiguous_format),
            torch.empty_like(input, memory_format=torch.contiguous_format))


@torch.library.custom_op("tpar::all_reduce_add_rms_norm_", mutates_args=("residual", "out"))
def _all_reduce_add_rms_norm_(input: torch.Tensor, weight: torch.Tensor, eps: float,
                              residual: torch.Tensor, out: torch.Tensor, comm: int) -> None:
    _comm.lookup(comm).all_reduce_add_rms_norm(input, weight, eps, residual, out=out)


@_all_reduce_add_rms_norm_.register_fake
def _all_reduce_add_rms_norm__fake(input, weight, eps, residual, out, comm) -> None:
    _check_fused_fake(input, weight, eps, residual, out)


def _check_layout(t) -> None:
    # A sparse tensor would reach torch's dispatcher, whose error is no TparArgumentError.
    if isinstance(t, torch.Tensor) and t.layout != torch.strided:
        raise TparArgumentError(f"tensor has layout {t.layout}; tpar reduces dense (strided) tensors")


def all_reduce(t: torch.Tensor, comm, op: str = "sum") -> torch.Tensor:
    """The reduced values of `t` in a new tensor (torch.ops.tpar.all_reduce)."""
    _check_layout(t)
    return torch.ops.tpar.all_reduce(t, _handle_of(comm), op)


def all_reduce_(t: torch.Tensor, comm, op: str = "sum") -> torch.Tensor:
    """Reduces `t` in place (torch.ops.tpar.all_reduce_) and returns it."""
    _check_layout(t)
    torch.ops.tpar.all_reduce_(t, _handle_of(comm), op)
    return t


def all_reduce_add_rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                            residual: Optional[torch.Tensor] = None, comm=None
                            ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(out, r) of the fused all-reduce + residual add + RMSNorm in new tensors
    (torch.ops.tpar.all_reduce_add_rms_norm); `residual` is only read."""
    _check_layout(input)
    return torch.ops.tpar.all_reduce_add_rms_norm(input, weight, eps, residual, _handle_of(comm))


def all_reduce_add_rms_norm_(input: torch.Tensor, weight: torch.Tensor, eps: float,
                             residual: torch.Tensor, out: torch.Tensor, comm) -> torch.Tensor:
    """The fused call with r written back into `residual` and the norm into `out`
    (torch.ops.tpar.all_reduce_add_rms_norm_); returns `out`."""
    _check_layout(input)
    torch.ops.tpar.all_reduce_add_rms_norm_(input, weight, eps, residual, out, _handle_of(comm))
    return out
