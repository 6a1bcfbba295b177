"""cgroup.bandwidth on fake machines: which cpu.max quotas exist, and does the scheduler enforce them."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakeroot import FakeRoot, context, every_kind_btf, hook_btf

from scxctl.doctor import checks_cgroup_bw as cb
from scxctl.doctor.model import Status
from scxctl.doctor.runner import run_checks

CG = "/sys/fs/cgroup"
BTF = "/sys/kernel/btf/vmlinux"


def machine(tmp_path: Path, *, state: str = "disabled", ops: str | None = None,
            hook: bool = True) -> FakeRoot:
    fake = FakeRoot(tmp_path).sched_ext_machine(state=state, ops=ops, cgroup="/work.slice/job.scope")
    fake.write(BTF, hook_btf(hook))
    return fake


def quota(fake: FakeRoot, cg: str, cpu_max: str = "50000 100000",
          throttled: tuple[int, int] | None = None) -> None:
    fake.write(f"{CG}{cg}/cpu.max", cpu_max + "\n")
    if throttled is not None:
        fake.write(f"{CG}{cg}/cpu.stat", f"usage_usec 10\nnr_periods 9\nnr_throttled {throttled[0]}\n"
                                         f"throttled_usec {throttled[1]}\n")


def test_no_quota_ok(tmp_path: Path) -> None:
    r = cb.cgroup_bandwidth(context(machine(tmp_path, state="enabled", ops="scx_rusty")))
    assert r.status is Status.OK
    assert "no cgroup has a cpu.max quota" in r.finding
    assert r.details["cgroups"] == [] and r.details["walked"] == 3  # /, /work.slice, /work.slice/job.scope


def test_quota_under_default_scheduler_is_enforced(tmp_path: Path) -> None:
    fake = machine(tmp_path, hook=False)
    quota(fake, "/work.slice", "20000 100000", throttled=(4, 1234))
    r = cb.cgroup_bandwidth(context(fake))
    assert r.status is Status.OK
    assert "enforced by the kernel" in r.finding
    assert r.details["enforced"] is True and r.details["scheduler"] is None
    assert r.details["kernel_hooks"] is False
    assert r.details["cgroups"] == [{"cgroup": "/work.slice", "quota_us": 20000, "period_us": 100000,
                                     "cpus": 0.2, "nr_throttled": 4, "throttled_usec": 1234}]


def test_quota_without_sched_ext_sysfs_is_enforced(tmp_path: Path) -> None:
    fake = machine(tmp_path)
    fake.remove("/sys/kernel/sched_ext")
    quota(fake, "/work.slice")
    r = cb.cgroup_bandwidth(context(fake))
    assert r.status is Status.OK and r.details["enforced"] is True


def test_quota_under_pyland_with_hook_ok(tmp_path: Path) -> None:
    fake = machine(tmp_path, state="enabled", ops="pyland", hook=True)
    quota(fake, "/work.slice/job.scope")
    r = cb.cgroup_bandwidth(context(fake))
    assert r.status is Status.OK
    assert "enforced by pyland through ops.cgroup_set_bandwidth" in r.finding
    assert r.details["scheduler"] == "pyland"
    assert (r.details["enforced"], r.details["kernel_hooks"]) == (True, True)


def test_quota_under_pyland_without_hook_warns(tmp_path: Path) -> None:
    fake = machine(tmp_path, state="enabled", ops="pyland", hook=False)
    quota(fake, "/work.slice/job.scope")
    r = cb.cgroup_bandwidth(context(fake))
    assert r.status is Status.WARN
    assert "1 cgroup with a cpu.max quota (/work.slice/job.scope)" in r.finding
    assert "NOT enforced" in r.finding
    assert "6.17" in (r.hint or "")
    assert (r.details["enforced"], r.details["kernel_hooks"]) == (False, False)


def test_quota_under_pyland_with_unreadable_btf_warns(tmp_path: Path) -> None:
    fake = machine(tmp_path, state="enabled", ops="pyland")
    fake.remove(BTF)
    quota(fake, "/work.slice")
    r = cb.cgroup_bandwidth(context(fake))
    assert r.status is Status.WARN and "may be ignored" in r.finding
    assert (r.details["enforced"], r.details["kernel_hooks"]) == (None, None)


def test_quota_under_other_scheduler_may_be_ignored(tmp_path: Path) -> None:
    fake = machine(tmp_path, state="enabled", ops="scx_rusty", hook=True)
    quota(fake, "/work.slice")
    r = cb.cgroup_bandwidth(context(fake))
    assert r.status is Status.WARN
    assert "may be ignored" in r.finding and "scx_rusty" in r.finding
    assert "ops.cgroup_set_bandwidth" in (r.hint or "") and "scx_lavd --enable-cpu-bw" in (r.hint or "")
    assert r.details["scheduler"] == "scx_rusty"
    assert (r.details["enforced"], r.details["kernel_hooks"]) == (None, True)


def test_other_scheduler_on_old_kernel_hint_names_the_kernel(tmp_path: Path) -> None:
    fake = machine(tmp_path, state="enabled", ops="scx_rusty", hook=False)
    quota(fake, "/work.slice")
    r = cb.cgroup_bandwidth(context(fake))
    assert r.status is Status.WARN and "may be ignored" in r.finding
    assert "6.17" in (r.hint or "")


def test_no_cgroup2_skips(tmp_path: Path) -> None:
    fake = machine(tmp_path)
    fake.write("/proc/self/mountinfo", "24 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1 rw\n")
    r = cb.cgroup_bandwidth(context(fake))
    assert r.status is Status.SKIP and r.hint
    assert "not mounted" in r.finding


def test_cpu_controller_not_on_v2_skips(tmp_path: Path) -> None:
    """A hybrid host: cgroup2 is mounted, but the cpu controller (and its quotas) lives on v1."""
    fake = machine(tmp_path)
    fake.write(f"{CG}/cgroup.controllers", "\n")
    r = cb.cgroup_bandwidth(context(fake))
    assert r.status is Status.SKIP and r.hint
    assert "cpu controller is not on cgroup v2" in r.finding


def test_unreadable_mountinfo_warns(tmp_path: Path) -> None:
    fake = machine(tmp_path)
    fake.unreadable_dir("/proc/self/mountinfo")
    r = cb.cgroup_bandwidth(context(fake))
    assert r.status is Status.WARN and "Is a directory" in r.finding and r.hint


def test_nested_quotas_all_listed(tmp_path: Path) -> None:
    fake = machine(tmp_path, state="enabled", ops="scx_lavd")
    for cg in ("/work.slice", "/work.slice/job.scope", "/work.slice/job.scope/inner",
               "/system.slice/a.service", "/system.slice/b.service"):
        quota(fake, cg)
    fake.write(f"{CG}/system.slice/cpu.max", "max 100000\n")  # "max" is no quota
    r = cb.cgroup_bandwidth(context(fake))
    assert [c["cgroup"] for c in r.details["cgroups"]] == [
        "/system.slice/a.service", "/system.slice/b.service", "/work.slice",
        "/work.slice/job.scope", "/work.slice/job.scope/inner"]
    assert "5 cgroups" in r.finding and ", ..." in r.finding
    assert "/work.slice/job.scope/inner" not in r.finding  # only the first few are named


@pytest.mark.parametrize("bad", ["fast 100000", "0 100000", "50000 0", "1 2 3", ""])
def test_malformed_cpu_max_is_reported_not_raised(tmp_path: Path, bad: str) -> None:
    fake = machine(tmp_path)
    quota(fake, "/work.slice", bad)
    quota(fake, "/work.slice/job.scope")
    r = cb.cgroup_bandwidth(context(fake))
    assert r.status is Status.OK  # the well-formed quota is still listed and judged
    assert [c["cgroup"] for c in r.details["cgroups"]] == ["/work.slice/job.scope"]
    assert [p["cgroup"] for p in r.details["problems"]] == ["/work.slice"]
    assert "1 cgroup unreadable or malformed" in r.finding


@pytest.mark.parametrize("breaker", ["unreadable_loop", "invalid_utf8"])
def test_unreadable_cpu_max_is_reported(tmp_path: Path, breaker: str) -> None:
    fake = machine(tmp_path)
    getattr(fake, breaker)(f"{CG}/work.slice/cpu.max")
    r = cb.cgroup_bandwidth(context(fake))
    assert r.status is Status.OK
    assert r.details["problems"][0]["cgroup"] == "/work.slice"


def test_malformed_cpu_stat_keeps_the_quota(tmp_path: Path) -> None:
    fake = machine(tmp_path)
    quota(fake, "/work.slice")
    fake.write(f"{CG}/work.slice/cpu.stat", "nr_throttled lots\n")
    (c,) = cb.cgroup_bandwidth(context(fake)).details["cgroups"]
    assert (c["quota_us"], c["nr_throttled"]) == (50000, None)


def test_walk_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = machine(tmp_path)
    for i in range(5):
        quota(fake, f"/many/c{i}")
    monkeypatch.setattr(cb, "MAX_DIRS", 4)
    r = cb.cgroup_bandwidth(context(fake))
    assert r.details["walked"] == 4 and r.details["truncated"] is True
    assert "walk stopped at 4 cgroups" in r.finding


def test_in_the_full_run_the_kernel_btf_result_is_reused(tmp_path: Path) -> None:
    fake = machine(tmp_path, state="enabled", ops="pyland", hook=True)
    quota(fake, "/work.slice")
    results = {r.id: r for r in run_checks(context(fake))}
    assert "cgroup_set_bandwidth" in results["kernel.btf"].details["sched_ext_ops"]["members"]
    r = results["cgroup.bandwidth"]
    assert r.status is Status.OK and r.details["kernel_hooks"] is True
    assert results["verdict"].status is not Status.FAIL


def test_quota_warning_never_fails_the_verdict(tmp_path: Path) -> None:
    fake = machine(tmp_path, state="enabled", ops="pyland", hook=False)
    quota(fake, "/work.slice")
    results = {r.id: r for r in run_checks(context(fake))}
    assert results["cgroup.bandwidth"].status is Status.WARN
    assert "cgroup.bandwidth" not in results["verdict"].details["failed"]


def test_every_kind_btf_has_no_hook() -> None:
    """The shared fake kernel BTF predates 6.17: the check must read it as 'no hooks'."""
    from scxctl.bpf.btf import find_struct

    ops = find_struct(every_kind_btf(), "sched_ext_ops")
    assert ops is not None and "cgroup_set_bandwidth" not in ops.members
