"""The policy watchdog: a thread that detaches pyland when the policy overruns its budget.

Every task handed to Python waits for the one thread that runs the policy, so a decide() that never
returns (a user's bug) would hold them until the kernel's own watchdog ejects pyland, 5 s later.
The loop stamps the time each call into the policy starts (policy_since in the shared area, 0 when
the batch is done). Attached, this thread sleeps until the BPF heartbeat (every 100 ms) finds a call
half a budget old (policy_alarm.py), so a policy that returns in time costs it no wake-up; it then
reads the stamp every quarter budget until the call ends, and when the call overran the budget it:

1. notes where the main thread is (the innermost frame in the policy's file);
2. detaches pyland, so the kernel's default scheduler takes every task at once;
3. raises PolicyStuck in the main thread, which unwinds the policy and ends the loop;
4. ends the process itself if the main thread does not acknowledge within a grace period (a policy
   that swallows BaseException).

The budget counts the time the policy had the CPU or slept, not the time its thread waited for a
CPU (run_delay in /proc/self/task/TID/schedstat): a loop preempted, or migrated away from a CPU going
offline, is not a stuck policy (under TCG a CPU hotplug kept the loop off-CPU for 400 ms). Nor is
the time this thread itself was held up: each look counts at most one period.

A pure-Python loop hands this thread the interpreter every switch interval (5 ms), so it runs,
provided both threads get a CPU: from the alarm until the call ends, BPF runs the scheduler's
threads before any other task (policy_watched in pyland.bpf.c), or under a heavy load each look
would wait for a report period.
Native code that holds the interpreter lock does not, and neither does a stopped process: the BPF
core's own backstop (check_progress in pyland.bpf.c) stops pyland then.

Woken by an alarm, the thread counts the half budget the heartbeat saw, so a stuck call is detached
about 1.25 budgets after it began, plus up to one heartbeat period (looking all the time, it took
1 to 1.25 budgets). Without an alarm source (the host tests) it reads the stamp every quarter
budget from the start.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable, MutableSequence
from dataclasses import dataclass
from types import FrameType

from scxctl.pyland.policy_alarm import PolicyAlarm
from scxctl.pyland.records import POLICY_SINCE

NSEC_PER_MSEC = 1_000_000
THREAD_STACK = 256 * 1024  # mlockall(MCL_FUTURE) locks the whole stack: not the 8 MiB default
MIN_PERIOD_S = 0.005


class PolicyStuck(BaseException):
    """Raised in the main thread; a BaseException so that a policy's `except Exception` lets it pass."""


@dataclass(frozen=True)
class StuckReport:
    policy: str
    budget_ns: int
    overrun_ns: int  # how long the policy had been running when the watchdog fired
    function: str  # decide or on_batch_end
    where: str  # FILE:LINE

    @property
    def message(self) -> str:
        return (f"policy {self.policy} did not return from {self.function}() within "
                f"{self.budget_ns / NSEC_PER_MSEC:g} ms ({self.where})")


def policy_frame(frame: FrameType | None, policy_file: str | None) -> tuple[str, str]:
    """(function, FILE:LINE) of the policy's code the thread is in, innermost first.

    `function` is the policy method the loop called (the outermost frame in the policy's file);
    FILE:LINE is the innermost frame there, or the innermost frame at all when the policy's file is
    unknown (a policy built from several modules)."""
    innermost = frame
    where: FrameType | None = None
    entry = "decide"
    f = frame
    while f is not None:
        if policy_file and f.f_code.co_filename == policy_file:
            where = where or f
            entry = f.f_code.co_name
        f = f.f_back
    at = where or innermost
    if at is None:
        return entry, "?"
    return entry, f"{os.path.basename(at.f_code.co_filename)}:{at.f_lineno}"


