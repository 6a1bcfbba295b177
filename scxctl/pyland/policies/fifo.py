"""The "fifo" policy: tasks run in arrival order; a baseline to compare "deadline" against.

Steer mode: one class for every task, ordered by arrival (the global vruntime when it is queued),
one weight for all, no wake-up ever decided here. Round-trip mode: decide() numbers the arrivals.
"""

from __future__ import annotations

from typing import ClassVar

from scxctl.pyland.policy import NICE0_WEIGHT, PYLAND_CPU_ANY, Decision, Params, Policy, PolicyOptions, Task


class FifoPolicy(Policy):
    """Arrival order as the DSQ key, the BPF default slice, never a preemption.

    The task's vtime is echoed unchanged: FIFO keeps no fairness account, so switching back to a
    vruntime policy later starts from what the task had.
    """

    __slots__ = ("_seq",)

    name: ClassVar[str] = "fifo"

    def __init__(self, options: PolicyOptions) -> None:
        super().__init__(options)
        self._seq = 0

    def class_params(self) -> dict[int, Params]:
        return {0: Params(fifo=True, weight=NICE0_WEIGHT)}

    def decide(self, task: Task, decision: Decision) -> None:
        seq = self._seq + 1
        self._seq = seq
        decision.pid = task.pid
        decision.cpu = task.cpu if task.nr_cpus_allowed == 1 else PYLAND_CPU_ANY
        decision.preempt = False
        decision.direct_wake = False
        decision.slice_ns = 0
        decision.deadline = seq
        decision.vtime = task.vtime
        decision.enq_cnt = task.enq_cnt

    def stats(self) -> dict[str, int]:
        return {"decisions": self._seq}
