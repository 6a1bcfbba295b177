"""The built-in "deadline" policy: ordering, weight, sleeper credit cap, vtime bounds, pinning."""

from __future__ import annotations

import random

import pytest

from scxctl.pyland.policies.deadline import (
    BATCH,
    BOOST_BUDGET_DIVISOR,
    BURST_CAP_BUDGETS,
    BURST_SLOTS,
    INTERACTIVE,
    MIXED,
    DeadlinePolicy,
)
from scxctl.pyland.policies.emulate import EmulatedTask, enqueue
from scxctl.pyland.policies.loader import check_decision
from scxctl.pyland.policy import (
    NSEC_PER_MSEC,
    NSEC_PER_USEC,
    PYLAND_CPU_ANY,
    SCX_ENQ_WAKEUP,
    Decision,
    Params,
    PolicyOptions,
    Task,
)
from scxctl.pyland.records import REC_ENQUEUE, REC_REPORT

MS = NSEC_PER_MSEC
US = NSEC_PER_USEC
OPTS = PolicyOptions(nr_cpus=4)


def run_hog(policy: DeadlinePolicy, hog: EmulatedTask, start: int, ms: int) -> tuple[int, Decision]:
    """`ms` back-to-back 1 ms slices of a CPU hog (preempted, never sleeping)."""
    d = Decision()
    now = start
    for _ in range(ms):
        hog.ran(now, now + MS)
        now += MS
        d = enqueue(policy, hog, wakeup=False)
    return now, d


def run_waker(policy: DeadlinePolicy, waker: EmulatedTask, start: int, cycles: int, burst: int) -> int:
    """`cycles` wake-ups of a task that runs `burst` ns then sleeps 9.9 ms."""
    now = start
    for _ in range(cycles):
        enqueue(policy, waker, wakeup=True)
        waker.ran(now, now + burst)
        now += 10 * MS
    return now


def test_short_burst_waker_gets_earlier_deadline_and_preempt_than_hog() -> None:
    policy = DeadlinePolicy(OPTS)
    hog, waker = EmulatedTask(100), EmulatedTask(200)
    now, _ = run_hog(policy, hog, 0, 50)
    run_waker(policy, waker, 0, 5, 100 * US)
    now, hog_d = run_hog(policy, hog, now, 5)
    waker_d = enqueue(policy, waker, wakeup=True)

    assert waker_d.deadline < hog_d.deadline
    assert waker_d.preempt is True
    assert hog_d.preempt is False
    # the hog's deadline carries its burst penalty; the waker's only its 100 us average burst
    assert hog_d.deadline - hog_d.vtime >= 50 * MS
    assert waker_d.deadline - waker_d.vtime == 100 * US


def test_long_burst_waker_is_not_boosted() -> None:
    policy = DeadlinePolicy(OPTS)
    slow = EmulatedTask(300)
    now = 0
    for _ in range(4):  # wake, run 10 ms in 1 ms slices, sleep
        enqueue(policy, slow, wakeup=True)
        now, _ = run_hog(policy, slow, now, 9)
        slow.ran(now, now + MS)
        now += MS
    d = enqueue(policy, slow, wakeup=True)
    assert d.preempt is False
    assert d.deadline - d.vtime == 10 * MS  # the completed 10 ms burst, not the fresh exec_runtime 0
    assert policy.stats()["boosted"] == 1  # only its very first wake-up, before any history


def test_wake_up_boost_threshold_is_a_quarter_budget() -> None:
    policy = DeadlinePolicy(OPTS)
    bound = OPTS.slice_ns // BOOST_BUDGET_DIVISOR
    assert bound == 5 * MS
    short, longer = EmulatedTask(1), EmulatedTask(2)
    run_waker(policy, short, 0, 8, bound)
    run_waker(policy, longer, 0, 8, bound + 50 * US)
    assert enqueue(policy, short, wakeup=True).preempt is True
    assert enqueue(policy, longer, wakeup=True).preempt is False
    assert enqueue(policy, short, wakeup=False).preempt is False  # no boost without a wake-up


