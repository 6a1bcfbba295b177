"""Example pyland policy written from scratch: round robin with a per-task slice by weight.

    scxctl run pyland --policy examples/policies/round_robin.py

Every runnable task goes to the back of the line with a slice that grows with its weight, so a
nice -10 task runs longer per turn than a nice 0 one.

Steer mode: the class every task starts in orders by arrival (fifo), with one weight for all;
observe() gives a task heavier than nice 0 its own, longer slice, once, when it first reports.
Round-trip mode (--round-trip): decide() numbers the turns itself.
"""

from __future__ import annotations

from scxctl.pyland.policy import NICE0_WEIGHT, PYLAND_CPU_ANY, Decision, Params, Policy, PolicyOptions, Task


class RoundRobin(Policy):
    name = "round-robin"

    def __init__(self, options: PolicyOptions) -> None:
        super().__init__(options)
        self.turn = 0
        self.base_slice = options.min_slice_ns  # 3 ms by default
        self.max_slice = options.slice_ns  # 20 ms by default
        self.told: set[int] = set()  # pids given their own slice (forgotten at restart: told again)

    def slice_for(self, weight: int) -> int:
        slice_ns = self.base_slice
        if weight > NICE0_WEIGHT:  # plain ifs: cheaper than min()/max() calls in the hot path
            slice_ns = slice_ns * weight // NICE0_WEIGHT
            if slice_ns > self.max_slice:
                slice_ns = self.max_slice
        return slice_ns

    def class_params(self) -> dict[int, Params]:
        return {0: Params(fifo=True, weight=NICE0_WEIGHT)}

    def observe(self, task: Task, params: Params) -> bool:
        if task.weight <= NICE0_WEIGHT or task.pid in self.told:
            return False
        if len(self.told) > 65536:  # bounded: pids of tasks long gone are forgotten
            self.told.clear()
        self.told.add(task.pid)
        params.own = params.fifo = True
        params.weight = NICE0_WEIGHT
        params.slice_ns = self.slice_for(task.weight)
        return True

    def decide(self, task: Task, decision: Decision) -> None:
        self.turn += 1
        decision.pid = task.pid
        decision.cpu = task.cpu if task.nr_cpus_allowed == 1 else PYLAND_CPU_ANY
        decision.preempt = False
        decision.direct_wake = False
        decision.slice_ns = self.slice_for(task.weight)
        decision.deadline = self.turn
        decision.vtime = task.vtime
        decision.enq_cnt = task.enq_cnt

    def stats(self) -> dict[str, int]:
        return {"turns": self.turn, "own_slices": len(self.told)}
