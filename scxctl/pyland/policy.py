"""The policy API of pyland: what a scheduling policy sees (Task) and returns (Decision).

The loop calls ``policy.decide(task, decision)`` once per runnable task, on ONE preallocated Task
and ONE Decision that it reuses for every record, so the hot path allocates nothing; a policy must
fill every Decision field and must not keep references to either object. The field order of both
classes mirrors the records of bpf/pyland.h (see docs/policy-api.md for the user documentation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from scxctl.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

PYLAND_CPU_ANY = -1  # Decision.cpu: no CPU chosen, the task goes to the shared DSQ
SCX_ENQ_WAKEUP = 1  # Task.flags: the task was enqueued because it woke up
NICE0_WEIGHT = 100  # Task.weight of a nice-0 task (sched_ext weights run 1..10000)
NSEC_PER_USEC = 1_000
NSEC_PER_MSEC = 1_000_000
# The BPF default/refill slice. Every slice that runs out while another task waits sends its task
# around the Python round trip: with 1 ms, stress-ng --fork's workers (bursts of a few ms under
# TCG) were cut and sent about 80 times a second, and forked at a median 0.92 of the default
# scheduler's rate; with 3 ms, alternated with 1 ms in one boot, at 0.97. Tasks that wake to run
# briefly are not cut by it; a boosted wake-up preempts whatever runs (the wake-up boost).
DEFAULT_MIN_SLICE_NS = 3 * NSEC_PER_MSEC

U64_MAX = (1 << 64) - 1

# Field order of the records (struct pyland_task / pyland_decision): the loop may rely on it to
# fill a Task from an unpacked record; Decision.preempt and Decision.direct_wake stand for the bits of
# the record's flags (PYLAND_DECISION_PREEMPT, PYLAND_DECISION_DIRECT_WAKE).
TASK_FIELDS = (
    "pid",
    "cpu",
    "nr_cpus_allowed",
    "flags",
    "start_ts",
    "stop_ts",
    "exec_runtime",
    "weight",
    "placed",
    "vtime",
    "enq_cnt",
    "comm",
    "cgroup_id",
    "throttled",
    "run_ns",
)
DECISION_FIELDS = ("pid", "cpu", "preempt", "direct_wake", "slice_ns", "deadline", "vtime", "enq_cnt")


class Task:
    """One runnable task as the BPF core queued it (struct pyland_task), reused for every record."""

    __slots__ = TASK_FIELDS

    pid: int  # thread id
    cpu: int  # CPU the task last ran on
    nr_cpus_allowed: int  # 1 = pinned to `cpu`
    flags: int  # SCX enqueue flags (low 32 bits); SCX_ENQ_WAKEUP = 1
    start_ts: int  # ns timestamp: the task last started running
    stop_ts: int  # ns timestamp: the task last stopped running
    exec_runtime: int  # ns of CPU time since the task last slept
    weight: int  # 1..10000, 100 = nice 0
    placed: int  # 1: BPF already placed it (a granted wake-up, a slice cut for the scheduler), 0: it waits
    vtime: int  # the vtime the policy last returned for this task (0 for a new task)
    enq_cnt: int  # generation of this enqueue: echo it in Decision.enq_cnt
    comm: bytes  # 16 bytes, NUL-padded
    cgroup_id: int  # its cgroup (cpu controller): the inode number of its /sys/fs/cgroup directory
    throttled: int  # 1: held aside since its last record because its cgroup ran out of cpu.max quota
    run_ns: int  # ns of CPU time since its previous record (all of it: runs BPF placed without one too)

    def __init__(
        self,
        *,
        pid: int = 0,
        cpu: int = 0,
        nr_cpus_allowed: int = 1,
        flags: int = 0,
        start_ts: int = 0,
        stop_ts: int = 0,
        exec_runtime: int = 0,
        weight: int = NICE0_WEIGHT,
        placed: int = 0,
        vtime: int = 0,
        enq_cnt: int = 0,
        comm: bytes = b"",
        cgroup_id: int = 0,
        throttled: int = 0,
        run_ns: int = 0,
    ) -> None:
        self.pid = pid
        self.cpu = cpu
        self.nr_cpus_allowed = nr_cpus_allowed
        self.flags = flags
        self.start_ts = start_ts
        self.stop_ts = stop_ts
        self.exec_runtime = exec_runtime
        self.weight = weight
        self.placed = placed
        self.vtime = vtime
        self.enq_cnt = enq_cnt
        self.comm = comm
        self.cgroup_id = cgroup_id
        self.throttled = throttled
        self.run_ns = run_ns

    @property
    def comm_text(self) -> str:
        """The command name without NUL padding (allocates: not for the hot path)."""
        return self.comm.split(b"\0", 1)[0].decode(errors="replace")

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name, '<unset>')!r}" for name in self.__slots__)
        return f"Task({fields})"


class Decision:
    """The policy's answer for one task (struct pyland_decision), reused for every record."""

    __slots__ = DECISION_FIELDS

    pid: int  # Task.pid
    cpu: int  # target CPU, or PYLAND_CPU_ANY (-1): shared DSQ, the BPF may pick an idle CPU
    preempt: bool  # kick the target CPU so the task runs now (wake-up boost)
    direct_wake: bool  # grant: BPF places this task's next wake-ups itself, at once (see the docs)
    slice_ns: int  # time slice; 0 = the BPF default slice (3 ms)
    deadline: int  # ordering key in the DSQ: smaller runs first
    vtime: int  # the task's new vruntime, echoed back in its next Task.vtime
    enq_cnt: int  # Task.enq_cnt (a decision for an older generation is dropped)

    def __init__(
        self,
        *,
        pid: int = 0,
        cpu: int = PYLAND_CPU_ANY,
        preempt: bool = False,
        direct_wake: bool = False,
        slice_ns: int = 0,
        deadline: int = 0,
        vtime: int = 0,
        enq_cnt: int = 0,
    ) -> None:
        self.pid = pid
        self.cpu = cpu
        self.preempt = preempt
        self.direct_wake = direct_wake
        self.slice_ns = slice_ns
        self.deadline = deadline
        self.vtime = vtime
        self.enq_cnt = enq_cnt

    @classmethod
    def unset(cls) -> Decision:
        """A Decision with no field set: validation uses it to catch a decide() that skips one."""
        return cls.__new__(cls)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name, '<unset>')!r}" for name in self.__slots__)
        return f"Decision({fields})"