def test_boosted_slice_covers_twice_the_burst_within_bpf_slice_and_budget() -> None:
    policy = DeadlinePolicy(OPTS)
    tiny, mid, hog = EmulatedTask(1), EmulatedTask(2), EmulatedTask(3)
    run_waker(policy, tiny, 0, 8, 100 * US)
    run_waker(policy, mid, 0, 8, 3 * MS)
    assert enqueue(policy, tiny, wakeup=True).slice_ns == OPTS.min_slice_ns  # 2 x 100 us < 1 ms
    assert enqueue(policy, mid, wakeup=True).slice_ns == 6 * MS
    _, d = run_hog(policy, hog, 0, 30)
    assert d.slice_ns == OPTS.min_slice_ns  # not boosted: the BPF slice


def test_weight_scales_vruntime_deadline_and_slice() -> None:
    policy = DeadlinePolicy(OPTS)
    light, heavy = EmulatedTask(1, weight=100), EmulatedTask(2, weight=400)
    now = 0
    for _ in range(20):
        light.ran(now, now + MS)
        heavy.ran(now + MS, now + 2 * MS)
        now += 2 * MS
        dl = enqueue(policy, light, wakeup=False)
        dh = enqueue(policy, heavy, wakeup=False)
    # same CPU time: the heavy task's vruntime advanced 100/400 as much
    assert dl.vtime == 20 * MS
    assert dh.vtime == 20 * MS // 4
    # same exec_runtime (20 ms): the burst penalty is scaled by 100/weight too
    assert dl.deadline - dl.vtime == 20 * MS
    assert dh.deadline - dh.vtime == 20 * MS // 4
    # slice: BPF slice * weight / 100, within [BPF slice, budget]
    assert dl.slice_ns == OPTS.min_slice_ns
    assert dh.slice_ns == 4 * OPTS.min_slice_ns
    top, low = EmulatedTask(3, weight=10000), EmulatedTask(4, weight=1)
    assert enqueue(policy, top, wakeup=True).slice_ns == OPTS.slice_ns
    assert enqueue(policy, low, wakeup=True).slice_ns == OPTS.min_slice_ns


def test_burst_penalty_is_capped() -> None:
    policy = DeadlinePolicy(OPTS)
    hog = EmulatedTask(1)
    _, d = run_hog(policy, hog, 0, 300)
    assert hog.exec_runtime == 300 * MS
    assert d.deadline - d.vtime == BURST_CAP_BUDGETS * OPTS.slice_ns


def test_sleeper_credit_is_capped_at_one_budget() -> None:
    policy = DeadlinePolicy(OPTS)
    hog = EmulatedTask(1)
    _, d = run_hog(policy, hog, 0, 200)
    run_hog(policy, hog, 200 * MS, 1)
    # the hog's vtime before its last segment, plus the clock's share of that 1 ms segment
    global_v = policy.stats()["vtime_now"]
    assert d.vtime == 200 * MS and global_v == d.vtime + MS // OPTS.nr_cpus

    newcomer = enqueue(policy, EmulatedTask(2), wakeup=True)
    assert newcomer.vtime == global_v - OPTS.slice_ns

    sleeper = EmulatedTask(3)
    sleeper.vtime = 10 * MS  # slept for a long time
    assert enqueue(policy, sleeper, wakeup=True).vtime == global_v - OPTS.slice_ns

    napper = EmulatedTask(4)
    napper.vtime = global_v - 5 * MS  # within the cap: keeps its credit
    assert enqueue(policy, napper, wakeup=True).vtime == global_v - 5 * MS
    assert policy.stats()["clamped"] == 2


def test_the_global_vruntime_moves_with_cpu_time_under_a_flood_of_sleepers() -> None:
    """Sleepers placed at the credit cap never raise the most advanced vtime; the clock must still
    move, or a task that wakes often charges its way up past all of them and loses every tie."""
    policy = DeadlinePolicy(OPTS)
    run_hog(policy, EmulatedTask(1), 0, 50)
    probe = EmulatedTask(2)
    sleepers = [EmulatedTask(1000 + i) for i in range(200)]  # each wakes every 50 rounds
    now = 50 * MS
    for rnd in range(300):  # each round 4 sleepers wake and run 1 ms, the probe runs 100 us
        batch = sleepers[4 * rnd % 200:4 * rnd % 200 + 4]
        woken = [enqueue(policy, s, wakeup=True) for s in batch]
        probe_d = enqueue(policy, probe, wakeup=True)
        for s in batch:
            s.ran(now, now + MS)
        probe.ran(now, now + 100 * US)
        now += 5 * MS
    # the probe slept between its runs too: it is not placed behind the sleepers woken with it
    assert probe_d.deadline < min(d.deadline for d in woken), (probe_d, woken)
    # every charged segment moved the clock by its share of the CPUs
    assert policy.stats()["vtime_now"] >= 50 * MS + 250 * 4 * MS // OPTS.nr_cpus


