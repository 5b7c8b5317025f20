"""The fused call's argument checks that need no GPU: the quantized outputs' buffers are named
with the bytes they hold and need (tpar.h, tparNormQuant_t), on CPU tensors."""
import pytest
import torch

from tpar import TparArgumentError
from tpar.communicator import _check_quant


def u8(*shape):
    return torch.zeros(*shape, dtype=torch.uint8)


def test_each_format_takes_its_buffers():
    x = torch.zeros(3, 64, dtype=torch.bfloat16)
    assert _check_quant(x, 3, 64, None, None, None, None) == 0
    assert _check_quant(x, 3, 64, "fp8_per_token", u8(3, 64), torch.zeros(3), None) == 1
    assert _check_quant(x, 3, 64, "fp8_static", u8(3, 64), torch.zeros(1), None) == 2
    # NVFP4's block scales: 3 rows padded to 128, 4 blocks of 16 (one group of 4).
    assert _check_quant(x, 3, 64, "nvfp4", u8(3, 32), torch.zeros(1), u8(128 * 4)) == 3


@pytest.mark.parametrize("dtype, args, words", [
    (torch.bfloat16, ("nvfp4", u8(3, 32), torch.zeros(1), u8(511)), "block_scale holds 511 bytes"),
    (torch.bfloat16, ("fp8_per_token", u8(3, 64), torch.zeros(2), None), "scale holds 8 bytes"),
    (torch.bfloat16, ("fp8_static", u8(3, 63), torch.zeros(1), None), "quant_out holds 189"),
    (torch.bfloat16, ("fp8_static", u8(3, 64), torch.zeros(1, dtype=torch.float16), None),
     "scale has dtype"),
    (torch.bfloat16, ("fp8_static", u8(3, 64), torch.zeros(1), u8(1)), "block_scale is not used"),
    (torch.bfloat16, (None, u8(3, 64), None, None), "quant_out is given without quant"),
    (torch.bfloat16, ("e5m2", u8(3, 64), torch.zeros(1), None), "quant 'e5m2'"),
    (torch.float32, ("fp8_static", u8(3, 64), torch.zeros(1), None), "float16 or bfloat16"),
])
def test_a_wrong_buffer_is_named(dtype, args, words):
    x = torch.zeros(3, 64, dtype=dtype)
    with pytest.raises(TparArgumentError, match=words):
        _check_quant(x, 3, 64, *args)


def test_nvfp4_needs_a_multiple_of_16():
    x = torch.zeros(2, 24, dtype=torch.float16)
    with pytest.raises(TparArgumentError, match="multiple of 16"):
        _check_quant(x, 2, 24, "nvfp4", u8(2, 12), torch.zeros(1), u8(512))
