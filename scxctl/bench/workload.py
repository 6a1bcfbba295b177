"""`scxctl bench workload`: any command, run under several schedulers in rotating order, compared.

Every round runs the command once under each scheduler; the order rotates from round to round, so
no scheduler always goes first (back-to-back runs are not alike: the second is often faster, the
machine warmer). Warm-up rounds run the same way and are not counted. Before each run the
scheduler is started and confirmed enabled (RunningScheduler), and it is stopped after; a run
under `default` is invalid if any sched_ext scheduler was loaded during it, a run under a
sched_ext scheduler if that scheduler left.

The command runs in its own session (its process group is killed after the run, so no straggler
loads the next one), with its output in a file. The harness waits on a pidfd and wakes once a
second to check the scheduler and draw the progress, and records its own CPU time per run. The
command gets no parent-death signal (a preexec_fn would make every spawn a full fork): a bench
killed with SIGKILL leaves it running; the scheduler it started still gets its SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import resource
import select
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from scxctl.bench import ab_stats, parsers
from scxctl.bench.runner import machine_facts
from scxctl.bench.scheduler import (
    RunningScheduler,
    SchedulerLeft,
    SchedulerSpec,
    check_can_start,
    parse_scheduler,
)
from scxctl.bench.topology import load_topology
from scxctl.errors import ExitCode, PermissionDenied, ScxctlError, UsageError
from scxctl.log import get_logger
from scxctl.sysfs import SysRoot, read_sched_ext

log = get_logger("scxctl.bench.workload")

SCHEMA_ID = "scxctl.bench.workload/1"
DEFAULT_ROUNDS = ab_stats.MIN_VERDICT_ROUNDS  # the fewest that can give a verdict
DEFAULT_WARMUP = 1
POLL_S = 1.0  # the harness's wake-ups while a command runs: health check and progress
KILL_GRACE_S = 2.0  # SIGTERM to the command's group, then SIGKILL
FLOOR_RUNS = 5  # spawn-and-wait of /bin/true, the least any run can measure
OUTPUT_TAIL = 8 << 20  # bytes of a run's output the recognisers read (its end holds the summaries)
ERROR_LINE = 200  # characters of a failed run's last output line kept as its `error`
SCHED_EXT = 7  # SCHED_EXT policy: the command joins a scheduler started with --partial
WALL, CPU = "wall_s", "cpu_s"


def rotated(items: list[Any], i: int) -> list[Any]:
    """`items` starting at its i-th (modulo its length): in round i, item i goes first."""
    k = i % len(items)
    return items[k:] + items[:k]


@dataclass(frozen=True)
class RunAs:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str


def resolve_user(name: str) -> RunAs:
    try:
        pw = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, ValueError):
        raise UsageError(f"--user {name}: no such user") from None
    if os.geteuid() != 0:
        raise PermissionDenied("--user runs the command as another user, which needs root")
    return RunAs(pw.pw_name, pw.pw_uid, pw.pw_gid, tuple(os.getgrouplist(pw.pw_name, pw.pw_gid)), pw.pw_dir)


def resolve_command(argv: list[str]) -> list[str]:
    """The command as given, once it is known to exist and be executable (else a usage error)."""
    if not argv:
        raise UsageError("no command to run: give it after --, e.g. -- hackbench -g 1 -l 50")
    prog = argv[0]
    if "/" in prog:
        if not Path(prog).is_file() or not os.access(prog, os.X_OK):
            raise UsageError(f"command {prog} does not exist or is not executable")
    elif shutil.which(prog) is None:
        raise UsageError(f"command {prog!r} not found in PATH")
    return list(argv)


def parse_compare(text: str, partial: bool = False, ops_name: str | None = None) -> list[SchedulerSpec]:
    """`default,pyland[:POLICY],PATH [ARGS]`: each entry split like a shell word list.

    A scheduler named twice (an A/A comparison) gets `#2`, `#3` on its label.
    """
    specs: list[SchedulerSpec] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        try:
            name, *args = shlex.split(entry)
        except ValueError as exc:
            raise UsageError(f"--compare {entry!r}: {exc}") from None
        spec = parse_scheduler(name, args, partial and name != "default", ops_name)
        if args:
            spec = replace(spec, label=f"{spec.label} {' '.join(args)}")
        seen = sum(1 for s in specs if s.label.split("#")[0] == spec.label)
        specs.append(replace(spec, label=f"{spec.label}#{seen + 1}") if seen else spec)
    if not specs:
        raise UsageError("--compare needs at least one scheduler, e.g. --compare default,pyland")
    return specs


@dataclass
class WorkloadOptions:
    command: list[str]
    schedulers: list[SchedulerSpec]
    rounds: int = DEFAULT_ROUNDS
    warmup: int = DEFAULT_WARMUP
    metrics: list[parsers.CustomMetric] = field(default_factory=list)
    timeout_s: float | None = None
    user: RunAs | None = None
    keep_output: Path | None = None
    start_timeout_s: float = 60.0


@dataclass
class Hooks:
    """What the terminal display plugs in (all optional)."""

    run_start: Callable[[dict[str, Any], int, int], None] = field(default=lambda run, done, total: None)
    waiting: Callable[[float], None] = field(default=lambda elapsed: None)
    run_end: Callable[[dict[str, Any]], None] = field(default=lambda run: None)


def validate(opts: WorkloadOptions) -> None:
    if opts.rounds < 1:
        raise UsageError(f"--rounds must be at least 1, not {opts.rounds}")
    if opts.warmup < 0:
        raise UsageError(f"--warmup must not be negative, not {opts.warmup}")
    if opts.timeout_s is not None and opts.timeout_s <= 0:
        raise UsageError(f"--timeout must be positive, not {opts.timeout_s:g}")
    if opts.keep_output is not None:
        try:
            opts.keep_output.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--keep-output {opts.keep_output}: {exc.strerror}") from None


# --- one run of the command -------------------------------------------------------------------------


@dataclass
class Execution:
    status: str  # ok | failed | timeout | invalid
    exit_status: int | None  # the command's exit code; -N when a signal ended it
    wall_s: float
    user_s: float
    sys_s: float
    harness_cpu_s: float
    harness_wakeups: int
    invalid_reason: str | None = None


def _self_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _join_sched_ext() -> None:
    """In the child: SCHED_EXT, so that a scheduler started with --partial schedules the command."""
    os.sched_setscheduler(0, SCHED_EXT, os.sched_param(0))


@contextlib.contextmanager
def _interrupts_held() -> Iterator[list[int]]:
    """Hold SIGINT and SIGTERM while the command starts, and list those that came.

    A KeyboardInterrupt raised inside Popen, after the fork, loses the child's pid: nothing could
    then kill the command's group. Only the main thread can set handlers; elsewhere none are held.
    """
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    old = {sig: signal.signal(sig, lambda signum, _frame: held.append(signum))
           for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield held
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _stop_group(proc: subprocess.Popen[bytes], reaped: bool) -> None:
    """The command must not outlive its run, whether it ended, timed out or was interrupted."""
    if not reaped:  # Ctrl-C or an error while waiting
        _kill_group(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.wait4(proc.pid, 0)
        proc.returncode = -signal.SIGKILL
    _kill_group(proc.pid, signal.SIGKILL)  # whatever of its group is left


def execute(argv: list[str], output: IO[bytes], *, timeout_s: float | None = None,
            run_as: RunAs | None = None, partial: bool = False,
            health: Callable[[], str | None] = lambda: None,
            waiting: Callable[[float], None] = lambda elapsed: None) -> Execution:
    """Run `argv` to its end (or its timeout, or its scheduler's departure); its group is killed after."""
    env = None
    if run_as is not None:
        env = {**os.environ, "HOME": run_as.home, "USER": run_as.name, "LOGNAME": run_as.name}
    cpu0 = _self_cpu_s()
    wakeups = 0
    status, reason = "ok", None
    proc: subprocess.Popen[bytes] | None = None
    pidfd = -1
    reaped = False
    t0 = time.monotonic()
    try:
        with _interrupts_held() as held:
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                    # no preexec_fn unless needed: it costs every spawn a full fork (1.7 ms on a dev host)
                    start_new_session=True, preexec_fn=_join_sched_ext if partial else None, env=env,
                    user=run_as.uid if run_as else None, group=run_as.gid if run_as else None,
                    extra_groups=list(run_as.groups) if run_as else None)
            except OSError as exc:
                raise ScxctlError(f"cannot start {argv[0]}: {exc.strerror}") from None
            pidfd = os.pidfd_open(proc.pid)
        if held:  # now that the group is known, the interrupt can take its course
            signal.raise_signal(held[0])
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        deadline = None if timeout_s is None else t0 + timeout_s
        while True:
            wait = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
            if wait > 0 and poller.poll(wait * 1000):
                break  # the command exited
            if deadline is not None and time.monotonic() >= deadline:
                status = "timeout"
                break
            wakeups += 1
            reason = health()
            if reason is not None:
                status = "invalid"
                break
            waiting(time.monotonic() - t0)
        if status != "ok":
            _kill_group(proc.pid, signal.SIGTERM)
            if not poller.poll(KILL_GRACE_S * 1000):
                _kill_group(proc.pid, signal.SIGKILL)
        _, wstatus, ru = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        reaped = True
        proc.returncode = code = os.waitstatus_to_exitcode(wstatus)
    finally:
        if proc is not None:
            _stop_group(proc, reaped)
        if pidfd >= 0:
            os.close(pidfd)
    if status == "ok" and code != 0:
        status = "failed"
    return Execution(status, code, wall, ru.ru_utime, ru.ru_stime, _self_cpu_s() - cpu0, wakeups, reason)


