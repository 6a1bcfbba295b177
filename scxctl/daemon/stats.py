"""What the running scheduler does: one reading of every source, and the per-second view of two.

Sources, each read without privileges and without touching the scheduler: the kernel's sched_ext
state and event counters (sysfs), pyland's own snapshot (scxctl/pyland/stats_report.py), and the
daemon's status reply. Rates come from two readings, never from one, so that a counter is never
mistaken for a rate; a scheduler that left between them, or a snapshot whose writer is gone, is
said to be so instead of being turned into numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from scxctl.daemon import client
from scxctl.errors import ScxctlError
from scxctl.pyland import stats_report
from scxctl.sysfs import SchedExtStatus, SysRoot, ops_matches, read_sched_ext, read_sched_ext_events

SCHEMA = "scxctl.stats/1"
PYLAND_OPS = "pyland"
DAEMON_TIMEOUT_S = 2.0

# pyland's summary lines: BPF counters added up per line (bpf/pyland.h says what each counts)
PLACED_IN_BPF = ("nr_kthread", "nr_direct", "nr_direct_wakes", "nr_new_direct", "nr_steered",
                 "nr_yield_requeues")
FALLBACKS = ("nr_ring_full", "nr_backlog")
KICKS = ("nr_preempt_kicks", "nr_timer_kicks", "nr_wake_preempts", "nr_idle_hint_kicks")
SUMMARY = ("records", "decisions", "placed_in_bpf", "fallbacks", "rescues", "kicks", "stalls",
           "cgroup_holds", "loop_cpu_s", "process_cpu_s")
# shared counters that are not event counts (gauges, clocks, flags): never summed, never a rate
BPF_GAUGES = frozenset({"nr_enabled", "nr_bw_cgroups", "nr_scheduled", "usersched_last_run_at",
                        "rescue_scan_at", "compat_missing", "vtime_now", "deadline_lead", "starving",
                        "progress_seen", "progress_at", "bw_timer_at", "bw_release", "vruntime_now",
                        "policy_since", "policy_alarmed", "idle_hint"})


def bpf_events(bpf: dict[str, Any]) -> dict[str, int]:
    """The shared counters that count events (`nr_*` and not a gauge)."""
    return {k: v for k, v in bpf.items()
            if k.startswith("nr_") and k not in BPF_GAUGES and isinstance(v, int)}


def pyland_summary(doc: dict[str, Any]) -> dict[str, float]:
    """The few numbers `scxctl stats` leads with, from a pyland snapshot's raw counters."""
    bpf: dict[str, int] = doc.get("bpf") or {}
    loop: dict[str, int] = doc.get("loop") or {}

    def total(names: tuple[str, ...]) -> int:
        return sum(int(bpf.get(n, 0)) for n in names)

    return {
        "records": loop.get("consumed", 0) + loop.get("observed", 0),
        "decisions": loop.get("written", 0),
        "placed_in_bpf": total(PLACED_IN_BPF),
        "fallbacks": total(FALLBACKS),
        "rescues": bpf.get("nr_rescued", 0),
        "kicks": total(KICKS),
        "stalls": bpf.get("nr_stalled", 0),
        "cgroup_holds": bpf.get("nr_bw_held", 0),
        "loop_cpu_s": float(doc.get("loop_cpu_s", 0.0)),
        "process_cpu_s": float(doc.get("process_cpu_s", 0.0)),
    }


@dataclass(frozen=True)
class Sample:
    """One reading of every source."""

    at: float  # CLOCK_MONOTONIC of the reading
    wall: float
    kernel: SchedExtStatus
    events: dict[str, int] | None  # None: no root/events (older kernel, or nothing loaded)
    pyland: dict[str, Any] | None  # the snapshot, only while the kernel runs pyland
    stale: str | None  # why that snapshot is not live (None: live)
    daemon: dict[str, Any] | None  # the daemon's status reply
    daemon_error: str | None  # why there is none

    @property
    def loaded(self) -> bool:
        return self.kernel.enabled or bool(self.kernel.ops)

    @property
    def live_pyland(self) -> dict[str, Any] | None:
        return self.pyland if self.pyland is not None and self.stale is None else None


def _daemon_status() -> tuple[dict[str, Any] | None, str | None]:
    try:
        return client.call("status", timeout=DAEMON_TIMEOUT_S), None
    except client.DaemonUnreachable as exc:
        return None, f"no daemon ({exc.message})"
    except ScxctlError as exc:
        return None, exc.message


