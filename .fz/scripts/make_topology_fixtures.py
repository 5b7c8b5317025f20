#!/usr/bin/env python3
"""Writes the hwloc XML fixtures of tests/fixtures/topology/.

Each fixture is a machine tpar must handle, written in hwloc 2.x's XML format (what `lstopo
--whole-io file.xml` or hwloc-gather-topology would save on that machine), so that the topology
code can be tested on any computer. The CPU part is cut down (a few cores per socket); the
PCIe part is complete: host bridges, root ports, switch upstream and downstream ports, GPUs and
the devices that share the tree with them (NICs, NVMe, the BMC's VGA, NVSwitches), with real
vendor/device ids and the link speeds hwloc computes (GB/s of one direction).

What a PCIe tree cannot say (NVLink, P2P disabled by the driver) is carried in hwloc info
attributes, as documented in docs/TOPOLOGY.md:
  <info name="TparNvLinkGroup" value="G"/> on a GPU: GPUs of one group reach each other by NVLink
  <info name="TparP2P" value="0"/> on the Machine (or on a GPU): no peer-to-peer access
or, as hwloc's NVML backend records NVLink, in an "NVLinkBandwidth" distances matrix between the
GPUs' NVML OS devices and the NVSwitches (the DGX-2 fixture).

Two more files test the reader's refusals: hwloc3_format_2gpu.xml is the two-GPU workstation
in the XML format hwloc 3 writes (<topology version="3.0">), which hwloc 2.x cannot read.

Run from anywhere: python3 scripts/make_topology_fixtures.py [output dir]
"""

import os
import sys

# hwloc's PCI link speed attribute: GB/s of one direction of a x16 link (lanes * GT/s *
# encoding / 8), printed with %f.
GEN3_X16 = 16 * 8.0 * 128 / 130 / 8
GEN4_X16 = 16 * 16.0 * 128 / 130 / 8
GEN5_X16 = 16 * 32.0 * 128 / 130 / 8
GEN4_X4 = 4 * 16.0 * 128 / 130 / 8
GEN2_X1 = 1 * 5.0 * 8 / 10 / 8

# (vendor, device, subvendor, subdevice, revision)
INTEL_SPR_ROOT_PORT = (0x8086, 0x352A, 0x8086, 0x0000, 0x04)
INTEL_BDX_ROOT_PORT = (0x8086, 0x6F08, 0x8086, 0x0000, 0x01)
AMD_MILAN_GPP_BRIDGE = (0x1022, 0x1483, 0x1022, 0x1453, 0x00)
BROADCOM_PEX89XXX = (0x1000, 0xC010, 0x1000, 0xA064, 0xB0)
PLX_PEX8747 = (0x10B5, 0x8747, 0x10B5, 0x8747, 0xCA)
PLX_PEX9781 = (0x10B5, 0x9781, 0x10B5, 0x9781, 0xB0)
PLX_PEX8725 = (0x10B5, 0x8725, 0x10B5, 0x8725, 0xCA)
INTEL_SKX_ROOT_PORT = (0x8086, 0x2030, 0x8086, 0x0000, 0x04)
ASPEED_BRIDGE = (0x1A03, 0x1150, 0x1A03, 0x1150, 0x06)

