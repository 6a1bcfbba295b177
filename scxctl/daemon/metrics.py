"""The daemon's metrics for Prometheus, as a text file for node-exporter's textfile collector.

No listening socket (the unit allows AF_UNIX only): every `interval_s` the daemon renders what it
knows with prometheus_client's registry and exposition, and replaces the file atomically (a
collector never reads half a file), mode 0644, only where the directory exists: it belongs to
prometheus-node-exporter, which this package only suggests. A directory that is missing or cannot be
written costs one warning line until the next success, and never stops the daemon.

Names follow the Prometheus conventions: `scxctl_` prefix, base units (seconds), `_total` on
counters; labels are bounded sets (a reason, an event, a counter's or a limited cgroup's name),
never a pid.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scxctl.daemon import exitinfo
from scxctl.daemon.config import MetricsConfig
from scxctl.daemon.stats import bpf_events, pyland_summary
from scxctl.daemon.supervisor import Counts
from scxctl.fsutil import atomic_write_bytes, atomic_write_text
from scxctl.log import get_logger

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = get_logger("scxctl.daemon")

MODE = 0o644
# restart reasons always present (at 0), so a rate over them exists before the first restart
RESTART_REASONS = (exitinfo.CRASHED, exitinfo.EJECTED, exitinfo.KILLED, exitinfo.EXITED,
                   exitinfo.VERIFY_FAILED, exitinfo.SPAWN_FAILED)


@dataclass(frozen=True)
class Facts:
    """Everything one rendering shows, gathered by the daemon (service.py) at one moment."""

    status: dict[str, Any]  # the daemon's status reply
    counts: Counts
    kernel_release: str
    events: dict[str, int] | None  # the kernel's sched_ext event counters
    pyland: dict[str, Any] | None  # the live stats snapshot of the daemon's own pyland
    since_change_s: float


def _families(f: Facts) -> Iterator[Metric]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

    st, counts = f.status, f.counts
    kernel, desired, sup = st["kernel"], st["desired"], st["supervisor"]
    yield GaugeMetricFamily("scxctl_scheduler_up", "1 while the kernel runs the daemon's scheduler",
                            value=int(kernel["owner"] == "scxctl"))
    yield GaugeMetricFamily("scxctl_scheduler_enabled", "1 while the desired state has a scheduler enabled",
                            value=int(bool(desired["enabled"])))
    yield GaugeMetricFamily("scxctl_sched_ext_enabled", "1 while any sched_ext scheduler is enabled",
                            value=int(kernel["state"] == "enabled"))
    info = InfoMetricFamily("scxctl_scheduler", "The scheduler the daemon runs (or the kernel's, when "
                            "not the daemon's) and the kernel release")
    info.add_metric([], {"scheduler": sup["scheduler"] or kernel["ops"] or "none", "mode": sup["mode"] or "",
                         "policy": sup["policy"] or "", "kernel": f.kernel_release})
    yield info
    yield CounterMetricFamily("scxctl_scheduler_switches", "Schedulers (or modes, policies) the daemon "
                              "started on request or at restore", value=counts.switches)
    restarts = CounterMetricFamily("scxctl_scheduler_restarts", "Restarts after a failure, by how the "
                                   "scheduler had stopped", labels=["reason"])
    for reason in sorted(set(RESTART_REASONS) | set(counts.restarts)):
        restarts.add_metric([reason], counts.restarts[reason])
    yield restarts
    ejections = CounterMetricFamily("scxctl_scheduler_ejections", "Ejections by the kernel, by the "
                                    "kernel's exit kind", labels=["reason"])
    for reason, n in sorted(counts.ejections.items()):
        ejections.add_metric([reason], n)
    yield ejections
    yield CounterMetricFamily("scxctl_scheduler_reattaches", "Re-attaches the scheduler made itself when "
                              "the kernel asked (CPU hotplug)", value=sup.get("reattach_count") or 0)
    yield GaugeMetricFamily("scxctl_scheduler_last_change_age_seconds", "Seconds since the scheduler last "
                            "started, stopped, exited or was switched", value=round(f.since_change_s, 3))
    if f.events is not None:
        events = CounterMetricFamily("scxctl_kernel_events", "The kernel's sched_ext event counters "
                                     "(root/events) of the loaded scheduler", labels=["event"])
        for name, n in sorted(f.events.items()):
            events.add_metric([name.removeprefix("SCX_EV_").lower()], n)
        yield events
    if f.pyland is not None:
        yield from _pyland(f.pyland)
    if st.get("cgroups"):
        yield from _cgroups(st["cgroups"])


def _pyland(doc: dict[str, Any]) -> Iterator[Metric]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

    info = InfoMetricFamily("scxctl_pyland", "pyland's policy and mode (steer or round-trip)")
    info.add_metric([], {"policy": str(doc.get("policy") or ""), "mode": str(doc.get("mode") or "")})
    yield info
    summary = pyland_summary(doc)
    helps = {
        "records": "Records pyland's loop read (queued tasks and steer-mode reports)",
        "decisions": "Decisions and parameter updates the loop wrote",
        "placed_in_bpf": "Tasks the BPF core placed without waiting for the policy",
        "fallbacks": "Tasks the BPF core placed because the ring was full or the loop behind",
        "rescues": "Tasks run out of deadline order because they waited too long",
        "kicks": "CPUs kicked (preemptions, heartbeat timer, wake-up preemptions)",
        "stalls": "Tasks placed by BPF because the policy overran its budget",
        "cgroup_holds": "Tasks held aside because their cgroup was out of cpu.max quota",
    }
    for key, text in helps.items():
        yield CounterMetricFamily(f"scxctl_pyland_{key}", text, value=summary[key])
    yield CounterMetricFamily("scxctl_pyland_loop_cpu_seconds", "CPU time of pyland's loop thread",
                              value=summary["loop_cpu_s"])
    yield CounterMetricFamily("scxctl_pyland_process_cpu_seconds",
                              "CPU time of pyland's process, every thread (the loop, the policy watchdog)",
                              value=summary["process_cpu_s"])
    bpf = doc.get("bpf") or {}
    counters = CounterMetricFamily("scxctl_pyland_bpf_events", "pyland's BPF event counters by name "
                                   "(bpf/pyland.h)", labels=["counter"])
    for name, n in sorted(bpf_events(bpf).items()):
        counters.add_metric([name], n)
    yield counters
    yield GaugeMetricFamily("scxctl_pyland_tasks", "Tasks in the sched_ext class under pyland",
                            value=bpf.get("nr_enabled", 0))
    policy = GaugeMetricFamily("scxctl_pyland_policy_stat", "The policy's own stats() numbers",
                               labels=["name"])
    for name, value in sorted((doc.get("policy_stats") or {}).items()):
        policy.add_metric([name], value)
    yield policy


def _cgroups(cg: dict[str, Any]) -> Iterator[Metric]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    rows = cg.get("cgroups") or []
    yield GaugeMetricFamily("scxctl_pyland_cgroups_limited", "cgroups with a cpu.max quota pyland enforces",
                            value=len(rows))
    yield GaugeMetricFamily("scxctl_pyland_cgroups_throttled", "Those of them throttled now",
                            value=sum(1 for r in rows if r.get("throttled")))
    yield CounterMetricFamily("scxctl_pyland_cgroup_tick_stops", "Running tasks stopped at the tick: "
                              "their cgroup ran out of quota", value=cg.get("preempted", 0))
    throttled = GaugeMetricFamily("scxctl_pyland_cgroup_throttled", "1 while the cgroup is throttled",
                                  labels=["cgroup"])
    periods = CounterMetricFamily("scxctl_pyland_cgroup_throttled_periods", "Periods the cgroup was "
                                  "throttled in", labels=["cgroup"])
    seconds = CounterMetricFamily("scxctl_pyland_cgroup_throttled_seconds", "Time the cgroup was "
                                  "throttled", labels=["cgroup"])
    usage = CounterMetricFamily("scxctl_pyland_cgroup_usage_seconds", "CPU time the cgroup used under "
                                "pyland", labels=["cgroup"])
    for r in rows:
        name = [str(r.get("path") or r.get("id"))]
        throttled.add_metric(name, int(bool(r.get("throttled"))))
        periods.add_metric(name, r.get("nr_throttled", 0))
        seconds.add_metric(name, r.get("throttled_ms", 0) / 1e3)
        usage.add_metric(name, r.get("usage_ms", 0) / 1e3)
    yield from (throttled, periods, seconds, usage)


class _Collector:
    """A prometheus_client collector over one set of facts (the registry asks it at render time)."""

    def __init__(self, facts: Facts) -> None:
        self._facts = facts

    def collect(self) -> Iterator[Metric]:
        return _families(self._facts)


def render(facts: Facts) -> bytes:
    """The Prometheus text exposition of `facts`."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(facts))  # type: ignore[arg-type]
    return generate_latest(registry)


