"""torch.library custom ops, so that torch.compile(fullgraph=True) traces models that call tpar
and CUDA-graph capture records the call on the capturing stream.

    torch.ops.tpar.all_reduce(t, comm_handle, op)   -> new tensor (functional)
    torch.ops.tpar.all_reduce_(t, comm_handle, op)  -> None, reduces t in place (declared mutating)

The communicator travels as its integer handle (Communicator.handle); the fake implementations
only describe the output, so tracing needs no GPU and no communicator.
"""
from __future__ import annotations

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
