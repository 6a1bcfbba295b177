"""Builders for fake /sys, /proc and BTF, so doctor checks run against trees we control.

Tests run as root, so "unreadable" cannot be a chmod 000 file. The ways used here, all of which make a
real read() fail the way a broken sysfs would:
- `unreadable_dir`: a directory where a file is expected (read -> IsADirectoryError, EISDIR);
- `unreadable_loop`: a symlink pointing at itself (read -> OSError ELOOP);
- `invalid_utf8`: bytes that are not UTF-8 (read_text -> UnicodeDecodeError).
FIFOs are not used: reading one blocks.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scxctl.bpf.btf import Kind
from scxctl.doctor.model import CommandOutput, DoctorContext
from scxctl.sysfs import SysRoot

RELEASE = "7.3.4+deb13-cloud-amd64"
ALL_CAPS = "000001ffffffffff"  # CAP_CHOWN .. CAP_CHECKPOINT_RESTORE (40 capabilities)
NO_CAPS = "0000000000000000"
SCHED_EXT_OPS_MEMBERS = ("select_cpu", "enqueue", "dequeue", "dispatch", "init", "exit", "name")


def status_text(cap_eff: str = ALL_CAPS, cap_prm: str | None = None) -> str:
    """A /proc/self/status with the Cap* lines (and a few others, as the kernel writes them)."""
    prm = cap_prm or cap_eff
    return (
        "Name:\tpython3\nUmask:\t0022\nState:\tR (running)\nTgid:\t4242\nPid:\t4242\n"
        f"CapInh:\t0000000000000000\nCapPrm:\t{prm}\nCapEff:\t{cap_eff}\nCapBnd:\t{ALL_CAPS}\n"
        "CapAmb:\t0000000000000000\nNoNewPrivs:\t0\nSeccomp:\t0\n"
    )


def kconfig(sched_ext: bool = True) -> str:
    line = "CONFIG_SCHED_CLASS_EXT=y" if sched_ext else "# CONFIG_SCHED_CLASS_EXT is not set"
    return (
        "#\n# Automatically generated file; DO NOT EDIT.\n#\nCONFIG_BPF_SYSCALL=y\nCONFIG_BPF_JIT=y\n"
        f"CONFIG_DEBUG_INFO_BTF=y\n{line}\nCONFIG_LOCALVERSION=\"\"\n"
    )


@dataclass
class BtfBuilder:
    """Hand-assembles a raw BTF blob (struct.pack), one method per kind, as the kernel lays it out."""

    byteorder: str = "<"
    _types: list[bytes] = field(default_factory=list)
    _strings: bytearray = field(default_factory=lambda: bytearray(b"\0"))

    def name(self, text: str) -> int:
        if not text:
            return 0
        off = len(self._strings)
        self._strings += text.encode() + b"\0"
        return off

    def _u32(self, *values: int) -> bytes:
        return struct.pack(f"{self.byteorder}{len(values)}I", *values)

    def _add(self, name: str, kind: int, vlen: int, size_or_type: int, trailer: bytes = b"",
             kind_flag: bool = False) -> int:
        info = (int(kind_flag) << 31) | (kind << 24) | vlen
        self._types.append(self._u32(self.name(name), info, size_or_type) + trailer)
        return len(self._types)  # the new type's id

    def int_(self, name: str, size: int = 4) -> int:
        return self._add(name, Kind.INT, 0, size, self._u32(size * 8))

    def ptr(self, target: int) -> int:
        return self._add("", Kind.PTR, 0, target)

    def array(self, elem: int, index: int, n: int) -> int:
        return self._add("", Kind.ARRAY, 0, 0, self._u32(elem, index, n))

    def struct(self, name: str, size: int, members: list[tuple[str, int, int]], union: bool = False) -> int:
        trailer = b"".join(self._u32(self.name(m), t, off) for m, t, off in members)
        return self._add(name, Kind.UNION if union else Kind.STRUCT, len(members), size, trailer)

    def enum(self, name: str, values: list[tuple[str, int]]) -> int:
        trailer = b"".join(self._u32(self.name(n), v & 0xFFFFFFFF) for n, v in values)
        return self._add(name, Kind.ENUM, len(values), 4, trailer)

    def enum64(self, name: str, values: list[tuple[str, int]]) -> int:
        trailer = b"".join(self._u32(self.name(n), v & 0xFFFFFFFF, v >> 32) for n, v in values)
        return self._add(name, Kind.ENUM64, len(values), 8, trailer)

    def fwd(self, name: str) -> int:
        return self._add(name, Kind.FWD, 0, 0)

    def modifier(self, kind: Kind, target: int, name: str = "") -> int:
        """TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG: no trailing data."""
        return self._add(name, kind, 0, target)

    def func_proto(self, ret: int, params: list[tuple[str, int]]) -> int:
        trailer = b"".join(self._u32(self.name(n), t) for n, t in params)
        return self._add("", Kind.FUNC_PROTO, len(params), ret, trailer)

    def func(self, name: str, proto: int) -> int:
        return self._add(name, Kind.FUNC, 1, proto)  # vlen holds the linkage for FUNC: no trailer

    def var(self, name: str, type_id: int) -> int:
        return self._add(name, Kind.VAR, 0, type_id, self._u32(1))

    def datasec(self, name: str, entries: list[tuple[int, int, int]]) -> int:
        trailer = b"".join(self._u32(*e) for e in entries)
        return self._add(name, Kind.DATASEC, len(entries), 0, trailer)

    def float_(self, name: str, size: int = 8) -> int:
        return self._add(name, Kind.FLOAT, 0, size)

    def decl_tag(self, name: str, target: int, component: int = 0xFFFFFFFF) -> int:
        return self._add(name, Kind.DECL_TAG, 0, target, self._u32(component))

    def raw(self, name: str, kind: int, vlen: int, size_or_type: int, trailer: bytes = b"") -> int:
        """Any record, valid or not (for corrupt-blob tests)."""
        return self._add(name, kind, vlen, size_or_type, trailer)

    def build(self) -> bytes:
        types = b"".join(self._types)
        strings = bytes(self._strings)
        header = struct.pack(f"{self.byteorder}HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types),
                             len(strings))
        return header + types + strings


def every_kind_btf(with_ops: bool = True, byteorder: str = "<") -> bytes:
    """A blob using every BTF kind (so a wrong trailer size for any kind derails the walk),
    with `struct sched_ext_ops` last when `with_ops`."""
    b = BtfBuilder(byteorder)
    u32 = b.int_("unsigned int", 4)
    u64 = b.int_("long long unsigned int", 8)
    ptr = b.ptr(u32)
    arr = b.array(u32, u32, 16)
    b.struct("task_struct", 16, [("pid", u32, 0), ("tgid", u32, 32), ("stack", ptr, 64)])
    b.struct("", 8, [("a", u32, 0), ("b", u64, 0)], union=True)
    b.enum("scx_exit_kind", [("SCX_EXIT_NONE", 0), ("SCX_EXIT_DONE", 1), ("SCX_EXIT_ERROR", 1024)])
    b.enum64("scx_big", [("SCX_BIG", 1 << 40)])
    b.fwd("sched_ext_ops_fwd")
    td = b.modifier(Kind.TYPEDEF, u32, "u32")
    b.modifier(Kind.VOLATILE, td)
    cst = b.modifier(Kind.CONST, td)
    b.modifier(Kind.RESTRICT, ptr)
    b.modifier(Kind.TYPE_TAG, ptr, "percpu")
    proto = b.func_proto(u32, [("p", ptr), ("cpu", u32), ("flags", u64)])
    # names that contain "sched_ext_ops" but are not the struct: a substring search would be fooled
    fn = b.func("bpf_sched_ext_ops_probe", proto)
    b.decl_tag("sched_ext_ops", fn)
    var = b.var("sched_ext_ops", arr)
    b.datasec(".data..sched_ext_ops", [(var, 0, 64)])
    b.float_("double", 8)
    b.modifier(Kind.CONST, cst)
    if with_ops:
        b.struct("sched_ext_ops", 56, [(m, ptr, 64 * i) for i, m in enumerate(SCHED_EXT_OPS_MEMBERS)])
    return b.build()


def hook_btf(with_hook: bool = True) -> bytes:
    """Kernel BTF whose struct sched_ext_ops has (6.17+) or lacks cgroup_set_bandwidth."""
    b = BtfBuilder()
    u32 = b.int_("unsigned int", 4)
    ptr = b.ptr(u32)
    members = [*SCHED_EXT_OPS_MEMBERS, *(["cgroup_set_bandwidth"] if with_hook else [])]
    b.struct("sched_ext_ops", 8 * len(members), [(m, ptr, 64 * i) for i, m in enumerate(members)])
    return b.build()


class FakeRoot:
    """A directory laid out like / with the /proc and /sys files doctor reads."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def sysroot(self) -> SysRoot:
        return SysRoot(self.root)

    def path(self, abspath: str) -> Path:
        return self.root / abspath.lstrip("/")

    def write(self, abspath: str, content: str | bytes) -> Path:
        p = self.path(abspath)
        if p.is_dir() and not p.is_symlink():
            p.rmdir()
        elif p.is_symlink() or p.exists():
            p.unlink()
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
        return p

    def mkdir(self, abspath: str) -> Path:
        p = self.path(abspath)
        p.mkdir(parents=True, exist_ok=True)
        return p

    def remove(self, abspath: str) -> None:
        p = self.path(abspath)
        if p.is_dir() and not p.is_symlink():
            for child in sorted(p.rglob("*"), key=lambda c: len(c.parts), reverse=True):
                child.rmdir() if child.is_dir() and not child.is_symlink() else child.unlink()
            p.rmdir()
        elif p.is_symlink() or p.exists():
            p.unlink()

    # the three ways to make a file unreadable as root (see the module docstring)
    def unreadable_dir(self, abspath: str) -> None:
        self.remove(abspath)
        self.mkdir(abspath)

    def unreadable_loop(self, abspath: str) -> None:
        self.remove(abspath)
        p = self.path(abspath)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(p.name)

    def invalid_utf8(self, abspath: str) -> None:
        self.write(abspath, b"\xff\xfe\xfa garbage")

    # whole machines
    def sched_ext_machine(self, *, state: str = "disabled", ops: str | None = None,
                          cgroup: str = "/user.slice/session-1.scope") -> FakeRoot:
        """A healthy sched_ext machine: config, sysfs, BTF with sched_ext_ops, root caps, cgroup v2."""
        self.write("/proc/sys/kernel/osrelease", RELEASE + "\n")
        self.write("/proc/config.gz", gzip.compress(kconfig(True).encode()))
        self.write("/proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1 rw console=ttyS0\n")
        self.write("/proc/self/status", status_text())
        self.write("/proc/self/cgroup", f"0::{cgroup}\n")
        self.write("/proc/self/mountinfo",
                   "24 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1 rw\n"
                   "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
                   "rw,nsdelegate,memory_recursiveprot\n")
        self.write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
        self.write("/sys/fs/cgroup/cpu.stat", "usage_usec 100\nuser_usec 60\nsystem_usec 40\n")
        parts = [p for p in cgroup.split("/") if p]
        for i in range(1, len(parts) + 1):
            d = "/sys/fs/cgroup/" + "/".join(parts[:i])
            self.write(f"{d}/cpu.max", "max 100000\n")
            self.write(f"{d}/cpu.stat", "usage_usec 50\nuser_usec 30\nsystem_usec 20\nnr_periods 0\n"
                                        "nr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n")
        self.write("/sys/kernel/btf/vmlinux", every_kind_btf(with_ops=True))
        self.sched_ext_sysfs(state=state, ops=ops)
        return self

    def sched_ext_sysfs(self, *, state: str = "disabled", ops: str | None = None) -> None:
        d = "/sys/kernel/sched_ext"
        self.write(f"{d}/state", state + "\n")
        self.write(f"{d}/switch_all", "0\n")
        self.write(f"{d}/nr_rejected", "0\n")
        self.write(f"{d}/hotplug_seq", "0\n")
        self.write(f"{d}/enable_seq", "3\n")
        if ops is not None:
            self.write(f"{d}/root/ops", ops + "\n")

    def no_sched_ext_machine(self) -> FakeRoot:
        """Like this development host: config says not set, no sysfs dir, BTF without sched_ext_ops."""
        self.sched_ext_machine()
        self.write("/proc/config.gz", gzip.compress(kconfig(False).encode()))
        self.remove("/sys/kernel/sched_ext")
        self.write("/sys/kernel/btf/vmlinux", every_kind_btf(with_ops=False))
        return self


class FakeLibbpf:
    """Stands in for ctypes.CDLL("libbpf.so.1"): only the version functions asked for exist."""

    def __init__(self, major: int = 1, minor: int = 5, numbers: bool = True, string: bool = True) -> None:
        if numbers:
            self.libbpf_major_version = lambda: major
            self.libbpf_minor_version = lambda: minor
        if string:
            self.libbpf_version_string = lambda: f"v{major}.{minor}".encode()


def no_programs(argv: list[str]) -> CommandOutput:
    raise AssertionError(f"no program should run in this test, got {argv}")


def context(fake: FakeRoot, **overrides: Any) -> DoctorContext:
    """A DoctorContext that touches nothing real: a privileged root with libbpf 1.5, no programs,
    and a kernel that accepts any BPF object (the trial load succeeds without loading anything)."""
    defaults: dict[str, Any] = {
        "sysroot": fake.sysroot,
        "euid": lambda: 0,
        "bpf_probe": lambda: None,
        "load_library": lambda name: FakeLibbpf(),
        "search_path": str(fake.path("/nonexistent-bin")),
        "run": no_programs,
        "bpf_load": lambda path, sysroot: None,
    }
    defaults.update(overrides)
    return DoctorContext(**defaults)