def test_a_task_held_for_cpu_max_gets_no_sleeper_credit_and_no_boost() -> None:
    policy = DeadlinePolicy(OPTS)
    hog = EmulatedTask(1)
    run_hog(policy, hog, 0, 200)
    global_v = policy.stats()["vtime_now"]

    # the same short-burst waker twice: once after a real sleep, once after a hold
    sleeper = EmulatedTask(2)
    run_waker(policy, sleeper, 0, 5, 100 * US)
    sleeper.vtime = global_v - 5 * MS
    slept = enqueue(policy, sleeper, wakeup=True)
    assert slept.preempt and slept.direct_wake and slept.vtime < global_v  # kept its credit

    held = EmulatedTask(3)
    run_waker(policy, held, 0, 5, 100 * US)
    held.vtime = global_v - 5 * MS
    held.throttled = 1
    d = enqueue(policy, held, wakeup=True)
    assert d.preempt is False and d.direct_wake is False
    assert d.vtime >= global_v  # its wait was its quota's: no credit for it
    assert policy.stats()["throttled"] == 1
    # the next wake-up, after a real sleep, is boosted again
    assert enqueue(policy, held, wakeup=True).preempt is True


def test_a_run_segment_is_charged_once() -> None:
    policy = DeadlinePolicy(OPTS)
    t = EmulatedTask(1)
    t.ran(0, 3 * MS)
    first = enqueue(policy, t, wakeup=False).vtime
    second = enqueue(policy, t, wakeup=False).vtime  # re-enqueued without running in between
    assert first == 3 * MS
    assert second == first


def test_a_decision_dropped_as_stale_keeps_its_charge() -> None:
    """The BPF core drops a decision whose task was enqueued again before it arrived; the next
    record then carries the vtime from before that decision. Its run must still count."""
    policy = DeadlinePolicy(OPTS)
    t = EmulatedTask(1)
    t.ran(0, 3 * MS)
    task, dropped = Task(), Decision()
    t.fill(task, 0)
    policy.decide(task, dropped)  # never applied: the task was enqueued again meanwhile
    t.ran(5 * MS, 7 * MS)
    assert enqueue(policy, t, wakeup=False).vtime == dropped.vtime + 2 * MS == 5 * MS


def test_one_bogus_run_cannot_throw_vruntime_far_ahead() -> None:
    policy = DeadlinePolicy(OPTS)
    t = EmulatedTask(1)
    t.ran(0, 10**15)  # 11 days in one segment
    assert enqueue(policy, t, wakeup=False).vtime == 2 * OPTS.slice_ns


def test_runs_placed_without_a_record_are_charged_with_the_next_one() -> None:
    # BPF sends a placed task's record at most once a budget: the runs of the wake-ups in between
    # come with the next record (run_ns), not only its last segment
    policy = DeadlinePolicy(OPTS)
    t = EmulatedTask(1)
    t.ran(0, MS)
    v0 = enqueue(policy, t, wakeup=True).vtime
    for i in range(1, 5):  # four granted wake-ups, each run 1 ms, no record
        t.ran(10 * i * MS, 10 * i * MS + MS)
    assert enqueue(policy, t, wakeup=True).vtime == v0 + 4 * MS
    # a record without a run since the last one charges nothing (enqueued again, e.g. a requeue)
    assert enqueue(policy, t, wakeup=False).vtime == v0 + 4 * MS


def test_vtime_is_monotonic_and_bounded_on_a_random_stream() -> None:
    rng = random.Random(4)
    policy = DeadlinePolicy(OPTS)
    tasks = [EmulatedTask(pid, weight=rng.choice((1, 50, 100, 400, 10000))) for pid in range(1, 40)]
    task, d = Task(), Decision()
    now = 0
    last_global = 0
    for _ in range(20000):
        et = rng.choice(tasks)
        seg = rng.choice((0, 10 * US, 500 * US, MS, 7 * MS, 30 * MS))
        et.ran(now, now + seg)
        now += seg + rng.randrange(0, 2 * MS)
        before_v = et.vtime
        enqueue(policy, et, wakeup=rng.random() < 0.5, task=task, decision=d)
        g = policy.stats()["vtime_now"]
        assert g >= last_global  # the global vruntime only moves forward
        last_global = g
        assert d.vtime >= before_v  # a task's vruntime never goes back
        assert d.vtime >= g - OPTS.slice_ns  # sleeper credit cap
        assert d.vtime <= max(g, before_v) + 2 * OPTS.slice_ns * 100 // et.weight  # one capped charge
        assert d.deadline >= d.vtime
        assert check_decision(task, d, OPTS) is None
    assert last_global > 0


