"""Keeps the scheduler process from waiting on the scheduler it is.

Once pyland is attached every task on the machine waits for its one thread: a page fault that needs
a kthread only pyland can schedule, or a garbage collection, is a stall of the whole machine. While
it is not attached (start-up, a restart) it competes with the load it is about to schedule.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import resource
from collections.abc import Iterator

from scxctl import log as logsetup

log = logsetup.get_logger("scxctl.pyland")

MCL_CURRENT, MCL_FUTURE = 1, 2
PR_SET_THP_DISABLE = 41
# While it loads and attaches the object (start-up; a restart after CPU hotplug attaches again) the
# default scheduler runs this process, beside the load it is about to schedule. At nice 0, loading
# on the one CPU a hotplug left to a stress-ng mix took 30 s, against 1.5 s at start-up. Only then:
# with --partial the loop itself stays a normal task, and a policy spinning at nice -20 stalled the
# shell that was to stop it for 30 s.
SET_UP_NICE = -20


@contextlib.contextmanager
def set_up_priority() -> Iterator[None]:
    """Nice -20 for the calling thread while the block runs, its own nice again after (Linux nice
    is per thread)."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, SET_UP_NICE)
    except OSError as exc:
        log.warning("cannot raise the scheduler's priority: restarts may be slow under load", error=str(exc))
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


_locked = False  # mlockall(MCL_FUTURE) succeeded: every later mapping is locked as it is made


def harden() -> None:
    """Lock memory and stop the garbage collector; called before each attach.

    Memory is locked once: MCL_FUTURE locks whatever is mapped later as it is mapped, and a second
    mlockall(MCL_CURRENT) only walks every page of the process again, on the restart's critical
    path (the one CPU left after a hotplug, under load). The collection is cheap after the first:
    frozen objects are never looked at again.
    """
    global _locked
    if not _locked:
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise RLIMIT_MEMLOCK", error=str(exc))
        libc = ctypes.CDLL(None, use_errno=True)
        # No transparent huge pages, before the lock faults everything in: with THP "always",
        # khugepaged collapsed this process's memory in the first seconds of each run, about 100 ms
        # of CPU beside the load (a kernel thread: R6 gives it turns as if it were nice 0), under
        # this process's mmap lock.
        if libc.prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
            log.warning("cannot turn transparent huge pages off for the scheduler", errno=ctypes.get_errno())
        if libc.mlockall(MCL_CURRENT | MCL_FUTURE) != 0:
            log.warning("mlockall failed: the scheduler may page-fault", errno=ctypes.get_errno())
        else:
            _locked = True
    gc.collect()
    gc.freeze()
    gc.disable()
