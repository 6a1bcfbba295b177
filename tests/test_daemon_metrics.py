"""The daemon's Prometheus text file: what it says (parsed back with prometheus_client's own parser),
where and how it is written, one warning for a directory it cannot use, and a real test daemon
writing it (and reading `scxctl stats`'s daemon view) while it keeps answering."""

from __future__ import annotations

import collections
import errno
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_fakes import REPO, DaemonEnv, daemon_env
from prometheus_client.parser import text_string_to_metric_families

from scxctl.daemon import metrics
from scxctl.daemon.config import MetricsConfig
from scxctl.daemon.supervisor import Counts


def status(owner: str | None = "scxctl", cgroups: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "kernel": {"sched_ext": True, "state": "enabled", "ops": "pyland", "owner": owner},
        "desired": {"enabled": True, "scheduler": "pyland", "mode": "gaming", "policy": "deadline"},
        "supervisor": {"phase": "running", "scheduler": "pyland", "mode": "gaming", "policy": "deadline",
                       "pid": 4242, "restart_count": 2, "reattach_count": 1},
        "cgroups": cgroups,
    }


PYLAND = {
    "pid": 4242, "policy": "deadline", "mode": "steer", "loop_cpu_s": 12.5, "process_cpu_s": 20.25,
    "bpf": {"nr_kthread": 10, "nr_direct": 5, "nr_ring_full": 1, "nr_backlog": 2, "nr_rescued": 3,
            "nr_preempt_kicks": 4, "nr_timer_kicks": 1, "nr_stalled": 0, "nr_bw_held": 6, "nr_enabled": 77,
            "vtime_now": 123456789},
    "loop": {"consumed": 900, "observed": 100, "written": 950},
    "policy_stats": {"boosted": 8},
}
CGROUPS = {"pid": 4242, "held": 6, "preempted": 2, "cgroups": [
    {"id": 1, "path": "/system.slice/a.service", "throttled": True, "nr_throttled": 9, "throttled_ms": 700,
     "usage_ms": 1900},
    {"id": 2, "path": None, "throttled": False, "nr_throttled": 0, "throttled_ms": 0, "usage_ms": 50},
]}


def facts(**over: Any) -> metrics.Facts:
    counts = Counts(switches=3)
    counts.restarts.update({"crashed": 2})
    counts.ejections.update({"ERROR_STALL": 1})
    base: dict[str, Any] = {"status": status(cgroups=CGROUPS), "counts": counts, "kernel_release": "6.17.1",
                            "events": {"SCX_EV_SELECT_CPU_FALLBACK": 40, "SCX_EV_BYPASS_DURATION": 0},
                            "pyland": PYLAND, "since_change_s": 42.0}
    base.update(over)
    return metrics.Facts(**base)


def parse(text: bytes) -> dict[str, Any]:
    """{family name: (type, {sample name + sorted labels: value})}"""
    out = {}
    for fam in text_string_to_metric_families(text.decode()):
        out[fam.name] = (fam.type, {(s.name, tuple(sorted(s.labels.items()))): s.value for s in fam.samples})
    return out


def value(families: dict[str, Any], sample: str, **labels: str) -> float:
    family = sample.removesuffix("_total")
    return families[family][1][(sample, tuple(sorted(labels.items())))]


