"""scxctl.sysfs: the root prefix, readers, cgroup/mount parsing, and read_sched_ext."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakeroot import RELEASE, FakeRoot

from scxctl.sysfs import SysRoot, nr_cpu_ids, ops_matches, read_sched_ext


def test_default_root_is_slash_and_env_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SCXCTL_SYSROOT", raising=False)
    assert SysRoot().is_real
    monkeypatch.setenv("SCXCTL_SYSROOT", str(tmp_path))
    sr = SysRoot()
    assert not sr.is_real
    assert sr.path("/sys/kernel/sched_ext/state") == tmp_path / "sys/kernel/sched_ext/state"


def test_real_root_reads_the_machine() -> None:
    sr = SysRoot("/")
    assert sr.kernel_release() == os.uname().release
    assert sr.cmdline() == Path("/proc/cmdline").read_text().strip()


def test_readers_on_a_fake_tree(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    sr = fake.sysroot
    assert sr.kernel_release() == RELEASE
    assert sr.read_optional("/sys/kernel/sched_ext/state") == "disabled"
    assert sr.read_optional("/sys/kernel/sched_ext/root/ops") is None
    fake.unreadable_dir("/sys/kernel/sched_ext/state")
    with pytest.raises(IsADirectoryError):
        sr.read_optional("/sys/kernel/sched_ext/state")
    fake.invalid_utf8("/proc/cmdline")
    with pytest.raises(UnicodeDecodeError):
        sr.cmdline()


def test_self_cgroups_v1_v2_and_named(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path)
    fake.write("/proc/self/cgroup", "9:name=systemd:/a\n3:cpu,cpuacct:/b\n0::/c/d\n")
    ms = fake.sysroot.self_cgroups()
    assert [(m.hierarchy, m.controllers, m.path) for m in ms] == [
        ("9", ("name=systemd",), "/a"), ("3", ("cpu", "cpuacct"), "/b"), ("0", (), "/c/d")]
    assert fake.sysroot.self_cgroup_v2() == "/c/d"
    fake.write("/proc/self/cgroup", "3:cpu:/b\n")
    assert fake.sysroot.self_cgroup_v2() is None


def test_cgroup2_mount(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path)
    fake.write("/proc/self/mountinfo",
               "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
               "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n")
    assert fake.sysroot.cgroup2_mount() == "/sys/fs/cgroup/unified"
    fake.write("/proc/self/mountinfo", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n")
    assert fake.sysroot.cgroup2_mount() is None


def test_cgroup2_mount_of_this_machine_matches_proc_mounts() -> None:
    mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    expected = next((m[1] for m in mounts if m[2] == "cgroup2"), None)
    assert SysRoot("/").cgroup2_mount() == expected


def test_read_sched_ext_absent_present_and_malformed(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path)
    assert read_sched_ext(fake.sysroot).available is False
    fake.sched_ext_sysfs(state="enabled", ops="pyland")
    st = read_sched_ext(fake.sysroot)
    got = (st.available, st.enabled, st.ops, st.switch_all, st.enable_seq)
    assert got == (True, True, "pyland", False, 3)
    fake.write("/sys/kernel/sched_ext/nr_rejected", "many\n")
    fake.unreadable_dir("/sys/kernel/sched_ext/state")
    st = read_sched_ext(fake.sysroot)
    assert (st.nr_rejected, st.state, st.enabled) == (None, None, False)


def test_nr_cpu_ids_is_one_past_the_highest_possible_cpu_not_a_count(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path)
    fake.write("/sys/devices/system/cpu/possible", "0,4-7\n")  # sparse ids: 5 CPUs, ids up to 7
    assert nr_cpu_ids(fake.sysroot) == 8
    fake.write("/sys/devices/system/cpu/possible", "0-3\n")
    assert nr_cpu_ids(fake.sysroot) == 4
    fake.write("/sys/devices/system/cpu/possible", "")  # the kernel does not say: the CPU count
    assert nr_cpu_ids(fake.sysroot) == (os.cpu_count() or 1)


@pytest.mark.parametrize(("ops", "name", "runs"), [
    ("pyland", "pyland", True),  # the kernel's C examples and pyland: the bare name
    ("simple", "simple", True),
    # scx's Rust schedulers: name, version, git describe and target, non-alphanumerics as `_`
    ("rustland_1.0.14_g3c5df27_x86_64_unknown_linux_gnu", "rustland", True),
    ("lavd_1.0.12_g8c3f1a2_dirty_x86_64_unknown_linux_gnu_debug", "lavd", True),
    ("bpfland_1.0.14_x86_64_unknown_linux_gnu", "bpf", False),  # another scheduler's prefix
    ("pylandx", "pyland", False),
    ("pyland", "rustland", False),
    (None, "pyland", False),  # nothing loaded
])
def test_ops_matches_the_names_schedulers_register(ops: str | None, name: str, runs: bool) -> None:
    assert ops_matches(ops, name) is runs
