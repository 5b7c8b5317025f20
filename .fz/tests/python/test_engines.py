"""The engine plugins without the engines: they patch exactly the names the engines look up
(vLLM 0.33: custom_all_reduce.CustomAllreduce; SGLang 0.5.23: dispatch_custom_allreduce), only
when TPAR_ENGINE_PLUGIN is on; a group whose GPUs are all joined by NVLink gets the engine's own
class back; the adapter refuses what it cannot reduce, and an error its kernels recorded stops
the engine's next call. The last test needs a GPU (skipped, with the reason, without one)."""
import random
import sys
import types

import pytest
import torch

from tpar import Result, TparError, integrations
from tpar.integrations import _adapter
from tpar.integrations import sglang as tpar_sglang
from tpar.integrations import vllm as tpar_vllm
from tpar.integrations._adapter import EngineAllReduce, GpuLinks


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


@pytest.fixture(autouse=True)
def no_registered_engine(monkeypatch):
    """Each test starts with no engine class registered and no decision pending."""
    monkeypatch.setattr(tpar_vllm, "original_class", None)
    monkeypatch.setattr(tpar_sglang, "original_dispatch", None)
    monkeypatch.setattr(EngineAllReduce, "_decided", {})


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
    original = engine_sentinel()
    mod.CustomAllreduce = original
    monkeypatch.setenv("TPAR_ENGINE_PLUGIN", "1")
    monkeypatch.setenv("VLLM_ALLREDUCE_USE_FLASHINFER", "1")
    tpar_vllm.register()
    tpar_vllm.register()  # loaded again by another vLLM entry point: still one patch
    assert mod.CustomAllreduce is tpar_vllm.VllmAllReduce
    assert tpar_vllm.original_class is original  # vLLM's own class stays reachable
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
    tpar_sglang.register()  # loaded twice: still one patch
    assert mod.dispatch_custom_allreduce is tpar_sglang.dispatch_custom_allreduce
    assert tpar_sglang.original_dispatch(None, None) is original  # SGLang's own stays reachable
    # What the replacement returns per group: the tests under "the choice" below.


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


class FakeCommunicator:
    """tpar.Communicator as the adapter uses it, without a GPU: all_reduce copies its input,
    and an asynchronous error can be planted."""

    made = 0

    def __init__(self, group=None, device=None):
        FakeCommunicator.made += 1
        self.async_error = None
        self.closed = False
        self.kernels = 0  # what the GPU would count: set by a test

    def kernel_count(self):
        return self.kernels

    def query(self):
        return {"cuda_device": 3, "transport": "host"}

    def all_reduce(self, inp, out):
        out.copy_(inp)
        return out

    def check_async_error(self):
        if self.async_error is not None:
            raise TparError(self.async_error, "a collective timed out: a peer did not arrive "
                            "within 500 ms (TPAR_TIMEOUT_MS)")

    def close(self):
        self.closed = True


def adapter(cls=EngineAllReduce, max_size=1024, comm=None):
    """An enabled adapter around `comm` (a FakeCommunicator), built without the collective
    constructor."""
    a = object.__new__(cls)
    a._reset(max_size)
    a.comm = comm if comm is not None else FakeCommunicator()
    a.disabled, a.rank, a.world_size = False, 1, 2
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
    a = adapter(cls, max_size=1024)
    assert a.should_custom_ar(torch.empty(504, dtype=torch.bfloat16))  # 1008 bytes
    assert a.should_custom_ar(torch.empty(512, dtype=torch.bfloat16)) is at_max  # 1024 bytes
    assert not a.should_custom_ar(torch.empty(520, dtype=torch.bfloat16))


# ---- the choice of custom all-reduce, per group -----------------------------------------------

BUS = ["00000000:1a:00.0", "00000000:1b:00.0", "00000000:3d:00.0", "00000000:3e:00.0"]