def test_the_text_parses_back_with_names_values_and_labels() -> None:
    fams = parse(metrics.render(facts()))
    assert all(name.startswith("scxctl_") for name in fams)
    assert value(fams, "scxctl_scheduler_up") == 1 and value(fams, "scxctl_scheduler_enabled") == 1
    assert value(fams, "scxctl_sched_ext_enabled") == 1
    assert value(fams, "scxctl_scheduler_info", scheduler="pyland", mode="gaming", policy="deadline",
                 kernel="6.17.1") == 1
    assert fams["scxctl_scheduler_switches"][0] == "counter"
    assert value(fams, "scxctl_scheduler_switches_total") == 3
    assert value(fams, "scxctl_scheduler_restarts_total", reason="crashed") == 2
    assert value(fams, "scxctl_scheduler_restarts_total", reason="ejected") == 0  # known before it happens
    assert value(fams, "scxctl_scheduler_ejections_total", reason="ERROR_STALL") == 1
    assert value(fams, "scxctl_scheduler_reattaches_total") == 1
    assert value(fams, "scxctl_scheduler_last_change_age_seconds") == 42.0
    assert value(fams, "scxctl_kernel_events_total", event="select_cpu_fallback") == 40
    assert value(fams, "scxctl_pyland_info", policy="deadline", mode="steer") == 1
    assert value(fams, "scxctl_pyland_records_total") == 1000
    assert value(fams, "scxctl_pyland_decisions_total") == 950
    assert value(fams, "scxctl_pyland_placed_in_bpf_total") == 15
    assert value(fams, "scxctl_pyland_fallbacks_total") == 3
    assert value(fams, "scxctl_pyland_rescues_total") == 3 and value(fams, "scxctl_pyland_kicks_total") == 5
    assert value(fams, "scxctl_pyland_cgroup_holds_total") == 6
    assert value(fams, "scxctl_pyland_loop_cpu_seconds_total") == 12.5
    assert value(fams, "scxctl_pyland_process_cpu_seconds_total") == 20.25
    assert value(fams, "scxctl_pyland_bpf_events_total", counter="nr_kthread") == 10
    assert ("scxctl_pyland_bpf_events_total", (("counter", "vtime_now"),)) not in \
        fams["scxctl_pyland_bpf_events"][1]  # a clock is no event counter
    assert value(fams, "scxctl_pyland_tasks") == 77
    assert value(fams, "scxctl_pyland_policy_stat", name="boosted") == 8
    assert value(fams, "scxctl_pyland_cgroups_limited") == 2
    assert value(fams, "scxctl_pyland_cgroups_throttled") == 1
    cg = "/system.slice/a.service"
    assert value(fams, "scxctl_pyland_cgroup_throttled", cgroup=cg) == 1
    assert value(fams, "scxctl_pyland_cgroup_throttled_seconds_total", cgroup=cg) == 0.7
    assert value(fams, "scxctl_pyland_cgroup_usage_seconds_total", cgroup="2") == 0.05
    assert value(fams, "scxctl_pyland_cgroup_throttled_periods_total", cgroup=cg) == 9
    labels = {k for _, samples in fams.values() for (_, ls) in samples for k, _ in ls}
    assert "pid" not in labels


def test_without_a_scheduler_only_the_daemons_own_numbers() -> None:
    st = status(owner=None)
    st["kernel"].update(state="disabled", ops=None)
    st["supervisor"].update(scheduler=None, mode=None, policy=None, pid=None)
    fams = parse(metrics.render(facts(status=st, events=None, pyland=None, counts=Counts())))
    assert value(fams, "scxctl_scheduler_up") == 0 and value(fams, "scxctl_sched_ext_enabled") == 0
    assert value(fams, "scxctl_scheduler_info", scheduler="none", mode="", policy="", kernel="6.17.1") == 1
    assert not any(n.startswith(("scxctl_pyland", "scxctl_kernel")) for n in fams)


class _Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def warning(self, event: str, **kw: Any) -> None:
        self.events.append(("warning", event, kw))

    def info(self, event: str, **kw: Any) -> None:
        self.events.append(("info", event, kw))


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> _Log:
    fake = _Log()
    monkeypatch.setattr(metrics, "log", fake)
    return fake


def test_written_atomically_0644_only_where_the_directory_exists(tmp_path: Path, log: _Log) -> None:
    path = tmp_path / "node-exporter" / "scxctl.prom"
    writer = metrics.MetricsWriter(MetricsConfig(path, 1.0), facts)
    assert writer.write_once() is False and writer.write_once() is False
    assert not path.parent.exists()  # never created: it is node-exporter's directory
    assert [e[:2] for e in log.events] == [("warning", "metrics_not_written")]  # once, not per interval
    assert "does not exist" in log.events[0][2]["reason"]
    path.parent.mkdir()
    assert writer.write_once() is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert "scxctl_scheduler_up 1.0" in path.read_text()
    assert os.listdir(path.parent) == ["scxctl.prom"]  # no temporary file left beside it
    assert log.events[-1][:2] == ("info", "metrics_written_again")


def test_an_unwritable_file_warns_once_and_recovers(tmp_path: Path, log: _Log) -> None:
    path = tmp_path / "scxctl.prom"
    path.mkdir()  # root writes anywhere: a directory in the file's place is what fails here
    writer = metrics.MetricsWriter(MetricsConfig(path, 1.0), facts)
    assert [writer.write_once() for _ in range(3)] == [False, False, False]
    assert collections.Counter(e[1] for e in log.events) == {"metrics_not_written": 1}
    assert "cannot write" in log.events[0][2]["reason"]
    path.rmdir()
    assert writer.write_once() is True and writer.writes == 1


