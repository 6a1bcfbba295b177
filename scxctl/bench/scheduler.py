"""The scheduler under test: parse `--scheduler`, start it as a child, watch it, stop it.

Start: refuse when another sched_ext scheduler is loaded (BUSY), start the child in its own session
(so the terminal's Ctrl-C reaches only the bench, which then stops it) with PR_SET_PDEATHSIG so it
also goes if the bench is killed, then poll sysfs every 10 ms until `state == enabled` and `root/ops`
names the expected scheduler. Health: the run is INVALID if the child exits, `state` leaves
`enabled`, `root/ops` changes, or `enable_seq` moves (it was ejected and something re-attached).
Stop: SIGTERM to its process group, SIGKILL after a timeout, then wait for `state` to leave enabled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from scxctl.caps import CAP_BPF, CAP_NAMES, CAP_SYS_ADMIN, CapsError, read_caps
from scxctl.errors import ExitCode, PermissionDenied, ScxctlError, UsageError
from scxctl.log import get_logger
from scxctl.sysfs import SchedExtStatus, SysRoot, ops_matches, read_sched_ext

log = get_logger("scxctl.bench")

PR_SET_PDEATHSIG = 1


def set_pdeathsig(sig: int) -> None:
    """In a child before exec: the kernel sends `sig` when the parent dies (a SIGKILLed bench)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)

POLL_S = 0.010


