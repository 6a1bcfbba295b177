"""A small ctypes binding over libbpf.so.1: open, configure, load and attach BPF objects.

Why ctypes and not a compiled extension or BCC: the guest and the host ship libbpf as a shared
library (Debian libbpf1), BCC cannot load a compiled object or struct_ops, and a binding of the
dozen calls pyland needs is smaller than a build step. Every libbpf/errno detail stays in this
module; callers get `BpfError` (an `ScxctlError`) with a documented exit code:

- object file missing, libbpf older than 1.4, verifier rejection (log tail attached) -> ExitCode.BPF
- EPERM (not root / no CAP_BPF + CAP_SYS_ADMIN) -> ExitCode.PERMISSION
- a struct_ops object on a kernel without sched_ext -> ExitCode.UNSUPPORTED
- EBUSY/EEXIST on struct_ops attach (another scheduler loaded) -> ExitCode.BUSY

libbpf's own messages go to structlog (logger "scxctl.libbpf") at debug level; its recent
warnings are kept so that an error can say what libbpf complained about.

Memory views returned by `BpfMap.initial_value()` point into libbpf's (or the kernel's) mapping:
they are valid until `BpfObject.close()`, and must not be written after `load()` for read-only maps
(`.rodata`), which is why those come back read-only then and `BpfObject.rodata()` hands out a copy.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import logging
import mmap
import os
import re
from pathlib import Path
from types import TracebackType
from typing import Any

from scxctl.errors import ExitCode, ScxctlError
from scxctl.log import get_logger
from scxctl.sysfs import SysRoot, read_sched_ext

MIN_VERSION = (1, 4)
LIBBPF_SONAME = "libbpf.so.1"

# uapi/linux/bpf.h
BPF_MAP_TYPE_RINGBUF = 27
BPF_MAP_TYPE_STRUCT_OPS = 26
BPF_MAP_TYPE_USER_RINGBUF = 31
BPF_F_RDONLY_PROG = 1 << 7
BPF_F_MMAPABLE = 1 << 10

# libbpf.h enum libbpf_print_level
_LIBBPF_WARN, _LIBBPF_INFO, _LIBBPF_DEBUG = 0, 1, 2

_KERNEL_LOG_SIZE = 4 << 20  # the verifier keeps the tail when the log overflows (kernel >= 6.4)
_LOG_TAIL_LINES = 25

_log = get_logger("scxctl.libbpf")
_stdlib_log = logging.getLogger("scxctl.libbpf")
_recent_warnings: collections.deque[str] = collections.deque(maxlen=20)


class BpfError(ScxctlError):
    """A BPF operation failed; `errno` is the libbpf/kernel errno (0 if none), `log` the verifier log."""

    def __init__(
        self,
        message: str,
        code: ExitCode = ExitCode.BPF,
        hint: str | None = None,
        err: int = 0,
        log: str = "",
    ) -> None:
        super().__init__(message, code, hint)
        self.errno = err
        self.log = log


# --- library loading -------------------------------------------------------------------------------


class _OpenOpts(ctypes.Structure):
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


class _TestRunOpts(ctypes.Structure):
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


_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)

_P, _I, _U32, _SZ, _S = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_size_t, ctypes.c_char_p
_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "libbpf_major_version": (_U32, []),
    "libbpf_minor_version": (_U32, []),
    "libbpf_version_string": (_S, []),
    "libbpf_set_print": (_P, [_PRINT_FN]),
    "libbpf_strerror": (_I, [_I, ctypes.c_char_p, _SZ]),
    "bpf_object__open_file": (_P, [_S, ctypes.POINTER(_OpenOpts)]),
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
    "bpf_link__destroy": (_I, [_P]),
    "bpf_prog_test_run_opts": (_I, [_I, ctypes.POINTER(_TestRunOpts)]),
    "bpf_obj_get_info_by_fd": (_I, [_I, _P, ctypes.POINTER(_U32)]),
    "bpf_object__btf": (_P, [_P]),
    "btf__find_by_name_kind": (_I, [_P, _S, _U32]),
    "btf__type_by_id": (_P, [_P, _U32]),
    "btf__name_by_offset": (_S, [_P, _U32]),
}

BTF_KIND_STRUCT = 4


class _BtfType(ctypes.Structure):
    """struct btf_type; a struct's `vlen` struct btf_member entries follow it in memory."""

    _fields_ = [("name_off", ctypes.c_uint32), ("info", ctypes.c_uint32), ("size", ctypes.c_uint32)]


class _BtfMember(ctypes.Structure):
    _fields_ = [("name_off", ctypes.c_uint32), ("type", ctypes.c_uint32), ("offset", ctypes.c_uint32)]

_lib: ctypes.CDLL | None = None
_libc = ctypes.CDLL(None, use_errno=True)
_libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]
_libc.vsnprintf.restype = ctypes.c_int


