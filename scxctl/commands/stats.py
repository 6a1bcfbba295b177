"""`scxctl stats`: what the running scheduler does, per second and in total.

Read-only for anyone (the sources are world-readable sysfs files, pyland's snapshot and the daemon's
status reply); the reading and the arithmetic live in scxctl/daemon/stats.py, this module renders.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Any

import typer

from scxctl import ui
from scxctl.daemon import stats as lib
from scxctl.errors import ExitCode, ScxctlError, UsageError

SNAPSHOT_WAIT_S = 1.5  # one-shot: how much longer to wait for pyland's next snapshot (one a second)

LABELS = {
    "records": "records",
    "decisions": "decisions",
    "placed_in_bpf": "placed in BPF",
    "fallbacks": "fallbacks",
    "rescues": "rescues",
    "kicks": "kicks",
    "stalls": "stalls",
    "cgroup_holds": "cgroup holds",
}


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if isinstance(value, float) and not value.is_integer() else f"{int(value):,}"


def _row(label: str, per_s: float | None, total: float | None) -> str:
    return f"  {label:<28}{_num(per_s):>14}{_num(total):>16}"


def _exit_text(last: dict[str, Any] | None) -> str:
    if not last:
        return "none"
    return f"{last.get('kind')}: {last.get('reason')}"


def render(doc: dict[str, Any]) -> list[str]:
    """The document as lines for a person (the same lines once, or redrawn with -f)."""
    sx = doc["sched_ext"]
    lines = []
    if doc["exited"]:
        lines.append(f"scheduler:  {doc['previous']} exited during the interval; "
                     f"now {doc['scheduler'] or 'none'} (sched_ext {sx['state']})")
    elif not doc["loaded"]:
        lines.append(f"scheduler:  none loaded (sched_ext {sx['state'] or 'unreadable'})")
    else:
        lines.append(f"scheduler:  {doc['scheduler'] or '?'} (sched_ext {sx['state']}"
                     f"{', switch_all' if sx['switch_all'] else ''})")
    d = doc["daemon"]
    if d["running"]:
        want = d["desired"] or {}
        desired = (f"{want.get('scheduler')} mode {want.get('mode')}"
                   + (f" policy {want['policy']}" if want.get("policy") else "")) if want.get("enabled") \
            else "disabled"
        lines.append(f"daemon:     desired {desired}; {d['phase']}, restarts {d['restarts']}, "
                     f"re-attaches {d['reattaches']}; last exit {_exit_text(d['last_exit'])}")
    else:
        lines.append(f"daemon:     {d['error']}")
    p = doc["pyland"]
    if p is None and doc["loaded"] and not doc["exited"] and doc["scheduler"] == lib.PYLAND_OPS:
        lines.append("pyland:     no counters published (no pyland-stats.json: not written yet, or "
                     "another runtime directory)")
    if p is not None and not p["live"]:
        lines.append(f"pyland:     counters of pid {p['pid']} stale: {p['stale']} (not shown as live)")
    elif p is not None:
        lines.append(f"pyland:     pid {p['pid']}, policy {p['policy']}, {p['mode']} mode, "
                     f"restarts {p['restarts']}")
        lines.append(f"  {'':<28}{'per second':>14}{'total':>16}")
        per_s = p["per_s"] or {}
        for key, label in LABELS.items():
            lines.append(_row(label, per_s.get(key), p["total"][key]))
        for key, label in (("loop_cpu_s", "loop CPU"), ("process_cpu_s", "process CPU (all threads)")):
            cpu = per_s.get(key)
            lines.append(f"  {label:<28}{(f'{cpu * 100:.1f} %' if cpu is not None else '-'):>14}"
                         f"{p['total'][key]:>14.2f} s")
        if p["policy_stats"]:
            lines.append(f"policy {p['policy']}:")
            lines.extend(_row(name, None, value) for name, value in sorted(p["policy_stats"].items()))
    ev = doc["events"]
    if ev is not None:
        lines.append(f"kernel events:{'per second':>30}{'total':>16}")
        rates = ev["per_s"] or {}
        for name, value in sorted(ev["total"].items()):
            lines.append(_row(name.removeprefix("SCX_EV_").lower(), rates.get(name), value))
    elif doc["loaded"]:
        lines.append("kernel events: not reported by this kernel (no /sys/kernel/sched_ext/root/events)")
    return lines


def _check_kernel(sample: lib.Sample) -> None:
    if not sample.kernel.available:
        raise ScxctlError("this kernel cannot run sched_ext schedulers (no /sys/kernel/sched_ext)",
                          ExitCode.UNSUPPORTED, hint="boot a kernel with CONFIG_SCHED_CLASS_EXT=y")


def _second(first: lib.Sample, interval: float) -> lib.Sample:
    """The reading `interval` after `first`; for pyland, until its snapshot moved on (a little longer)."""
    time.sleep(interval)
    second = lib.take()
    deadline = time.monotonic() + SNAPSHOT_WAIT_S
    while first.live_pyland and second.live_pyland and not lib.newer_pyland(first, second) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
        second = dataclasses.replace(lib.take(daemon=False), daemon=second.daemon,
                                     daemon_error=second.daemon_error)
    return second


def _once(interval: float, json_output: bool) -> None:
    first = lib.take()
    _check_kernel(first)
    if not first.loaded:
        if json_output:
            ui.print_json(lib.document(None, first))
        else:
            ui.line(f"no sched_ext scheduler is loaded (sched_ext {first.kernel.state or 'unreadable'})")
        return
    doc = lib.document(first, _second(first, interval))
    if json_output:
        ui.print_json(doc)
    else:
        for line in render(doc):
            ui.line(line)


def _follow(interval: float, json_output: bool) -> None:
    prev: lib.Sample | None = None
    if json_output:
        while True:
            cur = lib.take()
            _check_kernel(cur)
            sys.stdout.write(json.dumps(lib.document(prev, cur), sort_keys=True) + "\n")
            sys.stdout.flush()
            prev = cur
            time.sleep(interval)
    from rich.live import Live
    from rich.text import Text

    cur = lib.take()
    _check_kernel(cur)
    with Live(Text("\n".join(render(lib.document(None, cur)))), console=ui.out,
              auto_refresh=False, redirect_stdout=False) as live:
        while True:
            prev = cur
            time.sleep(interval)
            cur = lib.take()
            live.update(Text("\n".join(render(lib.document(prev, cur)))), refresh=True)


def stats(
    follow: bool = typer.Option(False, "--follow", "-f", help="Redraw every interval until Ctrl-C (exit 0)."),
    interval: float = typer.Option(1.0, "--interval", help="Seconds between the two readings of a rate."),
    json_output: bool = typer.Option(False, "--json", help="One JSON document (one per line with -f)."),
) -> None:
    """What the running scheduler does, per second and in total: pyland's counters, the kernel's events.

    Also the daemon's view when one runs. No loaded scheduler: one line, exit 0. No sched_ext: exit 4.
    """
    if not interval > 0:
        raise UsageError(f"--interval must be more than 0 seconds, got {interval:g}")
    if not follow:
        _once(interval, json_output)
        return
    try:
        _follow(interval, json_output)
    except KeyboardInterrupt:
        return
    except BrokenPipeError:  # `scxctl stats -f --json | head`: the reader is done
        return


def register(app: typer.Typer) -> None:
    app.command("stats")(stats)