def links(n, missing=(), unknown=()):
    """GpuLinks of n GPUs (BUS[:n]), all pairs joined by NVLink except the pairs in `missing`;
    the ranks in `unknown` could not ask NVML."""
    out = []
    for r in range(n):
        if r in unknown:
            out.append(GpuLinks(BUS[r], None, "pynvml (nvidia-ml-py) is not installed"))
            continue
        peers = [BUS[q] for q in range(n) if q != r and {r, q} not in [set(m) for m in missing]]
        out.append(GpuLinks(BUS[r], tuple(peers)))
    return out


def peers_of(gpu_links, hosts=None, forced=()):
    """What each rank sends in the adapter's one gather: host, bus id, NVLink peers, why, and
    whether TPAR_ENGINE_NVLINK is set there."""
    hosts = hosts or [_adapter.host_identity()] * len(gpu_links)
    return [(h, *g, r in forced) for r, (h, g) in enumerate(zip(hosts, gpu_links))]


def test_every_pair_on_nvlink_keeps_the_engines_own_and_every_rank_agrees():
    peers = peers_of(links(4))
    choices = [_adapter.choose(peers, r) for r in range(4)]
    assert {c.use for c in choices} == {"engine"}
    assert "every pair of the group's 4 GPUs is joined by NVLink" in choices[0].reason


def test_one_pair_without_nvlink_makes_it_tpar_and_names_the_pair():
    peers = peers_of(links(4, missing=[(1, 3)]))
    choices = [_adapter.choose(peers, r) for r in range(4)]
    assert {c.use for c in choices} == {"tpar"}
    assert "ranks 1 and 3" in choices[0].reason and BUS[3] in choices[0].reason


def test_a_link_seen_from_one_end_only_is_no_nvlink():
    gl = links(2)
    gl[1] = GpuLinks(BUS[1], ())  # rank 0 reports rank 1's GPU, rank 1 reports none
    assert _adapter.choose(peers_of(gl), 0).use == "tpar"


def test_nvlink_unknown_on_one_rank_makes_it_tpar_on_every_rank():
    peers = peers_of(links(4, unknown=[2]))
    choices = [_adapter.choose(peers, r) for r in range(4)]
    assert {c.use for c in choices} == {"tpar"}
    assert "rank 2" in choices[0].reason and "pynvml" in choices[0].reason


def test_the_nvlink_switch_asks_for_tpar_on_nvlink():
    peers = peers_of(links(2), forced=[0])
    choices = [_adapter.choose(peers, r) for r in range(2)]
    assert {c.use for c in choices} == {"tpar"}
    assert "TPAR_ENGINE_NVLINK=1" in choices[1].reason


def test_a_group_across_machines_gets_nccl_whatever_its_links():
    peers = peers_of(links(2), hosts=["host-a/boot-1", "host-b/boot-2"])
    assert _adapter.choose(peers, 0).use == "nccl"


@pytest.mark.parametrize("name, fn", [("TPAR_ENGINE_NVLINK", integrations.nvlink_forced),
                                      ("TPAR_ENGINE_PLUGIN", integrations.enabled)])
@pytest.mark.parametrize("text, value", [("1", True), ("on", True), ("0", False), ("", False)])
def test_switches_parse_as_the_library_parses_booleans(name, fn, text, value, monkeypatch):
    monkeypatch.setenv(name, text)
    assert fn() is value


def test_a_malformed_nvlink_switch_stops_the_plugin_at_load(fake_module, monkeypatch):
    mod = fake_module(tpar_vllm._MODULE)
    original = engine_sentinel()
    mod.CustomAllreduce = original
    monkeypatch.setenv("TPAR_ENGINE_PLUGIN", "1")
    monkeypatch.setenv("TPAR_ENGINE_NVLINK", "force")
    with pytest.raises(ValueError, match="TPAR_ENGINE_NVLINK"):
        tpar_vllm.register()
    assert mod.CustomAllreduce is original


def test_the_gpu_links_query_never_raises(monkeypatch):
    # No GPU here (or no NVML): the answer is "unknown", with the reason, never an exception.
    monkeypatch.setattr(_adapter, "_pynvml", lambda: None)
    g = _adapter.gpu_links(0)
    assert g.nvlink is None and g.why