RTX_PRO_6000 = (0x10DE, 0x2BB1, 0x10DE, 0x204B, 0xA1)   # RTX PRO 6000 Blackwell, Gen5
A100_PCIE = (0x10DE, 0x20F1, 0x10DE, 0x145F, 0xA1)      # A100 PCIe 40GB, Gen4
L40S = (0x10DE, 0x26B9, 0x10DE, 0x1851, 0xA1)           # L40S, Gen4
H100_SXM = (0x10DE, 0x2330, 0x10DE, 0x16C1, 0xA1)       # H100 SXM5 80GB, Gen5
V100_PCIE = (0x10DE, 0x1DB4, 0x10DE, 0x1214, 0xA1)      # V100 PCIe 16GB, Gen3
V100_SXM3 = (0x10DE, 0x1DB8, 0x10DE, 0x131D, 0xA1)      # V100 SXM3 32GB (DGX-2), Gen3
RTX_4090 = (0x10DE, 0x2684, 0x10DE, 0x167C, 0xA1)       # GeForce RTX 4090, Gen4
RTX_4090_AUDIO = (0x10DE, 0x22BA, 0x10DE, 0x167C, 0xA1)
NVSWITCH_H100 = (0x10DE, 0x22A3, 0x10DE, 0x1796, 0xA1)  # third-generation NVSwitch
NVSWITCH_V1 = (0x10DE, 0x1AC2, 0x0000, 0x0000, 0xA1)    # first-generation NVSwitch (DGX-2)
ASPEED_VGA = (0x1A03, 0x2000, 0x1A03, 0x2000, 0x52)
CONNECTX7 = (0x15B3, 0x1021, 0x15B3, 0x0041, 0x00)
SAMSUNG_PM1733 = (0x144D, 0xA824, 0x144D, 0xA809, 0x00)

CLASS_BRIDGE_PCI = 0x0604
CLASS_VGA = 0x0300
CLASS_3D = 0x0302
CLASS_AUDIO = 0x0403
CLASS_OTHER_BRIDGE = 0x0680
CLASS_ETHERNET = 0x0200
CLASS_NVME = 0x0108

# hwloc 2.x OS device types
OSDEV_BLOCK, OSDEV_GPU, OSDEV_NETWORK, OSDEV_OPENFABRICS = 0, 1, 2, 3


def bitmap(bits):
    """hwloc's bitmap text: 32-bit words, most significant first."""
    value = 0
    for b in bits:
        value |= 1 << b
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if value == 0:
            break
    return ",".join("0x%08x" % w for w in reversed(words))


def esc(text):
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


class Obj:
    """One <object>: its attributes in hwloc's order, infos, then children."""

    def __init__(self, type_, attrs=None, infos=None, children=None, extra=None):
        self.type = type_
        self.attrs = attrs or []          # [(name, value)] before gp_index
        self.after = []                   # [(name, value)] after gp_index
        self.infos = infos or []          # [(name, value)]
        self.children = children or []
        self.extra = extra or []          # raw child elements (page_type)


class Writer:
    def __init__(self):
        self.gp = 0
        self.lines = []

    def emit(self, obj, indent):
        self.gp += 1
        obj.gp = self.gp  # distances matrices name objects by it
        pad = "  " * indent
        attrs = [("type", obj.type)] + obj.attrs + [("gp_index", str(self.gp))] + obj.after
        head = pad + "<object " + " ".join('%s="%s"' % (k, esc(v)) for k, v in attrs)
        body = [(pad + '  <info name="%s" value="%s"/>' % (esc(k), esc(v))) for k, v in obj.infos]
        body += [pad + "  " + e for e in obj.extra]
        if not body and not obj.children:
            self.lines.append(head + "/>")
            return
        self.lines.append(head + ">")
        self.lines.extend(body)
        for c in obj.children:
            self.emit(c, indent + 1)
        self.lines.append(pad + "</object>")


def cpu_attrs(cpus, nodes, root=False):
    attrs = [("cpuset", bitmap(cpus)), ("complete_cpuset", bitmap(cpus))]
    if root:
        attrs.append(("allowed_cpuset", bitmap(cpus)))
    attrs += [("nodeset", bitmap(nodes)), ("complete_nodeset", bitmap(nodes))]
    if root:
        attrs.append(("allowed_nodeset", bitmap(nodes)))
    return attrs


def cache(level, size, assoc, ctype, cpus, nodes, children):
    name = {1: "L1Cache", 2: "L2Cache", 3: "L3Cache"}[level] if ctype != 2 else "L1iCache"
    o = Obj(name, cpu_attrs(cpus, nodes), children=children)
    o.after = [("cache_size", str(size)), ("depth", str(level)), ("cache_linesize", "64"),
               ("cache_associativity", str(assoc)), ("cache_type", str(ctype))]
    return o


class Cpu:
    def __init__(self, vendor, family, model, name, stepping, l3, l2, memory):
        self.vendor, self.family, self.model, self.name = vendor, family, model, name
        self.stepping, self.l3, self.l2, self.memory = stepping, l3, l2, memory


