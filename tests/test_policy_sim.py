"""A one-CPU simulation shaped like schtest adaptive_priority, driven by the real policies.

A slow worker burns 10 ms of CPU per round and sleeps 20 us (its controller's round trip); a fast
worker burns 100 us and sleeps 9.9 ms (plus up to 1 ms of timer slack); both are pinned to CPU 0.
The simulated kernel side follows the BPF core's contract: tasks wait in a DSQ ordered by
Decision.deadline, a running task is re-enqueued when its slice (Decision.slice_ns, 0 -> 1 ms)
ends, and a woken task whose decision has preempt=True takes the CPU at once (the running task
goes back through the policy). Scheduler overhead is not modelled: the test is about the
policy's choices, not its cost.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

import pytest

from scxctl.pyland.policies.emulate import EmulatedTask, enqueue
from scxctl.pyland.policies.loader import load_policy
from scxctl.pyland.policy import Decision, PolicyOptions

US = 1_000
MS = 1_000_000
BPF_DEFAULT_SLICE = 1 * MS
SIM_NS = 2_000 * MS


@dataclass
class Worker:
    et: EmulatedTask
    burst: int
    sleep: int
    left: int = 0  # CPU time left in the current burst
    wake_at: int | None = None  # sleeping until
    woke_at: int | None = None  # runnable since (for the wake latency)
    deadline: int = 0  # the deadline of its latest decision
    slice_ns: int = BPF_DEFAULT_SLICE  # the slice of its latest decision
    latencies: list[int] = field(default_factory=list)
    bursts: int = 0
    jitter: int = 0  # timer slack added to each sleep, so wake-ups fall at every phase of a slice


@dataclass
class Outcome:
    fast: Worker
    slow: Worker
    fast_vs_slow_deadlines: list[tuple[int, int]]  # at each fast wake-up with slow runnable

    @staticmethod
    def p90(values: list[int]) -> int:
        return sorted(values)[int(len(values) * 0.9)]


def simulate(policy_name: str) -> Outcome:
    policy = load_policy(policy_name, PolicyOptions(nr_cpus=1))
    slow = Worker(EmulatedTask(1, nr_cpus_allowed=1, comm=b"slow"), burst=10 * MS, sleep=20 * US)
    fast = Worker(
        EmulatedTask(2, nr_cpus_allowed=1, comm=b"fast"), burst=100 * US, sleep=9_900 * US, jitter=1 * MS
    )
    rng = random.Random(7)
    slow.wake_at, fast.wake_at = 0, 3 * MS
    seq = itertools.count()
    dsq: list[tuple[int, int, Worker]] = []
    running: Worker | None = None
    run_start = slice_end = 0
    compared: list[tuple[int, int]] = []
    now = 0

    def queue(w: Worker, wakeup: bool) -> Decision:
        d = enqueue(policy, w.et, wakeup=wakeup)
        w.deadline = d.deadline
        heapq.heappush(dsq, (d.deadline, next(seq), w))
        w.slice_ns = d.slice_ns or BPF_DEFAULT_SLICE
        return d

    def stop(w: Worker) -> None:
        w.et.ran(run_start, now, cpu=0)

    while now < SIM_NS:
        if running is None and dsq:
            _, _, running = heapq.heappop(dsq)
            run_start, slice_end = now, now + running.slice_ns
            if running.woke_at is not None:
                running.latencies.append(now - running.woke_at)
                running.woke_at = None
        sleepers = [w for w in (slow, fast) if w.wake_at is not None]
        wake_w = min(sleepers, key=lambda w: w.wake_at or 0) if sleepers else None
        events = [wake_w.wake_at] if wake_w is not None and wake_w.wake_at is not None else []
        if running is not None:
            events += [now + running.left, slice_end]
        nxt = min(events)
        if running is not None:
            running.left -= nxt - now
        now = nxt
        if running is not None and running.left == 0:  # burst done: sleep
            stop(running)
            running.bursts += 1
            running.wake_at = now + running.sleep + rng.randrange(running.jitter + 1)
            running = None
        elif running is not None and now == slice_end:  # slice over: back through the policy
            stop(running)
            queue(running, wakeup=False)
            running = None
        elif wake_w is not None and now == wake_w.wake_at:
            w = wake_w
            w.wake_at, w.woke_at, w.left = None, now, w.burst
            d = queue(w, wakeup=True)
            if w is fast and slow.wake_at is None:
                compared.append((d.deadline, slow.deadline))
            if d.preempt and running is not None:
                stop(running)
                queue(running, wakeup=False)
                running = None
    return Outcome(fast, slow, compared)


@pytest.fixture(scope="module")
def deadline_run() -> Outcome:
    return simulate("deadline")


@pytest.fixture(scope="module")
def fifo_run() -> Outcome:
    return simulate("fifo")


def test_the_scenario_has_contention(fifo_run: Outcome) -> None:
    # without a wake-up boost the fast worker waits for the slow one's slice to end
    assert len(fifo_run.fast.latencies) > 150
    assert Outcome.p90(fifo_run.fast.latencies) > 300 * US


def test_fast_worker_deadlines_beat_the_slow_ones(deadline_run: Outcome) -> None:
    pairs = deadline_run.fast_vs_slow_deadlines
    assert len(pairs) > 150
    assert all(fast_dl < slow_dl for fast_dl, slow_dl in pairs)


def test_fast_worker_wakes_at_once_under_deadline(deadline_run: Outcome, fifo_run: Outcome) -> None:
    fast_p90 = Outcome.p90(deadline_run.fast.latencies)
    assert len(deadline_run.fast.latencies) > 150
    assert fast_p90 <= 10 * US
    assert fast_p90 * 20 < Outcome.p90(fifo_run.fast.latencies)


def test_slow_worker_is_not_starved(deadline_run: Outcome) -> None:
    # 2 s of CPU minus the fast worker's 1 %: about 195 rounds of 10 ms
    assert deadline_run.slow.bursts >= 180
    assert deadline_run.fast.bursts >= 175  # one per 9.9-10.9 ms
