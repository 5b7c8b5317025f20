"""The torch ops trace without a GPU: torch.compile(fullgraph=True), make_fx and FakeTensorMode
see tpar::all_reduce (functional) and tpar::all_reduce_ (mutating) through their fake
implementations, and a Communicator method called inside a compiled function becomes the op."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import tpar
from tpar.communicator import Communicator

HANDLE = 0x5EED0  # never dereferenced: the fake implementations only describe outputs


def layer(x, w):
    y = x @ w
    y = torch.ops.tpar.all_reduce(y, HANDLE, "sum")
    torch.ops.tpar.all_reduce_(y, HANDLE, "max")
    return torch.relu(y)


def targets(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_compile_fullgraph_keeps_both_ops(dtype):
    seen = []

    def backend(gm, inputs):
        seen.append(gm)
        return gm.forward

    f = torch.compile(layer, fullgraph=True, backend=backend)
    out = f(torch.randn(4, 8, dtype=dtype, device="meta"), torch.randn(8, 16, dtype=dtype, device="meta"))
    assert out.shape == (4, 16) and out.dtype == dtype
    names = targets(seen[0])
    assert "tpar.all_reduce" in names and "tpar.all_reduce_" in names


def test_aot_autograd_functionalizes_the_mutating_op():
    f = torch.compile(layer, fullgraph=True, backend="aot_eager")
    out = f(torch.randn(2, 8, dtype=torch.bfloat16, device="meta"),
            torch.randn(8, 4, dtype=torch.bfloat16, device="meta"))
    assert out.shape == (2, 4)


def test_make_fx_records_the_default_overloads():
    gm = make_fx(layer, tracing_mode="fake")(torch.randn(4, 8), torch.randn(8, 16))
    names = targets(gm)
    assert "tpar.all_reduce.default" in names and "tpar.all_reduce_.default" in names


def test_fake_tensor_mode_on_cuda_tensors():
    with FakeTensorMode():
        a = torch.empty(3, 5, dtype=torch.float16, device="cuda")
        b = torch.ops.tpar.all_reduce(a, HANDLE, "min")
        assert b.shape == a.shape and b.dtype == a.dtype and b.device == a.device


def test_fake_implementation_refuses_what_eager_refuses():
    with pytest.raises(tpar.TparArgumentError, match="dtype"):
        torch.ops.tpar.all_reduce(torch.empty(4, dtype=torch.int32, device="meta"), HANDLE, "sum")
    with pytest.raises(tpar.TparArgumentError, match="op"):
        torch.ops.tpar.all_reduce(torch.empty(4, device="meta"), HANDLE, "avg")


def test_communicator_method_inside_compile_becomes_the_ops():
    comm = Communicator.__new__(Communicator)
    comm._adopt(HANDLE, 0, 2, 0)
    seen = []

    def backend(gm, inputs):
        seen.append(gm)
        return gm.forward

    def f(x):
        y = x * 2
        comm.all_reduce(y)
        z = comm.all_reduce(y, out=torch.empty_like(y))
        return z + 1

    try:
        out = torch.compile(f, fullgraph=True, backend=backend)(torch.randn(4, 8, device="meta"))
    finally:
        comm._release()
    assert out.shape == (4, 8)
    names = targets(seen[0])
    assert names.count("tpar.all_reduce_") == 1 and names.count("tpar.all_reduce") == 1
