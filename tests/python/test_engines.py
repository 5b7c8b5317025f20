"""The engine plugins without the engines: they patch exactly the names the engines look up
(vLLM 0.33: custom_all_reduce.CustomAllreduce; SGLang 0.5.23: dispatch_custom_allreduce), only
when TPAR_ENGINE_PLUGIN is on, and the adapter refuses what it cannot reduce."""
import sys
import types

import pytest
import torch

from tpar import integrations
from tpar.integrations import sglang as tpar_sglang
from tpar.integrations import vllm as tpar_vllm
from tpar.integrations._adapter import EngineAllReduce


@pytest.fixture
def fake_module(monkeypatch):
    """Installs an empty module (and its parents) under a dotted name."""

    def make(dotted):
        parts = dotted.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if name not in sys.modules:
                monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        return sys.modules[dotted]

    return make


def engine_sentinel():
    class Original:
        pass

    return Original


def test_vllm_plugin_is_off_unless_asked(fake_module, monkeypatch):
    mod = fake_module(tpar_vllm._MODULE)
    original = engine_sentinel()
    mod.CustomAllreduce = original
    monkeypatch.delenv("TPAR_ENGINE_PLUGIN", raising=False)
    tpar_vllm.register()
    assert mod.CustomAllreduce is original
    monkeypatch.setenv("TPAR_ENGINE_PLUGIN", "0")
    tpar_vllm.register()
    assert mod.CustomAllreduce is original


def test_vllm_plugin_replaces_the_class_and_keeps_an_explicit_flashinfer_choice(fake_module, monkeypatch):
    mod = fake_module(tpar_vllm._MODULE)
    mod.CustomAllreduce = engine_sentinel()
    monkeypatch.setenv("TPAR_ENGINE_PLUGIN", "1")
    monkeypatch.setenv("VLLM_ALLREDUCE_USE_FLASHINFER", "1")
    tpar_vllm.register()
    tpar_vllm.register()  # loaded again by another vLLM entry point: still one patch
    assert mod.CustomAllreduce is tpar_vllm.VllmAllReduce
    import os
    assert os.environ["VLLM_ALLREDUCE_USE_FLASHINFER"] == "1"


def test_vllm_plugin_turns_flashinfer_off_by_default(fake_module, monkeypatch):
    mod = fake_module(tpar_vllm._MODULE)
    mod.CustomAllreduce = engine_sentinel()
    monkeypatch.setenv("TPAR_ENGINE_PLUGIN", "yes")
    monkeypatch.delenv("VLLM_ALLREDUCE_USE_FLASHINFER", raising=False)
    tpar_vllm.register()
    import os
    assert os.environ["VLLM_ALLREDUCE_USE_FLASHINFER"] == "0"
    monkeypatch.delenv("VLLM_ALLREDUCE_USE_FLASHINFER")


def test_sglang_plugin_replaces_the_dispatcher(fake_module, monkeypatch):
    mod = fake_module(tpar_sglang._MODULE)
    original = engine_sentinel()
    mod.dispatch_custom_allreduce = lambda group, device: original
    monkeypatch.setenv("TPAR_ENGINE_PLUGIN", "0")
    tpar_sglang.register()
    assert mod.dispatch_custom_allreduce(None, None) is original
    monkeypatch.setenv("TPAR_ENGINE_PLUGIN", "on")
    tpar_sglang.register()
    assert mod.dispatch_custom_allreduce(group=None, device=None) is tpar_sglang.SglangAllReduce


def test_a_malformed_switch_is_an_error_not_a_silent_off(monkeypatch):
    monkeypatch.setenv("TPAR_ENGINE_PLUGIN", "maybe")
    with pytest.raises(ValueError, match="TPAR_ENGINE_PLUGIN"):
        integrations.enabled()


@pytest.mark.parametrize("text, value", [("4096", 4096), ("64K", 65536), ("8m", 8 << 20), ("1GiB", 1 << 30)])
def test_sizes_parse_as_the_library_parses_them(text, value, monkeypatch):
    monkeypatch.setenv("TPAR_ENGINE_MAX_BYTES", text)
    assert integrations.max_bytes(123) == value


@pytest.mark.parametrize("text", ["0", "-5", "8X", "2G", "0x100"])
def test_bad_sizes_are_named(text, monkeypatch):
    monkeypatch.setenv("TPAR_ENGINE_MAX_BYTES", text)
    with pytest.raises(ValueError, match="TPAR_ENGINE_MAX_BYTES"):
        integrations.max_bytes(123)


def test_without_a_variable_the_engine_size_holds(monkeypatch):
    monkeypatch.delenv("TPAR_ENGINE_MAX_BYTES", raising=False)
    assert integrations.max_bytes(8 << 20) == 8 << 20


def adapter(max_size=1024):
    """An enabled adapter whose communicator is never reached (the size rules only)."""
    a = EngineAllReduce.__new__(EngineAllReduce)
    a.disabled, a.max_size, a.comm, a.calls, a._IS_CAPTURING = False, max_size, None, 0, False
    return a


