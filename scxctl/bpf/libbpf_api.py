"""The ctypes binding of libbpf.so.1: the C structs and prototypes we use, loaded once by `lib()`.

Why ctypes and not a compiled extension or BCC: the guest and the host ship libbpf as a shared
library (Debian libbpf1), BCC cannot load a compiled object or struct_ops, and a binding of the
dozen calls pyland needs is smaller than a build step. Every prototype is declared here, so that a
libbpf lacking one fails once, at load, with a BpfError rather than at some later call.
"""

from __future__ import annotations

import ctypes
from typing import Any

from scxctl.bpf.errors import BpfError
from scxctl.bpf.libbpf_messages import PRINT_FN, print_callback

MIN_VERSION = (1, 4)
LIBBPF_SONAME = "libbpf.so.1"

# uapi/linux/bpf.h
BPF_MAP_TYPE_RINGBUF = 27
BPF_MAP_TYPE_STRUCT_OPS = 26
BPF_MAP_TYPE_USER_RINGBUF = 31
BPF_F_RDONLY_PROG = 1 << 7
BPF_F_MMAPABLE = 1 << 10

# uapi/linux/btf.h
BTF_KIND_STRUCT = 4
BTF_KIND_UNION = 5


class OpenOpts(ctypes.Structure):
    """struct bpf_object_open_opts up to kernel_log_level; `sz` tells libbpf which fields we know."""

    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("object_name", ctypes.c_char_p),
        ("relaxed_maps", ctypes.c_bool),
        ("pin_root_path", ctypes.c_char_p),
        ("_attach_prog_fd", ctypes.c_uint32),
        ("kconfig", ctypes.c_char_p),
        ("btf_custom_path", ctypes.c_char_p),
        ("kernel_log_buf", ctypes.c_void_p),
        ("kernel_log_size", ctypes.c_size_t),
        ("kernel_log_level", ctypes.c_uint32),
    ]


class ProgTestRunOpts(ctypes.Structure):
    """struct bpf_test_run_opts (bpf.h), complete since libbpf 0.7."""

    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("data_in", ctypes.c_void_p),
        ("data_out", ctypes.c_void_p),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_void_p),
        ("ctx_out", ctypes.c_void_p),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("repeat", ctypes.c_int),
        ("duration", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    ]


class MapInfo(ctypes.Structure):
    """The head of struct bpf_map_info; the kernel fills only as much as we pass."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * 16),
    ]


class BtfType(ctypes.Structure):
    """struct btf_type; a struct's `vlen` struct btf_member entries follow it in memory."""

    _fields_ = [("name_off", ctypes.c_uint32), ("info", ctypes.c_uint32), ("size", ctypes.c_uint32)]


class BtfMember(ctypes.Structure):
    _fields_ = [("name_off", ctypes.c_uint32), ("type", ctypes.c_uint32), ("offset", ctypes.c_uint32)]


_P, _I, _U32, _SZ, _S = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_size_t, ctypes.c_char_p
_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "libbpf_major_version": (_U32, []),
    "libbpf_minor_version": (_U32, []),
    "libbpf_version_string": (_S, []),
    "libbpf_set_print": (_P, [PRINT_FN]),
    "libbpf_strerror": (_I, [_I, ctypes.c_char_p, _SZ]),
    "bpf_object__open_file": (_P, [_S, ctypes.POINTER(OpenOpts)]),
    "bpf_object__load": (_I, [_P]),
    "bpf_object__close": (None, [_P]),
    "bpf_object__find_map_by_name": (_P, [_P, _S]),
    "bpf_object__find_program_by_name": (_P, [_P, _S]),
    "bpf_object__next_map": (_P, [_P, _P]),
    "bpf_map__fd": (_I, [_P]),
    "bpf_map__name": (_S, [_P]),
    "bpf_map__type": (_I, [_P]),
    "bpf_map__max_entries": (_U32, [_P]),
    "bpf_map__map_flags": (_U32, [_P]),
    "bpf_map__initial_value": (_P, [_P, ctypes.POINTER(_SZ)]),
    "bpf_map__set_initial_value": (_I, [_P, _P, _SZ]),
    "bpf_map__set_autocreate": (_I, [_P, ctypes.c_bool]),
    "bpf_map__set_max_entries": (_I, [_P, _U32]),
    "bpf_map__attach_struct_ops": (_P, [_P]),
    "bpf_program__fd": (_I, [_P]),
    "bpf_program__set_autoload": (_I, [_P, ctypes.c_bool]),
    "bpf_program__autoload": (ctypes.c_bool, [_P]),
    "bpf_link__destroy": (_I, [_P]),
    "bpf_prog_test_run_opts": (_I, [_I, ctypes.POINTER(ProgTestRunOpts)]),
    "bpf_obj_get_info_by_fd": (_I, [_I, _P, ctypes.POINTER(_U32)]),
    "bpf_map_get_next_key": (_I, [_I, _P, _P]),
    "bpf_map_lookup_elem": (_I, [_I, _P, _P]),
    "bpf_object__btf": (_P, [_P]),
    "btf__parse": (_P, [_S, _P]),
    "btf__free": (None, [_P]),
    "btf__find_by_name_kind": (_I, [_P, _S, _U32]),
    "btf__type_by_id": (_P, [_P, _U32]),
    "btf__name_by_offset": (_S, [_P, _U32]),
}

_lib: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    """libbpf.so.1 with prototypes declared and our print callback installed (loaded once)."""
    global _lib
    if _lib is None:
        try:
            handle = ctypes.CDLL(LIBBPF_SONAME, use_errno=True)
        except OSError as exc:
            raise BpfError(
                f"cannot load {LIBBPF_SONAME}: {exc}", hint="install libbpf1 >= 1.4 (Debian: libbpf1)"
            ) from None
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(handle, name, None)
            if fn is None:
                raise BpfError(f"{LIBBPF_SONAME} lacks {name}: libbpf too old", hint="install libbpf1 >= 1.4")
            fn.restype = restype
            fn.argtypes = argtypes
        handle.libbpf_set_print(print_callback)
        _lib = handle
    return _lib


def libbpf_version() -> tuple[int, int]:
    lb = lib()
    return int(lb.libbpf_major_version()), int(lb.libbpf_minor_version())


def libbpf_version_string() -> str:
    return (lib().libbpf_version_string() or b"?").decode()


def require_version(minimum: tuple[int, int] = MIN_VERSION) -> None:
    have = libbpf_version()
    if have < minimum:
        raise BpfError(
            f"libbpf {have[0]}.{have[1]} is too old: scxctl needs >= {minimum[0]}.{minimum[1]}",
            hint="install libbpf1 from bookworm-backports (Debian 12) or use Debian 13",
        )