def test_a_read_only_directory_says_how_to_make_it_writable(tmp_path: Path, log: _Log,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def read_only(*_: Any) -> None:  # what the unit's ProtectSystem=strict sandbox answers
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(metrics, "atomic_write_bytes", read_only)
    writer = metrics.MetricsWriter(MetricsConfig(tmp_path / "m.prom", 1.0), facts)
    assert writer.write_once() is False
    assert log.events[0][2]["reason"] == ("cannot write: Read-only file system (the directory appeared "
                                          "after the daemon started: systemctl restart scxctl)")


def test_a_bug_in_the_facts_is_a_warning_not_a_crash(tmp_path: Path, log: _Log) -> None:
    def broken() -> metrics.Facts:
        raise KeyError("supervisor")

    writer = metrics.MetricsWriter(MetricsConfig(tmp_path / "m.prom", 1.0), broken)
    assert writer.write_once() is False and writer.write_once() is False
    assert len(log.events) == 1 and "KeyError" in log.events[0][2]["reason"]


def test_off_writes_nothing(tmp_path: Path, log: _Log) -> None:
    writer = metrics.MetricsWriter(MetricsConfig(None, 1.0), facts)
    assert writer.write_once() is False and log.events == []


def test_a_file_left_by_an_earlier_configuration_is_removed(tmp_path: Path, log: _Log) -> None:
    """Metrics turned off or moved: node-exporter would export the old file's numbers forever."""
    record = tmp_path / "metrics-file"
    old, new = tmp_path / "a" / "scxctl.prom", tmp_path / "b" / "scxctl.prom"
    old.parent.mkdir()
    new.parent.mkdir()
    first = metrics.MetricsWriter(MetricsConfig(old, 1.0), facts)
    first.retire_previous(record)
    assert first.write_once() and record.read_text() == f"{old}\n" and log.events == []

    moved = metrics.MetricsWriter(MetricsConfig(new, 1.0), facts)
    moved.retire_previous(record)
    assert not old.exists() and record.read_text() == f"{new}\n"
    assert log.events[-1][:2] == ("info", "metrics_file_removed")
    assert (log.events[-1][2]["path"], log.events[-1][2]["reason"]) == (str(old), "metrics moved")
    assert moved.write_once()

    metrics.MetricsWriter(MetricsConfig(None, 1.0), facts).retire_previous(record)
    assert not new.exists() and not record.exists()
    assert log.events[-1][2]["reason"] == "metrics turned off"

    # a file at the recorded path that is not ours stays
    other = tmp_path / "a" / "other.prom"
    other.write_text("# HELP node_custom something else\n")
    record.write_text(f"{other}\n")
    metrics.MetricsWriter(MetricsConfig(new, 1.0), facts).retire_previous(record)
    assert other.exists() and record.read_text() == f"{new}\n"


# -- a real test daemon ----------------------------------------------------------------------------


@pytest.fixture
def d(tmp_path: Path) -> Iterator[DaemonEnv]:
    with daemon_env(tmp_path) as env:
        env.config.write_text(env.config.read_text() + "[metrics]\ninterval_s = 0.2\n")
        yield env


def read_metrics(env: DaemonEnv) -> dict[str, Any]:
    return parse(env.metrics.read_bytes())


def test_the_daemon_writes_its_metrics_and_they_follow_the_scheduler(d: DaemonEnv) -> None:
    d.start()
    d.wait_for(lambda: d.metrics.exists(), 10, "the first metrics file")
    assert value(read_metrics(d), "scxctl_scheduler_up") == 0
    assert d.request("enable", {"scheduler": "fake"})["ok"]
    d.wait_for(lambda: value(read_metrics(d), "scxctl_scheduler_up") == 1, 10, "scheduler_up 1")
    fams = read_metrics(d)
    assert value(fams, "scxctl_scheduler_switches_total") == 1
    info = fams["scxctl_scheduler_info"][1]
    ((_, labels),) = info.keys()
    assert dict(labels)["scheduler"] == "fake" and dict(labels)["mode"] == "auto"
    assert stat.S_IMODE(d.metrics.stat().st_mode) == 0o644
    assert d.stop() == 0
    # the last write, after the scheduler stopped: not left saying "up"
    assert value(read_metrics(d), "scxctl_scheduler_up") == 0


def test_an_unusable_metrics_path_is_one_warning_and_the_daemon_keeps_answering(d: DaemonEnv) -> None:
    d.metrics.mkdir()  # a directory where the file goes: every write fails
    d.start()
    assert d.request("enable", {"scheduler": "fake"})["ok"]
    time.sleep(1.5)  # several intervals of 0.2 s
    assert d.status()["kernel"]["owner"] == "scxctl"
    warnings = d.events("metrics_not_written")
    assert len(warnings) == 1 and warnings[0]["level"] == "warning"
    assert warnings[0]["path"] == str(d.metrics)


def test_stats_shows_the_daemons_view(d: DaemonEnv) -> None:
    d.start()
    assert d.request("enable", {"scheduler": "fake"})["ok"]
    done = subprocess.run([sys.executable, "-m", "scxctl", "stats", "--json", "--interval", "0.1"], cwd=REPO,
                          env=d.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["scheduler"] == "fake" and doc["pyland"] is None and doc["events"] is None
    daemon = doc["daemon"]
    assert daemon["running"] is True and daemon["owner"] == "scxctl" and daemon["phase"] == "running"
    assert daemon["desired"]["scheduler"] == "fake" and daemon["restarts"] == 0