def test_should_custom_ar_follows_dtype_size_and_layout():
    a = adapter(max_size=1024)
    assert a.should_custom_ar(torch.empty(512, dtype=torch.bfloat16))      # 1024 bytes
    assert not a.should_custom_ar(torch.empty(513, dtype=torch.bfloat16))  # above max_size
    assert not a.should_custom_ar(torch.empty(0, dtype=torch.float32))
    assert not a.should_custom_ar(torch.empty(16, dtype=torch.int32))
    assert not a.should_custom_ar(torch.empty(8, 8, dtype=torch.float16).t())
    a.disabled = True
    assert not a.should_custom_ar(torch.empty(16, dtype=torch.float32))
    assert a.custom_all_reduce(torch.empty(16, dtype=torch.float32)) is None


def test_capture_tracks_state_and_the_other_collectives_fall_back():
    a = adapter()
    with a.capture():
        assert a._IS_CAPTURING
    assert not a._IS_CAPTURING
    t = torch.empty(8)
    assert a.custom_all_gather(t) is None and a.custom_reduce_scatter(t) is None
    assert not a.should_custom_all_gather(t)
    a.close()
    assert a.disabled


@pytest.mark.parametrize("cls, at_max", [(tpar_vllm.VllmAllReduce, False),
                                         (tpar_sglang.SglangAllReduce, True)])
def test_max_size_is_compared_as_each_engine_compares_it(cls, at_max):
    # vLLM's own custom all-reduce takes messages below max_size, SGLang's up to it.
    a = cls.__new__(cls)
    a.disabled, a.max_size, a.comm, a.calls, a._IS_CAPTURING = False, 1024, None, 0, False
    assert a.should_custom_ar(torch.empty(504, dtype=torch.bfloat16))  # 1008 bytes
    assert a.should_custom_ar(torch.empty(512, dtype=torch.bfloat16)) is at_max  # 1024 bytes
    assert not a.should_custom_ar(torch.empty(520, dtype=torch.bfloat16))


class FakeDist:
    """torch.distributed as the adapter's constructor sees it: rank `rank` of a group whose
    ranks report `hosts` from host_identity()."""

    def __init__(self, hosts, rank=0):
        self.hosts, self.rank = hosts, rank

    def install(self, monkeypatch):
        import torch.distributed as dist

        monkeypatch.setattr(dist, "get_world_size", lambda group=None: len(self.hosts))
        monkeypatch.setattr(dist, "get_rank", lambda group=None: self.rank)

        def all_gather_object(out, obj, group=None):
            assert obj == _adapter.host_identity()  # this rank sends its own identity
            out[:] = list(self.hosts)

        monkeypatch.setattr(dist, "all_gather_object", all_gather_object)


from tpar.integrations import _adapter  # noqa: E402


class FakeCommunicator:
    made = 0

    def __init__(self, group, device=None):
        FakeCommunicator.made += 1

    def query(self):
        return {"cuda_device": 3, "transport": "host"}

    def close(self):
        pass


@pytest.mark.parametrize("cls, logger_name", [(tpar_vllm.VllmAllReduce, "vllm.tpar"),
                                              (tpar_sglang.SglangAllReduce, "sglang.tpar")])
def test_a_group_across_machines_is_handed_back_before_any_rendezvous(cls, logger_name,
                                                                      monkeypatch, caplog):
    FakeDist(["host-a/boot-1", "host-a/boot-1", "host-b/boot-2", "host-a/boot-1"],
             rank=2).install(monkeypatch)
    FakeCommunicator.made = 0
    monkeypatch.setattr(_adapter, "Communicator", FakeCommunicator)
    with caplog.at_level("INFO"):
        a = cls(group=object(), device=0)
    assert a.disabled and a.comm is None
    assert FakeCommunicator.made == 0  # no rendezvous was started
    lines = [r for r in caplog.records if r.name == logger_name]
    assert len(lines) == 1 and lines[0].levelname == "WARNING"
    assert "rank 2/4" in lines[0].getMessage() and "spans 2 machines" in lines[0].getMessage()


@pytest.mark.parametrize("cls, logger_name, words", [
    (tpar_vllm.VllmAllReduce, "vllm.tpar", "below 8388608 bytes"),
    (tpar_sglang.SglangAllReduce, "sglang.tpar", "up to 8388608 bytes")])
def test_one_line_in_the_engines_log_says_tpar_is_on(cls, logger_name, words, monkeypatch, caplog):
    here = _adapter.host_identity()
    FakeDist([here, here], rank=1).install(monkeypatch)
    FakeCommunicator.made = 0
    monkeypatch.setattr(_adapter, "Communicator", FakeCommunicator)
    monkeypatch.delenv("TPAR_ENGINE_MAX_BYTES", raising=False)
    with caplog.at_level("INFO"):
        a = cls(group=object(), device=3)
    assert not a.disabled and FakeCommunicator.made == 1
    lines = [r for r in caplog.records if r.name == logger_name]
    assert len(lines) == 1 and lines[0].levelname == "INFO"
    text = lines[0].getMessage()
    assert "on for rank 1/2" in text and "cuda:3, host transport" in text and words in text
    a.comm = None  # FakeCommunicator has nothing to free
