"""The policy watchdog asleep on a real BPF ring buffer until an alarm arrives (the host kernel has
ring buffers; a test program stands in for the heartbeat, which only runs attached).

The VM tests attach pyland: an idle scheduler whose watchdog never wakes, and a stuck policy
detached through the heartbeat's alarm (test_pyland_safety_vm.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from scxctl.bpf.libbpf import BpfObject
from scxctl.bpf.ringbuf import open_reader
from scxctl.pyland.policy_alarm import PolicyAlarm
from scxctl.pyland.records import POLICY_SINCE
from scxctl.pyland.watchdog import PolicyStuck, PolicyWatchdog
from tests.test_pyland_watchdog import counters, wait_for
from tests.test_ringbuf import OBJ, Harness, build_test_objects

BUDGET_NS = 200_000_000  # looks every 50 ms once awake


@pytest.fixture
def ring() -> Iterator[tuple[Harness, PolicyAlarm]]:
    build_test_objects()
    with BpfObject.open(OBJ) as obj:
        obj.load()
        h = Harness(obj)
        alarm = PolicyAlarm(open_reader(h.ring_fd))
        try:
            yield h, alarm
        finally:
            alarm.close()


def alarm_for(h: Harness, since: int) -> None:
    """What the heartbeat submits: a record whose first 8 bytes are the call's stamp."""
    h.produce(1, 16, seq_start=since)


def test_a_stuck_call_is_left_alone_until_its_alarm_then_detached(ring: tuple[Harness, PolicyAlarm]) -> None:
    h, alarm = ring
    c = counters()
    detached: list[float] = []
    wd = PolicyWatchdog(c, BUDGET_NS, "stuck", __file__, lambda: detached.append(time.monotonic()),
                        alarm=alarm)
    wd.start()
    c[POLICY_SINCE] = since = time.monotonic_ns()
    try:
        time.sleep(0.4)  # two budgets: a watchdog that polled would have looked eight times
        assert (wd.looks, wd.alarms, detached) == (0, 0, [])
        t0 = time.monotonic()
        alarm_for(h, since)
        with pytest.raises(PolicyStuck):  # the watchdog interrupts this thread, the "policy"
            while time.monotonic() < t0 + 5.0:
                pass
    finally:
        wd.stop()
    # half the budget counted at the alarm: detached within a few looks of it, not a budget later
    assert wd.alarms == 1 and len(detached) == 1 and 0.1 <= detached[0] - t0 < 1.0
    assert wd.report is not None and wd.report.overrun_ns >= 400_000_000


def test_an_alarm_for_a_call_that_has_ended_puts_the_watchdog_back_to_sleep(
        ring: tuple[Harness, PolicyAlarm]) -> None:
    h, alarm = ring
    c = counters()
    detached: list[int] = []
    wd = PolicyWatchdog(c, BUDGET_NS, "quick", __file__, lambda: detached.append(1), alarm=alarm)
    wd.start()
    try:
        alarm_for(h, time.monotonic_ns() - 150_000_000)  # the call returned since: policy_since 0
        wait_for(lambda: wd.looks >= 1)
        time.sleep(0.3)  # six periods: asleep again after the one look
        assert (wd.alarms, wd.looks, detached) == (1, 1, [])
    finally:
        wd.stop()


def test_stop_wakes_a_sleeping_watchdog_and_a_restart_forgets_old_alarms(
        ring: tuple[Harness, PolicyAlarm]) -> None:
    h, alarm = ring
    c = counters()
    wd = PolicyWatchdog(c, BUDGET_NS, "idle", __file__, lambda: None, alarm=alarm)
    wd.start()
    t0 = time.monotonic()
    wd.stop()
    assert time.monotonic() - t0 < 0.5
    assert not any(t.name == "pyland-watchdog" for t in threading.enumerate())
    # an alarm left from the last attachment, and the stop's own wake-up: the next watchdog
    # (a restart) starts asleep all the same
    alarm_for(h, 12345)
    wd = PolicyWatchdog(c, BUDGET_NS, "idle", __file__, lambda: None, alarm=alarm)
    wd.start()
    try:
        time.sleep(0.2)
        assert (wd.alarms, wd.looks) == (0, 0)
        assert any(t.name == "pyland-watchdog" for t in threading.enumerate())
    finally:
        wd.stop()
