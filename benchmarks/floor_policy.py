"""The cheapest valid policy, shared by the loop and policy benchmarks: what they measure with it is
the mechanism's cost (filling the Task, the call, packing the decision), apart from any policy's."""

from __future__ import annotations

from scxctl.pyland.policy import PYLAND_CPU_ANY, Decision, Policy, Task


class EchoPolicy(Policy):
    name = "echo"

    def decide(self, task: Task, decision: Decision) -> None:
        decision.pid = task.pid
        decision.cpu = PYLAND_CPU_ANY
        decision.preempt = False
        decision.direct_wake = False
        decision.slice_ns = 0
        decision.deadline = task.enq_cnt  # arrival order: the DSQ gets a real key
        decision.vtime = task.vtime
        decision.enq_cnt = task.enq_cnt