def _on_libbpf_print(level: int, fmt: bytes | None, args: int | None) -> int:
    """libbpf_set_print callback: format the va_list with libc's vsnprintf, hand it to structlog."""
    if fmt is None:
        return 0
    if level != _LIBBPF_WARN and not _stdlib_log.isEnabledFor(logging.DEBUG):
        return 0  # libbpf is chatty at debug level; skip the formatting cost when nobody listens
    buf = ctypes.create_string_buffer(2048)
    n = _libc.vsnprintf(buf, len(buf), fmt, args)  # va_list is passed by pointer on x86-64 and arm64
    text = buf.value.decode("utf-8", "replace").rstrip("\n") if n >= 0 else fmt.decode("utf-8", "replace")
    if level == _LIBBPF_WARN:
        _recent_warnings.append(text)
    _log.debug("libbpf", level=("warn", "info", "debug")[min(level, 2)], msg=text)
    return 0


_print_cb = _PRINT_FN(_on_libbpf_print)  # module-level reference: libbpf keeps the raw pointer


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
        handle.libbpf_set_print(_print_cb)
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


# --- errors ----------------------------------------------------------------------------------------


def _strerror(err: int) -> str:
    return os.strerror(err) if err else "unknown error"


def _last_warning() -> str:
    """libbpf's last specific complaint (not its generic "failed to load object" epilogue)."""
    for text in reversed(_recent_warnings):
        text = text.removeprefix("libbpf: ")
        if not text.startswith(("failed to load object", "failed to load BPF skeleton")):
            return text
    return ""


_INSN_LINE = re.compile(r"^\d+: \(")  # "8: (79) r6 = *(u64 *)(r0 +32)" (classic log, column 0)
_STATS_LINE = re.compile(r"^(processed \d+ insns|verification time|stack depth)")


def _split_log(log: str) -> tuple[list[str], list[str], list[str]]:
    """(instruction trace, the verifier's complaint after the last instruction, what follows).

    The complaint ends at the first blank line: kernels >= 7.x append an extended diagnostic
    ("Verification failed: ...", "Reason:", source and instruction context) after one."""
    lines = log.splitlines()
    last = max((i for i, line in enumerate(lines) if _INSN_LINE.match(line)), default=-1)
    end = next((j for j in range(last + 1, len(lines)) if not lines[j].strip()), len(lines))
    return lines[: last + 1], lines[last + 1 : end], lines[end:]


def verifier_reason(log: str) -> str:
    """The verifier's complaint in one line: the lines after the last instruction, minus statistics."""
    _, complaint, _ = _split_log(log)
    return "; ".join(line.strip() for line in complaint if line.strip() and not _STATS_LINE.match(line))


def log_tail(log: str, lines: int = _LOG_TAIL_LINES) -> str:
    """What to show of a verifier log: the end of the instruction trace and the complaint, plus the
    summary of a newer kernel's extended diagnostic (up to its source context)."""
    trace, complaint, extra = _split_log(log)
    kept = [line for line in trace + complaint if line.strip()][-lines:]
    if any(line.startswith("Verification failed") for line in extra):
        start = next(i for i, line in enumerate(extra) if line.startswith("Verification failed"))
        summary = []
        for line in extra[start:]:
            if line.startswith(("At:", "Causal path:", "Suggestion:")):
                break
            summary.append(line)
        kept += ["", *summary]
    return "\n".join(kept).rstrip()


# The verifier's complaint when a kfunc with implicit arguments has no `_impl` entry in kernel BTF
_MISSING_IMPL = re.compile(r"cannot find function (?P<name>\w+?)_impl in BTF")


def error_for_errno(
    err: int, action: str, *, struct_ops: bool = False, log: str = "", sysroot: SysRoot | None = None
) -> BpfError:
    """Map a failed libbpf call's errno to the BpfError (and exit code) the user should see."""
    why = _strerror(err)
    if err == errno.EPERM and not log:
        return BpfError(
            f"{action}: permission denied ({why})",
            ExitCode.PERMISSION,
            "run as root (BPF needs CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN for struct_ops)",
            err,
        )
    if struct_ops and err in (errno.EBUSY, errno.EEXIST):
        status = read_sched_ext(sysroot)
        name = status.ops or "unknown"
        return BpfError(
            f"another sched_ext scheduler is loaded: {name}",
            ExitCode.BUSY,
            "stop it first (scxctl stop, or end the process that loaded it)",
            err,
        )
    if struct_ops and not read_sched_ext(sysroot).available:
        detail = _last_warning() or why
        return BpfError(
            f"{action}: this kernel cannot run sched_ext schedulers ({detail})",
            ExitCode.UNSUPPORTED,
            "boot a kernel with CONFIG_SCHED_CLASS_EXT=y (see scxctl doctor)",
            err,
        )
    # libbpf fails with ESRCH (1.4) or ENOENT when a struct_ops type or member is not in kernel BTF
    if struct_ops and err in (errno.ENOENT, errno.ESRCH, errno.EOPNOTSUPP, errno.ENOTSUP):
        detail = _last_warning()
        return BpfError(
            f"{action}: the kernel does not support this sched_ext scheduler ({why})"
            + (f": {detail}" if detail else ""),
            ExitCode.UNSUPPORTED,
            "the running kernel lacks a sched_ext feature the object needs (see scxctl doctor)",
            err,
        )
    if log and (m := _MISSING_IMPL.search(log)):
        kfunc = m["name"]
        return BpfError(
            f"{action}: this kernel cannot call the kfunc {kfunc}: its BTF describes {kfunc} with the "
            f"verifier-supplied `aux` argument but has no {kfunc}_impl, which the verifier needs "
            "(a defect of this kernel build: no BPF program can call it here)",
            ExitCode.UNSUPPORTED,
            "boot another kernel of the series or a newer one (scxctl doctor checks the object on the "
            "running kernel)",
            err,
            log,
        )
    if log:
        tail = log_tail(log)
        last = verifier_reason(log) or why
        return BpfError(
            f"{action}: the verifier rejected the program ({why}): {last}",
            ExitCode.BPF,
            "verifier log tail:\n" + tail,
            err,
            log,
        )
    detail = _last_warning()
    return BpfError(f"{action}: {why}" + (f" ({detail})" if detail else ""), ExitCode.BPF, None, err)


