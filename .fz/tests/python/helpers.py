"""Shared pieces of the GPU tests: fresh random inputs and the exact reference.

tpar accumulates in fp32 in rank order and rounds once, so the reference is exact, not a
tolerance: acc = float(x0); acc += float(x1); ...; result = acc.to(dtype) (max/min: exact)."""
import math

import torch

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def fresh(n, dtype, device, generator):
    """Random values of moderate size, so that sums neither overflow fp16 nor cancel to zero."""
    x = torch.randn(n, generator=generator, device=device, dtype=torch.float32)
    return x.to(dtype)


def poisoned_like(t):
    return torch.full_like(t, math.nan)


def reference(inputs, op):
    """inputs: one tensor per rank, in rank order, all on one device."""
    if op == "sum":
        acc = inputs[0].float()
        for x in inputs[1:]:
            acc = acc + x.float()
        return acc.to(inputs[0].dtype)
    red = torch.maximum if op == "max" else torch.minimum
    acc = inputs[0]
    for x in inputs[1:]:
        acc = red(acc, x)
    return acc


def same_bits(a, b):
    """Bitwise equality (NaN-proof: compares the raw bytes)."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
