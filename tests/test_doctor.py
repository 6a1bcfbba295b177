"""The doctor as a whole: registry order, the runner's safety net, the verdict, the JSON report."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from fakeroot import FakeLibbpf, FakeRoot, context, status_text

from scxctl.bpf.syscall import BpfSyscallError
from scxctl.doctor import registry
from scxctl.doctor.model import REGISTRY, CheckResult, Status, check, run_command
from scxctl.doctor.runner import report, run_checks

EXPECTED_IDS = [
    "kernel.release", "kernel.config_sched_ext", "kernel.sched_ext_sysfs", "sched_ext.state",
    "sched_ext.loaded", "kernel.isolcpus", "kernel.btf", "privileges", "bpf.syscall", "libbpf",
    "toolchain.clang", "toolchain.bpftool", "cgroup.cpu",
]


# Checks of the checkout's build state (the BPF object, tested by its owner): they depend on whether
# `make -C bpf` ran, not on the fake machine, so the healthy-machine test accepts either outcome.
BUILD_STATE_CHECKS = {"bpf.object"}
# optional tools whose row depends on what this host has installed (their own tests fake both ways)
OPTIONAL_TOOL_CHECKS = {"bcc"}


def _ids(results: list[CheckResult]) -> list[str]:
    return [r.id for r in results]


def _by_id(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.id: r for r in results}


def test_order_is_the_module_list_whatever_was_imported_first() -> None:
    ids = [c.id for c in registry.ordered()]
    base = [i for i in ids if i in EXPECTED_IDS]
    assert base == EXPECTED_IDS
    assert ids[-1] == "verdict"
    # the optional BPF object check, when its module exists, sits after cgroup and before the verdict
    assert ids.index("cgroup.cpu") < len(ids) - 1


def test_ids_are_unique_and_dotted_lowercase() -> None:
    ids = [c.id for c in registry.ordered()]
    assert len(ids) == len(set(ids))
    assert all(i == i.lower() and " " not in i for i in ids)


def test_duplicate_id_is_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        check("kernel.release", "again")(lambda ctx: None)  # type: ignore[arg-type,return-value]


def test_a_crashing_check_becomes_a_failed_result(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()

    @check("test.crash", "crashes")
    def crash(ctx: object) -> CheckResult:
        raise RuntimeError("boom")

    try:
        results = run_checks(context(fake))
    finally:
        REGISTRY[:] = [c for c in REGISTRY if c.id != "test.crash"]
    r = _by_id(results)["test.crash"]
    assert r.status is Status.FAIL
    assert "RuntimeError: boom" in r.finding and r.hint
    assert _ids(results)[-1] == "verdict"  # an unlisted module's check still runs before the verdict
    assert "test.crash" in _by_id(results)["verdict"].details["failed"]


def test_healthy_machine_all_ok(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    programs = {"clang-19": "clang version 19.1.7", "bpftool": "bpftool v7.5.0\nusing libbpf v1.5"}
    for name, text in programs.items():
        (bindir / name).write_text(f"#!/bin/sh\necho '{text}'\n")
        (bindir / name).chmod(0o755)
    results = run_checks(context(fake, search_path=str(bindir), run=run_command))
    bad = {r.id: (r.status.value, r.finding) for r in results
           if r.status is not Status.OK
           and r.id not in BUILD_STATE_CHECKS | OPTIONAL_TOOL_CHECKS | {"verdict"}}
    assert bad == {}
    by_id = _by_id(results)
    build_failed = [cid for cid in BUILD_STATE_CHECKS if cid in by_id and by_id[cid].status is Status.FAIL]
    doc = report(results)
    assert doc["ok"] is (not build_failed)
    if build_failed:
        assert by_id["verdict"].details["failed"] == build_failed
    else:
        assert by_id["verdict"].finding == "this machine can run sched_ext schedulers and pyland"


def test_no_sched_ext_verdict_names_the_reasons(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).no_sched_ext_machine()
    results = _by_id(run_checks(context(fake)))
    v = results["verdict"]
    assert v.status is Status.FAIL
    assert v.finding.startswith("THIS KERNEL CANNOT RUN sched_ext SCHEDULERS")
    assert "CONFIG_SCHED_CLASS_EXT is not set" in v.finding
    assert "/sys/kernel/sched_ext is missing" in v.finding
    assert "trixie-backports" in (v.hint or "")
    assert "python -m tools.vm run -- scxctl doctor" in (v.hint or "")
    assert v.details["can_run_sched_ext"] is False
    assert results["sched_ext.state"].status is Status.SKIP


def test_only_sysfs_missing_is_enough_for_the_verdict(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    fake.remove("/sys/kernel/sched_ext")
    fake.remove("/proc/config.gz")  # config unknown: the sysfs check decides
    v = _by_id(run_checks(context(fake)))["verdict"]
    assert v.status is Status.FAIL
    assert "/sys/kernel/sched_ext is missing" in v.finding and "CONFIG" not in v.finding


def test_sched_ext_kernel_but_old_libbpf(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    v = _by_id(run_checks(context(fake, load_library=lambda n: FakeLibbpf(1, 1))))["verdict"]
    assert v.status is Status.FAIL
    assert "supports sched_ext" in v.finding and "libbpf" in v.finding
    assert (v.details["can_run_sched_ext"], v.details["can_run_pyland"]) == (True, False)


def test_other_scheduler_loaded_verdict_warns(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine(state="enabled", ops="lavd_1.0")
    v = _by_id(run_checks(context(fake)))["verdict"]
    assert v.status is Status.WARN
    assert "lavd_1.0" in v.finding


def test_unprivileged_verdict_warns(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    fake.write("/proc/self/status", status_text(cap_eff="0000000000000000"))

    def eperm() -> None:
        raise BpfSyscallError(errno.EPERM, os.strerror(errno.EPERM))

    results = _by_id(run_checks(context(fake, euid=lambda: 1000, bpf_probe=eperm)))
    assert results["bpf.syscall"].status is Status.WARN
    assert results["verdict"].status is Status.WARN
    assert "needs privileges" in results["verdict"].finding


@pytest.mark.parametrize("machine", ["sched_ext_machine", "no_sched_ext_machine"])
def test_every_result_that_is_not_ok_has_a_hint(tmp_path: Path, machine: str) -> None:
    fake = getattr(FakeRoot(tmp_path), machine)()
    for path in ("/proc/cmdline", "/sys/kernel/btf/vmlinux", "/proc/self/status", "/proc/self/cgroup"):
        fake.unreadable_dir(path)
    results = run_checks(context(fake, load_library=lambda n: FakeLibbpf(1, 0)))
    not_ok = [r for r in results if r.status is not Status.OK]
    assert len(not_ok) >= 6
    assert [r.id for r in not_ok if not r.hint] == []
    assert all("\n" not in r.finding for r in results)


def test_report_schema(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).no_sched_ext_machine()
    doc = report(run_checks(context(fake)))
    assert set(doc) == {"schema", "scxctl_version", "ok", "summary", "checks"}
    assert doc["schema"] == 1 and doc["ok"] is False
    assert set(doc["summary"]) == {"ok", "warn", "fail", "skip"}
    assert sum(doc["summary"].values()) == len(doc["checks"])
    for c in doc["checks"]:
        assert set(c) == {"id", "title", "status", "finding", "hint", "details"}
        assert c["status"] in {"ok", "warn", "fail", "skip"}
        assert isinstance(c["details"], dict)
