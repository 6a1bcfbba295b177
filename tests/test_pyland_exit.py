"""How `scxctl run` turns the exit info recorded by ops.exit into a message and an exit code."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scxctl.errors import ExitCode
from scxctl.pyland.loop import LoopStats, PolicyFailed
from scxctl.pyland.records import EXIT_INFO, EXIT_OFFSET, SHARED_SIZE
from scxctl.pyland.scheduler import RunOptions, Scheduler
from scxctl.pyland.shared import SharedState


class _Loop:
    def __init__(self) -> None:
        self.stats = LoopStats(consumed=5, written=5)


def scheduler_with_exit(kind: int, reason: bytes = b"", msg: bytes = b"", *, kernel: bool,
                        stop: str | None) -> tuple[Scheduler, SharedState]:
    buf = bytearray(SHARED_SIZE)
    EXIT_INFO.pack_into(buf, EXIT_OFFSET, kind, 0, reason, msg)
    shared = SharedState(memoryview(buf))
    s = Scheduler(RunOptions())
    s.shared = shared
    s.loop = _Loop()  # type: ignore[assignment]
    s._kernel_exit = kernel
    s._stop.reason = stop
    return s, shared


def test_exit_info_is_decoded() -> None:
    _s, shared = scheduler_with_exit(1026, b"runnable task stall", b"pyland: task 42 stalled for 5s",
                                    kernel=True, stop="kernel")
    info = shared.exit_info()
    assert (info.kind_name, info.reason, info.is_error) == ("ERROR_STALL", "runnable task stall", True)
    assert info.describe() == "ERROR_STALL (runnable task stall) - pyland: task 42 stalled for 5s"


def test_sigterm_then_unreg_is_success() -> None:
    s, shared = scheduler_with_exit(64, b"unregistered from user space", kernel=False, stop="signal SIGTERM")
    r = s._result(shared.exit_info(), None)
    assert r.code == ExitCode.OK
    assert r.message == "pyland stopped (signal SIGTERM): UNREG (unregistered from user space)"


@pytest.mark.parametrize(("kind", "name"), [(1026, "ERROR_STALL"), (1025, "ERROR_BPF"), (67, "SYSRQ"),
                                            (66, "UNREG_KERN")])
def test_kernel_ejection_exits_8(kind: int, name: str) -> None:
    s, shared = scheduler_with_exit(kind, b"why", b"details", kernel=True, stop="kernel")
    r = s._result(shared.exit_info(), None)
    assert r.code == ExitCode.EJECTED == 8
    assert r.message.startswith(f"the kernel ejected pyland: {name} (why) - details")


def test_policy_exception_is_reported_after_detach_with_location() -> None:
    s, shared = scheduler_with_exit(64, b"unregistered from user space", kernel=False, stop=None)
    try:
        raise KeyError("boom")
    except KeyError as exc:
        failure = PolicyFailed("mine", exc)
        failure.__cause__ = exc
    r = s._result(shared.exit_info(), failure)
    assert r.code == ExitCode.FAILURE
    assert r.message.startswith("policy 'mine' raised KeyError: 'boom' (test_pyland_exit.py:")
    assert r.message.endswith("; pyland detached (UNREG (unregistered from user space))")


def test_attach_never_confirmed_is_a_failure() -> None:
    s, shared = scheduler_with_exit(64, kernel=False, stop="attach check: state=disabled ops=None")
    r = s._result(shared.exit_info(), None)
    assert r.code == ExitCode.FAILURE and "never showed it enabled" in r.message


def test_set_up_runs_at_nice_minus_20_and_the_loop_at_its_own_nice() -> None:
    """Loading under the default scheduler beside the load took 30 s at nice 0 in a hotplug restart;
    a loop left at -20 starves normal tasks with --partial. Run in a child: nice is per thread."""
    code = (
        "import os\n"
        "from scxctl.pyland.hardening import SET_UP_NICE, set_up_priority\n"
        "os.setpriority(os.PRIO_PROCESS, 0, 3)\n"
        "with set_up_priority():\n"
        "    inside = os.getpriority(os.PRIO_PROCESS, 0)\n"
        "after = os.getpriority(os.PRIO_PROCESS, 0)\n"
        "assert (inside, after) == (SET_UP_NICE, 3), (inside, after)\n"
    )
    if os.geteuid() != 0:
        pytest.skip("only root may lower a nice value")
    subprocess.run([sys.executable, "-c", code], check=True)
