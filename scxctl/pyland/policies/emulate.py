"""The BPF core's per-task bookkeeping, emulated, so that a policy can be driven without a kernel.

Tests, the policy benchmark and users trying a policy file need realistic record streams: a
Task whose vtime is what the policy returned last time, whose enq_cnt grows per enqueue, whose
exec_runtime restarts at each wake-up, whose start_ts/stop_ts frame the last run and whose run_ns
sums the runs since the previous record. This module
keeps that state exactly as bpf/pyland.h documents it; it is not used by the real scheduler loop.
"""

from __future__ import annotations

from scxctl.pyland.policy import NICE0_WEIGHT, SCX_ENQ_WAKEUP, Decision, Policy, Task


class EmulatedTask:
    """What the BPF task storage holds for one task, and the record it would queue."""

    __slots__ = (
        "cgroup_id",
        "comm",
        "cpu",
        "enq_cnt",
        "exec_runtime",
        "nr_cpus_allowed",
        "pid",
        "run_ns",
        "start_ts",
        "stop_ts",
        "throttled",
        "vtime",
        "weight",
    )

    def __init__(
        self,
        pid: int,
        *,
        cpu: int = 0,
        nr_cpus_allowed: int = 2,
        weight: int = NICE0_WEIGHT,
        comm: bytes = b"",
        cgroup_id: int = 0,
    ) -> None:
        self.pid = pid
        self.cgroup_id = cgroup_id
        self.throttled = 0  # set by a test: held aside for cpu.max before this enqueue
        self.cpu = cpu
        self.nr_cpus_allowed = nr_cpus_allowed
        self.weight = weight
        self.comm = comm.ljust(16, b"\0")[:16]
        self.vtime = 0
        self.enq_cnt = 0
        self.exec_runtime = 0
        self.run_ns = 0
        self.start_ts = 0
        self.stop_ts = 0

    def ran(self, start_ns: int, stop_ns: int, cpu: int | None = None) -> None:
        """ops.running/ops.stopping: one run segment [start_ns, stop_ns)."""
        self.start_ts = start_ns
        self.stop_ts = stop_ns
        self.exec_runtime += stop_ns - start_ns
        self.run_ns += stop_ns - start_ns
        if cpu is not None:
            self.cpu = cpu

    def fill(self, task: Task, flags: int) -> None:
        """Queue a record (a new generation) into the caller's reusable Task."""
        if flags & SCX_ENQ_WAKEUP:
            self.exec_runtime = 0  # ops.runnable: the task slept, its burst starts again
        self.enq_cnt += 1
        task.pid = self.pid
        task.cpu = self.cpu
        task.nr_cpus_allowed = self.nr_cpus_allowed
        task.flags = flags
        task.start_ts = self.start_ts
        task.stop_ts = self.stop_ts
        task.exec_runtime = self.exec_runtime
        task.weight = self.weight
        task.placed = 0  # the emulation places nothing itself
        task.vtime = self.vtime
        task.enq_cnt = self.enq_cnt
        task.comm = self.comm
        task.cgroup_id = self.cgroup_id
        task.throttled = self.throttled
        self.throttled = 0  # told once, as the BPF core does
        task.run_ns = self.run_ns
        self.run_ns = 0

    def apply(self, decision: Decision) -> None:
        """The BPF side of a decision: store the vtime that comes back in the next record."""
        if decision.enq_cnt == self.enq_cnt:  # a stale generation is dropped, as in BPF
            self.vtime = decision.vtime


def enqueue(
    policy: Policy,
    etask: EmulatedTask,
    *,
    wakeup: bool,
    task: Task | None = None,
    decision: Decision | None = None,
) -> Decision:
    """One enqueue round trip through `policy`; returns the decision (the one given, if any)."""
    task = task if task is not None else Task()
    decision = decision if decision is not None else Decision()
    etask.fill(task, SCX_ENQ_WAKEUP if wakeup else 0)
    policy.decide(task, decision)
    etask.apply(decision)
    return decision
