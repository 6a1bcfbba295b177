"""The policy watchdog on the host: a real thread against a policy loop that never returns.

The loop and the BPF side share `policy_since`; here a plain list stands in for the shared counters,
which is all the watchdog reads. The VM test (test_pyland_safety_vm.py) runs the same path attached.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from scxctl.pyland import watchdog
from scxctl.pyland.records import POLICY_SINCE, SHARED_COUNTERS
from scxctl.pyland.scheduler import SCX_ECODE_ACT_RESTART, restart_requested
from scxctl.pyland.shared import ExitInfo
from scxctl.pyland.watchdog import PolicyStuck, PolicyWatchdog, policy_frame

ROOT = Path(__file__).resolve().parent.parent
BUDGET_NS = 50_000_000


def counters() -> list[int]:
    return [0] * len(SHARED_COUNTERS)


SPINNER = """\
import time


def spin(end):
    while time.monotonic() < end:  # line 5: where the report must point
        pass


class Spinner:
    def decide(self, c, index):
        c[index] = time.monotonic_ns()
        spin(time.monotonic() + 5)
        raise AssertionError("the watchdog did not interrupt a policy stuck for 5 s")
"""


def test_a_stuck_policy_is_detached_and_interrupted_with_its_location(tmp_path: Path) -> None:
    path = tmp_path / "spinner_policy.py"
    path.write_text(SPINNER)
    namespace: dict[str, object] = {}
    exec(compile(SPINNER, str(path), "exec"), namespace)
    policy = namespace["Spinner"]()  # type: ignore[operator]
    c = counters()
    detached: list[float] = []
    wd = PolicyWatchdog(c, BUDGET_NS, "spinner", str(path), lambda: detached.append(time.monotonic()))
    wd.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(PolicyStuck):
            policy.decide(c, POLICY_SINCE)
    finally:
        wd.stop()
    elapsed = time.monotonic() - t0
    assert len(detached) == 1 and detached[0] - t0 < 0.5
    assert wd.report is not None
    want = "policy spinner did not return from decide() within 50 ms (spinner_policy.py:5)"
    assert wd.report.message == want
    assert BUDGET_NS <= wd.report.overrun_ns < BUDGET_NS + 200_000_000
    assert elapsed < 1.0


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "the watchdog thread never looked"
        time.sleep(0.005)


def test_a_policy_within_its_budget_is_left_alone() -> None:
    c = counters()
    detached: list[int] = []
    wd = PolicyWatchdog(c, BUDGET_NS, "quick", __file__, lambda: detached.append(1))
    wd.start()
    for _ in range(20):  # 20 batches of 10 ms each: never one past the budget
        c[POLICY_SINCE] = time.monotonic_ns()
        time.sleep(0.01)
        c[POLICY_SINCE] = 0
    looked = wd.looks
    wait_for(lambda: wd.looks >= looked + 2)  # two looks at an idle loop: policy_since is 0
    wd.stop()
    assert detached == [] and wd.report is None


def test_a_stamp_already_old_when_first_seen_counts_one_period_of_its_age() -> None:
    """Both threads off-CPU for seconds (a CPU going offline): the stamp the watchdog then finds is
    old, but the policy did not run all that time. It is charged one period of it, no more."""
    budget_ns = 200_000_000  # period 50 ms: room for a loaded host's late wake-ups
    c = counters()
    detached: list[float] = []
    wd = PolicyWatchdog(c, budget_ns, "late", __file__, lambda: detached.append(time.monotonic()))
    c[POLICY_SINCE] = time.monotonic_ns() - 2_000_000_000
    wd.start()
    wait_for(lambda: wd.looks >= 1)  # the first look: one period (50 ms) of the stamp's age counted
    c[POLICY_SINCE] = 0
    looked = wd.looks
    wait_for(lambda: wd.looks >= looked + 2)
    assert detached == [] and wd.report is None
    # the same kind of stamp, never cleared: a stuck policy, caught one budget after the first look
    t0 = time.monotonic()
    c[POLICY_SINCE] = time.monotonic_ns() - 2_000_000_000
    try:
        with pytest.raises(PolicyStuck):  # the watchdog interrupts this thread, the "policy"
            while time.monotonic() < t0 + 2.0:
                pass
    finally:
        wd.stop()
    assert len(detached) == 1 and 0.1 <= detached[0] - t0 < 1.0
    assert wd.report is not None and wd.report.overrun_ns > 2_000_000_000


def test_a_look_the_watchdog_itself_was_late_for_counts_one_period(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watchdog thread held up for 300 ms in the middle of a look (its vCPU frozen, or holding
    the interpreter lock the policy then waits for): the stamp ages 300 ms meanwhile, but the next
    look counts one period of it. Counted: 50 + 50 + 50 ms of a 200 ms budget; the whole age, as
    before, was about 400 ms, a detach."""
    budget_ns = 200_000_000  # period 50 ms
    frozen = threading.Event()
    calls = []

    def held_up(tid: int) -> int:
        calls.append(tid)
        if len(calls) == 2:
            frozen.set()
            time.sleep(0.3)
        return 0

    monkeypatch.setattr(watchdog, "run_delay_ns", held_up)
    c = counters()
    detached: list[int] = []
    wd = PolicyWatchdog(c, budget_ns, "held", __file__, lambda: detached.append(1))
    c[POLICY_SINCE] = time.monotonic_ns()
    wd.start()
    try:
        frozen.wait(10)
        wait_for(lambda: wd.looks >= 3)  # the look after the hold-up has counted it
        c[POLICY_SINCE] = 0
        looked = wd.looks
        wait_for(lambda: wd.looks >= looked + 2)
    finally:
        wd.stop()
    assert len(calls) >= 3 and detached == [] and wd.report is None, (calls, wd.report)


