"""The pyland loop against real RINGBUF / USER_RINGBUF maps (no sched_ext needed).

bpf/tests/pyland_loop.bpf.c plays the BPF core: feed() queues records the way ops.enqueue does,
drain() consumes decisions the way ops.dispatch does and checks each generation. Needs root
(BPF_PROG_TEST_RUN) and the objects from `make -C bpf`.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from scxctl.bpf.libbpf import BpfObject
from scxctl.bpf.ringbuf import open_reader, open_writer
from scxctl.pyland.loop import PolicyFailed, SchedulerLoop, discard_records
from scxctl.pyland.policies.loader import load_policy
from scxctl.pyland.policy import Decision, Params, Policy, PolicyOptions, Task
from scxctl.pyland.records import (
    EXIT_INFO,
    EXIT_OFFSET,
    NR_CONSUMED,
    NR_SCHEDULED,
    NR_WRITTEN,
    PARAM_CPU,
    PARAM_FIFO,
    PARAM_SYNC,
    POLICY_SINCE,
    REC_ENQUEUE,
    REC_REPORT,
)
from scxctl.pyland.scheduler import RunOptions, Scheduler
from scxctl.pyland.shared import SharedState

ROOT = Path(__file__).resolve().parent.parent
OBJ = ROOT / "bpf" / "build" / "tests" / "pyland_loop.bpf.o"
FEED_ARGS = struct.Struct("=QiIQQII")
REPORT_ARGS = struct.Struct("=QiIQQII")  # struct report_args
# struct drain_results
RESULTS = struct.Struct("=iIQQQQQQQQiiQQQQiIIIQqIiQ")
RESULT_FIELDS = ("pid_base", "pad", "enq_base", "fed", "fed_full", "drained", "bad_generation",
                 "out_of_order", "preempt", "sum_slice_ns", "last_pid", "last_cpu", "last_deadline",
                 "last_vtime", "direct_wake", "updates", "upd_pid", "upd_class", "upd_own", "upd_flags",
                 "upd_slice_ns", "upd_lag_ns", "upd_weight", "upd_cpu", "upd_sent_at")
SMALL_RING_DECISIONS = 4096 // 56  # dispatched: 4096 bytes, 48-byte records + 8-byte headers

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="BPF_PROG_TEST_RUN and map creation need root")


class Harness:
    def __init__(self, obj: BpfObject, writer_map: str) -> None:
        self.obj = obj
        self.shared = SharedState(obj.map(".bss").initial_value())
        self._results = obj.map(".data.results").initial_value()
        self.reader = open_reader(obj.map("queued").fd)
        self.reports = open_reader(obj.map("reports").fd)
        self.writer = open_writer(obj.map(writer_map).fd)
        self._drain = obj.program("drain" if writer_map == "dispatched" else "drain_big")
        self.yields = 0

    def feed(self, count: int, pid_base: int = 1000, enq_base: int = 7, vtime: int = 0,
             flags: int = 0) -> int:
        args = FEED_ARGS.pack(count, pid_base, 0, enq_base, vtime, flags, 100)
        return self.obj.program("feed").test_run(args)

    def feed_reports(self, count: int, pid_base: int = 3000, nr_wakeups: int = 1, run_ns: int = 0,
                     exec_runtime: int = 0, class_id: int = 0) -> int:
        args = REPORT_ARGS.pack(count, pid_base, nr_wakeups, run_ns, exec_runtime, class_id, 100)
        return self.obj.program("feed_reports").test_run(args)

    def drain(self) -> int:
        return self._drain.test_run()

    def results(self) -> dict[str, int]:
        return dict(zip(RESULT_FIELDS, RESULTS.unpack_from(self._results), strict=True))

    def count_yield(self) -> None:
        self.yields += 1

    def loop(self, policy: Policy, batch: int = 256, steer: bool = False) -> SchedulerLoop:
        return SchedulerLoop(self.reader, self.writer, self.shared, policy, batch=batch,
                             yield_fn=self.count_yield, reports=self.reports if steer else None)


@pytest.fixture
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    if not OBJ.is_file():
        pytest.fail(f"{OBJ} missing: run make -C bpf")
    obj = BpfObject.open(OBJ)
    obj.load()
    h = Harness(obj, getattr(request, "param", "dispatched"))
    try:
        yield h
    finally:
        h.reader.close()
        h.reports.close()
        h.writer.close()
        h.shared.release()
        h._results.release()
        obj.close()


def fifo() -> Policy:
    return load_policy("fifo", PolicyOptions(nr_cpus=2))


def test_records_in_decisions_out_with_generation_echoed(harness: Harness) -> None:
    harness.feed(50, pid_base=1000, enq_base=7)
    loop = harness.loop(fifo())
    assert loop.step() == 50
    assert harness.drain() == 50
    r = harness.results()
    assert r["drained"] == 50
    assert r["bad_generation"] == 0
    assert r["out_of_order"] == 0
    assert r["last_pid"] == 1049
    counters = harness.shared.counters
    assert counters[NR_CONSUMED] == 50
    assert counters[NR_WRITTEN] == 50
    assert counters[NR_SCHEDULED] == 0
    assert harness.shared.get("nr_queued") == 50
    assert harness.yields == 1  # pool empty -> completion published, then one yield


def test_task_fields_reach_the_policy_and_decision_fields_reach_bpf(harness: Harness) -> None:
    seen: list[tuple[int, ...]] = []

    class Probe(Policy):
        name = "probe"

        def decide(self, task: Task, decision: Decision) -> None:
            seen.append((task.pid, task.cpu, task.nr_cpus_allowed, task.flags, task.start_ts,
                         task.stop_ts, task.exec_runtime, task.weight, task.placed, task.vtime,
                         task.enq_cnt, task.cgroup_id, task.throttled, task.run_ns))
            assert task.comm.startswith(b"pyland-feed")
            decision.pid = task.pid
            decision.cpu = 1
            decision.preempt = True
            decision.direct_wake = task.placed == 1  # the feed marks every other record placed
            decision.slice_ns = 3000
            decision.deadline = task.pid * 10
            decision.vtime = task.vtime + 5
            decision.enq_cnt = task.enq_cnt

    harness.feed(3, pid_base=500, enq_base=40, vtime=900, flags=1)
    harness.loop(Probe(PolicyOptions(nr_cpus=2))).step()
    assert seen[1][8] == 1  # placed
    assert seen[2] == (502, 0, 2, 1, 1002, 2002, 100002, 100, 0, 900, 42, 7002, 1, 300002)
    assert [t[12] for t in seen] == [0, 0, 1]  # throttled: its own field, apart from placed
    harness.drain()
    r = harness.results()
    assert (r["drained"], r["preempt"], r["direct_wake"], r["sum_slice_ns"]) == (3, 3, 1, 9000)
    assert (r["last_pid"], r["last_cpu"], r["last_deadline"], r["last_vtime"]) == (502, 1, 5020, 905)


def test_each_call_into_the_policy_is_stamped_not_only_the_batch(harness: Harness) -> None:
    """The watchdog and the BPF core time one call: a long batch of quick decisions must not look
    like one stuck call (under TCG a batch of 256 took 130 ms, past the 100 ms budget)."""
    stamps: list[int] = []
    inner = fifo()

    class Stamped(Policy):
        name = "stamped"

        def decide(self, task: Task, decision: Decision) -> None:
            stamps.append(harness.shared.counters[POLICY_SINCE])
            inner.decide(task, decision)

    harness.feed(20)
    harness.loop(Stamped(PolicyOptions(nr_cpus=2))).step()
    assert len(stamps) == 20 and all(stamps)
    assert stamps == sorted(set(stamps)), stamps  # one fresh stamp per call
    assert harness.shared.counters[POLICY_SINCE] == 0  # cleared once the batch is done


def test_a_policy_cannot_strand_a_task_with_a_wrong_pid_or_generation(harness: Harness) -> None:
    """The loop writes the record's pid and generation: a decision the BPF side would drop as stale
    (or for another task) would leave its task waiting for a decision that never comes. The drain
    here is a stand-in; the real apply_decision dropping an older generation is asserted in the
    guest by tests/test_pyland_safety_vm.py::test_decisions_for_an_older_generation_are_dropped."""
    class Wrong(Policy):
        name = "wrong"

        def decide(self, task: Task, decision: Decision) -> None:
            decision.pid, decision.cpu, decision.preempt = task.pid + 1, -1, False
            decision.direct_wake = False
            decision.slice_ns, decision.deadline, decision.vtime = 0, 0, 0
            decision.enq_cnt = task.enq_cnt - 1  # an older generation

    harness.feed(4, pid_base=700)
    harness.loop(Wrong(PolicyOptions(nr_cpus=2))).step()
    harness.drain()
    r = harness.results()
    assert (r["bad_generation"], r["drained"], r["last_pid"]) == (0, 4, 703)


def test_full_user_ring_keeps_every_decision_in_order(harness: Harness) -> None:
    total = 200  # > 2.5x what the 4 KiB user ring holds
    harness.feed(total)
    loop = harness.loop(fifo())
    assert loop.step() == total
    assert loop.pending == total - SMALL_RING_DECISIONS
    # the pool is published as pending work, so the BPF side keeps the scheduler runnable
    assert harness.shared.counters[NR_SCHEDULED] == loop.pending
    assert loop.stats.ring_full == 1
    rounds = 0
    while loop.pending:
        assert harness.drain() > 0
        loop.step()
        rounds += 1
        assert rounds < 10
    harness.drain()
    r = harness.results()
    assert r["drained"] == total
    assert r["out_of_order"] == 0
    assert r["bad_generation"] == 0
    assert harness.shared.counters[NR_SCHEDULED] == 0
    assert harness.shared.counters[NR_WRITTEN] == total
    assert loop.stats.written == total


def test_while_the_pool_is_full_no_new_records_are_taken(harness: Harness) -> None:
    harness.feed(SMALL_RING_DECISIONS + 10)
    loop = harness.loop(fifo())
    loop.step()
    assert loop.pending == 10
    harness.feed(5, pid_base=5000)
    yields = harness.yields
    assert loop.step() == 0  # ring still full: yield, read nothing
    assert harness.yields == yields + 1
    assert loop.stats.consumed == SMALL_RING_DECISIONS + 10


def test_batch_limit_and_empty_ring(harness: Harness) -> None:
    loop = harness.loop(fifo(), batch=16)
    assert loop.step() == 0
    assert harness.yields == 0  # nothing read: no pointless yield
    harness.feed(40)
    assert [loop.step(), loop.step(), loop.step(), loop.step()] == [16, 16, 8, 0]


def test_discard_records_empties_the_ring(harness: Harness) -> None:
    harness.feed(300)
    assert discard_records(harness.reader) == 300
    assert not harness.reader.has_data()
    assert discard_records(harness.reader) == 0


def test_a_restart_readies_the_loaded_object_as_if_freshly_loaded(harness: Harness) -> None:
    """A restart attaches the same object again: the records the loop never read are dropped, .bss
    (counters and the last exit info) is zeroed, and a new loop counts from 0 while the run's
    totals keep what the last one did."""
    loop = harness.loop(fifo())
    harness.feed(30)
    assert loop.step() == 30
    harness.feed(20)  # still in the ring when the kernel ended the attachment
    EXIT_INFO.pack_into(harness.obj.map(".bss").initial_value(), EXIT_OFFSET, 66, 1 << 48,
                        b"unregistered from the kernel", b"cpu 1 going offline")
    s = Scheduler(RunOptions())
    s.shared, s.loop, s.policy = harness.shared, loop, loop.policy
    s._confirmed = s._kernel_exit = True
    s._reset_attachment()
    assert not harness.reader.has_data()
    assert harness.shared.exit_kind() == 0 and harness.shared.exit_info().msg == ""
    assert set(harness.shared.snapshot().values()) == {0}
    assert s.loop is not loop and s.loop.policy is loop.policy and s.loop.reader is harness.reader
    assert s.loop.stats.consumed == 0 and s._stats()["consumed"] == 30
    # the run's summary counts BPF's events over both attachments; gauges are the current ones
    assert s._bpf_stats()["nr_queued"] == 50 and s._bpf_stats()["nr_consumed"] == 30
    assert (s._confirmed, s._kernel_exit) == (False, False)
    harness.feed(5, enq_base=100)
    assert s.loop.step() == 5
    assert harness.shared.counters[NR_CONSUMED] == 5 and s._stats()["consumed"] == 35
    assert s._bpf_stats()["nr_queued"] == 55 and s._bpf_stats()["nr_consumed"] == 35
    assert s._bpf_stats()["nr_scheduled"] == harness.shared.get("nr_scheduled")


def test_policy_exception_is_wrapped_with_the_policy_name(harness: Harness) -> None:
    class Boom(Policy):
        name = "boom"

        def decide(self, task: Task, decision: Decision) -> None:
            raise ZeroDivisionError("division by zero")

    harness.feed(2)
    with pytest.raises(PolicyFailed, match=r"policy 'boom' raised ZeroDivisionError"):
        harness.loop(Boom(PolicyOptions(nr_cpus=2))).step()


def test_run_sleeps_on_epoll_and_wakes_for_records(harness: Harness) -> None:
    loop = harness.loop(fifo())
    calls = {"service": 0}
    fed: ClassVar = None  # noqa: F841 - keeps the closure simple for ruff

    def service() -> None:
        calls["service"] += 1
        if calls["service"] == 1:
            harness.feed(30)

    def should_stop() -> bool:
        return calls["service"] >= 3

    loop.run(should_stop, service, wait_s=0.01)
    assert loop.stats.consumed == 30
    assert loop.stats.waits >= 2
    # the service's own cost is counted apart from the batches' (feeding 30 records takes a while)
    assert loop.stats.services == 3 and loop.stats.max_service_wall_ns > 0
    harness.drain()
    assert harness.results()["drained"] == 30


def test_a_record_that_wakes_the_loop_is_decided_before_the_service(harness: Harness) -> None:
    """Records fed while the loop sleeps on epoll: the service (stats files, log lines: milliseconds
    in an emulated guest) must not run between the wake-up and their decisions."""
    loop = harness.loop(fifo())
    seen: list[tuple[bool, int]] = []  # at each service: had the records come, how many were read
    fed = threading.Event()

    def feed_later() -> None:
        while loop.stats.waits == 0:  # counted just before the loop sleeps in epoll
            time.sleep(0.001)
        harness.feed(5)
        fed.set()

    feeder = threading.Thread(target=feed_later)
    feeder.start()
    try:
        loop.run(lambda: len(seen) >= 2, lambda: seen.append((fed.is_set(), loop.stats.consumed)),
                 wait_s=0.3)
    finally:
        feeder.join()
    assert fed.is_set() and loop.stats.consumed == 5
    assert all(consumed == 5 for came, consumed in seen if came), seen
    assert loop.stats.waits >= 2  # it slept before the records came, and after deciding them


@pytest.mark.parametrize("steer", [True, False], ids=["steer", "round-trip"])
def test_a_steering_loop_yields_its_cpu_before_each_service(harness: Harness, steer: bool) -> None:
    """A service runs for milliseconds under emulation and no wake-up can take the loop's CPU while
    it does: in steer mode the tasks already waiting for that CPU get it first. In round-trip mode
    they wait for the loop's decisions, and it does not yield to them."""
    loop = harness.loop(fifo(), steer=steer)
    events: list[str] = []
    loop.yield_fn = lambda: events.append("yield")
    loop.run(lambda: events.count("service") >= 3, lambda: events.append("service"), wait_s=0.01)
    assert events == (["yield", "service"] if steer else ["service"]) * 3


