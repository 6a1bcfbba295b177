"""Runs pyland in the foreground: checks, load, harden, attach, loop, detach, say why it stopped.

Order matters and each step says why:
1. everything that can fail with a user error (policy file, sched_ext present, root, another
   scheduler, object missing or stale, libbpf, verifier) fails BEFORE anything is attached;
2. the process is hardened before attaching -- memory locked (a page fault may need a kthread only
   pyland can schedule), gc frozen and disabled (a collection is a scheduling stall), everything
   imported -- because once attached, every task on the machine waits for this one thread;
3. attach, then run the loop at once; the loop itself confirms sysfs shows pyland enabled (ops.init
   can fail after a "successful" attach);
4. every exit path detaches (try/finally, atexit, SIGINT/SIGTERM through the loop), then reports the
   exit kind, reason and message the BPF side recorded in ops.exit.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import os
import resource
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from scxctl import log as logsetup
from scxctl.bpf import object as bpfobject
from scxctl.bpf.libbpf import BpfLink, BpfObject
from scxctl.bpf.ringbuf import open_reader, open_writer
from scxctl.errors import ExitCode, PermissionDenied, ScxctlError
from scxctl.pyland.loop import PolicyFailed, SchedulerLoop
from scxctl.pyland.policy import NSEC_PER_MSEC, NSEC_PER_USEC, PolicyOptions, load_policy
from scxctl.pyland.records import COMPAT_MISSING, CONFIG, OPS_NAME
from scxctl.pyland.shared import EXIT_UNREG, ExitInfo, SharedState
from scxctl.sysfs import STATE_DISABLED, SysRoot, read_sched_ext

log = logsetup.get_logger("scxctl.pyland")

OPS_MAP = "pyland_ops"
PARTIAL_OPS_MAP = "pyland_partial_ops"
TIMER_NS = 100 * NSEC_PER_MSEC
MCL_CURRENT, MCL_FUTURE = 1, 2


@dataclass
class RunOptions:
    policy: str = "deadline"
    builtin_idle: bool = True
    slice_us: int = 20_000  # user-space budget
    slice_min_us: int = 1_000  # BPF default/refill slice
    partial: bool = False
    stats_interval: float = 5.0  # 0: no periodic summary
    max_backlog: int = 1024  # records Python may be behind before BPF schedules new tasks itself
    direct_wake: bool = True  # latency-critical tasks (the policy's preempt) wake without a round trip
    starve_ms: int = 1000  # a task waiting this long in a DSQ runs next, whatever its deadline
    allow_stale: bool = False
    attach_timeout: float = 10.0  # seconds for sysfs to show pyland enabled after attach
    exit_timeout: float = 5.0  # seconds to wait for ops.exit after detaching
    object_path: Path | None = None  # None: the search order of scxctl.bpf.object
    sysroot: SysRoot = field(default_factory=SysRoot)


@dataclass
class RunResult:
    exit: ExitInfo | None
    stopped_by: str  # "signal SIGTERM", "kernel", "policy error", "attach check"
    code: ExitCode
    message: str
    loop_stats: dict[str, int]
    bpf_stats: dict[str, int]


def preflight(sysroot: SysRoot) -> None:
    """The errors a user can act on, in the order worth fixing them."""
    st = read_sched_ext(sysroot)
    if not st.available:
        raise ScxctlError("this kernel cannot run sched_ext schedulers (no /sys/kernel/sched_ext)",
                          ExitCode.UNSUPPORTED,
                          hint="boot a kernel with CONFIG_SCHED_CLASS_EXT=y, or run it in the VM: "
                               "python -m tools.vm run -- scxctl run")
    if os.geteuid() != 0:
        raise PermissionDenied("scxctl run needs root (CAP_BPF and CAP_SYS_ADMIN to attach a scheduler)")
    if st.ops or (st.state is not None and st.state != STATE_DISABLED):
        raise ScxctlError(f"another sched_ext scheduler is loaded: {st.ops or '?'} (state {st.state})",
                          ExitCode.BUSY, hint="stop it first")


def policy_options(opts: RunOptions) -> PolicyOptions:
    """What the policy and the BPF config are both derived from (raises UsageError when inconsistent)."""
    return PolicyOptions(nr_cpus=os.cpu_count() or 1, slice_ns=opts.slice_us * NSEC_PER_USEC,
                         min_slice_ns=opts.slice_min_us * NSEC_PER_USEC, builtin_idle=opts.builtin_idle)


def open_configured(path: Path, opts: RunOptions) -> BpfObject:
    """The pyland object opened and configured for `opts`, not yet loaded.

    The one place that configures the object, so that `scxctl doctor`'s trial load verifies exactly
    what `scxctl run` would load: the same .rodata and the same one of the two struct_ops maps."""
    popts = policy_options(opts)
    obj = BpfObject.open(path, sysroot=opts.sysroot)
    try:
        obj.set_rodata_bytes(0, CONFIG.pack(popts.min_slice_ns, os.getpid(), int(opts.builtin_idle), TIMER_NS,
                                            opts.max_backlog, opts.starve_ms * NSEC_PER_MSEC,
                                            popts.slice_ns if opts.direct_wake else 0))
        obj.map(OPS_MAP if opts.partial else PARTIAL_OPS_MAP).set_autocreate(False)
    except BaseException:
        obj.close()
        raise
    return obj


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


def _harden() -> None:
    """Lock memory and stop the garbage collector; called after start-up, before attaching."""
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise RLIMIT_MEMLOCK", error=str(exc))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mlockall(MCL_CURRENT | MCL_FUTURE) != 0:
        log.warning("mlockall failed: the scheduler may page-fault", errno=ctypes.get_errno())
    gc.collect()
    gc.freeze()
    gc.disable()


class _Stop:
    """Why the loop should stop; set from signal handlers and service checks."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def __call__(self) -> bool:
        return self.reason is not None