# --- the machine between runs ----------------------------------------------------------------------


def machine_state(sysroot: SysRoot | None = None) -> dict[str, Any]:
    """Load and sched_ext state, read before and after every run."""
    sr = sysroot or SysRoot()
    load1 = running = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = sr.read_text("/proc/loadavg").split()
        load1, running = float(fields[0]), int(fields[3].partition("/")[0])
    st = read_sched_ext(sr)
    return {"loadavg_1m": load1, "procs_running": running,
            "sched_ext_state": st.state, "ops": st.ops, "enable_seq": st.enable_seq}


def _default_health(before: dict[str, Any], sysroot: SysRoot | None) -> Callable[[], str | None]:
    """Under `default`, any sched_ext scheduler loaded during the run makes it invalid."""
    def check() -> str | None:
        st = read_sched_ext(sysroot)
        if st.enabled or st.ops:
            return f"another sched_ext scheduler ({st.ops or 'unknown'}) was loaded during the run"
        if st.enable_seq != before["enable_seq"]:
            return (f"a sched_ext scheduler was loaded and unloaded during the run (enable_seq "
                    f"{before['enable_seq']} -> {st.enable_seq})")
        return None
    return check


def _sched_health(sched: RunningScheduler) -> Callable[[], str | None]:
    def check() -> str | None:
        try:
            sched.check()
        except SchedulerLeft as exc:
            return exc.message
        return None
    return check