@pytest.mark.parametrize("harness", ["dispatched_big"], indirect=True)
def test_big_batch_roundtrip_with_deadline_policy(harness: Harness) -> None:
    policy = load_policy("deadline", PolicyOptions(nr_cpus=2))
    harness.feed(4096)
    loop = harness.loop(policy, batch=4096)
    assert loop.step() == 4096
    assert loop.pending == 0
    assert harness.drain() == 4096
    r = harness.results()
    assert (r["drained"], r["bad_generation"]) == (4096, 0)


# --- steer mode: reports in, parameter updates out -----------------------------------------------------

MS = 1_000_000


def test_reports_reach_observe_and_class_changes_reach_bpf(harness: Harness) -> None:
    """deadline: tasks whose bursts run past a quarter budget go to the batch class (1), told once."""
    loop = harness.loop(load_policy("deadline", PolicyOptions(nr_cpus=2)), steer=True)
    harness.feed_reports(3, pid_base=3000, nr_wakeups=1, run_ns=50 * MS)
    assert loop.step() == 3
    assert harness.shared.counters[POLICY_SINCE] == 0
    assert harness.drain() == 3
    r = harness.results()
    assert (r["updates"], r["drained"]) == (3, 0)  # told apart from decisions by their size
    assert (r["upd_pid"], r["upd_class"], r["upd_own"], r["upd_flags"]) == (3002, 1, 0, 0)
    assert r["upd_sent_at"] > 0 and (loop.stats.observed, loop.stats.updates) == (3, 3)
    # reports that already show the batch class change nothing; short bursts go back to class 0
    harness.feed_reports(2, pid_base=3000, nr_wakeups=1, run_ns=50 * MS, class_id=1)
    harness.feed_reports(1, pid_base=3005, nr_wakeups=10, run_ns=1 * MS, class_id=1)
    assert loop.step() == 3
    assert harness.drain() == 1
    r = harness.results()
    assert (r["updates"], r["upd_pid"], r["upd_class"]) == (4, 3005, 0)


