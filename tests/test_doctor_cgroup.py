"""cgroup.cpu against fake cgroup trees: v2 root, limited, throttled (self or parent), v1, hybrid, broken."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakeroot import FakeRoot, context

from scxctl.doctor import checks_cgroup as cc
from scxctl.doctor.model import Status

CG = "/sys/fs/cgroup"


@pytest.fixture
def fake(tmp_path: Path) -> FakeRoot:
    return FakeRoot(tmp_path).sched_ext_machine(cgroup="/work.slice/job.scope")


def _stat(nr_throttled: int = 0, throttled_usec: int = 0) -> str:
    return (f"usage_usec 1000\nuser_usec 600\nsystem_usec 400\nnr_periods 50\n"
            f"nr_throttled {nr_throttled}\nthrottled_usec {throttled_usec}\n")


def test_unlimited_cgroup_ok(fake: FakeRoot) -> None:
    r = cc.cgroup_cpu(context(fake))
    assert r.status is Status.OK
    assert r.details["cgroup"] == "/work.slice/job.scope"
    assert [lv["cgroup"] for lv in r.details["levels"]] == ["/work.slice/job.scope", "/work.slice", "/"]
    assert "no CPU bandwidth limit" in r.finding


def test_root_cgroup_has_no_cpu_max(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine(cgroup="/")
    r = cc.cgroup_cpu(context(fake))
    assert r.status is Status.OK
    (root,) = r.details["levels"]
    assert (root["cgroup"], root["cpu_max"], root["nr_throttled"]) == ("/", None, None)


def test_limited_not_throttled_ok(fake: FakeRoot) -> None:
    fake.write(f"{CG}/work.slice/cpu.max", "50000 100000\n")
    r = cc.cgroup_cpu(context(fake))
    assert r.status is Status.OK
    assert "limited by /work.slice" in r.finding and "0.50 CPUs" in r.finding
    assert r.details["levels"][1]["quota_usec"] == 50000


def test_throttled_cgroup_warns(fake: FakeRoot) -> None:
    fake.write(f"{CG}/work.slice/job.scope/cpu.max", "20000 100000\n")
    fake.write(f"{CG}/work.slice/job.scope/cpu.stat", _stat(12, 345_600))
    r = cc.cgroup_cpu(context(fake))
    assert r.status is Status.WARN
    assert "throttled 12 times" in r.finding and "345.6 ms" in r.finding and "0.20 CPUs" in r.finding
    assert f"{CG}/work.slice/job.scope/cpu.max" in (r.hint or "")
    assert r.details["levels"][0]["nr_throttled"] == 12


def test_throttled_parent_warns(fake: FakeRoot) -> None:
    """A parent's limit throttles the child but is counted in the parent's cpu.stat."""
    fake.write(f"{CG}/work.slice/cpu.max", "10000 100000\n")
    fake.write(f"{CG}/work.slice/cpu.stat", _stat(3, 9000))
    r = cc.cgroup_cpu(context(fake))
    assert r.status is Status.WARN
    assert "cgroup /work.slice was throttled 3 times" in r.finding


def test_cgroup_v1_only_skips(fake: FakeRoot) -> None:
    fake.write("/proc/self/cgroup", "4:memory:/x\n3:cpu,cpuacct:/x\n1:name=systemd:/x\n")
    r = cc.cgroup_cpu(context(fake))
    assert r.status is Status.SKIP
    assert "no cgroup v2 membership" in r.finding and r.hint


def test_hybrid_with_cpu_on_v1_skips(fake: FakeRoot) -> None:
    """Like this development host: a 0:: line, but the cpu controller is a v1 hierarchy."""
    fake.write("/proc/self/cgroup", "9:name=systemd:/\n2:cpuacct:/\n1:cpu:/\n0::/\n")
    r = cc.cgroup_cpu(context(fake))
    assert r.status is Status.SKIP
    assert "cpu controller is on cgroup v1" in r.finding


def test_cgroup2_not_mounted_skips(fake: FakeRoot) -> None:
    fake.write("/proc/self/mountinfo", "24 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1 rw\n")
    r = cc.cgroup_cpu(context(fake))
    assert r.status is Status.SKIP
    assert "not mounted" in r.finding


def test_mount_point_with_escaped_space(fake: FakeRoot) -> None:
    fake.write("/proc/self/mountinfo", "30 24 0:26 / /cg\\040two rw - cgroup2 cgroup2 rw\n")
    fake.write("/cg two/work.slice/job.scope/cpu.max", "30000 100000\n")
    fake.write("/cg two/work.slice/job.scope/cpu.stat", _stat(0, 0))
    r = cc.cgroup_cpu(context(fake))
    assert r.details["mount"] == "/cg two"
    assert "0.30 CPUs" in r.finding


@pytest.mark.parametrize("bad", ["max", "fast 100000", "0 100000", "50000 0", "1 2 3"])
def test_malformed_cpu_max_warns(fake: FakeRoot, bad: str) -> None:
    fake.write(f"{CG}/work.slice/job.scope/cpu.max", bad + "\n")
    r = cc.cgroup_cpu(context(fake))
    assert r.status is Status.WARN
    assert "cpu.max" in r.finding and repr(bad) in r.finding


def test_malformed_cpu_stat_warns(fake: FakeRoot) -> None:
    fake.write(f"{CG}/work.slice/cpu.stat", "nr_throttled lots\n")
    r = cc.cgroup_cpu(context(fake))
    assert r.status is Status.WARN
    assert "cgroup /work.slice" in r.finding and "nr_throttled lots" in r.finding


@pytest.mark.parametrize("breaker", ["unreadable_dir", "unreadable_loop", "invalid_utf8"])
def test_unreadable_cpu_stat_warns(fake: FakeRoot, breaker: str) -> None:
    getattr(fake, breaker)(f"{CG}/work.slice/job.scope/cpu.stat")
    r = cc.cgroup_cpu(context(fake))
    assert r.status is Status.WARN
    assert "cannot read cgroup /work.slice/job.scope" in r.finding


def test_unreadable_proc_self_cgroup_warns(fake: FakeRoot) -> None:
    fake.unreadable_dir("/proc/self/cgroup")
    r = cc.cgroup_cpu(context(fake))
    assert r.status is Status.WARN
    assert "Is a directory" in r.finding


def test_parse_cpu_max() -> None:
    assert cc.parse_cpu_max("max 100000") == (None, 100000)
    assert cc.parse_cpu_max("25000 50000") == (25000, 50000)