def _output_file(opts: WorkloadOptions, rnd: int | None, pos: int, label: str
                 ) -> tuple[IO[bytes], str | None]:
    if opts.keep_output is None:
        return tempfile.TemporaryFile(), None
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    if rnd is None:
        name = "probe.log"
    elif rnd < 0:
        name = f"warmup{-rnd:02d}-{pos + 1}-{safe}.log"
    else:
        name = f"round{rnd + 1:02d}-{pos + 1}-{safe}.log"
    path = opts.keep_output / name
    return path.open("w+b"), str(path)


def _last_line(text: str) -> str | None:
    """The last line with something on it, cut to ERROR_LINE characters; None for no output."""
    return text.rstrip().rpartition("\n")[2].strip()[:ERROR_LINE] or None


def _read_tail(f: IO[bytes]) -> str:
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - OUTPUT_TAIL))
    return f.read().decode(errors="replace")


def _metrics(text: str, opts: WorkloadOptions, catalog: dict[str, dict[str, Any]]
             ) -> tuple[dict[str, float], list[str]]:
    """The run's recognised and custom metrics, and the custom ones its output did not have."""
    found: dict[str, float] = {}
    missing = []
    candidates = parsers.recognise(text)
    for custom in opts.metrics:
        m = custom.find(text)
        if m is None:
            missing.append(custom.name)
        else:
            candidates.append(m)
    for m in candidates:
        found[m.name] = m.value
        catalog.setdefault(m.name, {"direction": m.direction, "unit": m.unit, "source": m.source})
    return found, missing