class MetricsWriter:
    """Writes the file every interval; warns once per kind of failure, until a write succeeds."""

    def __init__(self, config: MetricsConfig, gather: Callable[[], Facts]) -> None:
        self.config = config
        self._gather = gather
        self._warned: str | None = None
        self.writes = 0

    def _warn(self, key: str, reason: str) -> None:
        if self._warned == key:
            return
        self._warned = key
        log.warning("metrics_not_written", scheduler=None, pid=None, path=str(self.config.file),
                    reason=reason, action="retrying every interval; warned once")

    def write_once(self) -> bool:
        """One rendering and write; False (after at most one warning) when it could not be done."""
        path = self.config.file
        if path is None:
            return False
        if not path.parent.is_dir():
            self._warn("missing", f"the directory {path.parent} does not exist "
                       "(prometheus-node-exporter creates it)")
            return False
        try:
            atomic_write_bytes(path, render(self._gather()), MODE)
        except ImportError as exc:
            self._warn("import", f"prometheus_client cannot be imported: {exc}")
            return False
        except OSError as exc:
            reason = f"cannot write: {exc.strerror or exc}"
            if exc.errno == errno.EROFS:  # the unit's sandbox was set up before the directory existed
                reason += " (the directory appeared after the daemon started: systemctl restart scxctl)"
            self._warn(f"os:{exc.errno}", reason)
            return False
        except Exception as exc:  # a bug here must not take the daemon's scheduler down with it
            self._warn(f"bug:{type(exc).__name__}", f"{type(exc).__name__}: {exc}")
            return False
        if self._warned is not None:
            log.info("metrics_written_again", scheduler=None, pid=None, path=str(path))
        self._warned = None
        self.writes += 1
        return True

    def retire_previous(self, record: Path) -> None:
        """Remove the file an earlier configuration had written (metrics since turned off, or moved):
        node-exporter would export its last numbers forever, an "up" among them. `record` keeps the
        path last written; only a file that holds our metrics is removed."""
        try:
            previous = Path(record.read_text().strip())
        except (OSError, ValueError):
            previous = None
        if previous is not None and previous != self.config.file and previous.is_absolute():
            try:
                ours = previous.read_bytes().startswith(b"# HELP scxctl_")
                if ours:
                    previous.unlink()
                    log.info("metrics_file_removed", scheduler=None, pid=None, path=str(previous),
                             reason="metrics turned off" if self.config.file is None else "metrics moved")
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("metrics_file_not_removed", scheduler=None, pid=None, path=str(previous),
                            reason=exc.strerror or str(exc), action="node-exporter may show its old numbers")
        try:
            if self.config.file is None:
                record.unlink(missing_ok=True)
            else:
                atomic_write_text(record, f"{self.config.file}\n")
        except OSError as exc:
            log.warning("metrics_record_not_written", scheduler=None, pid=None, path=str(record),
                        reason=exc.strerror or str(exc))

    async def run(self) -> None:
        """Until cancelled: a write now, then every interval_s."""
        if self.config.file is None:
            return
        while True:
            self.write_once()
            await asyncio.sleep(self.config.interval_s)
