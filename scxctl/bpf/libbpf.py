"""BPF objects as libbpf opens, configures, loads and attaches them: BpfObject, BpfMap,
BpfProgram, BpfLink.

libbpf's objects are raw pointers with a lifetime; these wrappers tie them together (a link keeps
its object alive, closing the object detaches its links and unmaps its views) and turn every failed
call into a BpfError (`scxctl.bpf.errors`).

Memory views returned by `BpfMap.initial_value()` point into libbpf's (or the kernel's) mapping:
they are valid until `BpfObject.close()`, and must not be written after `load()` for read-only maps
(`.rodata`), which is why those come back read-only then and `BpfObject.rodata()` hands out a copy.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
from pathlib import Path
from types import TracebackType

from scxctl.bpf.btf import object_member_offsets
from scxctl.bpf.errors import BpfError, errno_of, error_for_errno
from scxctl.bpf.libbpf_api import (
    BPF_F_MMAPABLE,
    BPF_F_RDONLY_PROG,
    BPF_MAP_TYPE_STRUCT_OPS,
    MapInfo,
    OpenOpts,
    ProgTestRunOpts,
    lib,
    require_version,
)
from scxctl.bpf.libbpf_messages import forget_warnings
from scxctl.sysfs import SysRoot

_KERNEL_LOG_SIZE = 4 << 20  # the verifier keeps the tail when the log overflows (kernel >= 6.4)


def map_info(fd: int) -> MapInfo:
    """bpf_obj_get_info_by_fd for a map fd: type, max_entries, flags, name."""
    info = MapInfo()
    size = ctypes.c_uint32(ctypes.sizeof(info))
    ret = lib().bpf_obj_get_info_by_fd(fd, ctypes.addressof(info), ctypes.byref(size))
    if ret < 0:
        raise error_for_errno(errno_of(ret), f"map info of fd {fd}")
    return info


def _view(ptr: int, size: int, readonly: bool) -> memoryview:
    view = memoryview((ctypes.c_ubyte * size).from_address(ptr)).cast("B")
    return view.toreadonly() if readonly else view


class BpfLink:
    """An attached struct_ops link; destroying it (or process exit) detaches the scheduler."""

    def __init__(self, ptr: int, name: str, owner: BpfObject) -> None:
        self._ptr: int | None = ptr
        self.name = name
        self._owner = owner  # keeps the object (whose close() would detach us) alive while we are

    @property
    def attached(self) -> bool:
        return self._ptr is not None

    def destroy(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            lib().bpf_link__destroy(ptr)

    def __enter__(self) -> BpfLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


class BpfMap:
    """A map of an open object (its fd exists only after load)."""

    def __init__(self, obj: BpfObject, ptr: int) -> None:
        self._obj = obj
        self._ptr = ptr
        self.name = (lib().bpf_map__name(ptr) or b"").decode()

    @property
    def fd(self) -> int:
        self._obj._check_open()
        fd = lib().bpf_map__fd(self._ptr)
        if fd < 0:
            raise BpfError(f"map {self.name!r} has no fd (object not loaded?)", err=-fd)
        return int(fd)

    @property
    def type(self) -> int:
        return int(lib().bpf_map__type(self._ptr))

    @property
    def max_entries(self) -> int:
        return int(lib().bpf_map__max_entries(self._ptr))

    @property
    def map_flags(self) -> int:
        return int(lib().bpf_map__map_flags(self._ptr))

    def initial_value(self) -> memoryview:
        """Before load: libbpf's writable image (.rodata/.bss/.data, struct_ops). After load: the live
        shared mapping of .bss/.data (read-only for the frozen .rodata).

        After load we mmap the map fd ourselves: libbpf < 1.5 keeps returning its private pre-load
        copy (the remap onto the map fd only happens in skeletons there), which never changes."""
        self._obj._check_open()
        size = ctypes.c_size_t(0)
        ptr = lib().bpf_map__initial_value(self._ptr, ctypes.byref(size))
        if not ptr:
            raise BpfError(f"map {self.name!r} has no initial value (not a global-data or struct_ops map)")
        if self._obj.loaded and self.map_flags & BPF_F_MMAPABLE:
            return self._obj._live_view(self, size.value)
        return _view(ptr, size.value, readonly=False)

    def items(self, key_size: int, value_size: int, limit: int = 1 << 16) -> list[tuple[bytes, bytes]]:
        """After load: every (key, value) of a hash or array map, as raw bytes, at most `limit`.

        Not atomic: BPF may add or delete entries meanwhile, and an entry deleted between the two
        calls is skipped; for a snapshot to show, not to account."""
        fd = self.fd
        key, nxt = ctypes.create_string_buffer(key_size), ctypes.create_string_buffer(key_size)
        value = ctypes.create_string_buffer(value_size)
        out: list[tuple[bytes, bytes]] = []
        prev: ctypes.Array[ctypes.c_char] | None = None
        while len(out) < limit:
            if lib().bpf_map_get_next_key(fd, prev, nxt) < 0:
                break  # ENOENT: no more keys
            ctypes.memmove(key, nxt, key_size)
            prev = key
            if lib().bpf_map_lookup_elem(fd, key, value) == 0:
                out.append((key.raw, value.raw))
        return out

    def set_max_entries(self, n: int) -> None:
        """Before load; for a ring buffer, its size in bytes (libbpf rounds it up to a power of two)."""
        ret = lib().bpf_map__set_max_entries(self._ptr, n)
        if ret < 0:
            raise error_for_errno(errno_of(ret), f"set_max_entries({self.name!r}, {n})")

    def set_autocreate(self, autocreate: bool) -> None:
        ret = lib().bpf_map__set_autocreate(self._ptr, autocreate)
        if ret < 0:
            raise error_for_errno(errno_of(ret), f"set_autocreate({self.name!r})")


class BpfProgram:
    def __init__(self, obj: BpfObject, ptr: int, name: str) -> None:
        self._obj = obj
        self._ptr = ptr
        self.name = name

    @property
    def fd(self) -> int:
        self._obj._check_open()
        fd = lib().bpf_program__fd(self._ptr)
        if fd < 0:
            raise BpfError(f"program {self.name!r} has no fd (object not loaded?)", err=-fd)
        return int(fd)

    @property
    def autoload(self) -> bool:
        return bool(lib().bpf_program__autoload(self._ptr))

    def set_autoload(self, autoload: bool) -> None:
        ret = lib().bpf_program__set_autoload(self._ptr, autoload)
        if ret < 0:
            raise error_for_errno(errno_of(ret), f"set_autoload({self.name!r})")

    def test_run(self, ctx_in: bytes | bytearray | None = None) -> int:
        """Run the program once with BPF_PROG_TEST_RUN (SEC("syscall") programs); returns its retval."""
        opts = ProgTestRunOpts(sz=ctypes.sizeof(ProgTestRunOpts))
        buf = None
        if ctx_in is not None:
            buf = ctypes.create_string_buffer(bytes(ctx_in), len(ctx_in))
            opts.ctx_in = ctypes.addressof(buf)
            opts.ctx_size_in = len(ctx_in)
        ret = lib().bpf_prog_test_run_opts(self.fd, ctypes.byref(opts))
        if ret < 0:
            raise error_for_errno(errno_of(ret), f"test run of {self.name!r}")
        return int(opts.retval)


class BpfObject:
    """An opened BPF ELF object: configure it (rodata, autocreate), load it, attach struct_ops."""

    def __init__(self, ptr: int, path: Path, log_buf: ctypes.Array[ctypes.c_char] | None,
                 sysroot: SysRoot | None) -> None:
        self._ptr: int | None = ptr
        self.path = path
        self._log_buf = log_buf  # libbpf writes the verifier log here during load()
        self._sysroot = sysroot
        self._rodata_copy: bytearray | None = None
        self._links: list[BpfLink] = []
        self._mmaps: dict[str, mmap.mmap] = {}
        self.loaded = False

    @classmethod
    def open(cls, path: str | os.PathLike[str], kernel_log: bool = True,
             sysroot: SysRoot | None = None) -> BpfObject:
        """Open (parse) an object file; nothing reaches the kernel before load()."""
        p = Path(path)
        if not p.is_file():
            raise BpfError(f"BPF object not found: {p}", hint="build it with: make -C bpf")
        require_version()
        opts = OpenOpts(sz=ctypes.sizeof(OpenOpts))
        log_buf = None
        if kernel_log:
            log_buf = ctypes.create_string_buffer(_KERNEL_LOG_SIZE)
            opts.kernel_log_buf = ctypes.addressof(log_buf)
            opts.kernel_log_size = _KERNEL_LOG_SIZE
            opts.kernel_log_level = 0  # libbpf retries a failed load with level 1 into our buffer
        ptr = lib().bpf_object__open_file(os.fsencode(p), ctypes.byref(opts))
        if not ptr:
            err = ctypes.get_errno() or errno.EINVAL
            raise error_for_errno(err, f"cannot open BPF object {p}")
        return cls(ptr, p, log_buf, sysroot)

    # -- lifecycle

    def _check_open(self) -> int:
        if self._ptr is None:
            raise BpfError(f"BPF object {self.path} is closed")
        return self._ptr

    def _live_view(self, m: BpfMap, size: int) -> memoryview:
        """A shared mapping of a loaded global-data map; read-only when the program side is (.rodata)."""
        mm = self._mmaps.get(m.name)
        if mm is None:
            readonly = bool(m.map_flags & BPF_F_RDONLY_PROG)
            length = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
            prot = mmap.PROT_READ if readonly else mmap.PROT_READ | mmap.PROT_WRITE
            try:
                mm = mmap.mmap(m.fd, length, mmap.MAP_SHARED, prot)
            except OSError as exc:
                raise error_for_errno(exc.errno or errno.EINVAL, f"mmap of map {m.name!r}") from None
            self._mmaps[m.name] = mm
        return memoryview(mm)[:size]  # read-only by itself for a PROT_READ mapping

    def close(self) -> None:
        """Detach every link made here, free the object (maps and programs are released)."""
        for link in self._links:
            link.destroy()
        self._links.clear()
        for mm in self._mmaps.values():
            with contextlib.suppress(BufferError):  # a caller still holds a view: leave it mapped
                mm.close()
        self._mmaps.clear()
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            lib().bpf_object__close(ptr)

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing useful to report
            self.close()

    # -- lookups

    def map(self, name: str) -> BpfMap:
        """A map by name; ".rodata"/".bss"/".data" match the global-data sections."""
        ptr = lib().bpf_object__find_map_by_name(self._check_open(), name.encode())
        if not ptr:
            raise BpfError(f"map {name!r} not found in {self.path.name}")
        return BpfMap(self, ptr)

    def maps(self) -> list[BpfMap]:
        out: list[BpfMap] = []
        ptr = lib().bpf_object__next_map(self._check_open(), None)
        while ptr:
            out.append(BpfMap(self, ptr))
            ptr = lib().bpf_object__next_map(self._ptr, ptr)
        return out

    def program(self, name: str) -> BpfProgram:
        ptr = lib().bpf_object__find_program_by_name(self._check_open(), name.encode())
        if not ptr:
            raise BpfError(f"program {name!r} not found in {self.path.name}")
        return BpfProgram(self, ptr, name)

    def member_offset(self, struct_name: str, member: str) -> int:
        """Byte offset of `member` in `struct_name` as this object's BTF lays it out (how libbpf
        reads a struct_ops map's initial value; it translates to the kernel's layout at load)."""
        btf = lib().bpf_object__btf(self._check_open())
        members = object_member_offsets(btf, struct_name) if btf else None
        if members is None:
            raise BpfError(f"struct {struct_name} is not in the BTF of {self.path.name}")
        if member not in members:
            raise BpfError(f"struct {struct_name} has no member {member!r} in the BTF of {self.path.name}")
        return members[member] // 8

    # -- configuration before load

    def rodata(self) -> memoryview:
        """A writable copy of the .rodata image, copied into the object by load(). A copy, because
        libbpf remaps the real image read-only at load and a stale view would then crash on write."""
        if self.loaded:
            raise BpfError(".rodata is frozen once the object is loaded")
        if self._rodata_copy is None:
            self._rodata_copy = bytearray(self.map(".rodata").initial_value())
        return memoryview(self._rodata_copy)

    def set_rodata_bytes(self, offset: int, data: bytes) -> None:
        view = self.rodata()
        if offset < 0 or offset + len(data) > len(view):
            raise BpfError(f".rodata write [{offset}, {offset + len(data)}) out of range ({len(view)} bytes)")
        view[offset : offset + len(data)] = data

    # -- kernel

    def load(self) -> None:
        """Create maps, load and verify programs; a failure carries the verifier log tail."""
        ptr = self._check_open()
        if self._rodata_copy is not None:
            data = (ctypes.c_char * len(self._rodata_copy)).from_buffer(self._rodata_copy)
            rodata = lib().bpf_object__find_map_by_name(ptr, b".rodata")
            ret = lib().bpf_map__set_initial_value(rodata, ctypes.addressof(data), len(self._rodata_copy))
            if ret < 0:
                raise error_for_errno(errno_of(ret), "set .rodata")
        forget_warnings()
        ret = lib().bpf_object__load(ptr)
        if ret < 0:
            err = errno_of(ret)
            log = self._log_buf.value.decode("utf-8", "replace") if self._log_buf is not None else ""
            struct_ops = any(m.type == BPF_MAP_TYPE_STRUCT_OPS for m in self.maps())
            raise error_for_errno(err, f"loading {self.path.name} failed", struct_ops=struct_ops,
                                  log=log, sysroot=self._sysroot)
        self.loaded = True
        if self._log_buf is not None:  # the buffer is only needed for failures
            self._log_buf = None

    def attach_struct_ops(self, map_name: str) -> BpfLink:
        """Register the struct_ops map (e.g. the sched_ext_ops) with the kernel."""
        m = self.map(map_name)
        forget_warnings()
        link = lib().bpf_map__attach_struct_ops(m._ptr)
        if not link:
            err = ctypes.get_errno() or errno.EINVAL
            raise error_for_errno(err, f"attaching {map_name!r}", struct_ops=True, sysroot=self._sysroot)
        out = BpfLink(link, map_name, self)
        self._links.append(out)
        return out
