"""BPF ring buffers for the pyland hand-off: kernel -> Python (RINGBUF) and Python -> kernel (USER_RINGBUF).

On x86-64 both sides work directly on the shared mmap of the map, inside the caller's thread: no
callback per record, no helper thread, no queue: the scheduler loop consumes the ring itself, since
every hop between the ring and the policy adds to each decision's latency. A batch of records is
unpacked with the caller's `struct.Struct` into the caller's list and the consumer position is
published once per batch.

Layout and protocol (kernel/bpf/ringbuf.c, libbpf src/ringbuf.c): page 0 holds consumer_pos, page 1
producer_pos, then the data area, mapped twice back to back so a record that wraps is contiguous.
Each record is an 8-byte header {u32 len (bit 31 BUSY, bit 30 DISCARD), u32 pg_off} followed by the
payload; the stride is round_up(len + 8, 8).

Why this is only valid on x86-64: libbpf orders these accesses with smp_load_acquire /
smp_store_release. Under x86-64's TSO those are plain aligned loads/stores (plus compiler barriers),
so doing every 64-bit position and 32-bit header access as ONE aligned native access, in libbpf's
order, is equivalent. We get single accesses from memoryview casts ('Q'/'I' items are memcpy'd with
a constant size, i.e. one mov), never from struct's '<Q' (which assembles bytes one by one), and each
Python statement boundary is a compiler barrier. On weakly ordered CPUs (arm64, ...) plain loads
and stores are NOT acquire/release, so `open_reader` / `open_writer` return libbpf-backed
equivalents there (ring_buffer__new/consume, user_ring_buffer__reserve/submit) with the same
interface, at the price of a Python callback per consumed record.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import platform
import struct
from types import TracebackType
from typing import Any, Literal, Protocol

from scxctl.bpf.errors import BpfError, error_for_errno
from scxctl.bpf.libbpf import map_info
from scxctl.bpf.libbpf_api import BPF_MAP_TYPE_RINGBUF, BPF_MAP_TYPE_USER_RINGBUF, lib

PAGE_SIZE = mmap.PAGESIZE
HDR_SIZE = 8
BUSY_BIT = 1 << 31
DISCARD_BIT = 1 << 30
LEN_MASK = ~(BUSY_BIT | DISCARD_BIT) & 0xFFFFFFFF

Backend = Literal["auto", "mmap", "libbpf"]


def mmap_supported(machine: str | None = None) -> bool:
    """The direct mmap protocol needs TSO ordering: x86-64 only (see the module docstring)."""
    return (machine or platform.machine()) in ("x86_64", "AMD64")


def stride(payload_len: int) -> int:
    """Bytes a record of `payload_len` occupies in the ring (header included, 8-aligned)."""
    return (payload_len + HDR_SIZE + 7) & ~7


class Reader(Protocol):
    """What the scheduler loop needs from a ring buffer consumer (both backends provide it)."""

    fd: int

    def read_batch(self, fmt: struct.Struct, out: list[tuple[object, ...]], limit: int) -> int: ...
    def has_data(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: object) -> None: ...


class Writer(Protocol):
    """What the scheduler loop needs from a user ring buffer producer (both backends provide it)."""

    def write(self, fmt: struct.Struct, *values: object) -> bool: ...
    def free_bytes(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: object) -> None: ...


def _ring_size(map_fd: int, want_type: int, what: str) -> int:
    info = map_info(map_fd)
    if info.type != want_type:
        raise BpfError(f"map fd {map_fd} ({info.name.decode(errors='replace')}) is not a {what} map")
    size = int(info.max_entries)
    if size <= 0 or size & (size - 1) or size % PAGE_SIZE:
        raise BpfError(f"{what} map fd {map_fd}: size {size} is not a power-of-two multiple of the page")
    return size


def _mmap(fd: int, length: int, prot: int, offset: int, what: str) -> mmap.mmap:
    try:
        return mmap.mmap(fd, length, mmap.MAP_SHARED, prot, offset=offset)
    except OSError as exc:
        raise error_for_errno(exc.errno or errno.EINVAL, f"mmap of the {what}") from None


class _Mapped:
    """Owns mmaps and the memoryviews cut from them, and releases both on close()."""

    def __init__(self) -> None:
        self._mmaps: list[mmap.mmap] = []
        self._views: list[memoryview] = []

    def _keep(self, view: memoryview) -> memoryview:
        self._views.append(view)
        return view

    def close(self) -> None:
        for view in reversed(self._views):
            view.release()
        self._views.clear()
        for mm in self._mmaps:
            mm.close()
        self._mmaps.clear()

    def __enter__(self) -> _Mapped:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class RingBufferReader(_Mapped):
    """Consumer of a BPF_MAP_TYPE_RINGBUF through its mmap (x86-64; see the module docstring).

    `fd` is the map fd: epoll it for EPOLLIN. The kernel only wakes a consumer that had caught up,
    but epoll's poll callback re-checks for data, so publishing (read_batch) before epoll_wait
    never loses a wake-up.
    """

    def __init__(self, map_fd: int) -> None:
        super().__init__()
        if not mmap_supported():
            raise BpfError("the mmap ring buffer reader is x86-64 only: use open_reader()")
        self.fd = map_fd
        size = _ring_size(map_fd, BPF_MAP_TYPE_RINGBUF, "ring buffer")
        # consumer page: the only writable part for a kernel -> user ring (any other is EPERM)
        cons_mm = _mmap(map_fd, PAGE_SIZE, mmap.PROT_READ | mmap.PROT_WRITE, 0, "ring consumer page")
        self._mmaps.append(cons_mm)
        data_mm = _mmap(map_fd, PAGE_SIZE + 2 * size, mmap.PROT_READ, PAGE_SIZE, "ring data")
        self._mmaps.append(data_mm)
        whole = self._keep(memoryview(data_mm))
        self._setup(
            self._keep(memoryview(cons_mm)[:8]),
            self._keep(whole[:8]),
            self._keep(whole[PAGE_SIZE:]),
            size,
        )

    @classmethod
    def from_buffers(cls, consumer: memoryview, producer: memoryview, data: memoryview,
                     size: int) -> RingBufferReader:
        """A reader over caller-provided memory laid out like the map (data = 2 * size bytes, the
        second half mirroring the first): lets tests drive states a BPF program cannot leave behind
        (a BUSY record), through the very same read_batch()."""
        self = cls.__new__(cls)
        _Mapped.__init__(self)
        self.fd = -1
        self._setup(consumer, producer, data, size)
        return self

    def _setup(self, consumer: memoryview, producer: memoryview, data: memoryview, size: int) -> None:
        if len(data) < 2 * size:
            raise BpfError("ring data area must be mapped twice (2 * size bytes)")
        self.size = size
        self._mask = size - 1
        self._cons = self._keep(consumer.cast("Q"))  # [0]: one aligned 8-byte access
        self._prod = self._keep(producer.cast("Q"))
        self._data = data
        self._hdr = self._keep(data.cast("I"))  # headers are 8-aligned: index = offset >> 2
        self.short_records = 0  # records shorter than the caller's format: skipped, counted
        self._run_fmts: dict[struct.Struct, struct.Struct | None] = {}

    @property
    def consumer_pos(self) -> int:
        return int(self._cons[0])

    @property
    def producer_pos(self) -> int:
        return int(self._prod[0])

    def has_data(self) -> bool:
        """Committed or in-flight records are waiting (a cheap check before sleeping on epoll)."""
        return bool(self._cons[0] < self._prod[0])

    def _run_format(self, fmt: struct.Struct) -> struct.Struct | None:
        """`fmt` preceded by the 8-byte header as pad bytes and padded to the record stride: unpacks
        a run of records laid end to end with one iter_unpack, yielding exactly fmt's tuples."""
        if fmt not in self._run_fmts:
            order, body = (fmt.format[0], fmt.format[1:]) if fmt.format[:1] in "@=<>!" else ("@", fmt.format)
            total = stride(fmt.size)
            cand = struct.Struct(f"{order}{HDR_SIZE}x{body}{total - HDR_SIZE - fmt.size}x")
            self._run_fmts[fmt] = cand if cand.size == total else None
        return self._run_fmts[fmt]

    def read_batch(self, fmt: struct.Struct, out: list[tuple[object, ...]], limit: int) -> int:
        """Append up to `limit` committed records, unpacked with `fmt`, to `out`; return how many.

        Stops at a BUSY (reserved, not yet committed) record, skips DISCARDed ones, re-reads the
        producer position while it moves, and publishes the consumer position once at the end.

        Fast path (pyland's case, every record exactly fmt.size bytes): the headers of the next k
        records are loaded with one strided read (each still a single aligned 32-bit load) and,
        when all are committed records of that size, the k payloads are unpacked with one
        iter_unpack over the contiguous (double-mapped) run. Anything else -- BUSY, DISCARD, another
        size -- goes through the record-by-record loop.
        """
        cons_pos = start = self._cons[0]
        prod, hdr, data, mask = self._prod, self._hdr, self._data, self._mask
        need = fmt.size
        rec = stride(need)
        words = rec >> 2
        run_fmt = self._run_format(fmt)
        n = 0
        while n < limit:
            prod_pos = prod[0]  # acquire (TSO): records below it are fully written
            if cons_pos >= prod_pos:
                break
            while cons_pos < prod_pos and n < limit:
                off = cons_pos & mask
                k = min(limit - n, (prod_pos - cons_pos) // rec) if run_fmt is not None else 0
                if k > 1:
                    first = off >> 2
                    lens = hdr[first : first + k * words : words].tolist()  # acquire, k times
                    if lens.count(need) != k:
                        k = next(i for i, length in enumerate(lens) if length != need)
                    if k:
                        out.extend(run_fmt.iter_unpack(data[off : off + k * rec]))  # type: ignore[union-attr]
                        n += k
                        cons_pos += k * rec
                        continue
                length = hdr[off >> 2]  # acquire
                if length & BUSY_BIT:
                    limit = n  # not committed yet: stop for now, the commit will wake epoll
                    break
                cons_pos += ((length & LEN_MASK) + 15) & ~7
                if not length & DISCARD_BIT:
                    if (length & LEN_MASK) >= need:
                        out.append(fmt.unpack_from(data, off + HDR_SIZE))  # a copy, made before release
                        n += 1
                    else:
                        self.short_records += 1
        if cons_pos != start:
            self._cons[0] = cons_pos  # release (TSO): once per batch
        return n


class UserRingBufferWriter(_Mapped):
    """Single producer of a BPF_MAP_TYPE_USER_RINGBUF through its mmap (x86-64).

    Nothing wakes the kernel: records are consumed when a BPF program calls bpf_user_ringbuf_drain.
    """

    def __init__(self, map_fd: int) -> None:
        super().__init__()
        if not mmap_supported():
            raise BpfError("the mmap user ring buffer writer is x86-64 only: use open_writer()")
        self.fd = map_fd
        size = _ring_size(map_fd, BPF_MAP_TYPE_USER_RINGBUF, "user ring buffer")
        # consumer page read-only (the kernel owns it; a writable mapping is EPERM), the rest writable
        cons_mm = _mmap(map_fd, PAGE_SIZE, mmap.PROT_READ, 0, "user ring consumer page")
        self._mmaps.append(cons_mm)
        data_mm = _mmap(map_fd, PAGE_SIZE + 2 * size, mmap.PROT_READ | mmap.PROT_WRITE, PAGE_SIZE,
                        "user ring data")
        self._mmaps.append(data_mm)
        whole = self._keep(memoryview(data_mm))
        self.size = size
        self._mask = size - 1
        self._cons = self._keep(self._keep(memoryview(cons_mm)[:8]).cast("Q"))
        self._prod = self._keep(self._keep(whole[:8]).cast("Q"))
        self._data = self._keep(whole[PAGE_SIZE:])
        self._hdr64 = self._keep(self._data.cast("Q"))  # headers are 8-aligned: index = offset >> 3
        self._prod_pos = int(self._prod[0])  # we are the only producer: cache our own position

    @property
    def consumer_pos(self) -> int:
        return int(self._cons[0])

    @property
    def producer_pos(self) -> int:
        return self._prod_pos

    def free_bytes(self) -> int:
        return self.size - (self._prod_pos - self._cons[0])

    def write(self, fmt: struct.Struct, *values: object) -> bool:
        """Append one record; False when the ring is full (never blocks). A record that can never
        fit raises BpfError (E2BIG)."""
        length = fmt.size
        total = (length + 15) & ~7
        prod_pos = self._prod_pos
        if total > self.size - (prod_pos - self._cons[0]):  # consumer_pos: acquire
            if total > self.size:
                raise BpfError(f"record of {length} bytes cannot fit a {self.size}-byte user ring buffer",
                               err=errno.E2BIG)
            return False
        off = prod_pos & self._mask
        fmt.pack_into(self._data, off + HDR_SIZE, *values)  # may run into the mirror: same pages
        # the whole header {len, pg_off = 0} as one aligned 8-byte store (little-endian: len is the
        # low half), committed (no BUSY) at once: fine for a single producer, since the kernel reads
        # nothing beyond producer_pos, which is stored after it
        self._hdr64[off >> 3] = length
        prod_pos += total
        self._prod[0] = prod_pos  # release (TSO): the kernel may consume the record from now on
        self._prod_pos = prod_pos
        return True


# --- libbpf-backed equivalents (other architectures; also the benchmark's baseline) ----------------

_SAMPLE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_STOP = -errno.ECANCELED  # our callback's "limit reached" (libbpf passes negative returns through)
_libbpf_declared = False


def _declare() -> ctypes.CDLL:
    """Prototypes of libbpf's ring buffer API (declared on first use, with the rest of lib())."""
    global _libbpf_declared
    lb = lib()
    if not _libbpf_declared:
        p, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        protos: dict[str, tuple[object, list[object]]] = {
            "ring_buffer__new": (p, [i, _SAMPLE_FN, p, p]),
            "ring_buffer__free": (None, [p]),
            "ring_buffer__consume": (i, [p]),
            "ring_buffer__epoll_fd": (i, [p]),
            "ring_buffer__ring": (p, [p, ctypes.c_uint]),
            "ring__avail_data_size": (sz, [p]),
            "user_ring_buffer__new": (p, [i, p]),
            "user_ring_buffer__free": (None, [p]),
            "user_ring_buffer__reserve": (p, [p, ctypes.c_uint32]),
            "user_ring_buffer__submit": (None, [p, p]),
        }
        if hasattr(lb, "ring_buffer__consume_n"):  # libbpf >= 1.5
            protos["ring_buffer__consume_n"] = (i, [p, sz])
        for name, (restype, argtypes) in protos.items():
            fn = getattr(lb, name)
            fn.restype = restype
            fn.argtypes = argtypes
        _libbpf_declared = True
    return lb


class LibbpfRingBufferReader:
    """RINGBUF consumer through libbpf's ring_buffer__consume: one Python callback per record."""

    def __init__(self, map_fd: int) -> None:
        self._lib = lb = _declare()
        _ring_size(map_fd, BPF_MAP_TYPE_RINGBUF, "ring buffer")
        self._cb = _SAMPLE_FN(self._on_sample)  # referenced for as long as libbpf may call it
        self._rb: int | None = lb.ring_buffer__new(map_fd, self._cb, None, None)
        if not self._rb:
            raise error_for_errno(ctypes.get_errno() or errno.EINVAL, "ring_buffer__new")
        self._ring = lb.ring_buffer__ring(self._rb, 0)
        self.fd = int(lb.ring_buffer__epoll_fd(self._rb))  # an epoll fd: EPOLLIN when data waits
        self._consume_n = getattr(lb, "ring_buffer__consume_n", None)
        self._fmt: struct.Struct | None = None
        self._out: list[tuple[object, ...]] = []
        self._left = 0
        self.short_records = 0

    def _on_sample(self, _ctx: int | None, data: int, size: int) -> int:
        fmt = self._fmt
        assert fmt is not None
        if size >= fmt.size:
            self._out.append(fmt.unpack_from(ctypes.string_at(data, fmt.size)))
            self._left -= 1
        else:
            self.short_records += 1
        return _STOP if self._left <= 0 else 0

    def read_batch(self, fmt: struct.Struct, out: list[tuple[object, ...]], limit: int) -> int:
        if self._rb is None or limit <= 0:
            return 0
        before = len(out)
        self._fmt, self._out, self._left = fmt, out, limit
        if self._consume_n is not None:
            ret = self._consume_n(self._rb, limit)
        else:
            ret = self._lib.ring_buffer__consume(self._rb)
        if ret < 0 and ret != _STOP:
            raise error_for_errno(-ret, "ring_buffer__consume")
        self._out = []
        return len(out) - before

    def has_data(self) -> bool:
        return self._ring is not None and self._lib.ring__avail_data_size(self._ring) > 0

    def close(self) -> None:
        if self._rb is not None:
            rb, self._rb, self._ring = self._rb, None, None
            self._lib.ring_buffer__free(rb)

    def __enter__(self) -> LibbpfRingBufferReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LibbpfUserRingBufferWriter:
    """USER_RINGBUF producer through libbpf's user_ring_buffer__reserve/submit."""

    def __init__(self, map_fd: int) -> None:
        self._lib = lb = _declare()
        self.size = _ring_size(map_fd, BPF_MAP_TYPE_USER_RINGBUF, "user ring buffer")
        self._rb: int | None = lb.user_ring_buffer__new(map_fd, None)
        if not self._rb:
            raise error_for_errno(ctypes.get_errno() or errno.EINVAL, "user_ring_buffer__new")
        # read-only views of both positions, only for free_bytes() (an estimate, no ordering needed)
        self._cons_mm = _mmap(map_fd, PAGE_SIZE, mmap.PROT_READ, 0, "user ring consumer page")
        self._prod_mm = _mmap(map_fd, PAGE_SIZE, mmap.PROT_READ, PAGE_SIZE, "user ring producer page")
        self._pos = struct.Struct("=Q")

    def write(self, fmt: struct.Struct, *values: object) -> bool:
        if self._rb is None:
            raise BpfError("user ring buffer writer is closed")
        ptr = self._lib.user_ring_buffer__reserve(self._rb, fmt.size)
        if not ptr:
            err = ctypes.get_errno()
            if err == errno.ENOSPC:
                return False
            if err == errno.E2BIG:
                raise BpfError(f"record of {fmt.size} bytes cannot fit a {self.size}-byte user ring buffer",
                               err=err)
            raise error_for_errno(err or errno.EINVAL, "user_ring_buffer__reserve")
        fmt.pack_into((ctypes.c_char * fmt.size).from_address(ptr), 0, *values)
        self._lib.user_ring_buffer__submit(self._rb, ptr)
        return True

    def free_bytes(self) -> int:
        prod = self._pos.unpack_from(self._prod_mm)[0]
        cons = self._pos.unpack_from(self._cons_mm)[0]
        return self.size - (prod - cons)

    def close(self) -> None:
        if self._rb is not None:
            rb, self._rb = self._rb, None
            self._lib.user_ring_buffer__free(rb)
            for mm in (self._cons_mm, self._prod_mm):
                with contextlib.suppress(BufferError):
                    mm.close()

    def __enter__(self) -> LibbpfUserRingBufferWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pick(backend: Backend) -> Literal["mmap", "libbpf"]:
    if backend == "auto":
        return "mmap" if mmap_supported() else "libbpf"
    if backend == "mmap" and not mmap_supported():
        raise BpfError(f"the mmap ring buffer backend needs x86-64, not {platform.machine()}")
    return backend


def open_reader(map_fd: int, backend: Backend = "auto") -> Reader:
    """The ring buffer consumer for this machine: mmap on x86-64, libbpf elsewhere."""
    if _pick(backend) == "mmap":
        return RingBufferReader(map_fd)
    return LibbpfRingBufferReader(map_fd)


def open_writer(map_fd: int, backend: Backend = "auto") -> Writer:
    """The user ring buffer producer for this machine: mmap on x86-64, libbpf elsewhere."""
    if _pick(backend) == "mmap":
        return UserRingBufferWriter(map_fd)
    return LibbpfUserRingBufferWriter(map_fd)