class FakeNvml:
    """The part of pynvml that gpu_links uses: GPUs at `buses`, NVLink between `pairs`."""

    NVML_P2P_CAPS_INDEX_NVLINK = 3
    NVML_P2P_STATUS_OK = 0

    class NVMLError(Exception):
        pass

    def __init__(self, buses, pairs, fail_init=False):
        self.buses, self.pairs, self.fail_init = buses, [set(p) for p in pairs], fail_init
        self.open = 0

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")
        self.open += 1

    def nvmlShutdown(self):
        self.open -= 1

    def nvmlDeviceGetCount(self):
        return len(self.buses)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId=self.buses[h].upper().encode())  # older pynvml: bytes

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        assert index == self.NVML_P2P_CAPS_INDEX_NVLINK
        return self.NVML_P2P_STATUS_OK if {a, b} in self.pairs else 5  # 5: not supported


def gpu_at(monkeypatch, bus_number):
    props = types.SimpleNamespace(pci_domain_id=0, pci_bus_id=bus_number, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)


def test_gpu_links_lists_the_gpus_nvml_reports_on_nvlink(monkeypatch):
    nvml = FakeNvml(BUS, pairs=[(0, 1), (1, 2), (2, 3)])
    monkeypatch.setattr(_adapter, "_pynvml", lambda: nvml)
    gpu_at(monkeypatch, 0x1b)  # BUS[1]
    g = _adapter.gpu_links(0)
    assert g == GpuLinks(BUS[1], (BUS[0], BUS[2]))
    assert nvml.open == 0  # NVML shut down again


def test_gpu_links_is_unknown_where_nvml_fails(monkeypatch):
    monkeypatch.setattr(_adapter, "_pynvml", lambda: FakeNvml(BUS, [], fail_init=True))
    gpu_at(monkeypatch, 0x1b)
    g = _adapter.gpu_links(0)
    assert g.bus_id == BUS[1] and g.nvlink is None and "Driver Not Loaded" in g.why
    monkeypatch.setattr(_adapter, "_pynvml", lambda: FakeNvml(BUS[2:], []))
    g = _adapter.gpu_links(0)  # NVML does not list this GPU
    assert g.nvlink is None and BUS[1] in g.why


def test_bus_ids_compare_in_one_spelling():
    assert _adapter._bus_id("00000000:1A:00.0") == _adapter._bus_id("0:1a:0.0") == BUS[0]
    assert _adapter._bus_id(b"0000:3D:00.0") == BUS[2]


class FakeDist:
    """torch.distributed as the adapter's constructor sees it: rank `rank` of a group whose
    ranks send `peers` (see peers_of) in the one gather; this rank's GPU links are its entry."""

    def __init__(self, peers, rank=0):
        self.peers, self.rank, self.gathers = peers, rank, 0

    def install(self, monkeypatch):
        import torch.distributed as dist

        monkeypatch.setattr(dist, "get_world_size", lambda group=None: len(self.peers))
        monkeypatch.setattr(dist, "get_rank", lambda group=None: self.rank)
        monkeypatch.setattr(_adapter, "gpu_links", lambda index: GpuLinks(*self.peers[self.rank][1:4]))

        def all_gather_object(out, obj, group=None):
            assert obj[0] == _adapter.host_identity()  # this rank sends its own identity
            assert obj[1:] == self.peers[self.rank][1:4] + (integrations.nvlink_forced(),)
            self.gathers += 1
            out[:] = list(self.peers)

        monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
        return self


@pytest.fixture
def fake_tpar(monkeypatch):
    FakeCommunicator.made = 0
    monkeypatch.setattr(_adapter, "Communicator", FakeCommunicator)
    monkeypatch.delenv("TPAR_ENGINE_MAX_BYTES", raising=False)
    monkeypatch.delenv("TPAR_ENGINE_NVLINK", raising=False)
    return FakeCommunicator