SPR = Cpu("GenuineIntel", 6, 143, "Intel(R) Xeon(R) Platinum 8468", 8, 105 << 20, 2 << 20,
          1 << 40)
BDX = Cpu("GenuineIntel", 6, 79, "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz", 1, 35 << 20,
          256 << 10, 256 << 30)
MILAN = Cpu("AuthenticAMD", 25, 1, "AMD EPYC 7543 32-Core Processor", 1, 32 << 20, 512 << 10,
            512 << 30)
SKX = Cpu("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Platinum 8168 CPU @ 2.70GHz", 4, 33 << 20,
          1 << 20, 768 << 30)
TR_PRO = Cpu("AuthenticAMD", 25, 8, "AMD Ryzen Threadripper PRO 5975WX 32-Cores", 2, 32 << 20,
             512 << 10, 256 << 30)


def package(cpu, index, cores, first_pu, io):
    """A socket with one NUMA node, one L3 and `cores` cores (one PU each), then its I/O."""
    cpus = list(range(first_pu, first_pu + cores))
    nodes = [index]
    numa = Obj("NUMANode", [("os_index", str(index))] + cpu_attrs(cpus, nodes))
    numa.after = [("local_memory", str(cpu.memory))]
    numa.extra = ['<page_type size="4096" count="%d"/>' % (cpu.memory // 4096),
                  '<page_type size="2097152" count="0"/>',
                  '<page_type size="1073741824" count="0"/>']
    core_objs = []
    for i, pu in enumerate(cpus):
        pu_obj = Obj("PU", [("os_index", str(pu))] + cpu_attrs([pu], nodes))
        core = Obj("Core", [("os_index", str(i))] + cpu_attrs([pu], nodes), children=[pu_obj])
        l1i = cache(1, 32 << 10, 8, 2, [pu], nodes, [core])
        l1d = cache(1, 48 << 10 if cpu.vendor == "GenuineIntel" else 32 << 10, 12, 1, [pu],
                    nodes, [l1i])
        core_objs.append(cache(2, cpu.l2, 16, 0, [pu], nodes, [l1d]))
    l3 = cache(3, cpu.l3, 15, 0, cpus, nodes, core_objs)
    pkg = Obj("Package", [("os_index", str(index))] + cpu_attrs(cpus, nodes),
              infos=[("CPUVendor", cpu.vendor), ("CPUFamilyNumber", str(cpu.family)),
                     ("CPUModelNumber", str(cpu.model)), ("CPUModel", cpu.name),
                     ("CPUStepping", str(cpu.stepping))],
              children=[numa, l3] + io)
    return pkg, cpus


def machine(product, vendor, packages, infos=()):
    """packages: [(cpu, cores, io objects)]."""
    pkgs, all_cpus = [], []
    for i, (cpu, cores, io) in enumerate(packages):
        pkg, cpus = package(cpu, i, cores, len(all_cpus), io)
        pkgs.append(pkg)
        all_cpus += cpus
    nodes = list(range(len(packages)))
    return Obj("Machine", [("os_index", "0")] + cpu_attrs(all_cpus, nodes, root=True),
               infos=[("DMIProductName", product), ("DMIBoardVendor", vendor),
                      ("DMISysVendor", vendor), ("Backend", "Linux"), ("LinuxCgroup", "/"),
                      ("OSName", "Linux"), ("OSRelease", "6.8.0-52-generic"),
                      ("Architecture", "x86_64"), ("hwlocVersion", "2.9.0"),
                      ("ProcessName", "lstopo")] + list(infos),
               children=pkgs)


# --- PCIe trees ---------------------------------------------------------------------------
# A tree is described with these small records; buses are numbered depth-first from the host
# bridge's root bus, as firmware enumerates them, so bus ids come out like a real machine's.

class Dev:
    def __init__(self, ident, cls, speed, slot=(0, 0), infos=(), osdevs=(), subtype=None):
        self.ident, self.cls, self.speed, self.slot = ident, cls, speed, slot
        self.infos, self.osdevs, self.subtype = list(infos), list(osdevs), subtype


class Br:
    def __init__(self, ident, speed, children, slot=(0, 0), infos=()):
        self.ident, self.speed, self.children, self.slot = ident, speed, children, slot
        self.infos = list(infos)


class HostBridge:
    def __init__(self, root_bus, children, last_bus=None):
        self.root_bus, self.children, self.last_bus = root_bus, children, last_bus


def pci_type(cls, ident):
    v, d, sv, sd, rev = ident
    return "%04x [%04x:%04x] [%04x:%04x] %02x" % (cls, v, d, sv, sd, rev)


class Bus:
    def __init__(self, first):
        self.next = first


def build(node, bus, on_bus, depth, gpus_out):
    """An Obj for a Br or Dev sitting on bus `on_bus`; allocates buses from `bus`."""
    dev, fn = node.slot
    busid = "0000:%02x:%02x.%x" % (on_bus, dev, fn)
    if isinstance(node, Dev):
        o = Obj("PCIDev", infos=node.infos)
        if node.subtype:
            o.attrs.append(("subtype", node.subtype))
        o.after = [("pci_busid", busid), ("pci_type", pci_type(node.cls, node.ident)),
                   ("pci_link_speed", "%f" % node.speed)]
        node.objs = []
        for name, kind, sub in node.osdevs:
            osd = Obj("OSDev")
            osd.after = [("name", name)] + ([("subtype", sub)] if sub else []) + [
                ("osdev_type", str(kind))]
            o.children.append(osd)
            node.objs.append(osd)
        node.obj = o
        if node.ident[0] == 0x10DE and node.cls in (CLASS_VGA, CLASS_3D):
            gpus_out.append(busid)
        return o
    secondary = bus.next
    bus.next += 1
    kids = [build(c, bus, secondary, depth + 1, gpus_out) for c in node.children]
    o = Obj("Bridge", infos=node.infos, children=kids)
    o.after = [("bridge_type", "1-1"), ("depth", str(depth)),
               ("bridge_pci", "0000:[%02x-%02x]" % (secondary, bus.next - 1)),
               ("pci_busid", busid), ("pci_type", pci_type(CLASS_BRIDGE_PCI, node.ident)),
               ("pci_link_speed", "%f" % node.speed)]
    return o


def host_bridge(hb, gpus_out):
    bus = Bus(hb.root_bus + 1)
    kids = [build(c, bus, hb.root_bus, 1, gpus_out) for c in hb.children]
    last = hb.last_bus if hb.last_bus is not None else bus.next - 1
    o = Obj("Bridge", children=kids)
    o.after = [("bridge_type", "0-1"), ("depth", "0"),
               ("bridge_pci", "0000:[%02x-%02x]" % (hb.root_bus, last))]
    return o


def switch(ident, up_speed, down_speed, endpoints, slot=(0, 0)):
    """A PCIe switch: its upstream port bridge and one downstream port bridge per endpoint."""
    ports = [Br(ident, down_speed, [e], slot=(i, 0)) for i, e in enumerate(endpoints)]
    return Br(ident, up_speed, ports, slot=slot)


def root_port(ident, speed, child, dev):
    return Br(ident, speed, [child], slot=(dev, 0))


def gpu(ident, speed, infos=(), cls=CLASS_3D):
    return Dev(ident, cls, speed, infos=infos)


def values_text(items):
    """hwloc's list text: every item followed by a space; `length` counts its characters."""
    return "".join("%s " % v for v in items)


def distances_hetero(name, kind, objs, matrix):
    """A <distances2hetero> element as hwloc 2.x writes it: objects as Type:gp_index, values
    row after row, at most ten per <u64values>."""
    lines = ['  <distances2hetero nbobjs="%d" kind="%d" name="%s">' % (len(objs), kind, name)]
    refs = ["%s:%d" % (o.type, o.gp) for o in objs]
    for i in range(0, len(refs), 10):
        text = values_text(refs[i:i + 10])
        lines.append('    <indexes length="%d">%s</indexes>' % (len(text), text))
    flat = [v for row in matrix for v in row]
    for i in range(0, len(flat), 10):
        text = values_text(flat[i:i + 10])
        lines.append('    <u64values length="%d">%s</u64values>' % (len(text), text))
    lines.append("  </distances2hetero>")
    return lines


def write(path, top, version="2.0", after_objects=None):
    w = Writer()
    w.lines = ['<?xml version="1.0" encoding="UTF-8"?>',
               '<!DOCTYPE topology SYSTEM "hwloc2.dtd">', '<topology version="%s">' % version]
    w.emit(top, 1)
    if after_objects is not None:
        w.lines.extend(after_objects())
    # What hwloc 2.x records about the discovery that produced the file (read back only with
    # HWLOC_TOPOLOGY_FLAG_IMPORT_SUPPORT; kept so that the files look like lstopo's).
    for name in ("discovery.pu", "discovery.numa", "discovery.numa_memory",
                 "discovery.disallowed_pu", "discovery.disallowed_numa",
                 "custom.exported_support"):
        w.lines.append('  <support name="%s"/>' % name)
    w.lines.append("</topology>")
    with open(path, "w") as f:
        f.write("\n".join(w.lines) + "\n")


# --- The machines -------------------------------------------------------------------------

def bmc_vga():
    """The BMC's VGA (ASPEED, class 0300 like a GPU, but not NVIDIA) behind its own bridge."""
    vga = Dev(ASPEED_VGA, CLASS_VGA, GEN2_X1, osdevs=[("card0", OSDEV_GPU, None)])
    return root_port(INTEL_SPR_ROOT_PORT, GEN2_X1, Br(ASPEED_BRIDGE, GEN2_X1, [vga]), 0x1C)


def nvme(n, dev):
    return root_port(INTEL_SPR_ROOT_PORT, GEN4_X4,
                     Dev(SAMSUNG_PM1733, CLASS_NVME, GEN4_X4,
                         osdevs=[("nvme%dn1" % n, OSDEV_BLOCK, "Disk")]), dev)


def nic(n, speed=GEN5_X16):
    return Dev(CONNECTX7, CLASS_ETHERNET, speed,
               osdevs=[("ibp%ds0" % n, OSDEV_NETWORK, None), ("mlx5_%d" % n, OSDEV_OPENFABRICS,
                                                               None)])


def fixture_a(gpus):
    """(a) 8x RTX PRO 6000 Blackwell as 4 switch pairs over 2 Sapphire Rapids sockets: each
    PCIe stack is its own host bridge, a Broadcom PEX89xxx on its x16 root port, 2 GPUs each."""
    def stack(root_bus):
        sw = switch(BROADCOM_PEX89XXX, GEN5_X16, GEN5_X16,
                    [gpu(RTX_PRO_6000, GEN5_X16), gpu(RTX_PRO_6000, GEN5_X16)])
        return HostBridge(root_bus, [root_port(INTEL_SPR_ROOT_PORT, GEN5_X16, sw, 1)])
    s0 = [host_bridge(HostBridge(0x00, [bmc_vga()]), gpus),
          host_bridge(stack(0x15), gpus), host_bridge(stack(0x36), gpus),
          host_bridge(HostBridge(0x57, [nvme(0, 1)]), gpus)]
    s1 = [host_bridge(stack(0x97), gpus), host_bridge(stack(0xb8), gpus),
          host_bridge(HostBridge(0xd9, [root_port(INTEL_SPR_ROOT_PORT, GEN5_X16, nic(0), 1)]),
                      gpus)]
    return machine("SYS-421GE-TNRT", "Supermicro", [(SPR, 8, s0), (SPR, 8, s1)],
                   [("TparFixture", "8x RTX PRO 6000 Blackwell, 4 PEX89xxx switch pairs, 2 "
                                    "sockets")])


def fixture_b(gpus):
    """(b) 8x A100 PCIe on 2 EPYC Milan sockets, straight on root ports: two GPUs per root
    complex (host bridge), two root complexes with GPUs per socket."""
    def complex_(root_bus, with_nvme=False):
        ports = [root_port(AMD_MILAN_GPP_BRIDGE, GEN4_X16, gpu(A100_PCIE, GEN4_X16), 1),
                 root_port(AMD_MILAN_GPP_BRIDGE, GEN4_X16, gpu(A100_PCIE, GEN4_X16), 3)]
        if with_nvme:
            ports.append(root_port(AMD_MILAN_GPP_BRIDGE, GEN4_X4,
                                   Dev(SAMSUNG_PM1733, CLASS_NVME, GEN4_X4,
                                       osdevs=[("nvme0n1", OSDEV_BLOCK, "Disk")]), 5))
        return HostBridge(root_bus, ports, last_bus=root_bus + 0x1F)
    s0 = [host_bridge(complex_(0x00, with_nvme=True), gpus), host_bridge(complex_(0x40), gpus)]
    s1 = [host_bridge(complex_(0x80), gpus), host_bridge(complex_(0xc0), gpus)]
    return machine("ESC4000A-E11", "ASUSTeK COMPUTER INC.", [(MILAN, 8, s0), (MILAN, 8, s1)],
                   [("TparFixture", "8x A100 PCIe on root ports, 2 per root complex, 2 "
                                    "sockets")])


def fixture_c(gpus):
    """(c) 8x L40S behind one Broadcom PEX89xxx switch on one socket."""
    sw = switch(BROADCOM_PEX89XXX, GEN5_X16, GEN4_X16, [gpu(L40S, GEN4_X16) for _ in range(8)])
    s0 = [host_bridge(HostBridge(0x00, [bmc_vga()]), gpus),
          host_bridge(HostBridge(0x15, [root_port(INTEL_SPR_ROOT_PORT, GEN5_X16, sw, 1)]), gpus),
          host_bridge(HostBridge(0x57, [nvme(0, 1)]), gpus)]
    return machine("8-GPU single-root PCIe box", "Generic", [(SPR, 8, s0)],
                   [("TparFixture", "8x L40S behind one PEX89xxx switch, 1 socket")])


def fixture_d(gpus):
    """(d) HGX H100 8-GPU: NVSwitch-connected SXM GPUs. On the PCIe side each of the four
    Broadcom switches holds 2 GPUs and 2 NICs; the NVSwitches hang off their own switch."""
    nv = [("TparNvLinkGroup", "0")]

    def stack(root_bus, nic_base):
        sw = switch(BROADCOM_PEX89XXX, GEN5_X16, GEN5_X16,
                    [gpu(H100_SXM, GEN5_X16, nv), nic(nic_base), gpu(H100_SXM, GEN5_X16, nv),
                     nic(nic_base + 1)])
        return host_bridge(HostBridge(root_bus, [root_port(INTEL_SPR_ROOT_PORT, GEN5_X16, sw, 1)]),
                           gpus)
    nvswitches = switch(BROADCOM_PEX89XXX, GEN4_X4, GEN2_X1,
                        [Dev(NVSWITCH_H100, CLASS_OTHER_BRIDGE, GEN2_X1, subtype="NVSwitch")
                         for _ in range(4)])
    s0 = [host_bridge(HostBridge(0x00, [bmc_vga()]), gpus), stack(0x15, 0), stack(0x36, 2),
          host_bridge(HostBridge(0x57, [root_port(INTEL_SPR_ROOT_PORT, GEN4_X4, nvswitches, 1)]),
                      gpus)]
    s1 = [stack(0x97, 4), stack(0xb8, 6), host_bridge(HostBridge(0xd9, [nvme(0, 1)]), gpus)]
    return machine("DGX H100", "NVIDIA", [(SPR, 8, s0), (SPR, 8, s1)],
                   [("TparFixture", "HGX H100 8-GPU, NVSwitch (TparNvLinkGroup 0 on every GPU)")])


def fixture_e(gpus):
    """(e) A workstation with 2 RTX PRO 6000 Blackwell on two root ports of one host bridge
    (a Gen4 platform, so the Gen5 cards link at Gen4 x16)."""
    ports = [root_port(AMD_MILAN_GPP_BRIDGE, GEN4_X16, gpu(RTX_PRO_6000, GEN4_X16), 1),
             root_port(AMD_MILAN_GPP_BRIDGE, GEN4_X16, gpu(RTX_PRO_6000, GEN4_X16), 3)]
    s0 = [host_bridge(HostBridge(0x40, ports, last_bus=0x5F), gpus)]
    return machine("WRX80 workstation", "Generic", [(TR_PRO, 8, s0)],
                   [("TparFixture", "2x RTX PRO 6000 Blackwell on one host bridge")])


def fixture_f(gpus):
    """(f) 4x GeForce RTX 4090 (VGA class, each with its audio function) on one EPYC socket,
    where the driver reports no peer-to-peer access: TparP2P=0 on the Machine."""
    def rtx(dev, n):
        g = Dev(RTX_4090, CLASS_VGA, GEN4_X16, slot=(0, 0),
                osdevs=[("card%d" % n, OSDEV_GPU, None),
                        ("renderD%d" % (128 + n), OSDEV_GPU, None)])
        a = Dev(RTX_4090_AUDIO, CLASS_AUDIO, GEN4_X16, slot=(0, 1))
        return Br(AMD_MILAN_GPP_BRIDGE, GEN4_X16, [g, a], slot=(dev, 1))
    s0 = [host_bridge(HostBridge(0x00, [rtx(0x01, 0), rtx(0x03, 1)], last_bus=0x1F), gpus),
          host_bridge(HostBridge(0x40, [rtx(0x01, 2), rtx(0x03, 3)], last_bus=0x5F), gpus)]
    return machine("4x RTX 4090 server", "Generic", [(MILAN, 8, s0)],
                   [("TparFixture", "4x GeForce RTX 4090, P2P unavailable (TparP2P 0)"),
                    ("TparP2P", "0")])


def fixture_g(gpus):
    """(g) 8x V100 PCIe on 2 Broadwell sockets, each socket's root port feeding a two-level
    cascade of PLX PEX 8747 switches (2 GPUs per lower switch): PIX, PXB and SYS pairs."""
    def cascade():
        lower = [switch(PLX_PEX8747, GEN3_X16, GEN3_X16,
                        [gpu(V100_PCIE, GEN3_X16), gpu(V100_PCIE, GEN3_X16)], slot=(0, 0))
                 for _ in range(2)]
        top = Br(PLX_PEX8747, GEN3_X16,
                 [Br(PLX_PEX8747, GEN3_X16, [lower[i]], slot=(8 * i, 0)) for i in range(2)])
        return top
    s0 = [host_bridge(HostBridge(0x00, [root_port(INTEL_BDX_ROOT_PORT, GEN3_X16, cascade(), 2)],
                                 last_bus=0x7F), gpus)]
    s1 = [host_bridge(HostBridge(0x80, [root_port(INTEL_BDX_ROOT_PORT, GEN3_X16, cascade(), 2)],
                                 last_bus=0xFF), gpus)]
    return machine("SYS-4028GR-TR", "Supermicro", [(BDX, 8, s0), (BDX, 8, s1)],
                   [("TparFixture", "8x V100 PCIe, two-level PEX8747 cascades, 2 sockets")])


# hwloc's distances kinds (hwloc/distances.h).
KIND_FROM_OS, KIND_MEANS_BANDWIDTH, KIND_HETEROGENEOUS_TYPES = 1, 8, 16
NVLINK_V2_MBPS = 25000  # one NVLink 2.0 link, one direction, as hwloc's NVML backend counts it


def fixture_h(gpus):
    """(h) NVIDIA DGX-2: 16 V100 SXM3 on two baseboards of 8, each baseboard with 6 NVSwitches
    that every one of its GPUs links to once; the two boards' switches are joined to each
    other, so all 16 GPUs form one NVLink fabric. On the PCIe side each socket has two host
    bridges, each a root port feeding a PEX9781 switch with two more below it (2 GPUs each),
    and the NVSwitches hang off a PEX8725 of their board's socket. NVLink is recorded only as
    hwloc's NVML backend does it: an NVLinkBandwidth matrix between the GPUs' NVML OS devices
    and the NVSwitches, which lists no switch-to-switch links."""
    gpu_devs, switch_devs = [], []

    def sxm(n):
        d = Dev(V100_SXM3, CLASS_3D, GEN3_X16, osdevs=[("nvml%d" % n, OSDEV_GPU, "NVML")])
        gpu_devs.append(d)
        return d

    def nvswitches():
        devs = [Dev(NVSWITCH_V1, CLASS_OTHER_BRIDGE, GEN2_X1, subtype="NVSwitch")
                for _ in range(6)]
        switch_devs.extend(devs)
        return switch(PLX_PEX8725, GEN3_X16, GEN2_X1, devs)

    def stack(root_bus, first_gpu, with_nvswitches):
        lower = [switch(PLX_PEX9781, GEN3_X16, GEN3_X16,
                        [sxm(first_gpu + 2 * i), sxm(first_gpu + 2 * i + 1)], slot=(0, 0))
                 for i in range(2)]
        ports = [Br(PLX_PEX9781, GEN3_X16, [lower[i]], slot=(4 + 8 * i, 0)) for i in range(2)]
        if with_nvswitches:
            ports.append(Br(PLX_PEX9781, GEN3_X16, [nvswitches()], slot=(16, 0)))
        top = Br(PLX_PEX9781, GEN3_X16, ports)
        return host_bridge(HostBridge(root_bus, [root_port(INTEL_SKX_ROOT_PORT, GEN3_X16, top, 0)]),
                           gpus)
    s0 = [stack(0x2b, 0, True), stack(0x4e, 4, False)]
    s1 = [stack(0xb4, 8, True), stack(0xe2, 12, False)]
    top = machine("NVIDIA DGX-2H", "NVIDIA", [(SKX, 2, s0), (SKX, 2, s1)],
                  [("TparFixture", "NVIDIA DGX-2: 16 V100 SXM3, 12 NVSwitches, NVLink only in "
                                   "the NVLinkBandwidth matrix")])

    def matrix():
        objs = [d.objs[0] for d in gpu_devs] + [d.obj for d in switch_devs]
        n = len(objs)
        values = [[0] * n for _ in range(n)]
        for g in range(len(gpu_devs)):
            for s in range(len(switch_devs)):
                if g // 8 == s // 6:  # a GPU links to the six switches of its own board
                    values[g][16 + s] = values[16 + s][g] = NVLINK_V2_MBPS
        return distances_hetero("NVLinkBandwidth",
                                KIND_FROM_OS | KIND_MEANS_BANDWIDTH | KIND_HETEROGENEOUS_TYPES,
                                objs, values)
    return top, matrix


FIXTURES = [
    ("pcie_4switch_2socket_8gpu.xml", fixture_a),
    ("rootport_2socket_8gpu.xml", fixture_b),
    ("one_switch_8gpu.xml", fixture_c),
    ("nvswitch_8gpu.xml", fixture_d),
    ("two_gpu.xml", fixture_e),
    ("no_p2p_4gpu.xml", fixture_f),
    ("switch_cascade_2socket_8gpu.xml", fixture_g),
    ("nvswitch_dgx2_16gpu.xml", fixture_h),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "fixtures",
                                                             "topology")
    os.makedirs(out, exist_ok=True)
    for name, make in FIXTURES:
        gpus = []
        made = make(gpus)
        top, after = made if isinstance(made, tuple) else (made, None)
        write(os.path.join(out, name), top, after_objects=after)
        print("%-34s %d GPUs: %s" % (name, len(gpus), " ".join(gpus)))
    # Refused by the reader: hwloc 3's XML format, which the installed hwloc 2.x cannot read.
    bad = os.path.join(here, "..", "tests", "fixtures", "bad") if len(sys.argv) < 2 else out
    os.makedirs(bad, exist_ok=True)
    gpus = []
    write(os.path.join(bad, "hwloc3_format_2gpu.xml"), fixture_e(gpus), version="3.0")
    print("%-34s %d GPUs (format 3.0)" % ("hwloc3_format_2gpu.xml", len(gpus)))


if __name__ == "__main__":
    main()