def take(sysroot: SysRoot | None = None, daemon: bool = True) -> Sample:
    """Read every source now; never raises for a scheduler that comes or goes meanwhile."""
    sr = sysroot or SysRoot()
    kernel = read_sched_ext(sr)
    events = read_sched_ext_events(sr) if kernel.available else None
    pyland = stale = None
    if ops_matches(kernel.ops, PYLAND_OPS):
        pyland = stats_report.read_stats()
        if pyland is not None:
            stale = stats_report.stale_reason(pyland)
    status, error = _daemon_status() if daemon else (None, "not asked")
    return Sample(time.monotonic(), time.time(), kernel, events, pyland, stale, status, error)


def newer_pyland(first: Sample, second: Sample) -> bool:
    """Whether `second` holds a pyland snapshot written after `first`'s (a rate can be made)."""
    a, b = first.live_pyland, second.live_pyland
    return a is not None and b is not None and a["pid"] == b["pid"] and b["monotonic"] > a["monotonic"]


def _rates(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float] | None:
    """Per-second values of counters read `seconds` apart; None when a counter went back (a reset)."""
    if seconds <= 0:
        return None
    out = {}
    for name, value in after.items():
        if name not in before:
            continue
        delta = value - before[name]
        if delta < 0:
            return None
        out[name] = round(delta / seconds, 3)
    return out


def _same_scheduler(a: Sample, b: Sample) -> bool:
    return (a.loaded and b.loaded and a.kernel.ops == b.kernel.ops
            and a.kernel.enable_seq == b.kernel.enable_seq)


def _pyland_view(prev: Sample | None, cur: Sample) -> dict[str, Any] | None:
    doc = cur.pyland
    if doc is None:
        return None
    view: dict[str, Any] = {
        "live": cur.stale is None,
        "stale": cur.stale,
        "pid": doc["pid"],
        "policy": doc.get("policy"),
        "mode": doc.get("mode"),
        "restarts": doc.get("restarts", 0),
        "age_s": round(stats_report.age_s(doc), 3),
        "total": pyland_summary(doc),
        "per_s": None,
        "policy_stats": doc.get("policy_stats") or {},
        "bpf": doc.get("bpf") or {},
        "loop": doc.get("loop") or {},
    }
    if prev is not None and newer_pyland(prev, cur):
        assert prev.pyland is not None
        seconds = doc["monotonic"] - prev.pyland["monotonic"]
        view["per_s"] = _rates(pyland_summary(prev.pyland), view["total"], seconds)
    return view


def _daemon_view(cur: Sample) -> dict[str, Any]:
    st = cur.daemon
    if st is None:
        return {"running": False, "error": cur.daemon_error}
    sup = st.get("supervisor") or {}
    return {
        "running": True,
        "error": None,
        "desired": st.get("desired"),
        "phase": sup.get("phase"),
        "scheduler": sup.get("scheduler"),
        "pid": sup.get("pid"),
        "restarts": sup.get("restart_count"),
        "reattaches": sup.get("reattach_count"),
        "last_exit": sup.get("last_exit"),
        "owner": (st.get("kernel") or {}).get("owner"),
    }


def document(prev: Sample | None, cur: Sample) -> dict[str, Any]:
    """The JSON view of `cur`, with per-second values against `prev` where both describe the same
    scheduler (docs/reference.md describes every field)."""
    k = cur.kernel
    same = prev is not None and _same_scheduler(prev, cur)
    events: dict[str, Any] | None = None
    if cur.events is not None:
        per_s = None
        if same and prev is not None and prev.events is not None:
            per_s = _rates({n: float(v) for n, v in prev.events.items()},
                           {n: float(v) for n, v in cur.events.items()}, cur.at - prev.at)
        events = {"total": cur.events, "per_s": per_s}
    return {
        "schema": SCHEMA,
        "at": cur.wall,
        "interval_s": round(cur.at - prev.at, 3) if prev is not None else None,
        "sched_ext": {"available": k.available, "state": k.state, "ops": k.ops, "switch_all": k.switch_all,
                      "enable_seq": k.enable_seq},
        "loaded": cur.loaded,
        "scheduler": k.ops,
        # loaded at the first reading, and gone or replaced at this one
        "exited": prev is not None and prev.loaded and not same,
        "previous": prev.kernel.ops if prev is not None and prev.loaded and not same else None,
        "events": events,
        "pyland": _pyland_view(prev, cur),
        "daemon": _daemon_view(cur),
    }