@pytest.mark.parametrize("cls, logger_name", [(tpar_vllm.VllmAllReduce, "vllm.tpar"),
                                              (tpar_sglang.SglangAllReduce, "sglang.tpar")])
def test_a_group_across_machines_is_handed_back_before_any_rendezvous(cls, logger_name, fake_tpar,
                                                                      monkeypatch, caplog):
    here = _adapter.host_identity()
    FakeDist(peers_of(links(4), hosts=[here, here, here, "host-b/boot-2"]),
             rank=2).install(monkeypatch)
    with caplog.at_level("INFO"):
        a = cls(group=object(), device=0)
    assert a.disabled and a.comm is None
    assert fake_tpar.made == 0  # no rendezvous was started
    lines = [r for r in caplog.records if r.name == logger_name]
    assert len(lines) == 1 and lines[0].levelname == "WARNING"
    assert "rank 2/4" in lines[0].getMessage() and "spans 2 machines" in lines[0].getMessage()


@pytest.mark.parametrize("cls, logger_name, words", [
    (tpar_vllm.VllmAllReduce, "vllm.tpar", "below 8388608 bytes"),
    (tpar_sglang.SglangAllReduce, "sglang.tpar", "up to 8388608 bytes")])
def test_one_line_in_the_engines_log_says_tpar_is_on_and_why(cls, logger_name, words, fake_tpar,
                                                             monkeypatch, caplog):
    FakeDist(peers_of(links(2, missing=[(0, 1)])), rank=1).install(monkeypatch)
    with caplog.at_level("INFO"):
        a = cls(group=object(), device=3)
    assert isinstance(a, cls) and not a.disabled and fake_tpar.made == 1
    lines = [r for r in caplog.records if r.name == logger_name]
    assert len(lines) == 1 and lines[0].levelname == "INFO"
    text = lines[0].getMessage()
    assert "on for rank 1/2" in text and "cuda:3, host transport" in text and words in text
    assert "ranks 0 and 1" in text and "not joined by NVLink" in text


def own_class():
    """An engine's own custom all-reduce: records how it was built."""

    class Own:
        def __init__(self, *args, **kwargs):
            self.args, self.kwargs = args, kwargs

    return Own


def test_vllm_on_nvlink_builds_its_own_class_from_the_same_arguments(fake_module, fake_tpar,
                                                                     monkeypatch, caplog):
    mod = fake_module(tpar_vllm._MODULE)
    own = own_class()
    mod.CustomAllreduce = own
    monkeypatch.setenv("TPAR_ENGINE_PLUGIN", "1")
    monkeypatch.setenv("VLLM_ALLREDUCE_USE_FLASHINFER", "1")
    tpar_vllm.register()
    assert mod.CustomAllreduce is tpar_vllm.VllmAllReduce and tpar_vllm.original_class is own
    dist = FakeDist(peers_of(links(4)), rank=3).install(monkeypatch)
    group = object()
    with caplog.at_level("INFO"):
        # As CudaCommunicator builds it (vLLM 0.33: keywords only).
        ca = mod.CustomAllreduce(group=group, device=3, symm_mem_enabled=False,
                                 register_graph_buffers=True)
    assert type(ca) is own
    assert ca.args == () and ca.kwargs == {"group": group, "device": 3, "symm_mem_enabled": False,
                                           "register_graph_buffers": True}
    assert fake_tpar.made == 0 and dist.gathers == 1
    lines = [r for r in caplog.records if r.name == "vllm.tpar"]
    assert len(lines) == 1 and lines[0].levelname == "INFO"
    text = lines[0].getMessage()
    assert "left to vLLM's own for rank 3/4" in text and "joined by NVLink" in text
    assert "TPAR_ENGINE_NVLINK=1" in text


