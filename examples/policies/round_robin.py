"""Example pyland policy written from scratch: round robin with a per-task slice by weight.

    scxctl run pyland --policy examples/policies/round_robin.py

Every runnable task goes to the back of the line (deadline = arrival number) with a slice that
grows with its weight, so a nice -10 task runs longer per turn than a nice 0 one. Nothing is
remembered per task: what decide() needs is in the Task record.
"""

from __future__ import annotations

from scxctl.pyland.policy import PYLAND_CPU_ANY, Decision, Policy, PolicyOptions, Task


class RoundRobin(Policy):
    name = "round-robin"

    def __init__(self, options: PolicyOptions) -> None:
        super().__init__(options)
        self.turn = 0
        self.base_slice = options.min_slice_ns  # 1 ms by default
        self.max_slice = options.slice_ns  # 20 ms by default

    def decide(self, task: Task, decision: Decision) -> None:
        self.turn += 1
        slice_ns = self.base_slice
        if task.weight > 100:  # plain ifs: cheaper than min()/max() calls in the hot path
            slice_ns = slice_ns * task.weight // 100
            if slice_ns > self.max_slice:
                slice_ns = self.max_slice
        decision.pid = task.pid
        decision.cpu = task.cpu if task.nr_cpus_allowed == 1 else PYLAND_CPU_ANY
        decision.preempt = False
        decision.direct_wake = False
        decision.slice_ns = slice_ns
        decision.deadline = self.turn
        decision.vtime = task.vtime
        decision.enq_cnt = task.enq_cnt

    def stats(self) -> dict[str, int]:
        return {"turns": self.turn}