def _one_run(opts: WorkloadOptions, spec: SchedulerSpec | None, rnd: int | None, pos: int, hooks: Hooks,
             catalog: dict[str, dict[str, Any]], sysroot: SysRoot | None) -> dict[str, Any]:
    """One run of the command under `spec` (None: the probe, round None, nothing switched)."""
    label = spec.label if spec is not None else "probe"
    run: dict[str, Any] = {
        "round": rnd, "warmup": rnd is None or rnd < 0, "position": pos, "scheduler": label,
        "status": "error", "exit_status": None, WALL: None, CPU: None, "user_s": None, "sys_s": None,
        "metrics": {}, "missing_metrics": [], "before": machine_state(sysroot), "after": None,
        "scheduler_facts": None, "invalid_reason": None, "error": None, "output": None,
        "harness_cpu_s": None, "harness_wakeups": None,
    }
    out, run["output"] = _output_file(opts, rnd, pos, label)
    try:
        ex = _run_under(opts, spec, run, out, hooks, sysroot)
        if ex is not None:
            run.update(status=ex.status, exit_status=ex.exit_status, invalid_reason=ex.invalid_reason,
                       user_s=round(ex.user_s, 4), sys_s=round(ex.sys_s, 4),
                       harness_cpu_s=round(ex.harness_cpu_s, 4), harness_wakeups=ex.harness_wakeups)
            run[WALL] = round(ex.wall_s, 6)
            run[CPU] = round(ex.user_s + ex.sys_s, 4)
            tail = _read_tail(out)
            run["metrics"], run["missing_metrics"] = _metrics(tail, opts, catalog)
            if ex.status == "failed":  # why, kept even when the output is not (--keep-output)
                run["error"] = _last_line(tail)
    finally:
        out.close()
        run["after"] = machine_state(sysroot)
    return run


def _run_under(opts: WorkloadOptions, spec: SchedulerSpec | None, run: dict[str, Any], out: IO[bytes],
               hooks: Hooks, sysroot: SysRoot | None) -> Execution | None:
    """Start the scheduler, run the command, stop the scheduler; None when the scheduler did not start."""
    def go(health: Callable[[], str | None], partial: bool = False) -> Execution:
        return execute(opts.command, out, timeout_s=opts.timeout_s, run_as=opts.user, partial=partial,
                       health=health, waiting=hooks.waiting)

    if spec is None:
        return go(lambda: None)
    if spec.kind == "default":
        before = run["before"]
        if before["sched_ext_state"] == "enabled" or before["ops"]:
            reason = f"another sched_ext scheduler ({before['ops'] or 'unknown'}) was loaded before the run"
            ex = go(lambda: None)
            ex.status, ex.invalid_reason = "invalid", reason
            return ex
        return go(_default_health(before, sysroot))
    try:
        with RunningScheduler(spec, sysroot, opts.start_timeout_s) as sched:
            run["scheduler_facts"] = sched.facts()
            return go(_sched_health(sched), partial=sched.partial)
    except ScxctlError as exc:
        if exc.code == ExitCode.PERMISSION:
            raise
        run["error"] = exc.message
        log.warning("scheduler did not start", scheduler=spec.label, error=exc.message)
        return None


# --- the whole comparison --------------------------------------------------------------------------


