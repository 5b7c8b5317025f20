"""What the shim's Python checks share: its counters (tparShimGetStats, tpar_nccl_shim.h) and
the size syntax of the tpar tools (4K, 8M)."""
import ctypes

# tparShimRoute_t, in order.
ROUTES = ["tpar", "disabled", "in-group", "no-tpar-comm", "datatype", "op", "empty", "too-large",
          "tuned-nccl"]


class _Stats(ctypes.Structure):
    _fields_ = [("calls", ctypes.c_uint64 * len(ROUTES)), ("commsWithTpar", ctypes.c_uint64),
                ("commsPassThrough", ctypes.c_uint64)]


class ShimCounters:
    """The counters of a loaded libtpar_nccl.so (ctypes.CDLL of its path returns the copy the
    process has loaded already, preloaded or not)."""

    def __init__(self, path_or_lib):
        self.lib = ctypes.CDLL(path_or_lib) if isinstance(path_or_lib, str) else path_or_lib
        self.lib.tparShimGetStats.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Stats)]
        self.lib.tparShimNcclPath.restype = ctypes.c_char_p

    def read(self):
        """(calls per route, communicators with tpar, communicators passing through)."""
        s = _Stats()
        if self.lib.tparShimGetStats(None, ctypes.byref(s)) != 0:
            raise RuntimeError("tparShimGetStats failed")
        return list(s.calls), s.commsWithTpar, s.commsPassThrough

    def calls(self):
        return self.read()[0]

    def nccl_path(self):
        p = self.lib.tparShimNcclPath()
        return p.decode() if p else None


def route_of(before, after):
    """The route one call took: the counter that grew by one ("none" when none did)."""
    grown = [i for i in range(len(ROUTES)) if after[i] != before[i]]
    if len(grown) == 1 and after[grown[0]] - before[grown[0]] == 1:
        return ROUTES[grown[0]]
    return "none" if not grown else "several:" + ",".join(ROUTES[i] for i in grown)


def parse_size(text):
    """Bytes of "4096", "4K", "8M", "1G" (binary units)."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B")
    num = t.rstrip("KMG")
    return int(num) * units[t[len(num):]]
