"""Runs pyland in the foreground: checks, load, harden, attach, loop, detach, say why it stopped.

The checks are in preflight.py, the hardening in hardening.py, the .rodata configuration's layout in
bpf_config.py and the wording of the result in run_result.py; this module runs them in order.

Order matters and each step says why:
1. everything that can fail with a user error (policy file, sched_ext present, root, another
   scheduler, object missing or stale, libbpf, verifier) fails BEFORE anything is attached;
2. the process is hardened before attaching -- memory locked (a page fault may need a kthread only
   pyland can schedule), gc frozen and disabled (a collection is a scheduling stall), everything
   imported -- because once attached, every task on the machine waits for this one thread;
3. attach, then run the loop at once; the loop itself confirms sysfs shows pyland enabled (ops.init
   can fail after a "successful" attach);
4. every exit path detaches (try/finally, atexit, SIGINT/SIGTERM through the loop, the policy
   watchdog), then reports the exit kind, reason and message the BPF side recorded in ops.exit;
5. when the kernel asks for a restart (CPU hotplug), the same loaded object is attached again with
   the same policy object, so the policy keeps its state; a bounded number of times per minute.
   Loading again would verify every program again: seconds under TCG, and the one CPU a hotplug
   may have left is then shared with the load that waits for a scheduler.

Signals: the first SIGINT/SIGTERM stops the loop; inside the policy's code it also unwinds the
policy (StopRequested), so a stuck policy cannot hold the exit. A second one detaches and exits at
once, whatever the main thread is doing.
"""

from __future__ import annotations

import atexit
import collections
import gc
import inspect
import os
import signal
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

from scxctl import log as logsetup
from scxctl.bpf import object as bpfobject
from scxctl.bpf.btf import BANDWIDTH_HOOK, sched_ext_ops_members
from scxctl.bpf.libbpf import BpfLink, BpfObject
from scxctl.bpf.ringbuf import open_reader, open_writer
from scxctl.errors import ExitCode
from scxctl.pyland.bpf_config import PylandConfig
from scxctl.pyland.cgroup_report import CgroupReport
from scxctl.pyland.hardening import harden, set_up_priority
from scxctl.pyland.loop import DEFAULT_WAIT_S, STEER_WAIT_S, PolicyFailed, SchedulerLoop, discard_records
from scxctl.pyland.options import RunOptions
from scxctl.pyland.policies.loader import load_policy
from scxctl.pyland.policy import NSEC_PER_MSEC, NSEC_PER_USEC, Policy, PolicyOptions
from scxctl.pyland.policy_alarm import PolicyAlarm
from scxctl.pyland.preflight import preflight
from scxctl.pyland.records import COMPAT_MISSING, OPS_NAME, POLICY_SINCE, PROGRESS_AT, SHARED_COUNTERS
from scxctl.pyland.run_result import RunResult, outcome, too_many_restarts
from scxctl.pyland.shared import ExitInfo, SharedState
from scxctl.pyland.stats_log import STATS_EVENT
from scxctl.pyland.stats_report import StatsReport, numbers
from scxctl.pyland.watchdog import PolicyStuck, PolicyWatchdog, StuckReport
from scxctl.sysfs import nr_cpu_ids, read_sched_ext

log = logsetup.get_logger("scxctl.pyland")

OPS_MAP = "pyland_ops"
PARTIAL_OPS_MAP = "pyland_partial_ops"
BANDWIDTH_PROG = "pyland_cgroup_set_bandwidth"
TIMER_NS = 100 * NSEC_PER_MSEC
# steer mode: a CPU is preempted for a wake-up at most this many times per BPF slice
PREEMPTS_PER_SLICE = 4
# include/linux/sched/ext.h: the exit code's action bits; a restart is asked for on CPU hotplug
SCX_ECODE_ACT_RESTART = 1 << 48
RESTART_KINDS = (65, 66)  # UNREG_BPF, UNREG_KERN: the only kinds a restart request comes with
RESTART_LIMIT = 10  # restarts within RESTART_WINDOW_S before giving up (a hotplug storm, a bug)
RESTART_WINDOW_S = 60.0
# the shared counters that count events, summed over a run's attachments; the others are gauges
# (tasks enabled, cgroups with a quota, the loop's pool) or times
EVENT_COUNTERS = tuple(n for n in SHARED_COUNTERS
                       if n.startswith("nr_") and n not in ("nr_enabled", "nr_bw_cgroups", "nr_scheduled"))


