"""The "deadline" policy (default): vruntime + deadline with burst tracking and a wake-up boost.

Steer mode (the default): BPF keeps the vruntime and deadlines, and places every task at once; the
policy only classifies. From each task's records (its reports, and its sync wake-ups) it tracks
the average burst (CPU time between two wake-ups: run_ns / nr_wakeups; for a task that did not
wake at all in a report, at least the burst running now, exec_runtime; one long burst between
wake-ups does not make a hog), and how often a record's shortest burst (min_burst_ns) was short:
- a task whose bursts average within a quarter of the budget is interactive (class 0: placed at
  once, never preempted by a wake-up);
- a longer one that still often runs briefly after a wake-up is mixed (class 2: placed at once,
  and not preempted by a wake-up either). Such a task serves someone: a request's worker that is
  woken to reply, then computes; its partner waits on its wake-ups, and mostly wakes it just
  before blocking itself, so the woken worker takes the waker's CPU a moment later: preempting the
  other worker instead moves both (a reschedule IPI, then the preempted one to another CPU);
- one whose bursts are all long is batch (class 1: its wake-ups wait for decide(), which keeps
  BPF's deadline, and a waking task with an earlier deadline preempts it). A CPU-bound task seldom
  wakes, so its round trips cost little, and the task that shares its CPU with it gets there first.
An interactive task runs before one that woke at the same time, and at once beside a hog. A task
is told only when its class changes (its record carries the class BPF has for it).

Round-trip mode (--round-trip) makes every decision here, as follows.

Derived from scx_rustland's policy, adapted to deciding one task at a time (the BPF core orders
the DSQ by our deadline, so no task pool is kept in Python):

- vruntime: the CPU time since the task's previous record (run_ns: every run segment, also those
  of enqueues BPF placed without a record, capped at two budgets) is charged scaled by 100/weight.
  The vruntime travels in the record round trip (Decision.vtime comes back as Task.vtime), and is
  also kept beside the task's burst history: the BPF core drops a decision whose task was enqueued
  again before it arrived, and its next record then brings back the vruntime from before, without
  the charge. That is the usual fate of a granted wake-up's record (read with the next batch,
  after the task ran, slept and woke again: 8 in 10 of them under stress-ng --fork), so a
  latency-critical task's CPU time went mostly uncharged.
- global vruntime: the most advanced vtime seen on an incoming task (rustland's "min_vruntime"),
  and it also advances by every charge divided by the number of CPUs (nr_cpu_ids:
  the rate a fair share's vruntime moves at when every CPU is busy). It only moves forward.
  Without the second part it stood still under a flood of sleepers: each was placed at the
  credit cap below it and stayed there, while a task that woke often (a pinned 10 ms sleeper)
  charged its way up to it and lost every tie to them, waiting for the BPF core's starvation
  rescue (1 s) in turn.
- sleeper credit cap: a new or long-sleeping task is placed at most one budget (slice_ns, 20 ms)
  behind the global vruntime, so sleeping never buys more than one budget of priority.
- burst tracking: deadline = vtime + min(burst, cap) * 100/weight, where burst is the larger of
  the CPU time since the task last slept and the average of its completed bursts (CPU time between
  two sleeps). Short-burst (interactive) tasks get earlier deadlines than CPU hogs.
- wake-up boost: a task that woke up and whose bursts average at most a quarter of the budget
  gets preempt=True, so it does not wait for a running hog's slice to end (schtest
  adaptive_priority), and direct_wake=True, the grant for BPF to place its next wake-ups itself
  (renewed or withdrawn by the decision for each wake-up; for a wake-up BPF placed, Task.placed is
  1 and only the vtime and the grant of the decision count). The bound is relative to the
  budget, not one BPF slice: on a slow machine (TCG, a loaded VM) a futex ping-pong thread's burst
  exceeds 1 ms, while a CPU hog's stays an order of magnitude longer.
- slice: a boosted task's slice covers twice its average burst (within [BPF slice, budget]), so
  a short burst is not cut at the BPF slice and sent around the Python round trip again.
- cpu.max: a task the BPF core held aside because its cgroup ran out of quota (Task.throttled)
  waited for its quota, not in a sleep: it gets neither sleeper credit (its vruntime is brought up
  to the global one) nor the boost and grant, which would only make it burn the next period's
  quota ahead of everyone at the start of the period.

Burst history needs per-task state that the record does not carry; it lives in a fixed table
indexed by pid (BURST_SLOTS entries, an entry is taken over by another pid on a collision), so
memory stays bounded whatever the number of tasks.
"""

from __future__ import annotations

from typing import ClassVar

