"""tpar: all-reduce for tensor-parallel inference on PCIe-only and non-P2P GPU servers.

    import torch, torch.distributed as dist, tpar
    dist.init_process_group("nccl")
    comm = tpar.Communicator()                 # collective over the world group
    x = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    comm.all_reduce(x)                         # in place; tpar.ops.all_reduce(x, comm) for a copy

The extension binds the C API only; torch is imported on first use (``import tpar`` works
without it, and then offers get_unique_id and the version).
"""
from __future__ import annotations

from . import _C
from ._errors import Result, TparArgumentError, TparError
from .communicator import Communicator, algorithm_names, all_reduce, get_unique_id


def _version() -> str:
    rc, code = _C.get_version()
    if rc:
        return "unknown"
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


__version__ = _version()

try:  # the custom ops need torch; without it the rest of the package still works
    import torch as _torch  # noqa: F401
except ImportError:  # pragma: no cover - exercised by the no-torch import test
    ops = None
else:
    from . import ops

__all__ = [
    "Communicator",
    "Result",
    "TparArgumentError",
    "TparError",
    "algorithm_names",
    "all_reduce",
    "get_unique_id",
    "ops",
    "__version__",
]