class StopRequested(BaseException):
    """Raised by the first SIGINT/SIGTERM inside the policy's code: unwinds a policy that would not
    return; a BaseException so that the policy's `except Exception` lets it pass."""


def restart_requested(info: ExitInfo | None) -> bool:
    """Did the kernel ask the scheduler to re-attach (what scx's schedulers do on CPU hotplug)?"""
    return info is not None and info.kind in RESTART_KINDS and bool(info.exit_code & SCX_ECODE_ACT_RESTART)

def policy_options(opts: RunOptions) -> PolicyOptions:
    """What the policy and the BPF config are both derived from (raises UsageError when inconsistent)."""
    return PolicyOptions(nr_cpus=nr_cpu_ids(opts.sysroot), slice_ns=opts.slice_us * NSEC_PER_USEC,
                         min_slice_ns=opts.slice_min_us * NSEC_PER_USEC, builtin_idle=opts.builtin_idle)


def open_configured(path: Path, opts: RunOptions, steer: bool = True) -> BpfObject:
    """The pyland object opened and configured for `opts` (in steer mode, or round-trip), not yet loaded.

    The one place that configures the object, so that `scxctl doctor`'s trial load verifies exactly
    what `scxctl run` would load: the same .rodata and the same one of the two struct_ops maps.

    The ops' `hotplug_seq` stays 0. Set, it makes the kernel end an attachment made after a CPU came
    or went since the object was opened; but a struct_ops value is fixed once created, so a restart
    could then never attach this object again. Nothing here depends on which CPUs are online: the
    BPF core sizes everything by nr_cpu_ids, the possible CPUs, which hotplug does not change."""
    popts = policy_options(opts)
    obj = BpfObject.open(path, sysroot=opts.sysroot)
    try:
        config = PylandConfig(
            slice_ns=popts.min_slice_ns, usersched_tgid=os.getpid(), builtin_idle=int(opts.builtin_idle),
            timer_ns=TIMER_NS, max_backlog=opts.max_backlog, starve_ns=opts.starve_ms * NSEC_PER_MSEC,
            direct_wake_ns=popts.min_slice_ns if opts.direct_wake else 0, max_slice_ns=popts.slice_ns,
            stall_ns=opts.policy_budget_ms * NSEC_PER_MSEC, new_direct=int(opts.new_direct),
            bw_max_hold_ns=opts.cpu_max_hold_ms * NSEC_PER_MSEC, steer=int(steer),
            # a sleeper comes back at most one budget behind the running tasks
            lag_ns=popts.slice_ns, report_ns=opts.report_ms * NSEC_PER_MSEC,
            preempt_gap_ns=popts.min_slice_ns // PREEMPTS_PER_SLICE if opts.wake_preempt else 0)
        obj.set_rodata_bytes(0, config.pack())
        obj.map(OPS_MAP if opts.partial else PARTIAL_OPS_MAP).set_autocreate(False)
        members = sched_ext_ops_members(opts.sysroot)
        if members and BANDWIDTH_HOOK not in members:
            # before 6.17: libbpf refuses a callback the kernel's sched_ext_ops does not have, so it
            # goes (the BPF core then says cpu.max is not enforced: PYLAND_NO_CGROUP_BW)
            ops = obj.map(PARTIAL_OPS_MAP if opts.partial else OPS_MAP).initial_value()
            struct.pack_into("=Q", ops, obj.member_offset("sched_ext_ops", BANDWIDTH_HOOK), 0)
            obj.program(BANDWIDTH_PROG).set_autoload(False)
        if opts.ring_kib:
            obj.map("queued").set_max_entries(opts.ring_kib * 1024)
    except BaseException:
        obj.close()
        raise
    return obj


def steers(policy: Policy, opts: RunOptions) -> bool:
    """Steer mode unless asked for the round trip, or the policy only decides (no observe())."""
    return not opts.round_trip and type(policy).steers()


def trial_load(path: Path, opts: RunOptions | None = None) -> None:
    """Load the object as `scxctl run` would, then close it; raises BpfError as `scxctl run` would.

    Loading verifies every program and resolves every kfunc extern against the running kernel, but
    registers nothing: a `.struct_ops.link` map only becomes the kernel's scheduler when attached,
    so this never replaces the running scheduler."""
    with open_configured(path, opts or RunOptions()) as obj:
        obj.load()


def compat_missing(mask: int) -> list[str]:
    """What ops.init found missing in this kernel (its broken kfuncs have their own fallbacks)."""
    return [what for bit, what in COMPAT_MISSING.items() if mask & bit]


class _Stop:
    """Why the loop should stop; set from signal handlers and service checks."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def __call__(self) -> bool:
        return self.reason is not None


class Scheduler:
    def __init__(self, opts: RunOptions) -> None:
        self.opts = opts
        self.path: Path | None = None
        self.policy: Policy | None = None
        self.steer = False
        self._clamp_warned = False
        self.obj: BpfObject | None = None
        self.cgroup_report: CgroupReport | None = None
        self.stats_report = StatsReport()  # the counters for `scxctl stats` and the daemon's metrics
        self.link: BpfLink | None = None
        self.shared: SharedState | None = None
        self.loop: SchedulerLoop | None = None
        self.watchdog: PolicyWatchdog | None = None
        self.alarm: PolicyAlarm | None = None  # what the watchdog sleeps on (the object's `alarms`)
        self.stuck: StuckReport | None = None
        self.restarts = 0
        self._restart_times: collections.deque[float] = collections.deque()
        self._totals: collections.Counter[str] = collections.Counter()  # loop stats of earlier attaches
        self._bpf_totals: collections.Counter[str] = collections.Counter()  # BPF's, EVENT_COUNTERS only
        self._stop = _Stop()
        self._confirmed = False
        self._attach_deadline = 0.0
        self._next_stats = 0.0
        self._kernel_exit = False
        self._in_loop = False
        self._detach_lock = threading.Lock()
        # how long the last set-up took, in the "pyland enabled" event: a slow restart shows where
        self._load_ms = 0.0
        self._attach_ms = 0.0
        self._attach_started = 0.0
        self._reset_ms = 0.0  # a restart: readying the object the kernel unregistered
        self._harden_ms = 0.0

    # -- set-up, all before attach

    def prepare(self) -> None:
        o = self.opts
        self.policy = load_policy(o.policy, policy_options(o))  # USAGE errors, before anything else
        self.steer = steers(self.policy, o)
        preflight(o.sysroot)
        self.path = o.object_path or bpfobject.resolve(o.allow_stale)
        with set_up_priority():
            self._open()
        if not self.steer and not o.round_trip:
            log.info("the policy only decides (no observe()): every enqueue waits for it (round-trip mode)",
                     policy=self.policy.name)
        log.info("pyland loaded", object=str(self.path), policy=self.policy.name, partial=o.partial,
                 mode="steer" if self.steer else "round-trip",
                 builtin_idle=o.builtin_idle, direct_wake=o.direct_wake, new_direct=o.new_direct,
                 slice_us=o.slice_us,
                 slice_min_us=o.slice_min_us, policy_budget_ms=o.policy_budget_ms)

    def _open(self) -> None:
        """Open, configure and load a fresh object; the policy object is kept across restarts."""
        assert self.path is not None and self.policy is not None
        t0 = time.monotonic()
        self.obj = obj = open_configured(self.path, self.opts, self.steer)
        obj.load()
        self._load_ms = round((time.monotonic() - t0) * 1e3, 1)
        self.shared = SharedState(obj.map(".bss").initial_value())
        reader = open_reader(obj.map("queued").fd)
        writer = open_writer(obj.map("dispatched").fd)
        reports = open_reader(obj.map("reports").fd) if self.steer else None
        self.alarm = PolicyAlarm(open_reader(obj.map("alarms").fd))
        self.loop = SchedulerLoop(reader, writer, self.shared, self.policy, reports=reports)
        self.cgroup_report = CgroupReport(obj, self.opts.sysroot)
        self._confirmed = False
        self._kernel_exit = False

    def _close_object(self) -> None:
        self.detach()
        if self.cgroup_report is not None:
            self.cgroup_report.close()
            self.cgroup_report = None
        if self.loop is not None:
            self._totals.update(self.loop.stats.as_dict())
            for end in (self.loop.reader, self.loop.writer, self.loop.reports):
                close = getattr(end, "close", None)
                if close is not None:
                    close()
            self.loop = None
        if self.alarm is not None:
            self.alarm.close()
            self.alarm = None
        if self.shared is not None:
            self.shared.release()
            self.shared = None
        if self.obj is not None:
            self.obj.close()
            self.obj = None
        self.link = None

    # -- the loop's periodic service (outside the per-record path)

    def _service(self) -> None:
        assert self.shared is not None and self.loop is not None
        if self.shared.exit_kind() != 0:
            self._kernel_exit = True
            self._stop.reason = self._stop.reason or "kernel"
            return
        now = time.monotonic()
        if not self._confirmed:
            st = read_sched_ext(self.opts.sysroot)
            if st.enabled and st.ops == OPS_NAME:
                self._confirmed = True
                log.info("pyland enabled", state=st.state, ops=st.ops, switch_all=st.switch_all,
                         restarts=self.restarts, reset_ms=self._reset_ms, load_ms=self._load_ms,
                         harden_ms=self._harden_ms, attach_ms=self._attach_ms,
                         enabled_ms=round((now - self._attach_started) * 1e3, 1))
                if missing := compat_missing(self.shared.snapshot()["compat_missing"]):
                    log.warning("this kernel cannot give pyland some facilities; it runs without them",
                                kernel=os.uname().release, missing=missing)
            elif now > self._attach_deadline:
                self._stop.reason = f"attach check: state={st.state} ops={st.ops}"
        self._warn_clamped()
        if self.cgroup_report is not None:
            self.cgroup_report.maybe_write(now, self.shared.snapshot)
        self.stats_report.maybe_write(now, self._stats_document)
        if self.opts.stats_interval > 0 and now >= self._next_stats:
            self._next_stats = now + self.opts.stats_interval
            log.info(STATS_EVENT, **self.loop.stats.as_dict(), **self.shared.snapshot(),
                     **{f"policy_{k}": v for k, v in self.loop.policy.stats().items()},
                     restarts=self.restarts, process_cpu_ns=time.process_time_ns(),
                     watchdog_looks=wd.looks if (wd := self.watchdog) else 0)

    def _stats_document(self) -> dict[str, Any]:
        """What the stats snapshot says besides its pid and clocks: totals over the run's attachments."""
        assert self.loop is not None
        return {"policy": self.loop.policy.name, "mode": "steer" if self.steer else "round-trip",
                "restarts": self.restarts, "bpf": self._bpf_stats(), "loop": self._stats(),
                "loop_cpu_s": time.thread_time(),  # the service runs on the loop's thread
                "process_cpu_s": time.process_time(),  # every thread: the loop's and the watchdog's
                "policy_stats": numbers(self.loop.policy.stats())}

    def _warn_clamped(self) -> None:
        """One warning line, the first time BPF (or the loop) had to bring a parameter into range."""
        assert self.shared is not None and self.loop is not None
        if self._clamp_warned:
            return
        clamped = self.shared.get("nr_param_clamped")
        if clamped or self.loop.stats.saturated:
            self._clamp_warned = True
            log.warning("the policy set parameters out of range; they were clamped (counted in "
                        "nr_param_clamped)", policy=self.loop.policy.name, clamped=clamped,
                        saturated=self.loop.stats.saturated)

    def _on_signal(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if self._stop.reason is not None and self._stop.reason.startswith("signal"):
            self._force_exit(name)
        self._stop.reason = f"signal {name}"
        shared = self.shared
        if self._in_loop and shared is not None and shared.counters[POLICY_SINCE]:
            raise StopRequested(name)

    def _force_exit(self, signame: str) -> None:
        """The second signal: detach now and end the process, whatever the main thread was doing."""
        self.detach()
        sys.stderr.write(f"scxctl: second {signame}: pyland detached, exiting at once\n")
        sys.stderr.flush()
        os._exit(ExitCode.INTERRUPTED)

    def _on_stuck(self, report: StuckReport) -> None:
        self.stuck = report
        wd = self.watchdog
        log.warning("policy watchdog tripped", overrun_ms=round(report.overrun_ns / 1e6, 1),
                    where=report.where, heartbeat_alarms=wd.alarms if wd else 0)
        self._stop.reason = self._stop.reason or "policy stuck"

    # -- attach, loop, detach

    def detach(self) -> None:
        """Idempotent and thread-safe: the watchdog thread and a second signal call it too."""
        with self._detach_lock:
            if self.link is not None and self.link.attached:
                self.link.destroy()

    def run(self) -> RunResult:
        assert self.obj is not None and self.loop is not None and self.shared is not None
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        old_wakeup = signal.set_wakeup_fd(wfd)  # a signal wakes the epoll wait at once
        old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        atexit.register(self.detach)
        try:
            while True:
                info, failure = self._run_attached(rfd)
                if not self._should_restart(info):
                    return self._result(info, failure)
                if len(self._restart_times) >= RESTART_LIMIT:
                    return too_many_restarts(self._result(info, failure), len(self._restart_times),
                                             RESTART_WINDOW_S)
                assert info is not None  # a restart is only asked for with exit info
                self._restart(info)
        finally:
            self.detach()
            gc.enable()
            signal.set_wakeup_fd(old_wakeup)
            for s, h in old_handlers.items():
                signal.signal(s, h)
            os.close(rfd)
            os.close(wfd)
            atexit.unregister(self.detach)

    def _should_restart(self, info: ExitInfo | None) -> bool:
        if self._stop.reason != "kernel" or not restart_requested(info):
            return False
        now = time.monotonic()
        while self._restart_times and now - self._restart_times[0] > RESTART_WINDOW_S:
            self._restart_times.popleft()
        return True

    def _restart(self, info: ExitInfo) -> None:
        self.restarts += 1
        self._restart_times.append(time.monotonic())
        log.warning("pyland restarting", reason=info.describe(),
                    restarts=self.restarts, restarts_in_window=len(self._restart_times))
        t0 = time.monotonic()
        self._reset_attachment()
        self._reset_ms = round((time.monotonic() - t0) * 1e3, 1)
        self._load_ms = 0.0  # nothing is loaded again
        self._stop.reason = None

    def _reset_attachment(self) -> None:
        """Make the detached object look freshly loaded to its next attachment.

        The kernel finished with the last one (detach() waits for its disable work, ops.exit
        stopped the BPF timers), so nothing writes the maps until the next attach. BPF resets its
        per-task and per-CPU state itself (ops.init_task, ops.init); the records the loop had not
        read are dropped here, as a new object's empty ring would, and .bss is zeroed: the
        counters of one attachment and its exit info, which a new attachment must not see.
        """
        assert self.loop is not None and self.shared is not None
        self.detach()
        self._totals.update(self.loop.stats.as_dict())
        snap = self.shared.snapshot()
        self._bpf_totals.update({k: snap[k] for k in EVENT_COUNTERS})
        reader, writer, reports = self.loop.reader, self.loop.writer, self.loop.reports
        dropped = discard_records(reader)
        if reports is not None:
            discard_records(reports)  # what tasks did under the last attachment: stale news
        self.shared.clear()
        self.loop = SchedulerLoop(reader, writer, self.shared, self.loop.policy, reports=reports)
        self._confirmed = False
        self._kernel_exit = False
        if dropped:
            log.info("pyland dropped records of the last attachment", records=dropped)

    def _attach(self) -> None:
        assert self.obj is not None
        self._attach_started = time.monotonic()
        self.link = self.obj.attach_struct_ops(PARTIAL_OPS_MAP if self.opts.partial else OPS_MAP)
        self._attach_ms = round((time.monotonic() - self._attach_started) * 1e3, 1)

    def _run_attached(self, rfd: int) -> tuple[ExitInfo | None, PolicyFailed | None]:
        """One attachment: attach, watch the policy, loop, detach; the exit info ops.exit recorded."""
        assert self.obj is not None and self.loop is not None and self.shared is not None
        assert self.policy is not None
        failure: PolicyFailed | None = None
        t0 = time.monotonic()
        harden()
        now = time.monotonic()
        self._harden_ms = round((now - t0) * 1e3, 1)
        self._attach_deadline = now + self.opts.attach_timeout
        self._next_stats = now + self.opts.stats_interval
        if self.steer:  # drained by the first dispatch: until then every task is class 0's default
            self.loop.send_classes(self.policy.class_params())
        with set_up_priority():
            self._attach()
        if self.opts.policy_budget_ms > 0:
            self.watchdog = PolicyWatchdog(self.shared.counters, self.opts.policy_budget_ms * NSEC_PER_MSEC,
                                           self.policy.name, _policy_file(self.policy), self.detach,
                                           exit_code=ExitCode.FAILURE, on_trip=self._on_stuck,
                                           alarm=self.alarm)
            self.watchdog.start()
        try:
            self._in_loop = True
            # the BPF heartbeat judges the loop from here, not from the attach (check_progress)
            self.shared.counters[PROGRESS_AT] = time.monotonic_ns()
            self.loop.run(self._stop, self._service, extra_fds=(rfd,),
                          wait_s=STEER_WAIT_S if self.steer else DEFAULT_WAIT_S)
        except PolicyFailed as exc:
            failure = exc
        except (PolicyStuck, StopRequested):
            pass  # the reason is in self.stuck / self._stop
        finally:
            self._in_loop = False
            self._quiesce()
            t0 = time.monotonic()
            self.detach()  # first, whatever happened: the machine must not wait for a dead loop
            log.info("pyland detached", reason=self._stop.reason,
                     detach_ms=round((time.monotonic() - t0) * 1e3, 1))
        return self._wait_exit_info(), failure

    def _quiesce(self) -> None:
        """Stop the watchdog; a PolicyStuck it raised just before stopping may still arrive here."""
        assert self.shared is not None
        while True:
            try:
                self.shared.counters[POLICY_SINCE] = 0
                if self.watchdog is not None:
                    self.watchdog.stop()
                    self.watchdog = None
                return
            except PolicyStuck:
                continue

    def _wait_exit_info(self) -> ExitInfo | None:
        assert self.shared is not None
        deadline = time.monotonic() + self.opts.exit_timeout
        while self.shared.exit_kind() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.shared.exit_info() if self.shared.exit_kind() != 0 else None

    def _stats(self) -> dict[str, int]:
        assert self.loop is not None
        totals = collections.Counter(self._totals)
        totals.update(self.loop.stats.as_dict())
        return {k: totals[k] for k in self.loop.stats.as_dict()}

    def _bpf_stats(self) -> dict[str, int]:
        """The shared counters now, with the events of earlier attachments added in."""
        assert self.shared is not None
        snap = self.shared.snapshot()
        return {k: v + self._bpf_totals[k] for k, v in snap.items()}

    def _result(self, info: ExitInfo | None, failure: PolicyFailed | None) -> RunResult:
        assert self.loop is not None and self.shared is not None
        return outcome(info, stuck=self.stuck, failure=failure, stop_reason=self._stop.reason,
                       kernel_exit=self._kernel_exit, loop_stats=self._stats(),
                       bpf_stats=self._bpf_stats(), restarts=self.restarts)

    def close(self) -> None:
        t0 = time.monotonic()
        self._close_object()
        self.stats_report.close()
        log.debug("pyland closed", close_ms=round((time.monotonic() - t0) * 1e3, 1))


def _policy_file(policy: Policy) -> str | None:
    try:
        return inspect.getsourcefile(type(policy))
    except TypeError:
        return None


def run_pyland(opts: RunOptions) -> RunResult:
    sched = Scheduler(opts)
    try:
        sched.prepare()
        return sched.run()
    finally:
        sched.close()
