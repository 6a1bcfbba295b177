"""The pyland scheduling loop: records in, policy decisions out, on one OS thread.

The kernel/user hand-off rules of a user-space scheduler shape every line here:
- the loop consumes the `queued` ring itself (read_batch: no callback per record, no helper thread,
  no queue);
- after each batch it publishes nr_consumed / nr_written / nr_scheduled, and when the pool is empty
  (every decision written) it publishes completion (nr_scheduled = 0) and THEN sched_yield()s, so the
  BPF side drains the decisions on this CPU before the scheduler runs again;
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
  leave its task waiting for a decision that never comes.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from dataclasses import dataclass

from scxctl.bpf.ringbuf import Reader, Writer
from scxctl.pyland.policy import Decision, Policy, Task, batch_end_hook
from scxctl.pyland.records import (
    DECISION,
    DECISION_DIRECT_WAKE,
    DECISION_PREEMPT,
    NR_CONSUMED,
    NR_SCHEDULED,
    NR_WRITTEN,
    POLICY_SINCE,
    TASK,
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
DEFAULT_WAIT_S = 0.1  # epoll timeout when idle: also the period of stats and exit checks


@dataclass
class LoopStats:
    """Counters of the loop itself (the BPF side keeps its own in SharedState)."""

    consumed: int = 0
    written: int = 0
    batches: int = 0
    ring_full: int = 0  # times a write found the user ring full
    yields: int = 0
    waits: int = 0
    busy_wall_ns: int = 0  # wall time spent processing batches
    busy_cpu_ns: int = 0  # thread CPU time spent processing batches
    max_batch_wall_ns: int = 0
    max_batch_cpu_ns: int = 0

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
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.shared = shared
        self.policy = policy
        self.batch = batch
        self.yield_fn = yield_fn
        self.stats = LoopStats()
        self.task = Task()
        self.decision = Decision()
        self._records: list[tuple[object, ...]] = []
        self._pending: list[tuple[int, ...]] = []  # decisions waiting for room in the user ring
        self._batch_end = batch_end_hook(policy)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _flush_pending(self) -> None:
        pending = self._pending
        write = self.writer.write
        done = 0
        for values in pending:
            if not write(DECISION, *values):
                self.stats.ring_full += 1
                break
            done += 1
        if done:
            del pending[:done]
            self.stats.written += done

    def step(self) -> int:
        """Flush the pool, then read, decide and write one batch; returns the records read."""
        st = self.stats
        wall0 = time.perf_counter_ns()
        cpu0 = time.thread_time_ns()
        counters = self.shared.counters
        pending = self._pending
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
        if n == 0:
            return 0
        st.consumed += n
        counters[NR_CONSUMED] = st.consumed
        # the pool: consumed but not yet written; BPF treats nr_scheduled > 0 as pending work
        counters[NR_SCHEDULED] = n

        task = self.task
        decision = self.decision
        decide = self.policy.decide
        write = self.writer.write
        written = 0
        now_ns = time.monotonic_ns
        for rec in records:
            counters[POLICY_SINCE] = now_ns()
            (task.pid, task.cpu, task.nr_cpus_allowed, task.flags, task.start_ts, task.stop_ts,
             task.exec_runtime, task.weight, task.placed, task.vtime, task.enq_cnt, task.comm,
             task.cgroup_id, task.throttled, task.run_ns) = rec
            try:  # zero-cost unless it raises (3.11+); only the policy's own errors are wrapped
                decide(task, decision)
            except Exception as exc:
                counters[POLICY_SINCE] = 0
                raise PolicyFailed(self.policy.name, exc) from exc
            values = (task.pid, decision.cpu,
                      (DECISION_PREEMPT if decision.preempt else 0) |
                      (DECISION_DIRECT_WAKE if decision.direct_wake else 0),
                      decision.slice_ns, decision.deadline, decision.vtime, task.enq_cnt)
            # keep the order: once one decision waits, every later one waits behind it
            if not pending and write(DECISION, *values):
                written += 1
            else:  # the user ring is full: the pool keeps this decision
                if not pending:
                    st.ring_full += 1
                pending.append(values)

        st.written += written
        st.batches += 1
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
        self.yield_fn()
        st.yields += 1
        return n

    def run(
        self,
        should_stop: Callable[[], bool],
        service: Callable[[], None],
        *,
        wait_s: float = DEFAULT_WAIT_S,
        extra_fds: tuple[int, ...] = (),
    ) -> None:
        """Loop until should_stop(); sleep on epoll (the queued ring fd) when there is nothing to do.

        `service` runs after every idle wait and at least every `wait_s` while busy: stats, exit
        and attach checks live there, outside the per-record path.
        """
        ep = select.epoll()
        try:
            ep.register(self.reader.fd, select.EPOLLIN)
            for fd in extra_fds:
                ep.register(fd, select.EPOLLIN)
            step = self.step
            poll = ep.poll
            monotonic = time.monotonic
            next_service = monotonic() + wait_s
            while not should_stop():
                if step() == 0 and not self._pending:
                    self.stats.waits += 1
                    poll(wait_s)
                    service()
                    next_service = monotonic() + wait_s
                elif monotonic() >= next_service:
                    service()
                    next_service = monotonic() + wait_s
        finally:
            ep.close()
