"""`scxctl trace wakeup`: wake-up to run latency from the kernel's scheduler tracepoints (bcc)."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer

from scxctl import ui
from scxctl.errors import PermissionDenied, UsageError
from scxctl.trace import deps
from scxctl.trace.hist import Histogram, render_rows
from scxctl.units import fmt_ns

if TYPE_CHECKING:  # the tracer's module loads only when a trace runs
    from scxctl.trace.wakeup import Selector, WakeupTracer

SCHEMA = "scxctl.trace.wakeup/1"
ESTIMATE_NOTE = "percentiles estimated from quarter-octave buckets (within 25%); max is exact"

trace_app = typer.Typer(
    name="trace",
    help="Measure in the kernel (bcc): wake-up to run latency per process, name or cgroup.",
    no_args_is_help=True,
)


DURATION = typer.Option(None, "--duration", help="Stop after this many seconds (default: Ctrl-C).")
INTERVAL = typer.Option(None, "--interval", help="Print (or record in JSON) every S seconds.")
JSON_OUT = typer.Option(False, "--json",
                        help="Print one JSON document at the end (schema in docs/reference.md).")


def _histogram_json(h: Histogram) -> list[dict[str, int]]:
    return [{"low_ns": lo, "high_ns": hi, "count": n} for lo, hi, n in h.log2_rows()]


def _summary_line(label: str, h: Histogram) -> str:
    s = h.summary()
    return (f"{label}: {s['count']} wake-ups  p50 {fmt_ns(s['p50_ns'])}  p90 {fmt_ns(s['p90_ns'])}  "
            f"p99 {fmt_ns(s['p99_ns'])}  p99.9 {fmt_ns(s['p99_9_ns'])}  max {fmt_ns(s['max_ns'])}")


def _print_hist(label: str, h: Histogram) -> None:
    ui.line(_summary_line(label, h))
    for row in render_rows(h):
        ui.line("  " + row)


@dataclass
class _Run:
    """What one trace gathered: the total, each interval's summary, and when things happened."""

    total: Histogram
    lost: int
    elapsed_s: float
    intervals: list[dict[str, Any]] = field(default_factory=list)
    first_s: float | None = None  # from the command's start to the first interval's figures


def _selector(pid: int | None, comm: str | None, cgroup: str | None, duration: float | None,
              interval: float | None) -> Selector:
    """The filter the options ask for, once they are checked (each mistake a usage error)."""
    from scxctl.trace.wakeup import Selector, resolve_cgroup

    if sum(x is not None for x in (pid, comm, cgroup)) > 1:
        raise UsageError("give at most one of --pid, --comm, --cgroup")
    for name, v in (("--duration", duration), ("--interval", interval)):
        if v is not None and v <= 0:
            raise UsageError(f"{name} must be positive")
    if pid is not None and pid <= 0:
        raise UsageError("--pid must be a positive process id")
    return Selector(
        tgid=pid,
        comms=(comm,) if comm else (),
        cgroup=resolve_cgroup(cgroup) if cgroup is not None else None,
    )


def _sample_intervals(tracer: WakeupTracer, run: _Run, t0: float, started: float, duration: float | None,
                      interval: float | None, json_output: bool) -> None:
    """Read the tracer every `interval` s until `duration` or Ctrl-C; each interval printed or kept."""
    from scxctl.trace.wakeup import interval_hists

    before = tracer.read()
    end = math.inf if duration is None else started + duration
    next_tick = started + interval if interval is not None else math.inf
    try:
        while (now_t := time.monotonic()) < end:
            time.sleep(max(min(next_tick, end, now_t + 1.0) - now_t, 0.0))
            if time.monotonic() < next_tick:
                continue
            next_tick += interval or math.inf
            now = tracer.read()
            h = interval_hists(now, before)[0]
            before = now
            t = time.monotonic() - started
            run.first_s = time.monotonic() - t0 if run.first_s is None else run.first_s
            run.intervals.append({"end_s": round(t, 3), **h.summary()})
            if not json_output:
                _print_hist(f"[{t:7.1f}s]", h)
    except KeyboardInterrupt:
        pass


def _trace(tracer: WakeupTracer, sel: Selector, t0: float, duration: float | None, interval: float | None,
           json_output: bool) -> _Run:
    """Run the loaded tracer to the end, then close it: the totals and the intervals."""
    try:
        started = time.monotonic()
        ui.line(f"tracing wake-up latency ({sel.describe()}; compiled in {tracer.compile_s:.1f} s); "
                "Ctrl-C to stop", stderr=True)
        run = _Run(Histogram(), 0, 0.0)
        _sample_intervals(tracer, run, t0, started, duration, interval, json_output)
        run.total = tracer.read()[0]
        run.total.max_ns = tracer.overall_max()[0]
        run.lost = tracer.lost()
        run.elapsed_s = time.monotonic() - started
    finally:
        tracer.close()
    return run


def _print_json(sel: Selector, run: _Run, interval: float | None, compile_s: float) -> None:
    ui.print_json({
        "schema": SCHEMA,
        "kernel": deps.kernel_release(),
        "filter": sel.to_json(),
        "duration_s": round(run.elapsed_s, 3),
        "interval_s": interval,
        "compile_s": round(compile_s, 3),
        "first_interval_s": None if run.first_s is None else round(run.first_s, 3),
        "estimate": ESTIMATE_NOTE,
        "total": {**run.total.summary(), "histogram": _histogram_json(run.total)},
        "lost": run.lost,
        "intervals": run.intervals,
    })


def _print_text(run: _Run) -> None:
    _print_hist(f"total over {run.elapsed_s:.1f} s", run.total)
    ui.line(f"({ESTIMATE_NOTE})")
    if run.lost:
        ui.line(f"{run.lost} waits not counted: two tasks' stamps collided in the tracer's table")


def wakeup(
    pid: int | None = typer.Option(None, "--pid", help="Only this process (all its threads: the tgid)."),
    comm: str | None = typer.Option(None, "--comm", help="Only tasks with this name (first 15 characters)."),
    cgroup: str | None = typer.Option(
        None, "--cgroup", help="Only tasks in this cgroup v2 (and below it), e.g. /sys/fs/cgroup/app.slice."
    ),
    duration: float | None = DURATION,
    interval: float | None = INTERVAL,
    json_output: bool = JSON_OUT,
) -> None:
    """Wake-up to run latency of the woken tasks, measured in the kernel; totals at the end.

    From sched_waking/sched_wakeup_new (and a preemption) to sched_switch onto a CPU, aggregated
    in the kernel.

    Exit status: 0 done, 2 usage, 3 not root, 7 bcc or kernel headers missing.
    """
    from scxctl.trace.wakeup import open_tracer

    sel = _selector(pid, comm, cgroup, duration, interval)
    deps.require()
    if os.geteuid() != 0:
        raise PermissionDenied("scxctl trace loads BPF programs: run it as root")
    t0 = time.monotonic()
    tracer = open_tracer(sel)
    run = _trace(tracer, sel, t0, duration, interval, json_output)
    if json_output:
        _print_json(sel, run, interval, tracer.compile_s)
    else:
        _print_text(run)


def register(app: typer.Typer) -> None:
    trace_app.command("wakeup")(wakeup)
    app.add_typer(trace_app, name="trace")