def _errno_of(ret: int) -> int:
    """libbpf >= 1.0 returns -errno from int functions; errno is set too."""
    return -ret if ret < 0 else (ctypes.get_errno() or errno.EINVAL)


# --- objects ---------------------------------------------------------------------------------------


def map_info(fd: int) -> MapInfo:
    """bpf_obj_get_info_by_fd for a map fd: type, max_entries, flags, name."""
    info = MapInfo()
    size = ctypes.c_uint32(ctypes.sizeof(info))
    ret = lib().bpf_obj_get_info_by_fd(fd, ctypes.addressof(info), ctypes.byref(size))
    if ret < 0:
        raise error_for_errno(_errno_of(ret), f"map info of fd {fd}")
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

    def set_max_entries(self, n: int) -> None:
        """Before load; for a ring buffer, its size in bytes (libbpf rounds it up to a power of two)."""
        ret = lib().bpf_map__set_max_entries(self._ptr, n)
        if ret < 0:
            raise error_for_errno(_errno_of(ret), f"set_max_entries({self.name!r}, {n})")

    def set_autocreate(self, autocreate: bool) -> None:
        ret = lib().bpf_map__set_autocreate(self._ptr, autocreate)
        if ret < 0:
            raise error_for_errno(_errno_of(ret), f"set_autocreate({self.name!r})")


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

    def set_autoload(self, autoload: bool) -> None:
        ret = lib().bpf_program__set_autoload(self._ptr, autoload)
        if ret < 0:
            raise error_for_errno(_errno_of(ret), f"set_autoload({self.name!r})")

    def test_run(self, ctx_in: bytes | bytearray | None = None) -> int:
        """Run the program once with BPF_PROG_TEST_RUN (SEC("syscall") programs); returns its retval."""
        opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts))
        buf = None
        if ctx_in is not None:
            buf = ctypes.create_string_buffer(bytes(ctx_in), len(ctx_in))
            opts.ctx_in = ctypes.addressof(buf)
            opts.ctx_size_in = len(ctx_in)
        ret = lib().bpf_prog_test_run_opts(self.fd, ctypes.byref(opts))
        if ret < 0:
            raise error_for_errno(_errno_of(ret), f"test run of {self.name!r}")
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
        opts = _OpenOpts(sz=ctypes.sizeof(_OpenOpts))
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
        type_id = lib().btf__find_by_name_kind(btf, struct_name.encode(), BTF_KIND_STRUCT) if btf else -1
        if type_id < 0:
            raise BpfError(f"struct {struct_name} is not in the BTF of {self.path.name}")
        t = _BtfType.from_address(lib().btf__type_by_id(btf, type_id))
        kflag = t.info >> 31
        members = (_BtfMember * (t.info & 0xFFFF)).from_address(ctypes.addressof(t) + ctypes.sizeof(t))
        for m in members:
            if lib().btf__name_by_offset(btf, m.name_off) == member.encode():
                return (m.offset & 0xFFFFFF if kflag else m.offset) // 8
        raise BpfError(f"struct {struct_name} has no member {member!r} in the BTF of {self.path.name}")

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
                raise error_for_errno(_errno_of(ret), "set .rodata")
        _recent_warnings.clear()
        ret = lib().bpf_object__load(ptr)
        if ret < 0:
            err = _errno_of(ret)
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
        _recent_warnings.clear()
        link = lib().bpf_map__attach_struct_ops(m._ptr)
        if not link:
            err = ctypes.get_errno() or errno.EINVAL
            raise error_for_errno(err, f"attaching {map_name!r}", struct_ops=True, sysroot=self._sysroot)
        out = BpfLink(link, map_name, self)
        self._links.append(out)
        return out