def test_a_batch_of_reports_alone_does_not_yield(harness: Harness) -> None:
    """A yield hands BPF the CPU to drain decisions; reports need none, and a yield would give the
    loop a second turn on a busy CPU. A queued record in the batch still yields."""
    loop = harness.loop(load_policy("deadline", PolicyOptions(nr_cpus=2)), steer=True)
    harness.feed_reports(3, pid_base=3000, nr_wakeups=1, run_ns=50 * MS)
    assert loop.step() == 3
    assert (harness.yields, loop.stats.yields, loop.stats.batches) == (0, 0, 1)
    assert harness.shared.counters[NR_SCHEDULED] == 0  # nothing left to drain for a task
    harness.feed(2)
    harness.feed_reports(1, pid_base=3100)
    assert loop.step() == 3
    assert (harness.yields, loop.stats.yields, loop.stats.batches) == (1, 1, 2)


def test_reports_are_not_read_in_round_trip_mode(harness: Harness) -> None:
    loop = harness.loop(load_policy("deadline", PolicyOptions(nr_cpus=2)), steer=False)
    harness.feed_reports(2, run_ns=50 * MS)
    assert loop.step() == 0 and loop.stats.observed == 0


class _Steer(Policy):
    """Own params for every task, and a class set between batches."""

    name = "steer-test"

    def __init__(self, options: PolicyOptions, **fields: int) -> None:
        super().__init__(options)
        self.fields = fields

    def class_params(self) -> dict[int, Params]:
        return {5: Params(slice_ns=2 * MS, sync=True)}

    def observe(self, task: Task, params: Params) -> bool:
        params.own = True
        for name, value in self.fields.items():
            setattr(params, name, value)
        self.set_class(7, Params(cpu=1, fifo=True))
        return True

    def decide(self, task: Task, decision: Decision) -> None:
        raise AssertionError("no queued records in these tests")


