"""Adapters that make tpar the custom all-reduce of serving engines.

Both engines load entry-point plugins in every worker process before they build their
tensor-parallel communicators; tpar's plugins (``vllm.general_plugins`` and
``sglang.srt.plugins``, declared in pyproject.toml) replace the engine's custom all-reduce class
when ``TPAR_ENGINE_PLUGIN=1`` is set and do nothing otherwise. On a group whose GPUs are all
joined by NVLink the engine keeps its own custom all-reduce unless ``TPAR_ENGINE_NVLINK=1``.
docs/integration.md has the commands, the versions they were written against, and how to check
that tpar is in use.

TPAR_ENGINE_PLUGIN and TPAR_ENGINE_MAX_BYTES are declared in the library's environment registry
(docs/env.md); all three are parsed here as the library parses its own: booleans
1/true/yes/on and 0/false/no/off, sizes with an optional K/M/G suffix (binary multiples). A
malformed value is an error naming the variable, never a silent default.
"""
from __future__ import annotations

import logging
import os
import re

logger = logging.getLogger("tpar")

ENV_SWITCH = "TPAR_ENGINE_PLUGIN"
ENV_MAX_BYTES = "TPAR_ENGINE_MAX_BYTES"
ENV_NVLINK = "TPAR_ENGINE_NVLINK"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
_SIZE = re.compile(r"^([0-9]+)(|b|k|kb|kib|m|mb|mib|g|gb|gib)$")
_MULT = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _boolean(name: str) -> bool:
    text = os.environ.get(name, "").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{name}={text!r} is not a boolean (0/1)")


def enabled() -> bool:
    """True when TPAR_ENGINE_PLUGIN asks for the engine plugins."""
    return _boolean(ENV_SWITCH)


def nvlink_forced() -> bool:
    """True when TPAR_ENGINE_NVLINK asks for tpar also where every pair of the group's GPUs is
    joined by NVLink (by default such a group keeps the engine's own custom all-reduce)."""
    return _boolean(ENV_NVLINK)


def check_settings() -> None:
    """Parses every variable the adapters read, so that a malformed one fails when the plugin
    loads rather than halfway through a collective."""
    nvlink_forced()
    max_bytes(1)


def parse_bytes(text: str) -> int:
    m = _SIZE.match(text.strip().lower())
    if not m:
        raise ValueError(f"{text!r} is not a size (a number with an optional K/M/G suffix)")
    value = int(m.group(1)) * _MULT[m.group(2)[:1]]
    if not 0 < value <= 1 << 30:
        raise ValueError(f"{text!r} is not a size between 1 and 1G")
    return value


def max_bytes(default: int) -> int:
    """Largest message the engine hands to tpar: TPAR_ENGINE_MAX_BYTES, else the engine's own."""
    text = os.environ.get(ENV_MAX_BYTES, "").strip()
    if not text:
        return int(default)
    try:
        return parse_bytes(text)
    except ValueError as e:
        raise ValueError(f"{ENV_MAX_BYTES}: {e}") from None
