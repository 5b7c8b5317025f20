"""The torch ops trace without a GPU: torch.compile(fullgraph=True), make_fx and FakeTensorMode
see tpar::all_reduce (functional) and tpar::all_reduce_ (mutating), and the fused
tpar::all_reduce_add_rms_norm / tpar::all_reduce_add_rms_norm_ pair, through their fake
implementations (which refuse what the eager call refuses), and a Communicator method called
inside a compiled function becomes the op."""
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


def capturing():
    """(the graphs a torch.compile backend was given, that backend): it runs them as they are."""
    seen = []

    def backend(gm, inputs):
        seen.append(gm)
        return gm.forward

    return seen, backend


def targets(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_compile_fullgraph_keeps_both_ops(dtype):
    seen, backend = capturing()

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
    seen, backend = capturing()

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


# ---- the fused all-reduce + residual add + RMSNorm ------------------------------------------


def fused_layer(x, w, residual):
    out, r = torch.ops.tpar.all_reduce_add_rms_norm(x, w, 1e-6, residual, HANDLE)
    out2 = torch.empty_like(out)
    torch.ops.tpar.all_reduce_add_rms_norm_(out, w, 1e-5, r, out2, HANDLE)
    return out2, r


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_compile_fullgraph_keeps_both_fused_ops(dtype):
    seen, backend = capturing()

    f = torch.compile(fused_layer, fullgraph=True, backend=backend)
    x = torch.randn(3, 64, dtype=dtype, device="meta")
    out, r = f(x, torch.randn(64, dtype=dtype, device="meta"), torch.randn_like(x))
    assert out.shape == r.shape == (3, 64) and out.dtype == r.dtype == dtype
    names = targets(seen[0])
    assert "tpar.all_reduce_add_rms_norm" in names and "tpar.all_reduce_add_rms_norm_" in names


def test_aot_autograd_functionalizes_the_mutating_fused_op():
    f = torch.compile(fused_layer, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 16, dtype=torch.bfloat16, device="meta")
    out, r = f(x, torch.randn(16, dtype=torch.bfloat16, device="meta"), torch.randn_like(x))
    assert out.shape == (2, 16) and r.shape == (2, 16)


def test_make_fx_records_the_fused_overloads_without_a_residual():
    def f(x, w):
        return torch.ops.tpar.all_reduce_add_rms_norm(x, w, 1e-6, None, HANDLE)

    gm = make_fx(f, tracing_mode="fake")(torch.randn(4, 8), torch.randn(8))
    assert "tpar.all_reduce_add_rms_norm.default" in targets(gm)


@pytest.mark.parametrize("case, words", [
    ("hidden not a multiple of 8", "hidden size 12"),
    ("hidden above 16384", "hidden size 16392"),
    ("weight of another dtype", "weight has dtype"),
    ("weight of another size", "weight has shape"),
    ("residual of another shape", "residual has shape"),
    ("integer input", "input has dtype"),
    ("negative eps", "eps"),
])
def test_fused_fake_refuses_what_eager_refuses(case, words):
    dt, hidden, eps = torch.bfloat16, 64, 1e-6
    x_dtype, w_dtype, w_size, r_shape = dt, dt, hidden, None
    if case == "hidden not a multiple of 8":
        hidden = w_size = 12
    elif case == "hidden above 16384":
        hidden = w_size = 16392
    elif case == "weight of another dtype":
        w_dtype = torch.float32
    elif case == "weight of another size":
        w_size = hidden * 2
    elif case == "residual of another shape":
        r_shape = (3, hidden)
    elif case == "integer input":
        x_dtype = torch.int32
    elif case == "negative eps":
        eps = -1.0
    x = torch.empty(2, hidden, dtype=x_dtype, device="meta")
    w = torch.empty(w_size, dtype=w_dtype, device="meta")
    residual = torch.empty(r_shape, dtype=dt, device="meta") if r_shape else None
    with pytest.raises(tpar.TparArgumentError, match=words):
        torch.ops.tpar.all_reduce_add_rms_norm(x, w, eps, residual, HANDLE)


def test_communicator_fused_method_inside_compile_becomes_the_op():
    comm = Communicator.__new__(Communicator)
    comm._adopt(HANDLE, 0, 2, 0)
    seen, backend = capturing()

    def f(x, w, residual):
        y, r = comm.all_reduce_add_rms_norm(x * 2, w, 1e-6, residual)
        return y + 1, r

    try:
        x = torch.randn(4, 8, device="meta")
        y, r = torch.compile(f, fullgraph=True, backend=backend)(x, torch.randn(8, device="meta"),
                                                                 torch.randn_like(x))
    finally:
        comm._release()
    assert y.shape == (4, 8) and r.shape == (4, 8)
    assert targets(seen[0]).count("tpar.all_reduce_add_rms_norm") == 1