@pytest.mark.parametrize("nr_cpus_allowed, expected", [(1, 3), (2, PYLAND_CPU_ANY), (4, PYLAND_CPU_ANY)])
def test_pinned_task_keeps_its_cpu(nr_cpus_allowed: int, expected: int) -> None:
    policy = DeadlinePolicy(OPTS)
    t = EmulatedTask(7, cpu=3, nr_cpus_allowed=nr_cpus_allowed)
    assert enqueue(policy, t, wakeup=True).cpu == expected
    assert enqueue(policy, t, wakeup=False).cpu == expected


def test_pid_and_generation_are_echoed() -> None:
    policy = DeadlinePolicy(OPTS)
    task = Task(pid=42, cpu=1, nr_cpus_allowed=4, flags=SCX_ENQ_WAKEUP, enq_cnt=(1 << 40) + 3)
    d = Decision()
    policy.decide(task, d)
    assert (d.pid, d.enq_cnt) == (42, (1 << 40) + 3)


def test_colliding_pids_do_not_inherit_burst_history() -> None:
    policy = DeadlinePolicy(OPTS)
    slow, fast = EmulatedTask(5), EmulatedTask(5 + BURST_SLOTS)  # same table entry
    now = 0
    for _ in range(3):
        enqueue(policy, slow, wakeup=True)
        now, _ = run_hog(policy, slow, now, 10)
    enqueue(policy, slow, wakeup=True)  # slow's history: 10 ms bursts
    fast.ran(now, now + 50 * US)
    d = enqueue(policy, fast, wakeup=True)
    assert d.preempt is True
    assert d.deadline - d.vtime == 50 * US
    assert policy.stats()["burst_slot_takeovers"] == 2


def test_burst_history_smooths_a_change_of_behaviour() -> None:
    policy = DeadlinePolicy(OPTS)
    t = EmulatedTask(9)
    now = 0
    for _ in range(3):  # a 10 ms-burst task...
        enqueue(policy, t, wakeup=True)
        t.ran(now, now + 10 * MS)
        now += 20 * MS
    boosts = []
    for _ in range(6):  # ...that turns into a 100 us-burst one
        boosts.append(enqueue(policy, t, wakeup=True).preempt)
        t.ran(now, now + 100 * US)
        now += 20 * MS
    # boosts[i] is decided after i short bursts (the average halves towards 100 us each time:
    # 10, 5.05, 2.6 ms...): one short burst does not make a hog interactive; two in a row do
    assert boosts == [False, False, True, True, True, True]


# --- steer mode: classification from reports ------------------------------------------------------------


def report(pid: int, run_ms: float, wakeups: int, class_id: int, exec_ms: float = 0,
           min_ms: float = 0) -> Task:
    return Task(pid=pid, kind=REC_REPORT, run_ns=int(run_ms * MS), nr_wakeups=wakeups, class_id=class_id,
                exec_runtime=int(exec_ms * MS), placed=1, min_burst_ns=int(min_ms * MS))


def test_classes_interactive_placed_at_once_batch_decided() -> None:
    classes = DeadlinePolicy(OPTS).class_params()
    assert set(classes) == {INTERACTIVE, BATCH, MIXED}
    assert classes[INTERACTIVE].sync is False and classes[BATCH].sync is True and classes[MIXED].sync is False
    # only a task whose bursts are all long is preempted by a waking task: tasks that wake often
    # would preempt each other, and a mixed task's waker mostly hands it its own CPU a moment later
    assert classes[INTERACTIVE].preemptible is False and classes[MIXED].preemptible is False
    assert classes[BATCH].preemptible is True


def sync_wakeup(pid: int, burst_ms: float, class_id: int) -> Task:
    """The record of a sync wake-up after one burst of `burst_ms` (what observe() sees first)."""
    return Task(pid=pid, kind=REC_ENQUEUE, flags=SCX_ENQ_WAKEUP, run_ns=int(burst_ms * MS), nr_wakeups=1,
                class_id=class_id, min_burst_ns=int(burst_ms * MS), deadline=1)


