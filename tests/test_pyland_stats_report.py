"""pyland's counters snapshot for `scxctl stats` and the daemon: what the loop writes, when, and who
may take it for live.

The scheduler runs its real loop (SchedulerLoop.run with its epoll wait and periodic service) over
fake ring ends and a .bss in a bytearray (as tests/test_pyland_exit.py does), so no BPF is needed.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from scxctl import paths
from scxctl.pyland import stats_report
from scxctl.pyland.loop import SchedulerLoop
from scxctl.pyland.policies.loader import load_policy
from scxctl.pyland.policy import PolicyOptions
from scxctl.pyland.records import SHARED_SIZE
from scxctl.pyland.scheduler import RunOptions, Scheduler
from scxctl.pyland.shared import SharedState


@pytest.fixture(autouse=True)
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SCXCTL_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    return tmp_path / "run"


class _Ring:
    """A ring end with nothing in it: an fd epoll can wait on, and no records."""

    def __init__(self) -> None:
        self.fd, self._w = os.pipe()
        self.closed = False

    def read_batch(self, fmt: object, out: list[tuple[object, ...]], n: int) -> int:
        return 0

    def write(self, fmt: object, *values: int) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
            os.close(self._w)
            self.closed = True


def _burn_cpu(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def scheduler() -> Scheduler:
    """A Scheduler past its set-up: its loop, policy and .bss, attached as far as _service can tell."""
    s = Scheduler(RunOptions(stats_interval=0))
    s.shared = SharedState(memoryview(bytearray(SHARED_SIZE)))
    s.shared.counters[0] = 40  # nr_queued
    policy = load_policy("deadline", PolicyOptions(nr_cpus=2))
    s.policy = policy
    s.steer = True
    s.loop = SchedulerLoop(_Ring(), _Ring(), s.shared, policy, reports=_Ring())  # type: ignore[arg-type]
    s.loop.stats.consumed, s.loop.stats.observed, s.loop.stats.written = 30, 12, 25
    s._confirmed = True
    return s


def test_the_loop_writes_the_snapshot_from_its_service_and_close_removes_it() -> None:
    s = scheduler()
    assert s.loop is not None
    path = paths.pyland_stats_file()
    services = {"n": 0}
    # another thread of the process (as the policy watchdog is) burns CPU the loop thread does not
    burner = threading.Thread(target=_burn_cpu, args=(0.05,))
    burner.start()
    burner.join()

    def service() -> None:
        services["n"] += 1
        s._service()

    s.loop.run(lambda: services["n"] >= 3, service, wait_s=0.01)
    doc = stats_report.read_stats(os.getpid())
    assert doc is not None and path.name == "pyland-stats.json"
    assert (doc["policy"], doc["mode"], doc["restarts"], doc["schema"]) == ("deadline", "steer", 0, 1)
    assert doc["bpf"]["nr_queued"] == 40
    assert (doc["loop"]["consumed"], doc["loop"]["observed"], doc["loop"]["written"]) == (30, 12, 25)
    # taken from the running loop at its first service; the next two came within the second
    assert doc["loop"]["waits"] == 1 and services["n"] == 3
    assert 0 < doc["loop_cpu_s"] <= time.thread_time()
    assert doc["process_cpu_s"] - doc["loop_cpu_s"] >= 0.05 and doc["process_cpu_s"] <= time.process_time()
    assert {"boosted", "reclassified"} <= doc["policy_stats"].keys()
    assert abs(doc["monotonic"] - time.monotonic()) < 5 and abs(doc["wall"] - time.time()) < 5
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # the scxctl group (anyone) may read it
    assert stats_report.stale_reason(doc) is None
    s.close()
    assert not path.exists()


def test_written_at_most_once_a_second() -> None:
    report = stats_report.StatsReport()
    calls: list[int] = []

    def build() -> dict[str, object]:
        calls.append(1)
        return {"policy": "fifo"}

    assert report.maybe_write(100.0, build) is True
    assert report.maybe_write(100.5, build) is False  # due again only at 101.0: nothing built
    assert report.maybe_write(101.0, build) is True
    assert len(calls) == 2


def test_an_unwritable_runtime_directory_warns_once_and_never_raises(runtime: Path) -> None:
    runtime.rmdir()
    runtime.write_text("a file where the directory should be")
    report = stats_report.StatsReport()
    assert report.maybe_write(0.0, dict) is False
    assert report.maybe_write(5.0, dict) is False  # gave up: no retry on every service
    report.close()
    assert runtime.is_file()


def test_close_leaves_another_processes_snapshot_alone() -> None:
    path = paths.pyland_stats_file()
    path.write_text(json.dumps({"pid": 1, "monotonic": time.monotonic()}))
    stats_report.StatsReport().close()  # never wrote: removes nothing
    stats_report.remove_stats(os.getpid())
    assert path.exists()
    path.write_text("{not json")
    assert stats_report.read_stats() is None


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_when_its_pid_is_gone_or_it_is_intervals_old() -> None:
    now = time.monotonic()
    live = {"pid": os.getpid(), "monotonic": now - 0.5, "interval_s": 1.0}
    assert stats_report.stale_reason(live, now) is None
    old = {**live, "monotonic": now - 10}
    assert stats_report.stale_reason(old, now) == "written 10 s ago"
    gone = {**live, "pid": dead_pid()}
    assert stats_report.stale_reason(gone, now) == "its process is gone"


def test_policy_stats_keep_numbers_only() -> None:
    assert stats_report.numbers({"a": 1, "b": 2.5, "c": "x", "d": True, "e": None}) == {"a": 1, "b": 2.5}