def _floor(sysroot: SysRoot | None) -> dict[str, Any]:
    """What spawning and reaping a command costs the wall time, measured as every run is."""
    walls = []
    for _ in range(FLOOR_RUNS + 1):  # the first pays for cold caches: not counted
        with tempfile.TemporaryFile() as out:
            walls.append(execute(["/bin/true"], out).wall_s)
    walls = walls[1:]
    return {"command": "/bin/true", "runs": FLOOR_RUNS, "poll_interval_s": POLL_S,
            "wall_s_median": round(sorted(walls)[len(walls) // 2], 6), "wall_s_max": round(max(walls), 6)}


def _probe(opts: WorkloadOptions, hooks: Hooks, catalog: dict[str, dict[str, Any]],
           sysroot: SysRoot | None) -> dict[str, Any] | None:
    """With --metric: one run under the scheduler already running, before any switch, to check that
    every expression matches the command's output (a usage error otherwise)."""
    if not opts.metrics:
        return None
    hooks.run_start({"round": None, "warmup": True, "scheduler": "probe"}, 0, 0)
    probe = _one_run(opts, None, None, 0, hooks, catalog, sysroot)
    hooks.run_end(probe)
    if probe["status"] != "ok":
        raise ScxctlError(f"{shlex.join(opts.command)} {_what_happened(probe)} in its first run, before any "
                          f"scheduler was switched")
    if probe["missing_metrics"]:
        names = ", ".join(probe["missing_metrics"])
        raise UsageError(f"--metric {names}: no match in the command's output (first run, before any "
                         f"scheduler was switched)")
    return probe


def _what_happened(run: dict[str, Any]) -> str:
    if run["status"] == "timeout":
        return "timed out"
    if run["exit_status"] is not None and run["exit_status"] < 0:
        return f"was killed by signal {-run['exit_status']}"
    return f"exited with status {run['exit_status']}"


def run_workload(opts: WorkloadOptions, hooks: Hooks | None = None,
                 sysroot: SysRoot | None = None) -> dict[str, Any]:
    hooks = hooks or Hooks()
    validate(opts)
    if any(s.kind != "default" for s in opts.schedulers):
        check_can_start(sysroot)
    report: dict[str, Any] = {
        "schema": SCHEMA_ID,
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine_facts(load_topology(sysroot), sysroot),
        "options": {
            "command": opts.command, "rounds": opts.rounds, "warmup": opts.warmup,
            "timeout_s": opts.timeout_s, "user": opts.user.name if opts.user else None,
            "keep_output": str(opts.keep_output) if opts.keep_output else None,
            "metrics": [{"name": m.name, "regex": m.pattern.pattern, "direction": m.direction}
                        for m in opts.metrics],
        },
        "schedulers": [s.to_json() for s in opts.schedulers],
        "harness": _floor(sysroot),
        "probe": None,
        "order": [],
        "runs": [],
        "metrics": {},
        "results": {},
        "exit_code": None,
    }
    catalog: dict[str, dict[str, Any]] = {
        WALL: {"direction": parsers.LOWER, "unit": "s", "source": "harness"},
        CPU: {"direction": None, "unit": "s", "source": "harness"},
    }
    report["probe"] = _probe(opts, hooks, catalog, sysroot)
    total = (opts.warmup + opts.rounds) * len(opts.schedulers)
    for rnd in range(-opts.warmup, opts.rounds):
        order = rotated(opts.schedulers, rnd)
        report["order"].append({"round": rnd, "warmup": rnd < 0, "schedulers": [s.label for s in order]})
        for pos, spec in enumerate(order):
            hooks.run_start({"round": rnd, "warmup": rnd < 0, "scheduler": spec.label},
                            len(report["runs"]), total)
            run = _one_run(opts, spec, rnd, pos, hooks, catalog, sysroot)
            report["runs"].append(run)
            hooks.run_end(run)
    report["metrics"] = catalog
    report["results"] = results(report)
    report["exit_code"] = int(exit_code(report))
    return report


def results(report: dict[str, Any]) -> dict[str, Any]:
    """Per metric and scheduler: the summary over counted runs, and the ratio to the first scheduler."""
    labels = [s["name"] for s in report["schedulers"]]
    counted = [r for r in report["runs"] if not r["warmup"]]
    rounds = sorted({r["round"] for r in counted})

    def value(run: dict[str, Any], name: str) -> float | None:
        if run["status"] != "ok":
            return None
        return run[name] if name in (WALL, CPU) else run["metrics"].get(name)

    out: dict[str, Any] = {}
    for name, info in report["metrics"].items():
        by_label: dict[str, list[float | None]] = {lb: [None] * len(rounds) for lb in labels}
        for run in counted:
            by_label[run["scheduler"]][rounds.index(run["round"])] = value(run, name)
        per: dict[str, Any] = {}
        for lb in labels:
            present = [v for v in by_label[lb] if v is not None]
            summary = ab_stats.summarize(present)
            entry: dict[str, Any] = {"summary": summary.to_json() if summary else None,
                                     "values": by_label[lb], "vs_first": None, "verdict": None}
            if lb != labels[0]:
                ratio = ab_stats.paired_ratio(by_label[labels[0]], by_label[lb])
                entry["vs_first"] = ratio.to_json() if ratio else None
                entry["verdict"] = ab_stats.verdict(ratio, info["direction"])
            per[lb] = entry
        out[name] = {**info, "schedulers": per}
    return out


def exit_code(report: dict[str, Any]) -> ExitCode:
    statuses = {r["status"] for r in report["runs"]}
    if "invalid" in statuses:
        return ExitCode.EJECTED
    return ExitCode.OK if statuses <= {"ok"} else ExitCode.FAILURE