class Scheduler:
    def __init__(self, opts: RunOptions) -> None:
        self.opts = opts
        self.obj: BpfObject | None = None
        self.link: BpfLink | None = None
        self.shared: SharedState | None = None
        self.loop: SchedulerLoop | None = None
        self._stop = _Stop()
        self._confirmed = False
        self._attach_deadline = 0.0
        self._next_stats = 0.0
        self._kernel_exit = False

    # -- set-up, all before attach

    def prepare(self) -> None:
        o = self.opts
        policy = load_policy(o.policy, policy_options(o))  # USAGE errors, validated before anything else
        preflight(o.sysroot)
        path = o.object_path or bpfobject.resolve(o.allow_stale)
        self.obj = obj = open_configured(path, o)
        obj.load()
        self.shared = SharedState(obj.map(".bss").initial_value())
        reader = open_reader(obj.map("queued").fd)
        writer = open_writer(obj.map("dispatched").fd)
        self.loop = SchedulerLoop(reader, writer, self.shared, policy)
        log.info("pyland loaded", object=str(path), policy=policy.name, partial=o.partial,
                 builtin_idle=o.builtin_idle, direct_wake=o.direct_wake, slice_us=o.slice_us,
                 slice_min_us=o.slice_min_us)

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
                log.info("pyland enabled", state=st.state, ops=st.ops, switch_all=st.switch_all)
                if missing := compat_missing(self.shared.snapshot()["compat_missing"]):
                    log.warning("this kernel cannot give pyland some facilities; it runs without them",
                                kernel=os.uname().release, missing=missing)
            elif now > self._attach_deadline:
                self._stop.reason = f"attach check: state={st.state} ops={st.ops}"
        if self.opts.stats_interval > 0 and now >= self._next_stats:
            self._next_stats = now + self.opts.stats_interval
            log.info("pyland stats", **self.loop.stats.as_dict(), **self.shared.snapshot(),
                     **{f"policy_{k}": v for k, v in self.loop.policy.stats().items()})

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._stop.reason = f"signal {signal.Signals(signum).name}"

    # -- attach, loop, detach

    def detach(self) -> None:
        if self.link is not None and self.link.attached:
            self.link.destroy()

    def run(self) -> RunResult:
        assert self.obj is not None and self.loop is not None and self.shared is not None
        loop = self.loop
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        old_wakeup = signal.set_wakeup_fd(wfd)  # a signal wakes the epoll wait at once
        old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        atexit.register(self.detach)
        failure: PolicyFailed | None = None
        _harden()
        try:
            now = time.monotonic()
            self._attach_deadline = now + self.opts.attach_timeout
            self._next_stats = now + self.opts.stats_interval
            self.link = self.obj.attach_struct_ops(PARTIAL_OPS_MAP if self.opts.partial else OPS_MAP)
            try:
                loop.run(self._stop, self._service, extra_fds=(rfd,))
            except PolicyFailed as exc:
                failure = exc
        finally:
            self.detach()  # first, whatever happened: the machine must not wait for a dead loop
            gc.enable()
            signal.set_wakeup_fd(old_wakeup)
            for s, h in old_handlers.items():
                signal.signal(s, h)
            os.close(rfd)
            os.close(wfd)
            atexit.unregister(self.detach)
        info = self._wait_exit_info()
        return self._result(info, failure)

    def _wait_exit_info(self) -> ExitInfo | None:
        assert self.shared is not None
        deadline = time.monotonic() + self.opts.exit_timeout
        while self.shared.exit_kind() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.shared.exit_info() if self.shared.exit_kind() != 0 else None

    def _result(self, info: ExitInfo | None, failure: PolicyFailed | None) -> RunResult:
        assert self.loop is not None and self.shared is not None
        stats = self.loop.stats.as_dict()
        bpf_stats = self.shared.snapshot()
        why = info.describe() if info else "no exit info recorded"
        if failure is not None:
            cause = failure.__cause__
            where = ""
            tb = cause.__traceback__ if cause else None
            while tb is not None:
                where = f" ({os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno})"
                tb = tb.tb_next
            return RunResult(info, "policy error", ExitCode.FAILURE,
                             f"{failure}{where}; pyland detached ({why})", stats, bpf_stats)
        reason = self._stop.reason or "?"
        if self._kernel_exit and info is not None and info.kind != EXIT_UNREG:
            return RunResult(info, "kernel", ExitCode.EJECTED, f"the kernel ejected pyland: {why}",
                             stats, bpf_stats)
        if reason.startswith("attach check"):
            return RunResult(info, "attach check", ExitCode.FAILURE,
                             f"pyland attached but sysfs never showed it enabled ({reason}): {why}",
                             stats, bpf_stats)
        if info is None or info.kind == EXIT_UNREG:
            return RunResult(info, reason, ExitCode.OK, f"pyland stopped ({reason}): {why}", stats, bpf_stats)
        return RunResult(info, reason, ExitCode.EJECTED, f"pyland stopped ({reason}): {why}",
                         stats, bpf_stats)

    def close(self) -> None:
        self.detach()
        if self.loop is not None:
            for end in (self.loop.reader, self.loop.writer):
                close = getattr(end, "close", None)
                if close is not None:
                    close()
        if self.shared is not None:
            self.shared.release()
        if self.obj is not None:
            self.obj.close()


def run_pyland(opts: RunOptions) -> RunResult:
    sched = Scheduler(opts)
    try:
        sched.prepare()
        return sched.run()
    finally:
        sched.close()