from scxctl.pyland.policy import (
    NICE0_WEIGHT,
    PYLAND_CPU_ANY,
    SCX_ENQ_WAKEUP,
    Decision,
    Params,
    Policy,
    PolicyOptions,
    Task,
)

BURST_SLOTS = 8192  # power of two: the table index is pid & _SLOT_MASK
_SLOT_MASK = BURST_SLOTS - 1
BURST_CAP_BUDGETS = 5  # the deadline penalty grows up to 5 budgets (100 ms by default)
CHARGE_CAP_BUDGETS = 2  # one record charges at most 2 budgets (a placed task's come once a budget)
BOOST_BUDGET_DIVISOR = 4  # bursts averaging at most budget / 4 (5 ms by default) are "short"
INTERACTIVE = 0  # steer mode's classes: short bursts, placed by BPF at once
BATCH = 1  # long bursts only: wake-ups decided here
MIXED = 2  # long bursts on average, often a short one: placed by BPF, not preempted
# How often a task's records showed a short burst: each record moves the score a quarter of the way
# to SHORT_FULL (it showed one) or to 0. A short burst in every other record settles at 110-146, in
# every fourth at 40-94; a task becomes mixed at MIXED_ENTER (one short burst from nothing) and
# stays mixed down to MIXED_KEEP (from MIXED_ENTER, four records in a row without one).
SHORT_FULL = 256
MIXED_ENTER = 64
MIXED_KEEP = 24


class _Burst:
    """Burst history of the task that last used this table entry."""

    __slots__ = ("avg", "last_stop", "pid", "run", "short", "vtime")

    def __init__(self) -> None:
        self.pid = -1  # no task: pids are >= 0
        self.last_stop = 0  # stop_ts of the run segment already counted
        self.run = 0  # CPU time since the last wake-up, from the segments counted
        self.avg = -1  # moving average of completed bursts (ns, halved each time); -1: unknown
        self.short = 0  # steer mode: how often its records showed a short burst (0..SHORT_FULL)
        self.vtime = 0  # the vruntime last decided, should that decision never reach the task

    def take(self, pid: int) -> None:
        """The entry now tracks `pid`, a task it knows nothing of."""
        self.pid = pid
        self.last_stop = 0
        self.run = 0
        self.avg = -1
        self.short = 0
        self.vtime = 0


