"""Exceptions carrying the library's own text."""
from __future__ import annotations

import enum

from . import _C


class Result(enum.IntEnum):
    """tparResult_t, value for value."""

    SUCCESS = 0
    UNHANDLED_CUDA_ERROR = 1
    SYSTEM_ERROR = 2
    INTERNAL_ERROR = 3
    INVALID_ARGUMENT = 4
    INVALID_USAGE = 5
    REMOTE_ERROR = 6
    IN_PROGRESS = 7
    TIMEOUT = 8


class TparError(RuntimeError):
    """A tpar call failed. ``result`` is the :class:`Result`; the text is the library's."""

    def __init__(self, result: int, message: str):
        try:
            self.result = Result(result)
        except ValueError:  # a newer library's code: keep the number
            self.result = result
        self.message = message
        name = self.result.name if isinstance(self.result, Result) else str(result)
        super().__init__(f"{name}: {message}")


class TparArgumentError(TparError, ValueError):
    """An argument was refused before any GPU work (``result`` is INVALID_ARGUMENT)."""

    def __init__(self, message: str):
        super().__init__(Result.INVALID_ARGUMENT, message)


def raise_for(rc: int, comm: int = 0) -> None:
    """Raises TparError for a failed call; reads the text on this thread, right after it."""
    text = _C.last_error(comm) or _C.error_string(rc)
    raise TparError(rc, text)


def check(rc: int, comm: int = 0) -> None:
    if rc:
        raise_for(rc, comm)
