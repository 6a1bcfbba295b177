"""BTF, the kernel's and a BPF object's type information: the one module that reads it.

Two readers answer the same questions ("which members does struct sched_ext_ops have here?"):
- `Btf`, a pure-Python walk of the type section record by record, as the kernel's
  btf_parse_type_sec() does. It serves doctor's kernel.btf check, which must answer the kernel
  question where libbpf.so.1 is missing or too old: there only pyland is out ("the kernel supports
  sched_ext, but pyland cannot run here"), not the kernel.
- libbpf's parser (`btf_struct_members`, `btf_member_offsets`, `sched_ext_ops_members`), for code
  that runs where libbpf is loaded anyway: under emulation the Python walk of a kernel's 5 MB of
  types takes over a second, on every load and restart of pyland; libbpf's a tenth of that.

Both answer from the type graph, not from a substring that may sit in any string (a kfunc name, a
member). Format: Documentation/bpf/btf.rst and include/uapi/linux/btf.h.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import errno
import functools
import os
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scxctl.bpf import libbpf_api as api
from scxctl.bpf.errors import BpfError, error_for_errno
from scxctl.sysfs import VMLINUX_BTF, SysRoot

BTF_MAGIC = 0xEB9F
BTF_VERSION = 1
HEADER_MIN_LEN = 24  # magic, version, flags, hdr_len, type_off, type_len, str_off, str_len
TYPE_RECORD_LEN = 12  # struct btf_type: name_off, info, size/type


class Kind(enum.IntEnum):
    UNKN = 0
    INT = 1
    PTR = 2
    ARRAY = 3
    STRUCT = 4
    UNION = 5
    ENUM = 6
    FWD = 7
    TYPEDEF = 8
    VOLATILE = 9
    CONST = 10
    RESTRICT = 11
    FUNC = 12
    FUNC_PROTO = 13
    VAR = 14
    DATASEC = 15
    FLOAT = 16
    DECL_TAG = 17
    TYPE_TAG = 18
    ENUM64 = 19


# Bytes that follow each struct btf_type: (fixed part, size of each of the vlen entries).
_TRAILER: dict[Kind, tuple[int, int]] = {
    Kind.INT: (4, 0),  # u32 encoding/offset/bits
    Kind.PTR: (0, 0),
    Kind.ARRAY: (12, 0),  # struct btf_array: type, index_type, nelems
    Kind.STRUCT: (0, 12),  # struct btf_member: name_off, type, offset
    Kind.UNION: (0, 12),
    Kind.ENUM: (0, 8),  # struct btf_enum: name_off, val
    Kind.FWD: (0, 0),
    Kind.TYPEDEF: (0, 0),
    Kind.VOLATILE: (0, 0),
    Kind.CONST: (0, 0),
    Kind.RESTRICT: (0, 0),
    Kind.FUNC: (0, 0),
    Kind.FUNC_PROTO: (0, 8),  # struct btf_param: name_off, type
    Kind.VAR: (4, 0),  # struct btf_var: linkage
    Kind.DATASEC: (0, 12),  # struct btf_var_secinfo: type, offset, size
    Kind.FLOAT: (0, 0),
    Kind.DECL_TAG: (4, 0),  # struct btf_decl_tag: component_idx
    Kind.TYPE_TAG: (0, 0),
    Kind.ENUM64: (0, 12),  # struct btf_enum64: name_off, val_lo32, val_hi32
}


class BTFError(ValueError):
    """The blob is not valid BTF; the message says where and why."""


@dataclass(frozen=True)
class Header:
    byteorder: str  # "<" or ">" (BTF is written in the producer's byte order; the magic tells)
    version: int
    flags: int
    hdr_len: int
    type_off: int
    type_len: int
    str_off: int
    str_len: int


@dataclass(frozen=True)
class BtfType:
    id: int  # type ids start at 1 (0 is void)
    kind: Kind
    name: str
    vlen: int
    kind_flag: bool
    size_or_type: int  # byte size for INT/STRUCT/UNION/ENUM/DATASEC/FLOAT, else a type id
    offset: int  # of the struct btf_type within the type section
    members: tuple[str, ...] = ()  # member names, for STRUCT and UNION


def parse_header(data: bytes) -> Header:
    if len(data) < HEADER_MIN_LEN:
        raise BTFError(f"truncated: {len(data)} bytes, a BTF header needs {HEADER_MIN_LEN}")
    if struct.unpack_from("<H", data)[0] == BTF_MAGIC:
        bo = "<"
    elif struct.unpack_from(">H", data)[0] == BTF_MAGIC:
        bo = ">"
    else:
        raise BTFError(f"bad magic 0x{int.from_bytes(data[:2], 'little'):04x} (expected 0x{BTF_MAGIC:04x})")
    _, version, flags, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from(
        f"{bo}HBBIIIII", data
    )
    hdr = Header(bo, version, flags, hdr_len, type_off, type_len, str_off, str_len)
    if version != BTF_VERSION:
        raise BTFError(f"unsupported BTF version {version} (this reader knows {BTF_VERSION})")
    if hdr_len < HEADER_MIN_LEN or hdr_len > len(data):
        raise BTFError(f"header length {hdr_len} out of range (blob is {len(data)} bytes)")
    if any(data[HEADER_MIN_LEN:hdr_len]):
        raise BTFError("header has non-zero fields this reader does not know")
    body = len(data) - hdr_len
    if type_off % 4:
        raise BTFError(f"type section offset {type_off} is not 4-byte aligned")
    if type_off + type_len > body:
        raise BTFError(f"type section [{type_off}, +{type_len}) runs past the end ({body} bytes of data)")
    if str_off + str_len > body:
        raise BTFError(f"string section [{str_off}, +{str_len}) runs past the end ({body} bytes of data)")
    if str_len == 0 or data[hdr_len + str_off] != 0:
        raise BTFError("string section must start with an empty string")
    if data[hdr_len + str_off + str_len - 1] != 0:
        raise BTFError("string section is not NUL-terminated")
    return hdr


class Btf:
    """A parsed blob: the header plus a walk over the type records."""

    def __init__(self, data: bytes) -> None:
        self.header = parse_header(data)
        h = self.header
        self._types = data[h.hdr_len + h.type_off : h.hdr_len + h.type_off + h.type_len]
        self._strings = data[h.hdr_len + h.str_off : h.hdr_len + h.str_off + h.str_len]
        self._nr_types: int | None = None

    @classmethod
    def from_file(cls, path: str | Path) -> Btf:
        return cls(Path(path).read_bytes())

    def name_at(self, off: int) -> str:
        if off >= len(self._strings):
            raise BTFError(f"name offset {off} is outside the string section ({len(self._strings)} bytes)")
        end = self._strings.index(b"\0", off)
        try:
            return self._strings[off:end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BTFError(f"name at offset {off} is not UTF-8") from exc

    def _records(self) -> Iterator[tuple[int, int, int, int, int, int]]:
        """(type id, record offset, name_off, kind, vlen, size_or_type) for every type, validated."""
        types = self._types
        unpack = struct.Struct(f"{self.header.byteorder}III").unpack_from
        pos, type_id, end, nstr = 0, 1, len(types), len(self._strings)
        while pos < end:
            if pos + TYPE_RECORD_LEN > end:
                raise BTFError(f"type {type_id} at offset {pos}: record truncated ({end - pos} bytes left)")
            name_off, info, size_or_type = unpack(types, pos)
            if name_off >= nstr:
                raise BTFError(f"type {type_id} at offset {pos}: name offset {name_off} is past the strings")
            kind = (info >> 24) & 0x1F
            vlen = info & 0xFFFF
            trailer = _TRAILER.get(kind)  # type: ignore[call-overload]
            if trailer is None:
                raise BTFError(f"type {type_id} at offset {pos}: unknown kind {kind}")
            nxt = pos + TYPE_RECORD_LEN + trailer[0] + vlen * trailer[1]
            if nxt > end:
                raise BTFError(
                    f"type {type_id} ({Kind(kind).name}, vlen {vlen}) at offset {pos}: "
                    f"data runs past the end of the type section"
                )
            yield type_id, pos, name_off, kind, vlen, size_or_type
            pos, type_id = nxt, type_id + 1
        self._nr_types = type_id - 1

    def _make(self, rec: tuple[int, int, int, int, int, int]) -> BtfType:
        type_id, pos, name_off, kind, vlen, size_or_type = rec
        info = struct.unpack_from(f"{self.header.byteorder}I", self._types, pos + 4)[0]
        members: tuple[str, ...] = ()
        if kind in (Kind.STRUCT, Kind.UNION):
            fmt = struct.Struct(f"{self.header.byteorder}I")
            base = pos + TYPE_RECORD_LEN
            members = tuple(self.name_at(fmt.unpack_from(self._types, base + 12 * i)[0]) for i in range(vlen))
        return BtfType(
            id=type_id,
            kind=Kind(kind),
            name=self.name_at(name_off),
            vlen=vlen,
            kind_flag=bool(info >> 31),
            size_or_type=size_or_type,
            offset=pos,
            members=members,
        )

    def types(self) -> Iterator[BtfType]:
        for rec in self._records():
            yield self._make(rec)

    @property
    def nr_types(self) -> int:
        """Number of types (walks the whole section once)."""
        if self._nr_types is None:
            for _ in self._records():
                pass
        assert self._nr_types is not None
        return self._nr_types

    def find(self, kind: Kind, name: str) -> BtfType | None:
        """The first type of `kind` named `name`; the whole section is walked (and so validated)."""
        want = name.encode("utf-8") + b"\0"
        strings = self._strings
        found: BtfType | None = None
        for rec in self._records():
            name_off = rec[2]
            if found is None and rec[3] == kind and strings[name_off : name_off + len(want)] == want:
                found = self._make(rec)
        return found


def find_struct(data: bytes, name: str) -> BtfType | None:
    """The STRUCT type `name` in a raw BTF blob, or None; raises BTFError when the blob is invalid."""
    return Btf(data).find(Kind.STRUCT, name)


BANDWIDTH_HOOK = "cgroup_set_bandwidth"  # in struct sched_ext_ops since 6.17: cpu.max reaches BPF


# -- libbpf's parser


def _members_at(btf: int, struct_name: str, flatten: bool = False) -> dict[str, int] | None:
    """Member name -> bit offset of STRUCT `struct_name` in a libbpf `struct btf`; None if absent.

    `flatten`: the members of an anonymous struct or union member count as the struct's own, at
    their offset in it, as C names them (cgroup.ancestors lies in one on recent kernels)."""
    type_id = api.lib().btf__find_by_name_kind(btf, struct_name.encode(), api.BTF_KIND_STRUCT)
    if type_id < 0:
        return None
    out: dict[str, int] = {}
    _add_members(btf, type_id, 0, out, flatten)
    return out


def _add_members(btf: int, type_id: int, base_bits: int, out: dict[str, int], flatten: bool) -> None:
    lib = api.lib()
    t = api.BtfType.from_address(lib.btf__type_by_id(btf, type_id))
    kflag = t.info >> 31
    members = (api.BtfMember * (t.info & 0xFFFF)).from_address(ctypes.addressof(t) + ctypes.sizeof(t))
    for m in members:
        bits = base_bits + (m.offset & 0xFFFFFF if kflag else m.offset)
        name = (lib.btf__name_by_offset(btf, m.name_off) or b"").decode()
        if name or not flatten:
            # flattened, a bitfield (its size in the offset's top byte) has no byte offset: -1
            out.setdefault(name, -1 if flatten and kflag and m.offset >> 24 else bits)
            continue
        inner = api.BtfType.from_address(lib.btf__type_by_id(btf, m.type))
        if (inner.info >> 24) & 0x1F in (api.BTF_KIND_STRUCT, api.BTF_KIND_UNION):
            _add_members(btf, m.type, bits, out, flatten)


def object_member_offsets(btf: int, struct_name: str) -> dict[str, int] | None:
    """Member name -> bit offset of `struct_name` in a loaded object's BTF (bpf_object__btf)."""
    return _members_at(btf, struct_name)