class DeadlinePolicy(Policy):
    """vruntime + deadline, burst tracking, weight, sleeper credit cap, wake-up boost."""

    __slots__ = (
        "_boost_ns",
        "_budget",
        "_burst_cap",
        "_bursts",
        "_charge_cap",
        "_max_slice",
        "_min_slice",
        "_nr_cpus",
        "_vnow",
        "nr_boosted",
        "nr_clamped",
        "nr_reclassified",
        "nr_slot_takeovers",
        "nr_throttled",
    )

    name: ClassVar[str] = "deadline"

    def __init__(self, options: PolicyOptions) -> None:
        super().__init__(options)
        self._budget = options.slice_ns
        self._min_slice = options.min_slice_ns
        self._max_slice = options.slice_ns
        self._burst_cap = BURST_CAP_BUDGETS * options.slice_ns
        self._charge_cap = CHARGE_CAP_BUDGETS * options.slice_ns
        self._boost_ns = max(options.min_slice_ns, options.slice_ns // BOOST_BUDGET_DIVISOR)
        self._bursts = [_Burst() for _ in range(BURST_SLOTS)]
        self._vnow = 0
        self._nr_cpus = options.nr_cpus
        self.nr_boosted = 0
        self.nr_clamped = 0
        self.nr_reclassified = 0
        self.nr_slot_takeovers = 0
        self.nr_throttled = 0

    def _entry(self, pid: int) -> _Burst:
        b = self._bursts[pid & _SLOT_MASK]
        if b.pid != pid:
            b.take(pid)
            self.nr_slot_takeovers += 1
        return b

    def class_params(self) -> dict[int, Params]:
        return {
            INTERACTIVE: Params(),
            BATCH: Params(sync=True, preemptible=True),
            MIXED: Params(),
        }

    def observe(self, task: Task, params: Params) -> bool:
        b = self._entry(task.pid)
        n = task.nr_wakeups
        if n:
            burst = task.run_ns // n
            b.avg = burst = burst if b.avg < 0 else (b.avg + burst) >> 1
        else:  # not one wake-up in a report period: its burst is at least the one running now
            burst = task.exec_runtime if task.exec_runtime > b.avg else b.avg
        # an average of long and short bursts is long: the shortest one says whether it also runs briefly
        short = 0 < task.min_burst_ns <= self._boost_ns
        b.short += ((SHORT_FULL if short else 0) - b.short) >> 2
        # a mixed task's average swings around the bound: back to interactive only well under it
        if burst <= (self._boost_ns >> 1 if task.class_id == MIXED else self._boost_ns):
            cls = INTERACTIVE
        elif b.short >= (MIXED_KEEP if task.class_id == MIXED else MIXED_ENTER):
            cls = MIXED
        else:
            cls = BATCH
        if cls == task.class_id:  # the record says what BPF has now
            return False
        params.class_id = cls
        self.nr_reclassified += 1
        return True

    def decide(self, task: Task, decision: Decision) -> None:
        if task.deadline:
            self._keep_bpf_deadline(task, decision)
            return
        w = task.weight
        if w <= 0:
            w = NICE0_WEIGHT
        b = self._entry(task.pid)
        avg, preempt = self._learn_burst(b, task)
        if task.throttled:
            preempt = False
            self.nr_throttled += 1
        v = self._vruntime(b, task, w)

        # Deadline: the vruntime plus the expected burst, weighted.
        r = task.exec_runtime
        if avg > r:
            r = avg
        if r > self._burst_cap:
            r = self._burst_cap
        if w != NICE0_WEIGHT:
            r = r * NICE0_WEIGHT // w

        # Slice: the BPF slice scaled by weight, or twice the burst of a boosted task, within
        # [BPF slice, budget].
        s = self._min_slice
        if w > NICE0_WEIGHT:
            s = s * w // NICE0_WEIGHT
        if preempt and avg > 0 and 2 * avg > s:
            s = 2 * avg
        if s > self._max_slice:
            s = self._max_slice

        decision.pid = task.pid
        decision.cpu = task.cpu if task.nr_cpus_allowed == 1 else PYLAND_CPU_ANY
        decision.preempt = preempt
        decision.direct_wake = preempt
        decision.slice_ns = s
        decision.deadline = v + r
        decision.vtime = v
        decision.enq_cnt = task.enq_cnt
        b.vtime = v

    @staticmethod
    def _keep_bpf_deadline(task: Task, decision: Decision) -> None:
        """Steer mode, a batch task's wake-up: BPF's deadline, on the scale of every task it places."""
        decision.pid = task.pid
        decision.cpu = task.cpu if task.nr_cpus_allowed == 1 else PYLAND_CPU_ANY
        decision.preempt = decision.direct_wake = False
        decision.slice_ns = 0
        decision.deadline = task.deadline
        decision.vtime = task.vtime
        decision.enq_cnt = task.enq_cnt

    def _learn_burst(self, b: _Burst, task: Task) -> tuple[int, bool]:
        """(average burst, whether this wake-up is short enough to preempt) after the run segment
        that ended at stop_ts; a wake-up closes the burst (CPU time between two sleeps)."""
        # counted once even when the task is enqueued again without having run (dequeue/re-enqueue)
        stop = task.stop_ts
        seg = stop - task.start_ts
        if stop == b.last_stop or seg < 0:
            seg = 0
        elif seg > self._budget:
            seg = self._budget
        b.last_stop = stop
        if not task.flags & SCX_ENQ_WAKEUP:
            b.run += seg
            return b.avg, False
        burst = b.run + seg
        b.run = 0
        avg = b.avg
        if burst:  # a task never seen running has no burst to learn from
            avg = b.avg = burst if avg < 0 else (avg + burst) >> 1
        preempt = avg <= self._boost_ns  # also True for a task with no history yet
        if preempt:
            self.nr_boosted += 1
        return avg, preempt

    def _vruntime(self, b: _Burst, task: Task, w: int) -> int:
        """The task's vruntime after its charge, with the sleeper credit capped at one budget; moves
        the global vruntime along."""
        budget = self._budget
        v = task.vtime
        if b.vtime > v:
            v = b.vtime
        g = self._vnow
        if v > g:
            g = v
        elif v < g - budget:
            v = g - budget
            self.nr_clamped += 1
        if task.throttled and v < g:
            v = g
        # The charge: every run since the last record. BPF sends a placed task's record at most
        # once a budget, so one carries about a budget of runs, plus the run that ended it; the
        # cap only keeps a bogus figure from throwing the global vruntime far ahead.
        charge = task.run_ns
        if charge > self._charge_cap:
            charge = self._charge_cap
        if charge > 0:
            charge = charge if w == NICE0_WEIGHT else charge * NICE0_WEIGHT // w
            v += charge
            g += charge // self._nr_cpus
        self._vnow = g
        return v

    def stats(self) -> dict[str, int]:
        return {
            "vtime_now": self._vnow,
            "boosted": self.nr_boosted,
            "clamped": self.nr_clamped,
            "burst_slot_takeovers": self.nr_slot_takeovers,
            "throttled": self.nr_throttled,
            "reclassified": self.nr_reclassified,
        }
