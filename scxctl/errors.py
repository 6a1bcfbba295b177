"""The error type every command raises and the exit codes it maps to.

The codes are part of the CLI contract (documented in docs/reference.md and man/scxctl.1):
scripts branch on them, so never renumber one.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1  # the operation ran and failed (a doctor check failed, a scheduler was ejected, ...)
    USAGE = 2  # bad option or argument (also Typer/Click's own usage errors)
    PERMISSION = 3  # not root, missing capability, or not in the scxctl group
    UNSUPPORTED = 4  # the kernel cannot run sched_ext schedulers
    BUSY = 5  # another sched_ext scheduler is loaded
    DAEMON_UNREACHABLE = 6  # no scxctl daemon answers on the control socket
    BPF = 7  # BPF object missing or stale, libbpf too old, verifier rejection
    EJECTED = 8  # the kernel unloaded our scheduler (stall, error, sysrq)
    INTERRUPTED = 130  # SIGINT


class ScxctlError(Exception):
    """A failure the user can act on: printed as one line, never as a traceback.

    `code` is an ExitCode here; the VM harness's VMError subclass carries its own HarnessCode.
    """

    def __init__(self, message: str, code: IntEnum = ExitCode.FAILURE, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(ScxctlError):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, ExitCode.USAGE, hint)


class PermissionDenied(ScxctlError):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, ExitCode.PERMISSION, hint)
