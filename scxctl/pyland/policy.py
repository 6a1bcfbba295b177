"""The policy API of pyland: what a scheduling policy sees (Task) and returns (Params, Decision).

Steer mode (the default for a policy that defines observe() or class_params()): BPF places every
task itself from the parameters the policy set for it or its class, and the loop calls
``policy.observe(task, params)`` with each task's report of what it did; a policy that returns True
has the Params it filled sent to BPF. Tasks whose parameters say `sync`, and every task in
round-trip mode, wait for ``policy.decide(task, decision)`` instead; in steer mode such a record
goes to observe() first, since it carries what the task did since its previous record.

The loop reuses ONE Task, ONE Params and ONE Decision for every record, so the hot path allocates
nothing; a policy must fill every Decision field (and the Params it returns True for) and must not
keep references to them. The field order mirrors the records of bpf/pyland.h (docs/policy-api.md
is the user documentation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from scxctl.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

PYLAND_CPU_ANY = -1  # Decision.cpu: no CPU chosen, the task goes to the shared DSQ; Params.cpu: none
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
    "kind",
    "nr_wakeups",
    "waker",
    "class_id",
    "deadline",
    "sleep_ns",
    "min_burst_ns",
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
    kind: int  # REC_ENQUEUE (0): it waits for decide(); REC_REPORT (1): what it did, for observe()
    nr_wakeups: int  # wake-ups since its previous record
    waker: int  # pid of the task that woke it last; 0: none seen (a timer, an interrupt)
    class_id: int  # its class now (steer mode)
    deadline: int  # steer mode: the deadline BPF placed this enqueue by (never 0); 0 in round-trip mode
    sleep_ns: int  # ns it slept since its previous record
    min_burst_ns: int  # its shortest burst (CPU time from a wake-up to a sleep) ended since then; 0: none

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
        kind: int = 0,
        nr_wakeups: int = 0,
        waker: int = 0,
        class_id: int = 0,
        deadline: int = 0,
        sleep_ns: int = 0,
        min_burst_ns: int = 0,
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
        self.kind = kind
        self.nr_wakeups = nr_wakeups
        self.waker = waker
        self.class_id = class_id
        self.deadline = deadline
        self.sleep_ns = sleep_ns
        self.min_burst_ns = min_burst_ns

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


PARAMS_FIELDS = ("class_id", "own", "slice_ns", "lag_ns", "weight", "cpu", "sync", "fifo", "preemptible")
NR_CLASSES = 64  # Params.class_id: 0..63; class 0 is every task's until the policy says otherwise


class Params:
    """How BPF places a task in steer mode (struct pyland_params, with its class), or a class's.

    All defaults is "nothing special": class 0, the BPF slice, the task's own weight, no offset,
    any CPU, placed by BPF at once. Out-of-range values are clamped by BPF (counted as
    nr_param_clamped) rather than refused.
    """

    __slots__ = PARAMS_FIELDS

    class_id: int  # the task's class (0..63): its class's params apply unless `own`
    own: bool  # the fields below are the task's own, not its class's
    slice_ns: int  # its slice and the request in its deadline (shorter runs sooner); 0: the BPF slice
    lag_ns: int  # added to its deadline: negative runs sooner, positive later (within +-1 s)
    weight: int  # 1..10000 (100 = nice 0); 0: the task's own, from its nice value
    cpu: int  # preferred CPU: an idle one gets its wake-ups first; PYLAND_CPU_ANY (-1): none
    sync: bool  # its wake-ups wait for decide() (a round trip through this loop)
    fifo: bool  # ordered by arrival (the global vruntime when it is queued), not its own vruntime
    preemptible: bool  # a waking task with an earlier deadline may preempt it (a CPU hog, say)

    def __init__(
        self,
        *,
        class_id: int = 0,
        own: bool = False,
        slice_ns: int = 0,
        lag_ns: int = 0,
        weight: int = 0,
        cpu: int = PYLAND_CPU_ANY,
        sync: bool = False,
        fifo: bool = False,
        preemptible: bool = False,
    ) -> None:
        self.class_id = class_id
        self.own = own
        self.slice_ns = slice_ns
        self.lag_ns = lag_ns
        self.weight = weight
        self.cpu = cpu
        self.sync = sync
        self.fifo = fifo
        self.preemptible = preemptible

    def reset(self) -> None:
        """Back to the defaults (the loop does this before each observe())."""
        self.class_id = 0
        self.own = self.sync = self.fifo = self.preemptible = False
        self.slice_ns = self.lag_ns = self.weight = 0
        self.cpu = PYLAND_CPU_ANY

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name, '<unset>')!r}" for name in self.__slots__)
        return f"Params({fields})"


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

    __slots__ = ("_class_updates", "options")  # subclasses without __slots__ get a __dict__ as usual

    name: ClassVar[str] = "policy"

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__  # a subclass never reports its parent's name

    def __init__(self, options: PolicyOptions) -> None:
        self.options = options
        self._class_updates: list[tuple[int, Params]] = []

    @classmethod
    def steers(cls) -> bool:
        """Does this policy use steer mode (it defines observe() or class_params())? A policy that
        only decides runs in round-trip mode: every enqueue waits for decide()."""
        return cls.observe is not Policy.observe or cls.class_params is not Policy.class_params

    def decide(self, task: Task, decision: Decision) -> None:
        """Fill every field of `decision` for `task`: a task waiting for the policy (round-trip
        mode, or a wake-up of a task whose params say sync)."""
        raise NotImplementedError

    def observe(self, task: Task, params: Params) -> bool:
        """Steer mode: `task` reports what it did since its last record (a report, or a sync
        wake-up just before its decide()). Fill `params` (it arrives at the defaults) and return True
        to have them applied to the task; False changes nothing."""
        return False

    def class_params(self) -> dict[int, Params]:
        """Steer mode: the classes this policy defines, sent to BPF whenever pyland attaches."""
        return {}

    def set_class(self, class_id: int, params: Params) -> None:
        """Change a class's parameters at any time (sent after the current batch); every task of
        the class is placed by them from then on."""
        self._class_updates.append((class_id, params))

    def take_class_updates(self) -> list[tuple[int, Params]]:
        """What set_class() queued since the last call (the loop sends it)."""
        out, self._class_updates = self._class_updates, []
        return out

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