def test_vllm_on_nvlink_with_the_switch_set_is_tpar(fake_module, fake_tpar, monkeypatch, caplog):
    mod = fake_module(tpar_vllm._MODULE)
    mod.CustomAllreduce = own_class()
    monkeypatch.setenv("TPAR_ENGINE_PLUGIN", "1")
    monkeypatch.setenv("VLLM_ALLREDUCE_USE_FLASHINFER", "1")
    tpar_vllm.register()
    monkeypatch.setenv("TPAR_ENGINE_NVLINK", "1")
    FakeDist(peers_of(links(2), forced=[0, 1]), rank=0).install(monkeypatch)
    with caplog.at_level("INFO"):
        ca = mod.CustomAllreduce(group=object(), device=0, symm_mem_enabled=False,
                                 register_graph_buffers=True)
    assert isinstance(ca, tpar_vllm.VllmAllReduce) and not ca.disabled and fake_tpar.made == 1
    text = [r.getMessage() for r in caplog.records if r.name == "vllm.tpar"][0]
    assert "on for rank 0/2" in text and "TPAR_ENGINE_NVLINK=1 asks for tpar" in text


def test_without_the_plugin_an_nvlink_group_still_gets_tpar(fake_tpar, monkeypatch, caplog):
    # VllmAllReduce built directly (as tests/python/test_distributed.py does): there is no
    # engine class to hand back to.
    FakeDist(peers_of(links(2)), rank=0).install(monkeypatch)
    with caplog.at_level("INFO"):
        ca = tpar_vllm.VllmAllReduce(group=object(), device=0)
    assert isinstance(ca, tpar_vllm.VllmAllReduce) and not ca.disabled
    text = [r.getMessage() for r in caplog.records if r.name == "vllm.tpar"][0]
    assert "own class is not known here" in text


def test_sglang_on_nvlink_dispatches_to_its_own_choice(fake_module, fake_tpar, monkeypatch, caplog):
    mod = fake_module(tpar_sglang._MODULE)
    own = own_class()
    asked = []

    def sglang_dispatch(group, device):
        asked.append((group, device))
        return own

    mod.dispatch_custom_allreduce = sglang_dispatch
    monkeypatch.setenv("TPAR_ENGINE_PLUGIN", "1")
    tpar_sglang.register()
    assert tpar_sglang.original_dispatch is sglang_dispatch
    dist = FakeDist(peers_of(links(2)), rank=1).install(monkeypatch)
    group = object()
    with caplog.at_level("INFO"):
        # As GroupCoordinator does it (SGLang 0.5.23): ask for the class, then build it.
        cls = mod.dispatch_custom_allreduce(group=group, device="cuda:1")
        ca = cls(group=group, device="cuda:1")
    assert cls is own and asked == [(group, "cuda:1")]
    assert ca.kwargs == {"group": group, "device": "cuda:1"}
    assert fake_tpar.made == 0 and dist.gathers == 1
    text = [r.getMessage() for r in caplog.records if r.name == "sglang.tpar"]
    assert len(text) == 1 and "left to SGLang's own for rank 1/2" in text[0]


def test_sglang_on_pcie_decides_once_for_the_dispatch_and_the_build(fake_module, fake_tpar,
                                                                    monkeypatch):
    mod = fake_module(tpar_sglang._MODULE)
    mod.dispatch_custom_allreduce = lambda group, device: own_class()
    monkeypatch.setenv("TPAR_ENGINE_PLUGIN", "1")
    tpar_sglang.register()
    dist = FakeDist(peers_of(links(2, missing=[(0, 1)])), rank=0).install(monkeypatch)
    group = object()
    cls = mod.dispatch_custom_allreduce(group=group, device=0)
    ca = cls(group=group, device=0)
    assert cls is tpar_sglang.SglangAllReduce and not ca.disabled
    assert dist.gathers == 1 and fake_tpar.made == 1
    assert not EngineAllReduce._decided  # the decision was taken, not left behind


# ---- errors recorded by the kernels reach the engine ----------------------------------------