class SchedulerLeft(ScxctlError):
    """The scheduler under test went away mid-run: the measurements are INVALID."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ExitCode.EJECTED)


@dataclass(frozen=True)
class SchedulerSpec:
    kind: str  # "default" | "pyland" | "external"
    label: str  # the name shown in tables: default, pyland, pyland:POLICY, scx_foo
    command: tuple[str, ...] = ()
    expected_ops: str | None = None
    policy: str | None = None
    partial: bool = False
    args: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.label,
            "kind": self.kind,
            "policy": self.policy,
            "partial_requested": self.partial,
            "command": list(self.command) or None,
            "expected_ops": self.expected_ops,
        }


def parse_scheduler(
    text: str, args: list[str] | None = None, partial: bool = False, ops_name: str | None = None
) -> SchedulerSpec:
    """`default`, `pyland[:POLICY]` or a path to an scx_* binary (ARGS go to the binary only)."""
    text = text.strip()
    args = list(args or [])
    if text == "default":
        if args or partial:
            raise UsageError("--partial and scheduler arguments need a scheduler to start, not 'default'")
        return SchedulerSpec(kind="default", label="default")
    name, _, policy = text.partition(":")
    if name == "pyland":
        cmd = [sys.executable, "-m", "scxctl", "run", "pyland"]
        if policy:
            cmd += ["--policy", policy]
        if partial:
            cmd.append("--partial")
        cmd += args
        return SchedulerSpec(
            kind="pyland",
            label=text,
            command=tuple(cmd),
            expected_ops=ops_name or "pyland",
            policy=policy or None,
            partial=partial,
            args=tuple(args),
        )
    if "/" in text:
        path = Path(text)
        if not path.is_file():
            raise UsageError(f"scheduler binary {text} does not exist")
        if not os.access(path, os.X_OK):
            raise UsageError(f"scheduler binary {text} is not executable")
        base = path.name
        expected = ops_name or (base[4:] if base.startswith("scx_") else base)
        return SchedulerSpec(
            kind="external",
            label=base,
            command=(str(path), *args),
            expected_ops=expected,
            partial=partial,
            args=tuple(args),
        )
    raise UsageError(
        f"unknown scheduler {text!r}",
        hint="use default, pyland[:POLICY] or a path to an scx_* binary (e.g. ./scx_simple)",
    )


def check_can_start(sysroot: SysRoot | None = None) -> None:
    """BUSY / UNSUPPORTED / PERMISSION checks before any scheduler is started."""
    st = read_sched_ext(sysroot)
    if not st.available:
        raise ScxctlError(
            "this kernel has no sched_ext (/sys/kernel/sched_ext is missing)",
            ExitCode.UNSUPPORTED,
            hint="run `scxctl doctor`; use the VM (tools/vm) to test on a sched_ext kernel",
        )
    if st.enabled or st.ops:
        raise ScxctlError(
            f"another sched_ext scheduler is loaded ({st.ops or 'unknown'}, state {st.state})",
            ExitCode.BUSY,
            hint="stop it first; `--scheduler default` measures whatever is loaded",
        )
    try:
        missing = read_caps(sysroot).missing_effective(CAP_BPF, CAP_SYS_ADMIN)
    except (OSError, UnicodeDecodeError, CapsError):
        missing = [] if os.geteuid() == 0 else [CAP_SYS_ADMIN]
    if missing:
        names = ", ".join(CAP_NAMES[c] for c in missing)
        raise PermissionDenied(f"starting a sched_ext scheduler needs {names}", hint="run as root")


class RunningScheduler:
    """A started scheduler (or the default: nothing started) and its health."""

    def __init__(self, spec: SchedulerSpec, sysroot: SysRoot | None = None, start_timeout_s: float = 60.0):
        self.spec = spec
        self.sysroot = sysroot
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.status: SchedExtStatus | None = None  # as seen once enabled (or at start for default)
        self.invalid_reason: str | None = None

    @property
    def partial(self) -> bool:
        """Workloads must opt in with SCHED_EXT: a scheduler of ours runs with switch_all == 0."""
        st = self.status
        return bool(self.proc is not None and st is not None and st.enabled and st.switch_all is False)

    def facts(self) -> dict[str, Any]:
        st = self.status
        return {
            **self.spec.to_json(),
            "pid": self.proc.pid if self.proc else None,
            "ops": st.ops if st else None,
            "switch_all": st.switch_all if st else None,
            "partial": self.partial,
            "enable_seq": st.enable_seq if st else None,
            "sched_ext_state": st.state if st else None,
        }

    def start(self) -> None:
        if self.spec.kind == "default":
            self.status = read_sched_ext(self.sysroot)
            return
        check_can_start(self.sysroot)
        # The kernel shows state `enabled` and the new root/ops a moment before it bumps enable_seq:
        # the value to compare against later is the first one past what was there before we started.
        seq_before = read_sched_ext(self.sysroot).enable_seq
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (outlives this call; closed in stop())
        log.info("starting scheduler", command=" ".join(self.spec.command))
        try:
            self.proc = subprocess.Popen(
                list(self.spec.command),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: set_pdeathsig(signal.SIGTERM),
            )
        except OSError as exc:
            raise ScxctlError(f"cannot start {self.spec.label}: {exc.strerror}") from None
        deadline = time.monotonic() + self.start_timeout_s
        expected = self.spec.expected_ops or ""
        while True:
            st = read_sched_ext(self.sysroot)
            seq_moved = seq_before is None or st.enable_seq != seq_before
            if st.enabled and ops_matches(st.ops, expected) and seq_moved:
                self.status = st
                log.info("scheduler enabled", ops=st.ops, switch_all=st.switch_all, enable_seq=st.enable_seq)
                return
            code = self.proc.poll()
            if code is not None:
                raise ScxctlError(
                    f"{self.spec.label} exited (status {code}) before it was enabled: {self.tail()}"
                )
            if time.monotonic() > deadline:
                what = f"state {st.state}, ops {st.ops or '-'}"
                if st.enabled and st.ops and seq_moved:  # it loaded, under another name
                    what += (f": the ops expected come from the file name (scx_NAME) unless "
                             f"--ops-name says {st.ops!r}")
                raise ScxctlError(
                    f"{self.spec.label} was not enabled as {expected!r} within {self.start_timeout_s:.0f} s "
                    f"({what})"
                )
            time.sleep(POLL_S)

    def check(self) -> None:
        """Raise SchedulerLeft when the scheduler we started is no longer the one running."""
        if self.proc is None or self.status is None:
            return
        reason = self._problem()
        if reason:
            self.invalid_reason = reason
            raise SchedulerLeft(f"{self.spec.label} left mid-run: {reason}")

    def _problem(self) -> str | None:
        assert self.proc is not None and self.status is not None
        code = self.proc.poll()
        if code is not None:
            return f"the scheduler process exited (status {code})"
        st = read_sched_ext(self.sysroot)
        if not st.enabled:
            return f"sched_ext state is {st.state!r}, not enabled (ejected)"
        if st.ops != self.status.ops:
            return f"root/ops changed from {self.status.ops!r} to {st.ops!r}"
        if st.enable_seq != self.status.enable_seq:
            return f"enable_seq moved from {self.status.enable_seq} to {st.enable_seq} (re-attached)"
        return None

    def stop(self, timeout_s: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("scheduler ignored SIGTERM; killing it", pid=proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # the kernel unregisters when the last link closes; wait until it says so
        deadline = time.monotonic() + timeout_s
        while read_sched_ext(self.sysroot).enabled and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if self._log is not None:
            self._log.close()
            self._log = None

    def tail(self, lines: int = 3) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        text = self._log.read().decode(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) or "(no output)"

    def __enter__(self) -> RunningScheduler:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
