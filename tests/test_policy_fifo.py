"""The built-in "fifo" policy: arrival order, no preemption, default slice, pinned CPU kept."""

from __future__ import annotations

from scxctl.pyland.policies.emulate import EmulatedTask, enqueue
from scxctl.pyland.policies.fifo import FifoPolicy
from scxctl.pyland.policies.loader import check_decision
from scxctl.pyland.policy import NICE0_WEIGHT, PYLAND_CPU_ANY, Decision, PolicyOptions, Task

OPTS = PolicyOptions(nr_cpus=2)


def test_deadlines_follow_arrival_order_whatever_the_task() -> None:
    policy = FifoPolicy(OPTS)
    tasks = [EmulatedTask(10), EmulatedTask(20, weight=10000), EmulatedTask(30, weight=1)]
    tasks[0].ran(0, 50_000_000)  # a hog does not move back in FIFO
    order = [(t.pid, enqueue(policy, t, wakeup=i % 2 == 0).deadline) for i, t in enumerate(tasks * 3)]
    deadlines = [dl for _, dl in order]
    assert deadlines == sorted(deadlines)
    assert len(set(deadlines)) == len(deadlines)
    assert [pid for pid, _ in order] == [10, 20, 30] * 3
    assert policy.stats() == {"decisions": 9}


def test_no_preempt_default_slice_vtime_echoed() -> None:
    policy = FifoPolicy(OPTS)
    task = Task(pid=5, cpu=1, nr_cpus_allowed=2, flags=1, vtime=123_456, enq_cnt=77)
    d = Decision()
    policy.decide(task, d)
    assert (d.pid, d.preempt, d.slice_ns, d.vtime, d.enq_cnt) == (5, False, 0, 123_456, 77)
    assert d.cpu == PYLAND_CPU_ANY
    assert check_decision(task, d, OPTS) is None


def test_pinned_task_keeps_its_cpu() -> None:
    policy = FifoPolicy(OPTS)
    assert enqueue(policy, EmulatedTask(1, cpu=1, nr_cpus_allowed=1), wakeup=True).cpu == 1
    assert enqueue(policy, EmulatedTask(2, cpu=1, nr_cpus_allowed=2), wakeup=True).cpu == PYLAND_CPU_ANY


def test_steer_mode_orders_every_task_by_arrival_with_one_weight() -> None:
    classes = FifoPolicy(PolicyOptions(nr_cpus=2)).class_params()
    assert list(classes) == [0]
    assert (classes[0].fifo, classes[0].weight, classes[0].sync) == (True, NICE0_WEIGHT, False)
