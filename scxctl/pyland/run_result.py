"""Why a pyland run ended, in the words and exit code `scxctl run` reports.

Kept apart from the scheduler's lifecycle so that the wording and the exit codes, which users and
the daemon act on, are decided in one place from plain facts about the run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from scxctl.errors import ExitCode
from scxctl.pyland.loop import PolicyFailed
from scxctl.pyland.records import EXIT_STALLED
from scxctl.pyland.shared import EXIT_UNREG, ExitInfo
from scxctl.pyland.watchdog import StuckReport


@dataclass
class RunResult:
    exit: ExitInfo | None
    stopped_by: str  # "signal SIGTERM", "kernel", "policy error", "attach check"
    code: ExitCode
    message: str
    loop_stats: dict[str, int]
    bpf_stats: dict[str, int]
    restarts: int = 0


def outcome(info: ExitInfo | None, *, stuck: StuckReport | None, failure: PolicyFailed | None,
            stop_reason: str | None, kernel_exit: bool, loop_stats: dict[str, int],
            bpf_stats: dict[str, int], restarts: int) -> RunResult:
    """The most specific explanation first: the policy's own fault, then the kernel's, then the stop."""

    def result(stopped_by: str, code: ExitCode, message: str) -> RunResult:
        return RunResult(info, stopped_by, code, message, loop_stats, bpf_stats, restarts)

    why = info.describe() if info else "no exit info recorded"
    if stuck is not None:
        return result("policy stuck", ExitCode.FAILURE, f"{stuck.message}; pyland detached ({why})")
    if failure is not None:
        return result("policy error", ExitCode.FAILURE,
                      f"{failure}{_raised_at(failure)}; pyland detached ({why})")
    reason = stop_reason or "?"
    if kernel_exit and info is not None and info.exit_code == EXIT_STALLED:
        return result("kernel", ExitCode.EJECTED,
                      f"pyland's BPF core stopped it: user space made no progress ({why})")
    if kernel_exit and info is not None and info.kind != EXIT_UNREG:
        return result("kernel", ExitCode.EJECTED, f"the kernel ejected pyland: {why}")
    if reason.startswith("attach check"):
        return result("attach check", ExitCode.FAILURE,
                      f"pyland attached but sysfs never showed it enabled ({reason}): {why}")
    code = ExitCode.OK if info is None or info.kind == EXIT_UNREG else ExitCode.EJECTED
    return result(reason, code, f"pyland stopped ({reason}): {why}")


def too_many_restarts(last: RunResult, restarts_in_window: int, window_s: float) -> RunResult:
    """A hotplug storm or a bug: the kernel keeps asking for restarts, so pyland stops asking back."""
    return replace(last, stopped_by="kernel", code=ExitCode.EJECTED,
                   message=f"the kernel asked pyland to restart {restarts_in_window} times within "
                           f"{window_s:g} s; giving up: {last.message}")


def _raised_at(failure: PolicyFailed) -> str:
    """Where in the policy the exception was raised: the innermost frame, as " (file:line)"."""
    cause = failure.__cause__
    where = ""
    tb = cause.__traceback__ if cause else None
    while tb is not None:
        where = f" ({os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno})"
        tb = tb.tb_next
    return where
