"""Capability parsing, the privileges check, and the raw bpf(2) probe (real and simulated)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from fakeroot import ALL_CAPS, NO_CAPS, FakeRoot, context, status_text

from scxctl import caps
from scxctl.bpf import syscall
from scxctl.doctor import checks_privileges as cp
from scxctl.doctor.model import Status
from scxctl.sysfs import SysRoot


def _mask(*bits: int) -> str:
    return f"{sum(1 << b for b in bits):016x}"


@pytest.fixture
def fake(tmp_path: Path) -> FakeRoot:
    return FakeRoot(tmp_path).sched_ext_machine()


# scxctl.caps

def test_parse_status_reads_every_set() -> None:
    sets = caps.parse_status(status_text(cap_eff=_mask(21, 39), cap_prm=_mask(0, 21, 39)))
    assert sets.effective == (1 << 21) | (1 << 39)
    assert sets.permitted == 1 | (1 << 21) | (1 << 39)
    assert sets.bounding == int(ALL_CAPS, 16)
    assert sets.has_effective(caps.CAP_BPF) and sets.has_effective(caps.CAP_SYS_ADMIN)
    assert not sets.has_effective(caps.CAP_PERFMON)
    assert sets.missing_effective(caps.CAP_BPF, caps.CAP_PERFMON) == [caps.CAP_PERFMON]


def test_parse_status_rejects_missing_and_malformed_lines() -> None:
    with pytest.raises(caps.CapsError, match="CapEff"):
        caps.parse_status("Name:\tx\nCapInh:\t0\nCapPrm:\t0\nCapBnd:\t0\nCapAmb:\t0\n")
    with pytest.raises(caps.CapsError, match="not a hexadecimal mask"):
        caps.parse_status(status_text(cap_eff="zz"))


def test_read_caps_of_this_process_matches_the_kernel() -> None:
    """The real /proc/self/status parses, and a root process with a full bounding set has CAP_SYS_ADMIN."""
    sets = caps.read_caps(SysRoot("/"))
    text = Path("/proc/self/status").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("CapEff:"))
    assert sets.effective == int(line.split()[1], 16)
    if os.geteuid() == 0 and sets.bounding == sets.effective:
        assert sets.has_effective(caps.CAP_SYS_ADMIN)


# the privileges check

def test_root_with_caps_ok(fake: FakeRoot) -> None:
    r = cp.privileges(context(fake))
    assert r.status is Status.OK
    assert (r.details["euid"], r.details["missing"]) == (0, [])


def test_root_without_caps_fails(fake: FakeRoot) -> None:
    fake.write("/proc/self/status", status_text(cap_eff=_mask(21)))
    r = cp.privileges(context(fake))
    assert r.status is Status.FAIL
    assert r.details["missing"] == ["CAP_BPF"]
    assert "CAP_BPF" in r.finding and r.hint


def test_unprivileged_user_with_both_caps_ok(fake: FakeRoot) -> None:
    fake.write("/proc/self/status", status_text(cap_eff=_mask(21, 39)))
    r = cp.privileges(context(fake, euid=lambda: 1000))
    assert r.status is Status.OK
    assert "uid 1000" in r.finding


def test_unprivileged_user_warns(fake: FakeRoot) -> None:
    fake.write("/proc/self/status", status_text(cap_eff=NO_CAPS))
    r = cp.privileges(context(fake, euid=lambda: 1000))
    assert r.status is Status.WARN
    assert r.details["missing"] == ["CAP_BPF", "CAP_SYS_ADMIN"]
    assert "root" in (r.hint or "")


@pytest.mark.parametrize("breaker", ["unreadable_dir", "invalid_utf8", "remove"])
def test_status_unreadable_warns(fake: FakeRoot, breaker: str) -> None:
    getattr(fake, breaker)("/proc/self/status")
    r = cp.privileges(context(fake))
    assert r.status is Status.WARN
    assert "capability sets unreadable" in r.finding


def test_status_without_cap_lines_warns(fake: FakeRoot) -> None:
    fake.write("/proc/self/status", "Name:\tpython3\n")
    r = cp.privileges(context(fake))
    assert r.status is Status.WARN
    assert "no CapInh" in r.finding


# bpf.syscall

def test_real_bpf_probe_creates_an_array_map() -> None:
    """On this machine (root, BPF syscall enabled) the raw syscall really creates a map."""
    fd = syscall.create_array_map(max_entries=4, value_size=16)
    try:
        assert os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:bpf-map"
        info = dict(line.split(":\t") for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines())
        assert (info["map_type"], info["max_entries"], info["value_size"]) == ("2", "4", "16")
    finally:
        os.close(fd)


def test_real_bpf_error_carries_errno() -> None:
    with pytest.raises(syscall.BpfSyscallError) as exc:
        syscall.create_array_map(max_entries=0)  # the kernel rejects an empty array map
    assert exc.value.errno == errno.EINVAL


def test_unknown_architecture_is_enosys() -> None:
    with pytest.raises(syscall.BpfSyscallError) as exc:
        syscall.syscall_number("pdp11")
    assert exc.value.errno == errno.ENOSYS
    assert syscall.syscall_number("x86_64") == 321


def test_bpf_check_ok_with_the_real_probe(fake: FakeRoot) -> None:
    r = cp.bpf_syscall(context(fake, bpf_probe=syscall.probe_map_create))
    assert r.status is Status.OK


def _failing(code: int):  # type: ignore[no-untyped-def]
    def probe() -> None:
        raise syscall.BpfSyscallError(code, os.strerror(code))
    return probe


@pytest.mark.parametrize(
    ("code", "hint_word"),
    [(errno.EPERM, "CAP_BPF"), (errno.ENOSYS, "CONFIG_BPF_SYSCALL"), (errno.ENOMEM, "RLIMIT_MEMLOCK"),
     (errno.EIO, "dmesg")],
)
def test_bpf_check_fails_with_errno_text_when_privileged(fake: FakeRoot, code: int, hint_word: str) -> None:
    ctx = context(fake, bpf_probe=_failing(code))
    ctx.results["privileges"] = cp.privileges(ctx)
    r = cp.bpf_syscall(ctx)
    assert r.status is Status.FAIL
    assert errno.errorcode[code] in r.finding and os.strerror(code) in r.finding
    assert r.details == {"errno": code, "error": errno.errorcode[code]}
    assert hint_word in (r.hint or "")


def test_bpf_eperm_is_only_a_warning_for_an_unprivileged_user(fake: FakeRoot) -> None:
    fake.write("/proc/self/status", status_text(cap_eff=NO_CAPS))
    ctx = context(fake, euid=lambda: 1000, bpf_probe=_failing(errno.EPERM))
    ctx.results["privileges"] = cp.privileges(ctx)
    r = cp.bpf_syscall(ctx)
    assert r.status is Status.WARN
    assert "EPERM" in r.finding
