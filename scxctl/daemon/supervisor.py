"""Supervision of the one scheduler child: start, verify the kernel switched, watch, restart, give up.

Each step answers one of scx_loader's weak points: success means the kernel says our scheduler is
loaded (not that a process started); an ejection is noticed even when the child keeps running;
restarts back off exponentially (capped) and stop after `max_failures` within `failure_window_s`,
leaving the default scheduler; a stop escalates from the stop signal to SIGKILL after a timeout.
A child that re-attaches by itself when the kernel asks (pyland on CPU hotplug logs REATTACH_EVENT)
is counted apart (reattach_count) and never as a failure: it did what the kernel asked.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import json
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scxctl.daemon import exitinfo
from scxctl.daemon.config import SupervisorLimits
from scxctl.daemon.exitinfo import ExitInfo
from scxctl.log import get_logger
from scxctl.sysfs import SchedExtStatus, SysRoot, ops_matches, read_sched_ext

log = get_logger("scxctl.daemon")

_VERIFY_POLL_S = 0.05
_OUTPUT_TAIL = 50
REATTACH_EVENT = '"event": "pyland restarting"'  # scxctl.pyland.scheduler's JSON log line


class Phase(enum.StrEnum):
    IDLE = "idle"  # nothing to supervise
    STARTING = "starting"  # child spawned, waiting for the kernel to switch
    RUNNING = "running"  # kernel runs our scheduler
    BACKOFF = "backoff"  # failed; waiting before the next start
    STOPPING = "stopping"
    FAILED = "failed"  # gave up after too many failures


@dataclass(frozen=True)
class ChildSpec:
    """What to run: everything comes from the config, never from a client."""

    scheduler: str
    argv: tuple[str, ...]
    ops: str  # the name the kernel must show in root/ops
    mode: str
    policy: str | None = None
    stop_signal: int = signal.SIGTERM
    args: tuple[str, ...] = ()  # the client's allow-listed arguments, already part of argv


_KIND_NAME = re.compile(r"^[A-Z][A-Z_]{0,31}$")


@dataclass
class Counts:
    """Totals since the daemon started, for its metrics: what changed, and why restarts happened.

    Label values stay a small fixed set: restarts by the daemon's exit kind, ejections by the
    kernel's exit kind the child stated (anything else is "unknown").
    """

    switches: int = 0  # a scheduler (or a mode, a policy) started on request or at restore
    restarts: collections.Counter[str] = field(default_factory=collections.Counter)
    ejections: collections.Counter[str] = field(default_factory=collections.Counter)
    changed_at: float = field(default_factory=time.monotonic)  # the last start, stop, exit or switch

    def changed(self) -> None:
        self.changed_at = time.monotonic()


class Supervisor:
    def __init__(
        self,
        limits: SupervisorLimits,
        sysroot: SysRoot | None = None,
        on_exit: Callable[[ExitInfo], None] | None = None,
        on_give_up: Callable[[dict[str, Any]], None] | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.limits = limits
        self.sysroot = sysroot or SysRoot()
        self._on_exit = on_exit
        self._on_give_up = on_give_up
        # told whenever what the kernel runs for us may have changed (the D-Bus properties follow it)
        self._on_change = on_change
        self.spec: ChildSpec | None = None
        self.phase = Phase.IDLE
        self.proc: asyncio.subprocess.Process | None = None
        self.restart_count = 0
        # re-attaches the child did itself when the kernel asked (CPU hotplug): not failures
        self.reattach_count = 0
        self._reattach_at = 0.0
        self.last_exit: ExitInfo | None = None
        self.gave_up: dict[str, Any] | None = None
        self.enable_latency_s: float | None = None  # spawn -> kernel enabled, last start
        self.running_since: float | None = None
        self.next_start_at: float | None = None
        self.output: collections.deque[str] = collections.deque(maxlen=_OUTPUT_TAIL)
        self._failures: collections.deque[float] = collections.deque()
        self._task: asyncio.Task[None] | None = None
        self._first: asyncio.Future[ExitInfo | None] | None = None
        self._stop_reason = "stop"
        self._last_pid: int | None = None
        self._exited: asyncio.Task[int] | None = None
        self.counts = Counts()

    # -- public ---------------------------------------------------------------------------------

    def kernel(self) -> SchedExtStatus:
        return read_sched_ext(self.sysroot)

    def owns(self, kernel: SchedExtStatus) -> bool:
        """Is the scheduler the kernel runs our live child?"""
        return (
            self.spec is not None
            and self.phase in (Phase.RUNNING, Phase.STARTING, Phase.STOPPING)
            and self.proc is not None
            and self.proc.returncode is None
            and kernel.enabled
            and ops_matches(kernel.ops, self.spec.ops)
        )

    async def start(self, spec: ChildSpec) -> None:
        """Stop whatever runs, then supervise `spec` from a clean failure budget."""
        await self.stop("replaced")
        self.spec = spec
        self.counts.switches += 1
        self.counts.changed()
        self.restart_count = 0
        self.reattach_count = 0
        self.gave_up = None
        self._failures.clear()
        self._first = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._supervise(spec), name=f"supervise-{spec.scheduler}")

    async def first_outcome(self, timeout: float) -> ExitInfo | None:
        """None once the first start is verified; the ExitInfo when it failed; TimeoutError otherwise."""
        if self._first is None:
            return None
        return await asyncio.wait_for(asyncio.shield(self._first), timeout)

    async def stop(self, reason: str) -> None:
        """Stop supervising: terminate the child (stop signal, then SIGKILL) and wait for it."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            self._stop_reason = reason
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.counts.changed()
        self.phase = Phase.IDLE
        self.next_start_at = None
        self._tell()

    def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "phase": self.phase.value,
            "scheduler": self.spec.scheduler if self.spec else None,
            "mode": self.spec.mode if self.spec else None,
            "policy": self.spec.policy if self.spec else None,
            "args": list(self.spec.args) if self.spec else None,
            "expected_ops": self.spec.ops if self.spec else None,
            "pid": self.proc.pid if self.proc is not None and self.proc.returncode is None else None,
            "restart_count": self.restart_count,
            "reattach_count": self.reattach_count,
            "failures_in_window": len(self._failures),
            "uptime_s": round(now - self.running_since, 1) if self.running_since else None,
            "enable_latency_s": self.enable_latency_s,
            "next_restart_in_s": round(max(0.0, self.next_start_at - now), 2) if self.next_start_at else None,
            "last_exit": self.last_exit.to_json() if self.last_exit else None,
            "gave_up": self.gave_up,
        }

    def _tell(self) -> None:
        if self._on_change is not None:
            self._on_change()

    # -- the supervision loop -------------------------------------------------------------------

    async def _supervise(self, spec: ChildSpec) -> None:
        while True:
            info = await self._run_once(spec)
            # the kernel lets go of a dead child's scheduler a moment after it exits; until then the
            # status would show it as someone else's, and a restart could not attach anyway
            await self._wait_kernel_left(spec)
            self._record_exit(spec, info)
            self._tell()
            now = time.monotonic()
            self._failures.append(now)
            while self._failures and now - self._failures[0] > self.limits.failure_window_s:
                self._failures.popleft()
            if len(self._failures) >= self.limits.max_failures:
                self._give_up(spec, info)
                return
            delay = min(
                self.limits.backoff_initial_s * 2 ** (len(self._failures) - 1), self.limits.backoff_max_s
            )
            self.phase = Phase.BACKOFF
            self.next_start_at = now + delay
            log.warning(
                "restart_scheduled",
                scheduler=spec.scheduler,
                pid=None,
                reason=info.reason,
                delay_s=round(delay, 3),
                failures_in_window=len(self._failures),
            )
            await asyncio.sleep(delay)
            self.next_start_at = None
            self.restart_count += 1
            self.counts.restarts[info.kind] += 1

    def _record_exit(self, spec: ChildSpec, info: ExitInfo) -> None:
        self.last_exit = info
        self.counts.changed()
        if info.kind == exitinfo.EJECTED:
            kind = info.kernel_exit_kind or ""
            self.counts.ejections[kind if _KIND_NAME.match(kind) else "unknown"] += 1
        log.error(
            "scheduler_exited",
            scheduler=spec.scheduler,
            pid=self._last_pid,
            reason=info.reason,
            exit_kind=info.kind,
            message=info.message,
            returncode=info.returncode,
            signal=info.signal,
            kernel_exit_kind=info.kernel_exit_kind,
            runtime_s=info.runtime_s,
        )
        if self._first is not None and not self._first.done():
            self._first.set_result(info)
        if self._on_exit is not None:
            self._on_exit(info)

    def _give_up(self, spec: ChildSpec, info: ExitInfo) -> None:
        self.phase = Phase.FAILED
        self.gave_up = {
            "at": time.time(),
            "reason": f"{len(self._failures)} failures within {self.limits.failure_window_s:g}s; "
            f"last: {info.kind}: {info.reason}",
            "last_exit": info.to_json(),
        }
        kernel = self.kernel()
        log.critical(
            "supervision_given_up",
            scheduler=spec.scheduler,
            pid=None,
            reason=self.gave_up["reason"],
            kernel_state=kernel.state,
            kernel_ops=kernel.ops,
        )
        if self._on_give_up is not None:
            self._on_give_up(self.gave_up)
        self._tell()

    async def _spawn(self, spec: ChildSpec) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *spec.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group: the stop signal reaches its helpers too
            close_fds=True,
        )

    async def _run_once(self, spec: ChildSpec) -> ExitInfo:
        self.phase = Phase.STARTING
        self.output.clear()
        self.running_since = None
        self._last_pid = None
        started = time.monotonic()
        try:
            proc = await self._spawn(spec)
        except OSError as exc:
            return ExitInfo(exitinfo.SPAWN_FAILED, f"cannot execute {spec.argv[0]}: {exc.strerror or exc}")
        self.proc, self._last_pid = proc, proc.pid
        self._exited = asyncio.create_task(proc.wait())
        log.info(
            "scheduler_starting",
            scheduler=spec.scheduler,
            pid=proc.pid,
            reason="start",
            mode=spec.mode,
            policy=spec.policy,
            argv=list(spec.argv),
            restart_count=self.restart_count,
        )
        reader = asyncio.create_task(self._read_output(proc, spec))
        requested_stop = False
        kernel_ejected = False
        try:
            verified, kernel = await self._verify(proc, spec)
            if not verified:
                if proc.returncode is None:
                    await self._terminate(proc, spec, "verification timed out")
                    await reader
                    return self._verify_failed(proc, spec, kernel, started)
            else:
                self._mark_running(proc, spec, kernel, started)
                kernel_ejected = await self._watch(proc, spec)
            await proc.wait()
        except asyncio.CancelledError:
            requested_stop = True
            await self._stop_on_request(proc, spec, reader, started)
            raise
        finally:
            if not requested_stop:
                self.running_since = None
        await reader
        return exitinfo.classify(
            proc.returncode if proc.returncode is not None else -1,
            requested_stop=False,
            lines=list(self.output),
            runtime_s=time.monotonic() - started,
            kernel_ejected=kernel_ejected,
        )

    def _verify_failed(self, proc: asyncio.subprocess.Process, spec: ChildSpec, kernel: SchedExtStatus,
                       started: float) -> ExitInfo:
        return ExitInfo(
            exitinfo.VERIFY_FAILED,
            f"the kernel did not switch to {spec.ops!r} within {self.limits.verify_timeout_s:g}s "
            f"(state={kernel.state}, ops={kernel.ops})",
            exitinfo.last_words(list(self.output)).get("message", ""),
            proc.returncode,
            runtime_s=time.monotonic() - started,
        )

    def _mark_running(self, proc: asyncio.subprocess.Process, spec: ChildSpec, kernel: SchedExtStatus,
                      started: float) -> None:
        self.enable_latency_s = round(time.monotonic() - started, 3)
        self.running_since = time.monotonic()
        self.counts.changed()
        self.phase = Phase.RUNNING
        log.info(
            "scheduler_enabled",
            scheduler=spec.scheduler,
            pid=proc.pid,
            reason="verified",
            ops=kernel.ops,
            enable_latency_s=self.enable_latency_s,
        )
        if self._first is not None and not self._first.done():
            self._first.set_result(None)
        self._tell()

    async def _stop_on_request(self, proc: asyncio.subprocess.Process, spec: ChildSpec,
                               reader: asyncio.Task[None], started: float) -> None:
        """A stop (or switch) cancelled the run: end the child, record why, and wait until the
        kernel no longer runs it, so that the next scheduler can attach."""
        self.phase = Phase.STOPPING
        await self._terminate(proc, spec, self._stop_reason)
        await reader
        info = exitinfo.classify(
            proc.returncode or 0,
            requested_stop=True,
            lines=list(self.output),
            runtime_s=time.monotonic() - started,
        )
        self.last_exit = info
        log.info(
            "scheduler_stopped",
            scheduler=spec.scheduler,
            pid=proc.pid,
            reason=self._stop_reason,
            exit_kind=info.kind,
            returncode=proc.returncode,
        )
        await self._wait_kernel_left(spec)
        self.running_since = None

    async def _verify(self, proc: asyncio.subprocess.Process, spec: ChildSpec) -> tuple[bool, SchedExtStatus]:
        """Poll sysfs until the kernel runs spec.ops, the child exits, or the timeout passes."""
        deadline = time.monotonic() + self.limits.verify_timeout_s
        while True:
            kernel = self.kernel()
            if kernel.enabled and ops_matches(kernel.ops, spec.ops) and proc.returncode is None:
                return True, kernel
            if proc.returncode is not None or time.monotonic() >= deadline:
                return False, kernel
            await self._exit_within(_VERIFY_POLL_S)

    async def _watch(self, proc: asyncio.subprocess.Process, spec: ChildSpec) -> bool:
        """Wait for the child to exit; True when the kernel dropped our scheduler while it still ran."""
        interval = self.limits.monitor_interval_s
        grace = max(3 * interval, 3.0)  # let the child report an ejection itself first
        lost_since: float | None = None
        while proc.returncode is None:
            if await self._exit_within(interval):
                break
            kernel = self.kernel()
            if kernel.enabled and ops_matches(kernel.ops, spec.ops):
                if lost_since is not None:
                    lost_since = None
                    self._tell()  # back (a re-attach)
                continue
            now = time.monotonic()
            if lost_since is None:
                self._tell()  # dropped by the kernel: ejected, or re-attaching
            lost_since = lost_since or now
            # a child re-attaching on the kernel's request gets the time a fresh start gets to switch
            if now - self._reattach_at < grace + self.limits.verify_timeout_s:
                continue
            if now - lost_since >= grace:
                reason = f"kernel no longer runs {spec.ops!r} (state={kernel.state}, ops={kernel.ops})"
                log.error("scheduler_ejected", scheduler=spec.scheduler, pid=proc.pid, reason=reason)
                await self._terminate(proc, spec, "ejected but still running")
                return True
        return False

    async def _terminate(self, proc: asyncio.subprocess.Process, spec: ChildSpec, reason: str) -> None:
        """Stop signal to the child's process group, SIGKILL after stop_timeout_s."""
        if proc.returncode is not None:
            return
        sig = signal.Signals(spec.stop_signal)
        log.info(
            "scheduler_stop_signal", scheduler=spec.scheduler, pid=proc.pid, reason=reason, signal=sig.name
        )
        self._signal_group(proc, sig)
        if not await self._exit_within(self.limits.stop_timeout_s):
            log.warning(
                "scheduler_kill",
                scheduler=spec.scheduler,
                pid=proc.pid,
                reason=f"still running {self.limits.stop_timeout_s:g}s after {sig.name}",
                signal="SIGKILL",
            )
            self._signal_group(proc, signal.SIGKILL)
            await proc.wait()

    async def _exit_within(self, timeout: float) -> bool:
        """True when the current child has exited, waiting at most `timeout` (one wait task per child)."""
        assert self._exited is not None
        done, _ = await asyncio.wait({self._exited}, timeout=timeout)
        return bool(done)

    @staticmethod
    def _signal_group(proc: asyncio.subprocess.Process, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)

    async def _wait_kernel_left(self, spec: ChildSpec, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        kernel = self.kernel()
        while kernel.enabled and ops_matches(kernel.ops, spec.ops) and time.monotonic() < deadline:
            await asyncio.sleep(_VERIFY_POLL_S)
            kernel = self.kernel()
        log.info(
            "scheduler_disabled",
            scheduler=spec.scheduler,
            pid=None,
            reason="child stopped",
            kernel_state=kernel.state,
            kernel_ops=kernel.ops,
        )

    def _note_reattach(self, spec: ChildSpec, proc: asyncio.subprocess.Process, line: str) -> None:
        try:
            reason = json.loads(line).get("reason", "")
        except ValueError:
            return
        self.reattach_count += 1
        self._reattach_at = time.monotonic()
        log.info("scheduler_reattaching", scheduler=spec.scheduler, pid=proc.pid, reason=reason,
                 reattach_count=self.reattach_count)

    async def _read_output(self, proc: asyncio.subprocess.Process, spec: ChildSpec) -> None:
        """Keep the child's last lines (the exit reason is on the last one); read in chunks: no line limit."""
        assert proc.stdout is not None
        pending = b""
        while True:
            chunk = await proc.stdout.read(65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > 8192:
                lines.append(pending[:8192])
                pending = b""
            for raw in lines:
                line = raw.decode("utf-8", "replace").rstrip()
                self.output.append(line)
                if REATTACH_EVENT in line:
                    self._note_reattach(spec, proc, line)
                log.debug("scheduler_output", scheduler=spec.scheduler, pid=proc.pid, line=line)
        if pending:
            self.output.append(pending.decode("utf-8", "replace").rstrip())
