"""The pyland scheduling loop: records in, policy decisions out, on one OS thread.

The kernel/user hand-off rules of a user-space scheduler shape every line here:
- the loop consumes the `queued` ring itself (read_batch: no callback per record, no helper thread,
  no queue);
- after each batch it publishes nr_consumed / nr_written / nr_scheduled, and when the pool is empty
  (every decision written) it publishes completion (nr_scheduled = 0) and THEN sched_yield()s, so the
  BPF side drains the decisions on this CPU before the scheduler runs again (a batch of reports
  alone decides nothing and does not yield);
- a full user ring never drops a decision: the rest of the batch waits in a small pending list
  (the pool), which is retried after a yield;
- the hot path has no logging and allocates one small tuple per record (the decision's values):
  ONE Task and ONE Decision are reused, counters are plain ints, and the periodic summary is built
  outside the per-record loop;
- wall time AND thread CPU time are measured per batch: a long wall time with little CPU time
  means the scheduler was off-CPU, not slow;
- the time each decide() call starts is published (policy_since, 0 once the batch is done): the BPF
  core stops handing tasks to a policy past its budget, and the watchdog thread detaches pyland.
  Per call, not per batch: a long batch of quick decisions is not a stuck policy (under TCG a batch of
  256 took up to 130 ms);
- a decision's pid and generation are the record's, whatever the policy wrote: a wrong one would
  leave its task waiting for a decision that never comes;
- steer mode: the `reports` ring (what tasks did, never waking the loop) is read after the queued
  one; each report, and each queued (sync) record before its decide(), goes to observe(), and the
  parameters it returns True for are written to the same user ring as the decisions (an update,
  told apart by its size, ahead of the record's decision), as are set_class() changes.
  A value that does not fit its C field is saturated here and counted (BPF clamps the rest).
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from dataclasses import dataclass

from scxctl.bpf.ringbuf import Reader, Writer
from scxctl.pyland.policy import Decision, Params, Policy, Task, batch_end_hook
from scxctl.pyland.records import (
    DECISION,
    DECISION_DIRECT_WAKE,
    DECISION_PREEMPT,
    NR_CONSUMED,
    NR_SCHEDULED,
    NR_WRITTEN,
    PARAM_CPU,
    PARAM_FIFO,
    PARAM_PREEMPTIBLE,
    PARAM_SYNC,
    POLICY_SINCE,
    REC_REPORT,
    TASK,
    UPDATE,
)
from scxctl.pyland.shared import SharedState

DEFAULT_BATCH = 256


def discard_records(reader: Reader) -> int:
    """Read and drop what is left in the queued ring; the number of records dropped."""
    out: list[tuple[object, ...]] = []
    dropped = 0
    while n := reader.read_batch(TASK, out, DEFAULT_BATCH):
        dropped += n
        out.clear()
    return dropped
DEFAULT_WAIT_S = 0.1  # epoll timeout when idle: also the period of stats, exit checks and reports
# steer mode: no task waits for the timer (a sync wake-up's record wakes the loop at once), and each
# turn costs a CPU the workload wants (about 2 ms under TCG), so reports are read in fewer turns
STEER_WAIT_S = 0.25
U32_MAX = (1 << 32) - 1
S32_MIN, S32_MAX = -(1 << 31), (1 << 31) - 1
U64_MAX = (1 << 64) - 1
S64_MIN, S64_MAX = -(1 << 63), (1 << 63) - 1


def _fit(value: int, lo: int, hi: int) -> tuple[int, bool]:
    """`value` saturated to [lo, hi], and whether it had to be."""
    if value < lo:
        return lo, True
    if value > hi:
        return hi, True
    return value, False


def update_values(pid: int, params: Params, sent_at: int) -> tuple[tuple[int, ...], bool]:
    """A struct pyland_update's values for `params`, and whether a value had to be saturated to fit
    its C field (BPF then clamps what fits but is out of range, and counts it)."""
    class_id, c1 = _fit(int(params.class_id), 0, U32_MAX)
    slice_ns, c2 = _fit(int(params.slice_ns), 0, U64_MAX)
    lag_ns, c3 = _fit(int(params.lag_ns), S64_MIN, S64_MAX)
    weight, c4 = _fit(int(params.weight), 0, U32_MAX)
    cpu, c5 = _fit(int(params.cpu), S32_MIN, S32_MAX)
    flags = (PARAM_SYNC if params.sync else 0) | (PARAM_CPU if cpu >= 0 else 0) | \
        (PARAM_FIFO if params.fifo else 0) | (PARAM_PREEMPTIBLE if params.preemptible else 0)
    return (pid, class_id, 1 if params.own else 0, 0, sent_at, slice_ns, lag_ns, weight, cpu, flags, 0), \
        c1 or c2 or c3 or c4 or c5


@dataclass
class LoopStats:
    """Counters of the loop itself (the BPF side keeps its own in SharedState)."""

    consumed: int = 0
    written: int = 0
    observed: int = 0  # steer mode: reports read and given to observe()
    updates: int = 0  # steer mode: parameter updates written (tasks and classes)
    saturated: int = 0  # updates with a value that did not fit its C field
    batches: int = 0
    ring_full: int = 0  # times a write found the user ring full
    yields: int = 0
    waits: int = 0
    busy_wall_ns: int = 0  # wall time spent processing batches
    busy_cpu_ns: int = 0  # thread CPU time spent processing batches
    max_batch_wall_ns: int = 0
    max_batch_cpu_ns: int = 0
    services: int = 0  # periodic service runs (stats, exit and attach checks)
    service_cpu_ns: int = 0  # thread CPU time spent in them
    max_service_wall_ns: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class PolicyFailed(Exception):
    """decide() raised: carries the policy name and the original exception as __cause__."""

    def __init__(self, policy: str, exc: BaseException) -> None:
        super().__init__(f"policy {policy!r} raised {type(exc).__name__}: {exc}")
        self.policy = policy


class SchedulerLoop:
    """One loop per attached scheduler; `step()` is one non-blocking iteration (tests drive it)."""

    def __init__(
        self,
        reader: Reader,
        writer: Writer,
        shared: SharedState,
        policy: Policy,
        *,
        batch: int = DEFAULT_BATCH,
        yield_fn: Callable[[], None] = os.sched_yield,
        reports: Reader | None = None,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.shared = shared
        self.policy = policy
        self.batch = batch
        self.yield_fn = yield_fn
        self.reports = reports  # steer mode's `reports` ring; None in round-trip mode
        self.stats = LoopStats()
        self.task = Task()
        self.decision = Decision()
        self.params = Params()
        self._records: list[tuple[object, ...]] = []
        # records waiting for room in the user ring, in order: (DECISION or UPDATE, values)
        self._pending: list[tuple[object, tuple[int, ...]]] = []
        self._batch_end = batch_end_hook(policy)
        self._observe = policy.observe if reports is not None else None

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _flush_pending(self) -> None:
        pending = self._pending
        write = self.writer.write
        done = 0
        for fmt, values in pending:
            if not write(fmt, *values):
                self.stats.ring_full += 1
                break
            done += 1
        if done:
            del pending[:done]
            self.stats.written += done

    def _emit(self, fmt: object, values: tuple[int, ...]) -> bool:
        """Write one record to the user ring, or keep it in order in the pool; True if written."""
        pending = self._pending
        # keep the order: once one record waits, every later one waits behind it
        if not pending and self.writer.write(fmt, *values):
            return True
        if not pending:
            self.stats.ring_full += 1
        pending.append((fmt, values))
        return False

    def send_update(self, pid: int, params: Params) -> None:
        """Parameters for task `pid`, or for class params.class_id when `pid` is 0."""
        values, saturated = update_values(pid, params, time.monotonic_ns())
        if saturated:
            self.stats.saturated += 1
        self.stats.updates += 1
        if self._emit(UPDATE, values):
            self.stats.written += 1

    def send_classes(self, classes: dict[int, Params]) -> None:
        """A policy's classes (class_params() at attach, set_class() after a batch)."""
        for class_id, params in classes.items():
            params.class_id = class_id
            self.send_update(0, params)

    def step(self) -> int:
        """Flush the pool, then one batch: queued records decided, reports observed, the results
        written; returns the records read."""
        st = self.stats
        wall0 = time.perf_counter_ns()
        cpu0 = time.thread_time_ns()
        counters = self.shared.counters
        pending = self._pending
        now_ns = time.monotonic_ns
        if pending:
            self._flush_pending()
            counters[NR_WRITTEN] = st.written
            counters[NR_SCHEDULED] = len(pending)  # 0 once the pool is empty: completion
            if pending:  # still full: let the BPF side drain before taking more work
                self.yield_fn()
                st.yields += 1
                return 0

        records = self._records
        records.clear()
        n = self.reader.read_batch(TASK, records, self.batch)
        if n:
            st.consumed += n
            counters[NR_CONSUMED] = st.consumed
            # the pool: consumed but not yet written; BPF treats nr_scheduled > 0 as pending work
            counters[NR_SCHEDULED] = n
            self._handle(records)
        reported = 0
        if self.reports is not None:  # steer mode: what tasks did, at the loop's pace
            records.clear()
            reported = self.reports.read_batch(TASK, records, self.batch)
            self._handle(records)
        if n == 0 and reported == 0:
            return 0
        st.batches += 1
        if class_updates := self.policy.take_class_updates():
            self.send_classes(dict(class_updates))
        counters[NR_WRITTEN] = st.written
        if self._batch_end is not None:
            now = counters[POLICY_SINCE] = now_ns()
            try:
                self._batch_end(now)
            except Exception as exc:
                counters[POLICY_SINCE] = 0
                raise PolicyFailed(self.policy.name, exc) from exc
        counters[POLICY_SINCE] = 0
        wall = time.perf_counter_ns() - wall0
        cpu = time.thread_time_ns() - cpu0
        st.busy_wall_ns += wall
        st.busy_cpu_ns += cpu
        if wall > st.max_batch_wall_ns:
            st.max_batch_wall_ns = wall
        if cpu > st.max_batch_cpu_ns:
            st.max_batch_cpu_ns = cpu
        if pending:
            counters[NR_SCHEDULED] = len(pending)
        else:
            # completion first, then give the CPU back so ops.dispatch drains our decisions
            counters[NR_SCHEDULED] = 0
            if n == 0:
                # reports only: no task waits for a decision, and the updates are drained by the
                # next dispatch on any CPU (at the latest when the loop sleeps): a yield would only
                # give the loop a second turn on a CPU the workload wants
                return reported
        self.yield_fn()
        st.yields += 1
        return n + reported

    def _handle(self, records: list[tuple[object, ...]]) -> None:
        """Each record to its policy method: a report to observe() (its parameters sent when it
        returns True), any other to decide() (its decision written, or pooled, in order)."""
        counters = self.shared.counters
        task = self.task
        decision = self.decision
        params = self.params
        decide = self.policy.decide
        observe = self._observe
        emit = self._emit
        send = self.send_update
        written = observed = 0
        now_ns = time.monotonic_ns
        for rec in records:
            counters[POLICY_SINCE] = now_ns()
            (task.pid, task.cpu, task.nr_cpus_allowed, task.flags, task.start_ts, task.stop_ts,
             task.exec_runtime, task.weight, task.placed, task.vtime, task.enq_cnt, task.comm,
             task.cgroup_id, task.throttled, task.run_ns, task.kind, task.nr_wakeups, task.waker,
             task.class_id, task.deadline, task.sleep_ns, task.min_burst_ns) = rec
            try:  # zero-cost unless it raises (3.11+); only the policy's own errors are wrapped
                if observe is not None:
                    # every record, a sync wake-up's too: its counters start again once it is sent,
                    # and what a task did before a wake-up would otherwise never reach observe()
                    params.reset()
                    if observe(task, params):
                        send(task.pid, params)
                    if task.kind == REC_REPORT:
                        observed += 1
                        continue
                decide(task, decision)
            except Exception as exc:
                counters[POLICY_SINCE] = 0
                raise PolicyFailed(self.policy.name, exc) from exc
            values = (task.pid, decision.cpu,
                      (DECISION_PREEMPT if decision.preempt else 0) |
                      (DECISION_DIRECT_WAKE if decision.direct_wake else 0),
                      decision.slice_ns, decision.deadline, decision.vtime, task.enq_cnt)
            if emit(DECISION, values):
                written += 1
        self.stats.written += written
        self.stats.observed += observed

    def run(
        self,
        should_stop: Callable[[], bool],
        service: Callable[[], None],
        *,
        wait_s: float = DEFAULT_WAIT_S,
        extra_fds: tuple[int, ...] = (),
    ) -> None:
        """Loop until should_stop(); sleep on epoll (the queued ring fd) when there is nothing to do.

        `service` (stats, exit and attach checks) runs every `wait_s`, busy or idle, and never
        ahead of records already waiting: writing stats takes milliseconds on a slow machine, and
        the record that woke the loop must not wait for it.
        """
        ep = select.epoll()
        try:
            ep.register(self.reader.fd, select.EPOLLIN)
            for fd in extra_fds:
                ep.register(fd, select.EPOLLIN)
            step = self.step
            poll = ep.poll
            steer = self.reports is not None
            monotonic = time.monotonic
            next_service = monotonic() + wait_s
            st = self.stats
            while not should_stop():
                busy = step() > 0 or bool(self._pending)
                now = monotonic()
                if now >= next_service:
                    if steer:
                        # Tasks already waiting for a CPU go first: a service takes milliseconds
                        # under emulation, and no wake-up takes the CPU from the loop meanwhile.
                        # The dispatch after a yield serves a waiting task before the scheduler
                        # (R3). Not in round-trip mode, where the waiting tasks wait for the loop.
                        self.yield_fn()
                    cpu0 = time.thread_time_ns()
                    service()
                    after = monotonic()
                    next_service = after + wait_s
                    st.services += 1
                    st.service_cpu_ns += time.thread_time_ns() - cpu0
                    wall = int((after - now) * 1e9)
                    if wall > st.max_service_wall_ns:
                        st.max_service_wall_ns = wall
                elif not busy:
                    st.waits += 1
                    poll(next_service - now)
        finally:
            ep.close()