@dataclass(frozen=True, slots=True)
class PolicyOptions:
    """What a policy may tune itself by; the 20 ms budget and the 3 ms BPF slice are separate."""

    nr_cpus: int  # the kernel's nr_cpu_ids: one past the highest possible CPU id (ids may be sparse)
    slice_ns: int = 20 * NSEC_PER_MSEC  # user-space budget: vruntime and deadline scale
    min_slice_ns: int = DEFAULT_MIN_SLICE_NS  # the BPF default/refill slice
    builtin_idle: bool = True

    def __post_init__(self) -> None:
        if self.nr_cpus < 1:
            raise UsageError(f"nr_cpus must be at least 1, not {self.nr_cpus}")
        if self.min_slice_ns < NSEC_PER_USEC:
            raise UsageError(f"the minimum slice must be at least 1 us, not {self.min_slice_ns} ns")
        if self.slice_ns < self.min_slice_ns:
            raise UsageError(
                f"the slice budget ({self.slice_ns} ns) must not be below the minimum slice "
                f"({self.min_slice_ns} ns)"
            )


class Policy:
    """Base class of every policy: built-in ones and the ones loaded with --policy FILE.py."""

    __slots__ = ("options",)  # subclasses without __slots__ get a __dict__ as usual

    name: ClassVar[str] = "policy"

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__  # a subclass never reports its parent's name

    def __init__(self, options: PolicyOptions) -> None:
        self.options = options

    def decide(self, task: Task, decision: Decision) -> None:
        """Fill every field of `decision` for `task`; called once per runnable task."""
        raise NotImplementedError

    def on_batch_end(self, now_ns: int) -> None:
        """Called after each batch of records (optional): periodic work belongs here."""

    def stats(self) -> dict[str, int]:
        """Counters for the periodic summary line (optional)."""
        return {}


def batch_end_hook(policy: Policy) -> Callable[[int], None] | None:
    """The policy's on_batch_end, or None when it does not override it (the loop skips the call)."""
    if type(policy).on_batch_end is Policy.on_batch_end:
        return None
    return policy.on_batch_end

