"""Kernel checks against fake /proc and /sys trees: present, absent, malformed, unreadable."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from fakeroot import RELEASE, FakeRoot, context, kconfig

from scxctl.doctor import checks_kernel as ck
from scxctl.doctor.model import Status


@pytest.fixture
def fake(tmp_path: Path) -> FakeRoot:
    return FakeRoot(tmp_path).sched_ext_machine()


# kernel.release

def test_release_read_from_osrelease(fake: FakeRoot) -> None:
    r = ck.kernel_release(context(fake))
    assert (r.status, r.finding, r.details["release"]) == (Status.OK, RELEASE, RELEASE)


@pytest.mark.parametrize("breaker", ["unreadable_dir", "unreadable_loop", "invalid_utf8", "remove"])
def test_release_unreadable_is_a_warning_with_the_reason(fake: FakeRoot, breaker: str) -> None:
    getattr(fake, breaker)("/proc/sys/kernel/osrelease")
    r = ck.kernel_release(context(fake))
    assert r.status is Status.WARN
    assert r.hint
    expected = {"unreadable_dir": "Is a directory", "unreadable_loop": "ELOOP", "invalid_utf8": "UTF-8",
                "remove": "ENOENT"}[breaker]
    assert expected in r.finding


# kernel.config_sched_ext

def test_config_gz_with_sched_ext(fake: FakeRoot) -> None:
    r = ck.config_sched_ext(context(fake))
    assert r.status is Status.OK
    assert r.details["source"] == "/proc/config.gz"
    assert "/proc/config.gz" in r.finding
    assert r.details["options"]["CONFIG_DEBUG_INFO_BTF"] == "y"


def test_config_gz_without_sched_ext_fails(fake: FakeRoot) -> None:
    fake.write("/proc/config.gz", gzip.compress(kconfig(False).encode()))
    r = ck.config_sched_ext(context(fake))
    assert r.status is Status.FAIL
    assert r.details["value"] == "n"
    assert "not set" in r.finding and "/proc/config.gz" in r.finding
    assert "CONFIG_SCHED_CLASS_EXT=y" in (r.hint or "")


def test_config_option_absent_counts_as_not_set(fake: FakeRoot) -> None:
    fake.write("/proc/config.gz", gzip.compress(b"CONFIG_BPF_SYSCALL=y\n"))
    r = ck.config_sched_ext(context(fake))
    assert (r.status, r.details["value"]) == (Status.FAIL, "n")


def test_boot_config_used_when_no_config_gz(fake: FakeRoot) -> None:
    fake.remove("/proc/config.gz")
    fake.write(f"/boot/config-{RELEASE}", kconfig(True))
    r = ck.config_sched_ext(context(fake))
    assert r.status is Status.OK
    assert r.details["source"] == f"/boot/config-{RELEASE}"
    assert r.details["problems"] == {"/proc/config.gz": "absent"}


def test_garbage_config_gz_falls_back_to_boot_and_names_the_problem(fake: FakeRoot) -> None:
    fake.write("/proc/config.gz", b"\x1f\x8b\x08garbage that is not deflate")
    fake.write(f"/boot/config-{RELEASE}", kconfig(False))
    r = ck.config_sched_ext(context(fake))
    assert r.status is Status.FAIL  # the /boot config answered: not set
    assert r.details["source"] == f"/boot/config-{RELEASE}"
    assert "not valid gzip" in r.details["problems"]["/proc/config.gz"]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"this is not gzip at all", "not valid gzip"),
        (gzip.compress(kconfig(True).encode())[:40], "not valid gzip"),  # truncated stream
        (gzip.compress(b"\x00\x01binary junk\xff" * 10), "not a kernel config"),
        (b"", "empty file"),
    ],
)
def test_garbage_config_gz_alone_is_a_warning_naming_the_problem(
    fake: FakeRoot, content: bytes, problem: str
) -> None:
    fake.write("/proc/config.gz", content)
    r = ck.config_sched_ext(context(fake))
    assert r.status is Status.WARN
    assert problem in r.finding
    assert "/proc/config.gz" in r.finding and f"/boot/config-{RELEASE}: absent" in r.finding
    assert r.hint


def test_neither_config_readable_warns(fake: FakeRoot) -> None:
    fake.remove("/proc/config.gz")
    r = ck.config_sched_ext(context(fake))
    assert r.status is Status.WARN
    assert r.details["source"] is None
    assert "cannot tell" in r.finding


def test_config_gz_as_directory_is_reported_not_raised(fake: FakeRoot) -> None:
    fake.unreadable_dir("/proc/config.gz")
    r = ck.config_sched_ext(context(fake))
    assert r.status is Status.WARN
    assert "Is a directory" in r.details["problems"]["/proc/config.gz"]


def test_without_release_only_config_gz_is_tried(fake: FakeRoot) -> None:
    fake.remove("/proc/sys/kernel/osrelease")
    fake.remove("/proc/config.gz")
    r = ck.config_sched_ext(context(fake))
    assert list(r.details["problems"]) == ["/proc/config.gz"]


def test_parse_kconfig() -> None:
    values = ck.parse_kconfig('CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C="text"\n# comment\n')
    assert values == {"CONFIG_A": "y", "CONFIG_B": "n", "CONFIG_C": "text"}


# kernel.sched_ext_sysfs, sched_ext.state, sched_ext.loaded

def test_sysfs_present(fake: FakeRoot) -> None:
    assert ck.sched_ext_sysfs(context(fake)).status is Status.OK


def test_sysfs_missing_fails_and_dependent_checks_skip(fake: FakeRoot) -> None:
    fake.remove("/sys/kernel/sched_ext")
    ctx = context(fake)
    r = ck.sched_ext_sysfs(ctx)
    assert r.status is Status.FAIL
    assert "missing" in r.finding and "cannot run sched_ext" in r.finding
    for fn in (ck.sched_ext_state, ck.sched_ext_loaded):
        s = fn(ctx)
        assert s.status is Status.SKIP and s.hint


def test_sysfs_a_file_not_a_directory(fake: FakeRoot) -> None:
    fake.remove("/sys/kernel/sched_ext")
    fake.write("/sys/kernel/sched_ext", "oops")
    r = ck.sched_ext_sysfs(context(fake))
    assert r.status is Status.FAIL
    assert "not a directory" in r.finding


@pytest.mark.parametrize(
    ("state", "status"),
    [("disabled", Status.OK), ("enabled", Status.OK), ("enabling", Status.WARN), ("disabling", Status.WARN),
     ("bogus", Status.WARN)],
)
def test_state_values(tmp_path: Path, state: str, status: Status) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine(state=state)
    r = ck.sched_ext_state(context(fake))
    assert r.status is status
    assert r.details["state"] == state
    assert r.details["enable_seq"] == 3
    assert (r.hint is None) == (status is Status.OK)


@pytest.mark.parametrize("breaker", ["unreadable_dir", "unreadable_loop", "invalid_utf8", "remove"])
def test_state_unreadable(fake: FakeRoot, breaker: str) -> None:
    getattr(fake, breaker)("/sys/kernel/sched_ext/state")
    r = ck.sched_ext_state(context(fake))
    assert r.status is Status.WARN
    assert "cannot read /sys/kernel/sched_ext/state" in r.finding


def test_loaded_none(fake: FakeRoot) -> None:
    r = ck.sched_ext_loaded(context(fake))
    assert (r.status, r.details["ops"]) == (Status.OK, None)


@pytest.mark.parametrize("name", ["pyland", "pyland_0.1.0"])
def test_loaded_ours(tmp_path: Path, name: str) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine(state="enabled", ops=name)
    r = ck.sched_ext_loaded(context(fake))
    assert (r.status, r.details["ours"], r.details["ops"]) == (Status.OK, True, name)


def test_loaded_other_warns_about_ebusy(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine(state="enabled", ops="rusty_1.0.4_x86_64")
    r = ck.sched_ext_loaded(context(fake))
    assert r.status is Status.WARN
    assert "EBUSY" in r.finding and "rusty_1.0.4_x86_64" in r.finding
    assert r.details["ours"] is False
    assert "rusty_1.0.4_x86_64" in (r.hint or "")


def test_loaded_unreadable(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine(state="enabled")
    fake.invalid_utf8("/sys/kernel/sched_ext/root/ops")
    r = ck.sched_ext_loaded(context(fake))
    assert r.status is Status.WARN
    assert "UTF-8" in r.finding


# kernel.isolcpus

def test_isolcpus_absent(fake: FakeRoot) -> None:
    assert ck.isolcpus(context(fake)).status is Status.OK


def test_isolcpus_present_warns(fake: FakeRoot) -> None:
    fake.write("/proc/cmdline", "root=/dev/sda1 isolcpus=domain,2-3 quiet\n")
    r = ck.isolcpus(context(fake))
    assert r.status is Status.WARN
    assert r.details["isolcpus"] == "domain,2-3"
    assert "isolcpus=domain,2-3" in r.finding and r.hint


def test_isolcpus_after_double_dash_belongs_to_init(fake: FakeRoot) -> None:
    fake.write("/proc/cmdline", "root=/dev/sda1 -- isolcpus=1\n")
    assert ck.isolcpus(context(fake)).status is Status.OK


def test_isolcpus_unreadable_cmdline(fake: FakeRoot) -> None:
    fake.unreadable_loop("/proc/cmdline")
    r = ck.isolcpus(context(fake))
    assert r.status is Status.WARN
    assert "cannot read /proc/cmdline" in r.finding