def test_own_params_classes_and_set_class(harness: Harness) -> None:
    policy = _Steer(PolicyOptions(nr_cpus=2), slice_ns=4 * MS, lag_ns=-3 * MS, weight=250, cpu=1)
    loop = harness.loop(policy, steer=True)
    loop.send_classes(policy.class_params())
    harness.drain()
    r = harness.results()
    assert (r["upd_pid"], r["upd_class"], r["upd_flags"], r["upd_slice_ns"]) == (0, 5, PARAM_SYNC, 2 * MS)
    harness.feed_reports(1, pid_base=4000)
    assert loop.step() == 1
    harness.drain()
    r = harness.results()
    # the task's own params first, then the class set_class() queued during the batch
    assert r["updates"] == 3
    assert (r["upd_pid"], r["upd_class"], r["upd_flags"]) == (0, 7, PARAM_CPU | PARAM_FIFO)
    assert r["upd_cpu"] == 1


def test_own_params_reach_bpf_field_by_field(harness: Harness) -> None:
    policy = _Steer(PolicyOptions(nr_cpus=2), slice_ns=4 * MS, lag_ns=-3 * MS, weight=250, cpu=1,
                    class_id=9)
    policy.set_class = lambda class_id, params: None  # type: ignore[method-assign]
    loop = harness.loop(policy, steer=True)
    harness.feed_reports(1, pid_base=4100)
    loop.step()
    harness.drain()
    r = harness.results()
    assert r["updates"] == 1
    assert (r["upd_pid"], r["upd_class"], r["upd_own"], r["upd_flags"]) == (4100, 9, 1, PARAM_CPU)
    assert (r["upd_slice_ns"], r["upd_lag_ns"], r["upd_weight"], r["upd_cpu"]) == (4 * MS, -3 * MS, 250, 1)


