"""Raw bpf(2) through ctypes, without libbpf.

Used to prove that the kernel lets *this* process use BPF at all (seccomp filters, lockdown,
missing capabilities, a kernel without CONFIG_BPF_SYSCALL all show up here as an errno) before
anything heavier is attempted.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

BPF_MAP_CREATE = 0
BPF_MAP_TYPE_ARRAY = 2

# __NR_bpf per architecture (asm/unistd_64.h and friends)
_NR_BPF = {
    "x86_64": 321,
    "aarch64": 280,
    "riscv64": 280,
    "s390x": 351,
    "ppc64le": 361,
    "i686": 357,
    "i386": 357,
    "armv7l": 386,
}


class MapCreateAttr(ctypes.Structure):
    """The BPF_MAP_CREATE part of union bpf_attr, up to map_name; the kernel zero-fills the rest."""

    _fields_ = [
        ("map_type", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("inner_map_fd", ctypes.c_uint32),
        ("numa_node", ctypes.c_uint32),
        ("map_name", ctypes.c_char * 16),
    ]


class BpfSyscallError(OSError):
    """bpf(2) failed; `errno` and `strerror` say why."""


def syscall_number(machine: str | None = None) -> int:
    machine = machine or platform.machine()
    try:
        return _NR_BPF[machine]
    except KeyError:
        raise BpfSyscallError(errno.ENOSYS, f"bpf(2) syscall number unknown for {machine}") from None


def bpf(cmd: int, attr: ctypes.Structure) -> int:
    """Call bpf(cmd, &attr, sizeof attr); returns the result or raises BpfSyscallError."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    size = ctypes.c_uint(ctypes.sizeof(attr))
    ret = libc.syscall(ctypes.c_long(syscall_number()), ctypes.c_int(cmd), ctypes.byref(attr), size)
    if ret < 0:
        err = ctypes.get_errno()
        raise BpfSyscallError(err, os.strerror(err))
    return int(ret)


def create_array_map(max_entries: int = 1, value_size: int = 8, name: bytes = b"scxctl_probe") -> int:
    """Create a BPF_MAP_TYPE_ARRAY map and return its file descriptor (the caller closes it)."""
    attr = MapCreateAttr(
        map_type=BPF_MAP_TYPE_ARRAY, key_size=4, value_size=value_size, max_entries=max_entries, map_name=name
    )
    return bpf(BPF_MAP_CREATE, attr)


def probe_map_create() -> None:
    """Create and close a one-entry array map; raises BpfSyscallError when bpf() does not work."""
    os.close(create_array_map())