def run_delay_ns(tid: int) -> int | None:
    """Nanoseconds thread `tid` of this process spent runnable but waiting for a CPU, or None when
    the kernel does not say (no CONFIG_SCHED_INFO): the budget is then plain wall time."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _raise_in(thread_id: int, exc: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc))


class PolicyWatchdog:
    """One per attached scheduler; started after attach, stopped before detach."""

    def __init__(
        self,
        counters: MutableSequence[int],
        budget_ns: int,
        policy: str,
        policy_file: str | None,
        detach: Callable[[], None],
        *,
        force_exit_after_s: float = 2.0,
        exit_code: int = 1,
        on_trip: Callable[[StuckReport], None] | None = None,
        alarm: PolicyAlarm | None = None,
    ) -> None:
        self.counters = counters
        self.alarm = alarm  # None: look every period whatever the loop does
        self.budget_ns = budget_ns
        self.policy = policy
        self.policy_file = policy_file
        self.detach = detach
        self.force_exit_after_s = force_exit_after_s
        self.exit_code = exit_code
        self.on_trip = on_trip
        self.report: StuckReport | None = None
        main = threading.main_thread()
        self._main_id = main.ident or 0
        self._main_tid = main.native_id or 0
        self._stop = threading.Event()
        self.looks = 0  # times it has read the stamp: a test waits for looks, not for time
        self.alarms = 0  # alarms the BPF heartbeat woke it with
        self._acknowledged = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.alarm is not None:
            self.alarm.reset()
        old = threading.stack_size(THREAD_STACK)
        try:
            self._thread = threading.Thread(target=self._run, name="pyland-watchdog", daemon=True)
            self._thread.start()
        finally:
            threading.stack_size(old)

    def stop(self) -> None:
        """Stop watching; the main thread calls it once the loop has ended, whatever ended it."""
        self._acknowledged.set()
        self._stop.set()
        if self.alarm is not None:
            self.alarm.wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        period = max(self.budget_ns / 4 / 1e9, MIN_PERIOD_S)
        while True:
            alarmed = 0
            if self.alarm is not None:
                alarmed = self.alarm.wait()  # asleep until a call has run half its budget
                if not alarmed:
                    return  # stop()
                self.alarms += 1
            if self._watch(period, alarmed):
                return

    def _watch(self, period: float, alarmed: int) -> bool:
        """Look at the stamp every period; True once stopped or tripped. Woken by an alarm, the
        look that finds the loop out of the policy returns False: back to sleep."""
        period_ns = int(period * 1e9)
        counters = self.counters
        # the stamp being watched, how much of its age is counted so far, and when this thread
        # last looked at it (with the main thread's run_delay then)
        seen, counted, last, last_delay = 0, 0, 0, 0
        while not self._stop.wait(period):
            since = counters[POLICY_SINCE]
            self.looks += 1
            if not since:
                if alarmed:
                    return False
                continue
            now = time.monotonic_ns()
            delay = run_delay_ns(self._main_tid)
            if since != seen:
                # What the main thread did before this first look is unknown: this thread too may
                # have been off-CPU for long (a CPU going offline stalled both for 300 ms under
                # TCG), so the stamp's age then may be mostly waiting.
                seen, counted = since, min(max(0, now - since), period_ns)
                if since == alarmed:
                    # the heartbeat saw this call half a budget old; the rest is measured here
                    counted = max(counted, self.budget_ns // 2)
            else:
                waited = delay - last_delay if delay is not None else 0
                # A look counts at most one period: what a stamp can age between two timely looks.
                # A late look means this thread was held up itself (a frozen vCPU, holding the
                # interpreter lock the policy then waits for), not that the policy ran all that time.
                counted += max(0, min(now - last - waited, period_ns))
            last, last_delay = now, delay or 0
            if counted > self.budget_ns:
                self._trip(since)
                return True
        return True

    def _trip(self, since: int) -> None:
        function, where = policy_frame(sys._current_frames().get(self._main_id), self.policy_file)
        self.report = StuckReport(self.policy, self.budget_ns, time.monotonic_ns() - since, function, where)
        self.detach()  # first: every task waits for the policy until this returns
        if self.on_trip is not None:
            self.on_trip(self.report)
        _raise_in(self._main_id, PolicyStuck)
        if not self._acknowledged.wait(self.force_exit_after_s):
            sys.stderr.write(f"scxctl: {self.report.message}; the policy did not stop: forced exit\n")
            sys.stderr.flush()
            os._exit(self.exit_code)