def test_values_that_do_not_fit_are_saturated_and_counted(harness: Harness) -> None:
    policy = _Steer(PolicyOptions(nr_cpus=2), weight=-5, cpu=1 << 40, slice_ns=-1)
    policy.set_class = lambda class_id, params: None  # type: ignore[method-assign]
    loop = harness.loop(policy, steer=True)
    harness.feed_reports(1, pid_base=4200)
    loop.step()
    harness.drain()
    r = harness.results()
    assert loop.stats.saturated == 1
    assert (r["upd_weight"], r["upd_cpu"], r["upd_slice_ns"]) == (0, (1 << 31) - 1, 0)


def test_observe_that_raises_is_a_policy_failure(harness: Harness) -> None:
    class Boom(_Steer):
        def observe(self, task: Task, params: Params) -> bool:
            raise ValueError("observe broke")

    loop = harness.loop(Boom(PolicyOptions(nr_cpus=2)), steer=True)
    harness.feed_reports(1)
    with pytest.raises(PolicyFailed, match="observe broke"):
        loop.step()
    assert harness.shared.counters[POLICY_SINCE] == 0


def test_a_sync_wake_up_is_observed_before_it_is_decided(harness: Harness) -> None:
    """A queued record resets the task's counters in BPF: observe() sees it too, first, and the
    parameters it returns go out ahead of the decision."""
    calls: list[tuple[str, int, int]] = []

    class Both(_Steer):
        def observe(self, task: Task, params: Params) -> bool:
            calls.append(("observe", task.pid, task.kind))
            params.class_id = 3
            return task.kind == REC_ENQUEUE

        def decide(self, task: Task, decision: Decision) -> None:
            calls.append(("decide", task.pid, task.kind))
            load_policy("fifo", PolicyOptions(nr_cpus=2)).decide(task, decision)

    loop = harness.loop(Both(PolicyOptions(nr_cpus=2)), steer=True)
    harness.feed(1, pid_base=4300)
    harness.feed_reports(1, pid_base=4400)
    assert loop.step() == 2
    assert calls == [("observe", 4300, REC_ENQUEUE), ("decide", 4300, REC_ENQUEUE),
                     ("observe", 4400, REC_REPORT)]
    assert (loop.stats.observed, loop.stats.updates) == (1, 1)  # reports observed; the sync one is consumed
    assert harness.drain() == 2  # the update and the decision
    r = harness.results()
    assert (r["updates"], r["upd_pid"], r["upd_class"], r["drained"], r["last_pid"]) == (1, 4300, 3, 1, 4300)
