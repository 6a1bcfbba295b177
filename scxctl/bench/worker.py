"""The native bench worker (native/scxctl-bench-worker.c): found, checked, driven round by round.

The timed roles run as native code so that the interpreter's time is neither in a sample nor in what
the scheduler sees of the tasks. This module finds the worker as the loader finds the BPF object
(with the same source-hash freshness check), starts one per test in its own process group, and
speaks its line protocol: "ready ROLE=PID ...", then per "round N" the sampled semaphores
("sem NAME SEEN V...") and "done". While a round runs it calls the test's tick (progress and the
scheduler's health check) about ten times a second.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from pathlib import Path

from scxctl import paths
from scxctl.bench.env import Env
from scxctl.bpf import object as bpfobject
from scxctl.bpf.buildinfo import WORKER_SECTION
from scxctl.errors import ExitCode, PermissionDenied, ScxctlError, UsageError

WORKER = bpfobject.Artifact(
    "bench worker", WORKER_SECTION, "native", "scxctl-bench-worker.c", "make -C bpf (or make -C native)"
)
TICK_S = 0.1

Samples = tuple[list[int], int]  # (retained wake latencies in ns, wake-ups seen)


def inspect() -> bpfobject.ObjectVerdict:
    return bpfobject.inspect(paths.bench_worker_candidates(), artifact=WORKER)


def resolve(allow_stale: bool = False) -> Path:
    """The worker to run; a missing or stale one is an installation problem (exit 7)."""
    return bpfobject.resolve(allow_stale, inspect(), code=ExitCode.BPF)


class Worker:
    """One running worker: `start()` waits for its roles, `round(iters)` runs one measurement."""

    def __init__(self, workload: str, cpus: list[int], env: Env, path: Path | None = None) -> None:
        self.env = env
        self.workload = workload
        exe = path or env.worker or resolve()
        argv = [str(exe), *(["--sched-ext"] if env.sched_ext else []), workload, ",".join(map(str, cpus))]
        try:
            # its own process group: Ctrl-C reaches only scxctl, which then kills the whole group
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, process_group=0)
        except OSError as exc:
            raise ScxctlError(f"cannot start the bench worker {exe}: {exc.strerror}", ExitCode.BPF) from None
        self._buf = b""
        self.roles: dict[str, int] = {}

    def start(self) -> dict[str, int]:
        """Wait until every role is pinned and waiting; returns role -> PID."""
        words = self._line(time.monotonic() + self.env.round_timeout_s, "start-up").split()
        if not words or words[0] != "ready":
            raise self._unexpected(" ".join(words))
        self.roles = {name: int(pid) for name, _, pid in (w.partition("=") for w in words[1:])}
        return self.roles

    def round(self, iters: int) -> dict[str, Samples]:
        """One round of `iters`; returns each sampled semaphore's samples."""
        what = f"a round of {iters}"
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(f"round {iters}\n".encode())
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise self._exited(what) from None
        deadline = time.monotonic() + self.env.round_timeout_s
        out: dict[str, Samples] = {}
        while True:
            words = self._line(deadline, what).split()
            if words == ["done"]:
                return out
            if len(words) < 3 or words[0] != "sem":
                raise self._unexpected(" ".join(words))
            out[words[1]] = ([int(v) for v in words[3:]], int(words[2]))

    def _line(self, deadline: float, what: str) -> str:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            ready, _, _ = select.select([fd], [], [], TICK_S)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise self._exited(what)
                self._buf += chunk
                continue
            self.env.tick()
            if time.monotonic() > deadline:
                raise ScxctlError(f"{what} did not finish in time: a workload process is starved or stuck")
        line, _, self._buf = self._buf.partition(b"\n")
        text = line.decode(errors="replace")
        if text.startswith("error "):
            raise _error(text)
        return text

    def _exited(self, what: str) -> ScxctlError:
        rest = self._buf.decode(errors="replace").strip()
        if rest.startswith("error "):
            return _error(rest.splitlines()[0])
        rc = self._proc.wait()
        how = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"
        said = f": {rest[:200]}" if rest else ""
        return ScxctlError(f"the bench worker exited during {what} ({how}){said}")

    def _unexpected(self, line: str) -> ScxctlError:
        return ScxctlError(f"the bench worker ({self.workload}) said something unexpected: {line[:200]!r}")

    def close(self) -> None:
        """Kill the worker and every role process (idempotent)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()
        for pipe in (self._proc.stdin, self._proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error(line: str) -> ScxctlError:
    """The worker's "error KIND MESSAGE" as the matching one-line error."""
    _, kind, message = [*line.split(" ", 2), "", ""][:3]
    if kind == "perm":
        return PermissionDenied(message)
    if kind == "usage":
        return UsageError(message)
    return ScxctlError(message)


def start(workload: str, cpus: list[int], env: Env) -> Worker:
    """A started worker (closed again if its start-up fails)."""
    w = Worker(workload, cpus, env)
    try:
        w.start()
    except BaseException:
        w.close()
        raise
    return w
