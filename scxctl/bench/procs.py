"""Forked workload processes: one process per role, pinned, in one process group, never orphaned.

Why processes and not threads: threads of one Python process share a GIL, so a spinning worker would
delay its controller's wake-up by up to the GIL switch interval (5 ms) and the test would measure the
interpreter, not the scheduler. Separate processes are scheduled independently, like schtest's native
threads; the price is the interpreter's own cost around each futex call, which `overhead` measures.

Each child: joins the group's process group (away from the terminal's, so Ctrl-C reaches only the
bench, which then kills the group), asks for SIGKILL when its parent dies (PR_SET_PDEATHSIG, the
backstop if the bench itself is SIGKILLed), and is pinned / switched to SCHED_EXT by the parent before
any work starts, so that errors surface in the parent as one clear message.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import sys
import time
from collections.abc import Callable

from scxctl.bench.futex import Arena, Semaphore
from scxctl.errors import PermissionDenied, ScxctlError, UsageError

SCHED_EXT = 7
PR_SET_NAME = 15
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)


def set_pdeathsig(sig: int) -> None:
    _libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


class Controller:
    """schtest's per-process start/ready handshake: the driver hands out `iters` for one round."""

    def __init__(self, arena: Arena) -> None:
        self.start = arena.semaphore()  # driver -> process
        self.ready = arena.semaphore()  # process -> driver
        self._iters = arena.counter()

    def get_iters(self) -> int:
        """Process side: report the previous round done, then block until the next one starts."""
        self.ready.post()
        self.start.wait(sample=False)
        return int(self._iters.value)

    def begin(self, iters: int) -> None:
        """Driver side."""
        self._iters.value = iters
        self.start.post()


class WorkloadGroup:
    """The bench's workload processes; `close()` kills and reaps every one (idempotent)."""

    def __init__(self, sched_ext: bool) -> None:
        self.sched_ext = sched_ext  # switch each process to SCHED_EXT (partial-mode schedulers)
        self.pgid: int | None = None
        self.pids: list[int] = []
        self.names: dict[int, str] = {}

    def spawn(self, name: str, target: Callable[[], None], cpus: set[int]) -> int:
        parent = os.getpid()
        pgid = self.pgid or 0
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # child
            code = 0
            try:
                os.setpgid(0, pgid)
                set_pdeathsig(signal.SIGKILL)
                if os.getppid() != parent:
                    os._exit(1)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                _libc.prctl(PR_SET_NAME, ctypes.c_char_p(f"scxbench-{name}"[:15].encode()), 0, 0, 0)
                target()
            except BaseException as exc:  # report and die; never return into the parent's code
                code = 1
                with contextlib.suppress(OSError):
                    os.write(2, f"scxctl bench: workload {name}: {exc!r}\n".encode())
            finally:
                os._exit(code)
        if self.pgid is None:
            self.pgid = pid
        with contextlib.suppress(OSError):  # the child did it already, or is gone (see check_alive)
            os.setpgid(pid, self.pgid)
        self.pids.append(pid)
        self.names[pid] = name
        self._configure(pid, name, cpus)
        return pid

    def _configure(self, pid: int, name: str, cpus: set[int]) -> None:
        try:
            os.sched_setaffinity(pid, cpus)
        except OSError as exc:
            msg = f"cannot pin the {name} process to CPUs {sorted(cpus)}: {exc.strerror}"
            if exc.errno == errno.EPERM:
                raise PermissionDenied(msg) from None
            raise UsageError(msg) from None
        if self.sched_ext:
            try:
                os.sched_setscheduler(pid, SCHED_EXT, os.sched_param(0))
            except OSError as exc:
                cls = PermissionDenied if exc.errno == errno.EPERM else ScxctlError
                raise cls(f"cannot set SCHED_EXT on the {name} process: {exc.strerror}") from None

    def check_alive(self) -> None:
        for pid in self.pids:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                self.pids.remove(pid)
                raise ScxctlError(
                    f"workload process {self.names.get(pid, pid)} exited unexpectedly ({_describe(status)})"
                )

    def close(self) -> None:
        if self.pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGKILL)
        for pid in list(self.pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # in case it never joined the group
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.pids.clear()

    def __enter__(self) -> WorkloadGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def wait_ready(
    sems: list[Semaphore],
    group: WorkloadGroup,
    tick: Callable[[], None],
    deadline: float,
    what: str,
) -> None:
    """Driver: take one post from each semaphore, calling `tick` about 10x/s and checking children."""
    for sem in sems:
        while not sem.wait(sample=False, timeout_s=0.1):
            group.check_alive()
            tick()
            if time.monotonic() > deadline:
                raise ScxctlError(f"{what} did not finish in time: a workload process is starved or stuck")


def spin_for_ns(duration_ns: int) -> None:
    """Busy-spin for a span of wall-clock time (schtest's Spinner)."""
    clock = time.clock_gettime_ns
    mono = time.CLOCK_MONOTONIC
    end = clock(mono) + duration_ns
    while clock(mono) < end:
        pass