@contextlib.contextmanager
def _parsed(path: Path) -> Iterator[int]:
    """libbpf's `struct btf` of the file `path`; OSError when unreadable, BpfError when not BTF."""
    btf = api.lib().btf__parse(os.fsencode(path), None)
    if not btf:
        err = ctypes.get_errno() or errno.EINVAL
        if err in (errno.ENOENT, errno.EACCES, errno.EPERM):
            raise OSError(err, os.strerror(err), str(path))
        raise error_for_errno(err, f"cannot parse the BTF in {path}")
    try:
        yield btf
    finally:
        api.lib().btf__free(btf)


def btf_struct_members(path: Path, struct_name: str) -> tuple[str, ...] | None:
    """The members of STRUCT `struct_name` in the BTF file `path` (raw, as /sys/kernel/btf/vmlinux,
    or ELF), in order; None when the file has no such struct. Raises OSError when the file cannot
    be read and BpfError when it is not valid BTF."""
    with _parsed(path) as btf:
        members = _members_at(btf, struct_name)
    return tuple(members) if members is not None else None


def btf_member_offsets(path: Path, wanted: Mapping[str, Sequence[str]]) -> dict[str, dict[str, int]]:
    """Byte offsets of the members `wanted` (struct -> member names) in the BTF file `path`, in
    one parse. BpfError names a struct or member the file lacks, or one that is a bitfield; OSError
    and BpfError otherwise as btf_struct_members."""
    out: dict[str, dict[str, int]] = {}
    with _parsed(path) as btf:
        for struct_name, names in wanted.items():
            members = _members_at(btf, struct_name, flatten=True)
            if members is None:
                raise BpfError(f"the BTF in {path} has no struct {struct_name}")
            out[struct_name] = {}
            for name in names:
                bits = members.get(name)
                if bits is None or bits < 0 or bits % 8:
                    what = "no member" if bits is None else "a bitfield member"
                    raise BpfError(f"the BTF in {path} has {what} {struct_name}.{name}")
                out[struct_name][name] = bits // 8
    return out


def sched_ext_ops_members(sysroot: SysRoot | None = None) -> tuple[str, ...] | None:
    """The members of the running kernel's struct sched_ext_ops: which callbacks it can call.
    Empty when the BTF has no such struct (no sched_ext); None when it is missing or unreadable."""
    path = (sysroot or SysRoot()).path(VMLINUX_BTF)
    try:
        st = path.stat()
    except OSError:
        return None
    return _cached_struct_members(str(path), st.st_size, st.st_mtime_ns, "sched_ext_ops")


@functools.lru_cache(maxsize=8)
def _cached_struct_members(path: str, size: int, mtime_ns: int, name: str) -> tuple[str, ...] | None:
    """Cached by the file's identity: the kernel's BTF only changes with a reboot, and pyland asks
    again on every restart the kernel requests (e.g. at each CPU hotplug)."""
    try:
        members = btf_struct_members(Path(path), name)
    except (OSError, BpfError):
        return None
    return members if members is not None else ()
