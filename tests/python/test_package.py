"""The package without a GPU: import, version, errors that carry the library's text, and every
argument refusal of Communicator.all_reduce, which must come before any GPU work."""
import math

import pytest
import torch

import tpar
from tpar import _C
from tpar.communicator import Communicator, _config_args, op_code


def fake_comm(index=0):
    """A Communicator object whose handle was never made by the library: every call that
    reached the library would fail, so a refusal proves the check ran first."""
    c = Communicator.__new__(Communicator)
    c._adopt(0xDEAD0, 0, 2, index)
    c.group = None
    return c


def test_version_matches_the_header():
    rc, code = _C.get_version()
    assert rc == 0
    assert code == _C.HEADER_VERSION
    assert tpar.__version__ == f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def test_algorithm_names_are_the_c_names():
    names = tpar.algorithm_names()
    assert names[0] == "auto"
    assert {"oneshot", "twoshot", "nccl"} <= set(names)
    assert _C.algo_name(len(names)) == "unknown"


def test_unique_ids_are_fresh_bytes_of_the_right_size():
    a, b = tpar.get_unique_id(), tpar.get_unique_id()
    assert isinstance(a, bytes) and len(a) == _C.UNIQUE_ID_BYTES
    assert a != b


def test_a_library_failure_raises_tpar_error_with_the_library_text():
    rc = _C.all_reduce(0xDEAD0, 0x1000, 0x1000, 4, 0, 0, 0)
    assert rc == tpar.Result.INVALID_ARGUMENT
    with pytest.raises(tpar.TparError) as info:
        tpar._errors.check(rc)
    assert info.value.result == tpar.Result.INVALID_ARGUMENT
    assert "not a live communicator" in str(info.value)


def test_unknown_result_codes_keep_their_number():
    e = tpar.TparError(99, "from a newer library")
    assert e.result == 99 and "from a newer library" in str(e)


@pytest.mark.parametrize("config, word", [
    ({"timeout": 5}, "timeout"),
    ({"algorithm": "fastest"}, "algorithm"),
    ({"transport": "pcie"}, "transport"),
    ({"wire": "fp16"}, "wire"),
    ({"wire": "bf8"}, "wire"),
    ({"wire": 7}, "wire"),
    ({"timeout_ms": -1}, "timeout_ms"),
    ({"timeout_ms": 1.5}, "timeout_ms"),
    ({"max_bytes_per_call": "8M"}, "max_bytes_per_call"),
    ("timeout_ms=5", "config"),
])
def test_bad_config_is_refused_naming_the_key(config, word):
    with pytest.raises(tpar.TparArgumentError, match=word):
        _config_args(config)


def test_config_names_become_the_c_values():
    args = _config_args({"algorithm": "twoshot", "transport": "host", "allow_shared_device": True,
                         "timeout_ms": 2500, "max_bytes_per_call": 1 << 20, "wire": "int4"})
    assert args == {"algorithm": tpar.algorithm_names().index("twoshot"), "transport": 1,
                    "allow_shared_device": 1, "timeout_ms": 2500, "max_bytes_per_call": 1 << 20,
                    "wire": 3}
    assert [_config_args({"wire": w})["wire"] for w in ("none", "fp8", "int8", "int4")] == [0, 1, 2, 3]
    # "bf16" is the lossless format's other name, as TPAR_WIRE takes it; names in any case.
    assert [_config_args({"wire": w})["wire"] for w in ("bf16", "BF16", "FP8", "Int4")] == [0, 0, 1, 3]


def test_ops_by_name_or_reduce_op():
    import torch.distributed as dist

    assert [op_code(x) for x in ("sum", "max", "min")] == [0, 1, 2]
    assert op_code(dist.ReduceOp.MAX) == 1
    for bad in ("avg", "prod", dist.ReduceOp.PRODUCT, 3):
        with pytest.raises(tpar.TparArgumentError, match="op"):
            op_code(bad)


def poisoned(n, dtype=torch.float32):
    return torch.full((n,), math.nan, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float64, torch.uint8, torch.float8_e4m3fn])
def test_unsupported_dtypes_are_refused(dtype):
    t = torch.zeros(8, dtype=dtype)
    with pytest.raises(tpar.TparArgumentError, match="tensor has dtype"):
        fake_comm().all_reduce(t)


def test_non_tensors_are_refused():
    with pytest.raises(tpar.TparArgumentError, match="tensor must be a torch.Tensor"):
        fake_comm().all_reduce([1.0, 2.0])


def test_non_contiguous_tensors_are_refused():
    t = torch.randn(8, 8).t()
    with pytest.raises(tpar.TparArgumentError, match="tensor is not contiguous"):
        fake_comm().all_reduce(t)


@pytest.mark.parametrize("sparse", [lambda: torch.randn(16).to_sparse(),
                                    lambda: torch.randn(4, 4).to_sparse_csr()], ids=["coo", "csr"])
def test_sparse_tensors_are_refused_with_the_package_error_not_torchs(sparse):
    with pytest.raises(tpar.TparArgumentError, match="tensor has layout torch.sparse"):
        fake_comm().all_reduce(sparse())
    with pytest.raises(tpar.TparArgumentError, match="out has layout torch.sparse"):
        fake_comm().all_reduce(torch.randn(16), out=sparse())
    for op in (tpar.ops.all_reduce, tpar.ops.all_reduce_):
        with pytest.raises(tpar.TparArgumentError, match="tensor has layout torch.sparse"):
            op(sparse(), fake_comm())


def test_init_all_without_devices_is_refused_naming_the_argument():
    with pytest.raises(tpar.TparArgumentError, match="devices is empty"):
        Communicator.init_all([])
    with pytest.raises(tpar.TparArgumentError, match="devices must be a list"):
        Communicator.init_all(0)


def test_mismatched_outputs_are_refused_and_left_untouched():
    t = torch.randn(16)
    comm = fake_comm()
    cases = [(poisoned(15), "out has 15 elements"),
             (poisoned(16, torch.float16), "out has dtype"),
             (torch.full((8, 4), math.nan).t(), "out has 32 elements"),
             (torch.full((4, 4), math.nan).t(), "out is not contiguous")]
    for out, text in cases:
        before = out.clone()
        with pytest.raises(tpar.TparArgumentError, match=text):
            comm.all_reduce(t, out=out)
        assert torch.equal(out.isnan(), before.isnan())


def test_bad_ops_are_refused_before_any_gpu_work():
    with pytest.raises(tpar.TparArgumentError, match="op 'avg'"):
        fake_comm().all_reduce(torch.randn(4), op="avg")


def test_tensors_on_another_device_are_refused():
    t = torch.randn(4)
    before = t.clone()
    with pytest.raises(tpar.TparArgumentError, match="tensor is on cpu, the communicator on cuda:0"):
        fake_comm().all_reduce(t)
    assert torch.equal(t, before)


def test_a_closed_communicator_refuses_calls():
    comm = fake_comm()
    comm._release()
    with pytest.raises(tpar.TparError, match="closed") as info:
        comm.all_reduce(torch.randn(4))
    assert info.value.result == tpar.Result.INVALID_USAGE
    with pytest.raises(tpar.TparError, match="closed"):
        comm.query()
    comm.close()  # idempotent
    comm.abort()


def test_without_torch_distributed_the_constructor_says_what_to_do():
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("torch.distributed is initialized in this process")
    with pytest.raises(tpar.TparError, match="init_process_group"):
        tpar.Communicator()


def test_from_unique_id_checks_its_arguments():
    with pytest.raises(tpar.TparArgumentError, match="unique_id"):
        Communicator.from_unique_id(b"short", 0, 2, device=0)
