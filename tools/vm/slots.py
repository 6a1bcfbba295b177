"""Host cores for guests: a guest holds one slot per host thread that runs its vCPUs.

TCG guests competing for cores run so slowly that boot and command timeouts become meaningless,
so a guest holds as many slots as it has vCPU threads: all of them (one per vCPU, up to the
host's cores) under multi-threaded TCG or KVM, one under single-threaded TCG. Two single-threaded
guests can then run side by side on a 2-core host, each on a core of its own, while a guest with a
thread per vCPU still has the host to itself.

Slots are flock()ed files under the cache directory. A gate lock orders the waiters: whoever holds
the gate takes its slots next, so a guest that needs every slot is not starved by single-slot
guests taking each slot as it frees. Whoever holds the gate only ever waits for slots, and slots
are released without the gate, so the waiting cannot deadlock.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

POLL_S = 0.2


def host_slots() -> int:
    """The cores this process may run on (its affinity), at least one."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except OSError:
        return max(1, os.cpu_count() or 1)


def needed(cpus: int, tcg_single: bool, total: int) -> int:
    """Slots a guest holds: one per vCPU thread, never more than the host has."""
    return 1 if tcg_single else max(1, min(cpus, total))


def _try(f: IO[str]) -> bool:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextmanager
def held(directory: Path, count: int, total: int | None = None) -> Iterator[bool]:
    """Hold `count` of the host's slots for the body; yields whether it had to wait for them."""
    total = total or host_slots()
    count = max(1, min(count, total))
    directory.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        files = [stack.enter_context(open(directory / f"qemu.slot{i}.lock", "w")) for i in range(total)]
        gate = stack.enter_context(open(directory / "qemu.lock", "w"))
        waited = not _try(gate)
        if waited:
            fcntl.flock(gate, fcntl.LOCK_EX)
        mine: list[IO[str]] = []
        while True:
            for f in files:
                if len(mine) < count and f not in mine and _try(f):
                    mine.append(f)
            if len(mine) == count:
                break
            waited = True
            time.sleep(POLL_S)
        fcntl.flock(gate, fcntl.LOCK_UN)
        yield waited