def test_a_policy_that_swallows_the_interruption_ends_the_process() -> None:
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from scxctl.pyland.records import POLICY_SINCE, SHARED_COUNTERS
        from scxctl.pyland.watchdog import PolicyWatchdog
        c = [0] * len(SHARED_COUNTERS)
        wd = PolicyWatchdog(c, 50_000_000, "greedy", None, lambda: print("detached", flush=True),
                            force_exit_after_s=0.3, exit_code=1)
        wd.start()
        c[POLICY_SINCE] = time.monotonic_ns()
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                while time.monotonic() < end:
                    pass
            except BaseException:
                continue
        print("not interrupted", flush=True)
    """)
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert out.stdout.splitlines() == ["detached"]
    assert "policy greedy did not return from decide() within 50 ms" in out.stderr
    assert "forced exit" in out.stderr
    assert time.monotonic() - t0 < 5


def test_policy_frame_names_the_policy_method_and_the_innermost_policy_line() -> None:
    def helper() -> object:
        return sys._getframe()

    def decide() -> object:
        return helper()

    frame = decide()
    assert isinstance(frame, type(sys._getframe()))
    function, where = policy_frame(frame, __file__)  # type: ignore[arg-type]
    assert where == f"test_pyland_watchdog.py:{helper.__code__.co_firstlineno + 1}"
    assert function == "test_policy_frame_names_the_policy_method_and_the_innermost_policy_line"
    assert policy_frame(None, __file__) == ("decide", "?")


@pytest.mark.parametrize(("kind", "code", "want"), [
    (66, SCX_ECODE_ACT_RESTART | (1 << 32), True),  # UNREG_KERN, hotplug
    (65, SCX_ECODE_ACT_RESTART, True),  # UNREG_BPF
    (66, 1 << 32, False),  # a reason without the restart action
    (1026, SCX_ECODE_ACT_RESTART, False),  # an error is never restarted
    (64, SCX_ECODE_ACT_RESTART, False),  # UNREG: user space detached
])
def test_only_an_unregistration_with_the_restart_action_is_restarted(kind: int, code: int,
                                                                    want: bool) -> None:
    assert restart_requested(ExitInfo(kind, code, "", "")) is want
    assert restart_requested(None) is False