def classify(policy: DeadlinePolicy, records: list[Task]) -> list[int]:
    """The class BPF has for the task after each record, as observe() moves it."""
    out = []
    cls = records[0].class_id
    for task in records:
        task.class_id = cls
        params = Params()
        if policy.observe(task, params):
            cls = params.class_id
        out.append(cls)
    return out


def test_a_worker_woken_to_reply_is_mixed_a_spinner_woken_to_spin_stays_batch() -> None:
    """A request's worker (woken, a short burst, a short sleep, then 14 ms of work) averages long
    bursts like a task woken for 10 ms of spinning; its short bursts make it mixed, placed by BPF."""
    policy = DeadlinePolicy(OPTS)
    worker = [sync_wakeup(30, 0.1 if i % 2 else 14, BATCH) for i in range(16)]
    # mixed from its first short burst on, though its average dips under the bound now and then
    assert classify(policy, worker) == [BATCH] + [MIXED] * 15
    spinner = [sync_wakeup(31, 10, BATCH) for _ in range(40)]
    assert classify(policy, spinner) == [BATCH] * 40


def test_a_mixed_task_whose_short_bursts_stop_goes_back_to_batch() -> None:
    policy = DeadlinePolicy(OPTS)
    # reports of 100 ms: seven 14 ms requests, the shortest burst 0.1 ms
    assert classify(policy, [report(40, 100, 14, BATCH, min_ms=0.1)] * 3) == [MIXED] * 3
    # then only 10 ms bursts: it stays mixed a few reports, then is batch again
    after = classify(policy, [report(40, 100, 10, MIXED, min_ms=10) for _ in range(12)])
    assert after[0] == MIXED and after[-1] == BATCH
    assert after.index(BATCH) >= 4
    # a report without a burst that ended (min_burst_ns 0) is no short burst
    policy = DeadlinePolicy(OPTS)
    assert classify(policy, [report(41, 100, 0, BATCH, exec_ms=100)] * 4) == [BATCH] * 4


def test_a_hog_becomes_batch_once_and_a_sleeper_stays_interactive() -> None:
    policy = DeadlinePolicy(OPTS)
    boost = OPTS.slice_ns // BOOST_BUDGET_DIVISOR  # 5 ms
    params = Params()
    # 1 ms bursts: 100 ms of CPU over 100 wake-ups
    assert policy.observe(report(10, 100, 100, INTERACTIVE), params) is False
    # a hog: a whole report period without a wake-up, its burst running for 100 ms
    params = Params()
    assert policy.observe(report(11, 100, 0, INTERACTIVE, exec_ms=100), params) is True
    assert (params.class_id, params.own) == (BATCH, False)
    # told once: its next reports carry the batch class
    assert policy.observe(report(11, 100, 0, BATCH, exec_ms=200), Params()) is False
    # bursts just over the bound are batch, just under interactive
    assert policy.observe(report(12, (boost + MS) / MS, 1, INTERACTIVE), Params()) is True
    assert policy.observe(report(13, (boost - MS) / MS, 1, INTERACTIVE), Params()) is False
    assert policy.stats()["reclassified"] == 2


def test_a_batch_task_that_starts_sleeping_goes_back_to_interactive() -> None:
    policy = DeadlinePolicy(OPTS)
    assert policy.observe(report(20, 100, 1, INTERACTIVE), Params()) is True  # 100 ms bursts
    params = Params()
    changed = [policy.observe(report(20, 10, 20, BATCH), params) for _ in range(6)]  # 0.5 ms bursts
    assert changed[0] is False  # the average moves by halves: 50 ms, 25, 12.5, 6.5, 3.5 ...
    assert True in changed and params.class_id == INTERACTIVE


def test_a_batch_wake_up_keeps_bpf_s_deadline() -> None:
    policy = DeadlinePolicy(OPTS)
    d = Decision()
    task = Task(pid=5, cpu=1, nr_cpus_allowed=4, flags=SCX_ENQ_WAKEUP, deadline=123_456, vtime=99, enq_cnt=7)
    policy.decide(task, d)
    assert (d.deadline, d.vtime, d.cpu, d.preempt, d.direct_wake, d.slice_ns) == (
        123_456, 99, PYLAND_CPU_ANY, False, False, 0)
    assert check_decision(task, d, OPTS) is None
    task.nr_cpus_allowed = 1
    policy.decide(task, d)
    assert d.cpu == 1
