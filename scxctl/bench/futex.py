"""Futex semaphores in shared memory, with schtest's wake-latency timestamps.

Every workload role is its own process (see README, "Why processes"), so the semaphores live in an
anonymous MAP_SHARED mapping created before fork and use the shared futex operations (FUTEX_WAIT /
FUTEX_WAKE, never the _PRIVATE variants, which only match waiters in the same address space).

Each semaphore has exactly one producer and one consumer, so it is an event count: the producer
alone writes `seq` (posts so far), the consumer keeps how many it has taken. FUTEX_WAIT's atomic
"sleep only if *addr == taken" check plus the kernel's barrier pairing between FUTEX_WAKE and
FUTEX_WAIT make a lost wake-up impossible without user-space atomics (which Python lacks); the
cost is one FUTEX_WAKE syscall per post, also when nobody sleeps.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import random
import time

SYS_FUTEX = 202  # x86-64
FUTEX_WAIT = 0
FUTEX_WAKE = 1
RESERVOIR = 1024  # samples kept per semaphore, as schtest's Semaphore<_, 1024>

_MASK32 = 0xFFFFFFFF
_CLOCK = time.CLOCK_MONOTONIC

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = [
    ctypes.c_long,
    ctypes.c_void_p,
    ctypes.c_int,
    ctypes.c_uint,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_uint,
]


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _SemLayout(ctypes.Structure):
    """One semaphore in the shared mapping (64-byte aligned so two never share a cache line)."""

    _fields_ = (
        ("seq", ctypes.c_uint32),  # the futex word: posts so far (mod 2**32); producer writes
        ("wake_seq", ctypes.c_uint32),  # which post `wake_ts` belongs to; producer writes
        ("wake_ts", ctypes.c_int64),  # CLOCK_MONOTONIC ns taken immediately before FUTEX_WAKE
        ("seen", ctypes.c_uint64),  # wake-ups sampled since the last reset; consumer writes
        ("_pad", ctypes.c_uint8 * 40),
        ("samples", ctypes.c_int64 * RESERVOIR),  # reservoir of wake latencies in ns
    )


_SEM_SIZE = ctypes.sizeof(_SemLayout)


class Arena:
    """An anonymous shared mapping carved into semaphores and 64-bit counters; create before fork."""

    def __init__(self, size: int = 1 << 20) -> None:
        self._map = mmap.mmap(-1, size, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        self._base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        self._used = 0

    def _take(self, size: int) -> int:
        off = (self._used + 63) & ~63
        if off + size > len(self._map):
            raise MemoryError("bench shared arena exhausted")
        self._used = off + size
        return off

    def semaphore(self) -> Semaphore:
        return Semaphore(_SemLayout.from_buffer(self._map, self._take(_SEM_SIZE)))

    def counter(self) -> ctypes.c_uint64:
        return ctypes.c_uint64.from_buffer(self._map, self._take(8))


class Semaphore:
    """Single-producer single-consumer semaphore whose consumer samples wake latencies.

    As in schtest, a latency is sampled only when the consumer really slept and was woken: if the
    post came first, the consumer never waits and no sample exists (this is why the default
    scheduler yields few slow-wake samples in adaptive_priority).
    """

    def __init__(self, layout: _SemLayout) -> None:
        self._l = layout
        self._addr = ctypes.addressof(layout)
        self._taken = 0  # consumer-local: posts consumed so far (mod 2**32)

    def post(self) -> None:
        """Producer side: publish one post, timestamp, wake (the timestamp precedes FUTEX_WAKE)."""
        lay = self._l
        nxt = (lay.seq + 1) & _MASK32
        lay.seq = nxt
        lay.wake_ts = time.clock_gettime_ns(_CLOCK)
        lay.wake_seq = nxt
        _syscall(SYS_FUTEX, self._addr, FUTEX_WAKE, 1, None, None, 0)

    def wait(self, sample: bool = True, timeout_s: float | None = None) -> bool:
        """Consumer side: take one post, sleeping in FUTEX_WAIT while there is none.

        Returns False only on timeout. With `sample`, a wake-up latency goes into the reservoir.
        """
        lay = self._l
        taken = self._taken
        woken = False
        after = 0
        ts = None
        if timeout_s is not None:
            sec = int(timeout_s)
            ts = ctypes.byref(_Timespec(sec, int((timeout_s - sec) * 1e9)))
        while lay.seq == taken:
            rc = _syscall(SYS_FUTEX, self._addr, FUTEX_WAIT, taken, ts, None, 0)
            after = time.clock_gettime_ns(_CLOCK)
            woken = rc == 0
            if not woken and ctypes.get_errno() == errno.ETIMEDOUT and lay.seq == taken:
                return False
        self._taken = nxt = (taken + 1) & _MASK32
        if sample and woken and lay.wake_seq == nxt:
            self._record(after - lay.wake_ts)
        return True

    def _record(self, latency_ns: int) -> None:
        """Reservoir sampling (Vitter's algorithm R) of 1024 latencies; the consumer is the only writer."""
        lay = self._l
        n = lay.seen
        if n < RESERVOIR:
            lay.samples[n] = latency_ns
        else:
            j = random.randrange(n + 1)
            if j < RESERVOIR:
                lay.samples[j] = latency_ns
        lay.seen = n + 1

    def collect(self) -> tuple[list[int], int]:
        """(retained samples, wake-ups seen) since the last collect, then reset; call while idle."""
        lay = self._l
        seen = int(lay.seen)
        kept = [int(v) for v in lay.samples[: min(seen, RESERVOIR)]]
        lay.seen = 0
        return kept, seen