def test_a_recorded_timeout_stops_the_next_engine_call(caplog):
    a = adapter(tpar_vllm.VllmAllReduce, max_size=1 << 20)
    t = torch.ones(64, dtype=torch.bfloat16)
    assert a.should_custom_ar(t)  # no error yet
    a.comm.async_error = Result.TIMEOUT  # a replayed kernel waited out its peer
    with caplog.at_level("INFO"):
        with pytest.raises(TparError) as info:
            a.should_custom_ar(t)
    assert info.value.result == Result.TIMEOUT
    text = str(info.value)
    assert "rank 1/2" in text and "timed out" in text and "restart" in text
    # Every later call raises too (also for messages tpar would not take), and capture refuses.
    with pytest.raises(TparError):
        a.custom_all_reduce(t)
    with pytest.raises(TparError):
        a.should_custom_ar(torch.ones(4, dtype=torch.int32))
    with pytest.raises(TparError):
        with a.capture():
            pass
    errors = [r for r in caplog.records if r.name == "vllm.tpar" and r.levelname == "ERROR"]
    assert len(errors) == 1  # logged once, raised every time


def test_the_close_line_counts_eager_and_captured_calls(monkeypatch, caplog):
    a = adapter(tpar_sglang.SglangAllReduce, max_size=1 << 20)
    capturing = [False]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    t = torch.arange(8, dtype=torch.float32)
    assert torch.equal(a.custom_all_reduce(t), t)
    with a.capture():
        a.custom_all_reduce(t)  # warm-up before the capture: runs for real
        capturing[0] = True
        a.custom_all_reduce(t)  # captured
        capturing[0] = False
    comm = a.comm
    replays = random.randint(1, 1000)
    comm.kernels = 2 + replays  # two eager calls, then the captured one replayed
    with caplog.at_level("INFO"):
        a.close()
    assert comm.closed and a.disabled
    text = [r.getMessage() for r in caplog.records if r.name == "sglang.tpar"][0]
    assert f"closed: {2 + replays} all-reduce kernels ran on the GPU, graph replays included" in text
    assert ("3 all-reduces called from Python (0 fused with the residual add and RMSNorm), 1 of "
            "them captured") in text


@pytest.mark.gpu
def test_gpu_links_finds_this_gpu_in_nvml():
    pynvml = pytest.importorskip("pynvml", reason="needs nvidia-ml-py")
    g = _adapter.gpu_links(torch.cuda.current_device())
    assert g.nvlink is not None, g.why
    pynvml.nvmlInit()
    try:
        buses = [_adapter._bus_id(pynvml.nvmlDeviceGetPciInfo(
            pynvml.nvmlDeviceGetHandleByIndex(i)).busId) for i in range(pynvml.nvmlDeviceGetCount())]
    finally:
        pynvml.nvmlShutdown()
    assert g.bus_id in buses and g.bus_id not in g.nvlink
    assert set(g.nvlink) <= set(buses)


@pytest.mark.gpu
def test_a_peer_that_never_arrives_during_a_graph_replay_stops_the_next_engine_call():
    # Two ranks of one process on one GPU; only rank 0 takes part, through the adapter, in a
    # captured graph. The replay waits out the timeout, and the engine's next call raises.
    import tpar

    comms = tpar.Communicator.init_all([0, 0], config={"allow_shared_device": True,
                                                       "timeout_ms": 300})
    try:
        a = adapter(tpar_vllm.VllmAllReduce, max_size=1 << 20, comm=comms[0])
        a.rank = 0
        x = torch.ones(4096, dtype=torch.bfloat16, device="cuda")
        stream = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with a.capture():
            with torch.cuda.graph(graph, stream=stream):
                a.custom_all_reduce(x)
        assert a.captured == 1
        assert a.should_custom_ar(x)  # nothing has run yet
        graph.replay()
        torch.cuda.synchronize()  # returns after the timeout: rank 1 never arrived
        with pytest.raises(TparError) as info:
            a.should_custom_ar(x)
        assert info.value.result == Result.TIMEOUT and "restart" in str(info.value)
    finally:
        for c in comms:
            c.abort()
