"""The VM harness (tools/vm): host-only logic, then real guest boots (marked vm).

Guest boots are expensive under TCG (15-40 s each), so this module boots three times: one light
boot that checks everything it can and exits 3, one that hangs past --timeout, one with systemd.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import scxctl
from tools.vm import accel, api, apt, cli, config, hang, image, kernel, matrix, qemu, rundisk, runner
from tools.vm.api import VM, VMResult
from tools.vm.codes import HarnessCode
from tools.vm.rundisk import Copy

CHECKOUT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- host-only: argument parsing


def test_copy_spec_parses_src_and_absolute_dst() -> None:
    c = Copy.parse("some/file.txt:/etc/scxctl/x.toml")
    assert c.src == Path("some/file.txt")
    assert c.dst == "/etc/scxctl/x.toml"


@pytest.mark.parametrize("spec", ["nodst", "src:", ":/dst", "src:relative/dst", "src:/a\tb"])
def test_copy_spec_rejects_malformed(spec: str) -> None:
    with pytest.raises(ValueError):
        Copy.parse(spec)


def test_command_string_keeps_one_arg_and_quotes_several() -> None:
    assert cli.command_string(["echo a; exit 3"]) == "echo a; exit 3"
    assert cli.command_string(["sh", "-c", "exit 3"]) == "sh -c 'exit 3'"


class _FakeRun:
    def __init__(self, code: int, message: str | None = None) -> None:
        self.code, self.message = code, message
        self.spec: runner.RunSpec | None = None

    def __call__(self, spec: runner.RunSpec, sink: object = None) -> runner.Outcome:
        self.spec = spec
        return runner.Outcome(self.code, b"", self.message, "tcg", 1.0, 2.0, "")


def test_run_cli_builds_the_spec_and_exits_with_the_command_code(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeRun(3)
    monkeypatch.setattr(runner, "run", fake)
    res = CliRunner().invoke(
        cli.app,
        ["run", "--systemd", "--timeout", "7", "--cpus", "3", "--mem", "1G", "--copy", "a:/b",
         "--results", "out", "--", "scxctl", "doctor", "--json"],
    )  # fmt: skip
    assert res.exit_code == 3, res.output
    assert fake.spec is not None
    assert fake.spec.command == "scxctl doctor --json"
    assert (fake.spec.systemd, fake.spec.timeout, fake.spec.cpus, fake.spec.mem) == (True, 7.0, 3, "1G")
    assert fake.spec.copies == [Copy(Path("a"), "/b")]
    assert fake.spec.results == Path("out")


def test_run_cli_icount_reaches_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeRun(0)
    monkeypatch.setattr(runner, "run", fake)
    res = CliRunner().invoke(cli.app, ["run", "--icount", "2", "--", "true"])
    assert res.exit_code == 0, res.output
    assert fake.spec is not None and fake.spec.icount == 2
    assert CliRunner().invoke(cli.app, ["run", "--icount", "-1", "--", "true"]).exit_code == 2


def test_run_cli_options_after_the_command_belong_to_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeRun(0)
    monkeypatch.setattr(runner, "run", fake)
    res = CliRunner().invoke(cli.app, ["run", "scxctl", "doctor", "--json"])
    assert res.exit_code == 0, res.output
    assert fake.spec is not None and fake.spec.command == "scxctl doctor --json"


def test_run_cli_reports_harness_failures_with_their_code(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeRun(int(HarnessCode.TIMEOUT), "guest command timed out after 5 s")
    monkeypatch.setattr(runner, "run", fake)
    res = CliRunner().invoke(cli.app, ["run", "--", "sleep 100"])
    assert res.exit_code == 124
    assert "timed out" in res.output


def test_run_cli_rejects_bad_copy_before_booting(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeRun(0)
    monkeypatch.setattr(runner, "run", fake)
    res = CliRunner().invoke(cli.app, ["run", "--copy", "x:relative", "--", "true"])
    assert res.exit_code == 2
    assert fake.spec is None


# ---------------------------------------------------------------- host-only: outcome mapping


def _watch(**kw: object) -> runner._Watch:
    w = runner._Watch("n0nce")
    for k, v in kw.items():
        setattr(w, k, v)
    return w


@pytest.mark.parametrize(
    ("watch", "timed_out", "code"),
    [
        (_watch(started_at=1.0, exit_code=0), None, 0),
        (_watch(started_at=1.0, exit_code=3), None, 3),
        (_watch(started_at=1.0), "command", HarnessCode.TIMEOUT),
        (_watch(started_at=1.0, exit_code=0, panic="Kernel panic - not syncing: x"), None, HarnessCode.PANIC),
        (_watch(), "boot", HarnessCode.NO_COMMAND),
        (_watch(), None, HarnessCode.NO_COMMAND),
        (_watch(error="cannot bind /results"), None, HarnessCode.NO_COMMAND),
        (_watch(started_at=1.0), None, HarnessCode.NO_COMMAND),
    ],
)
def test_classify_maps_each_outcome_to_its_code(
    watch: runner._Watch, timed_out: str | None, code: int
) -> None:
    got, message = runner.classify(watch, timed_out)
    assert got == code
    assert (message is None) == (code in (0, 3))


def test_harness_codes_are_distinct_and_above_command_range() -> None:
    values = [int(c) for c in HarnessCode]
    assert len(set(values)) == len(values) == 4
    assert values == [124, 125, 126, 127]


def test_watch_parses_markers_split_across_reads_and_ignores_other_nonces() -> None:
    w = runner._Watch("abc")
    w.feed_ctl("SCXVM:other:exit=9\nSCXVM:abc:st", 1.0)
    assert w.started_at is None and w.exit_code is None
    w.feed_ctl("art\nSCXVM:abc:exit=42\n", 2.0)
    assert w.started_at == 2.0
    assert w.exit_code == 42


def test_watch_sees_a_kernel_panic_on_the_console() -> None:
    w = runner._Watch("abc")
    w.feed_console("[  3.1] ok\n")
    assert w.panic is None
    w.feed_console("[  4.2] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100\n")
    assert w.panic is not None and "Attempted to kill init" in w.panic


def test_usage_error_is_one_line() -> None:
    r = subprocess.run([sys.executable, "-m", "tools.vm", "run", "--timeout", "0", "--", "true"],
                       capture_output=True, text=True, timeout=60, cwd=Path(__file__).parent.parent)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "tools.vm: error: Invalid value for '--timeout': 0.0 is not in the range x>=1.",
        "tools.vm: hint: see 'python -m tools.vm run -h'",
    ]


def test_panic_excerpt_starts_at_the_kernel_report() -> None:
    noise = [f"[  {i}.0] boot line {i}" for i in range(100)]
    noise[50] = "[  50.0] WARNING: CPU: 0 PID: 1 at kernel/somewhere.c:1 harmless+0x1/0x2"
    oops = ["[ 101.0] BUG: kernel NULL pointer dereference, address: 0000000000000008",
            "[ 101.0] RIP: 0010:scx_disable_workfn+0x42/0x900"]
    calls = [f"[ 101.1]  frame_{i}+0x1/0x2" for i in range(60)]
    panic = "[ 101.2] Kernel panic - not syncing: Fatal exception in interrupt"
    text = runner.panic_excerpt("\n".join(noise + oops + calls + [panic]))
    lines = text.splitlines()
    assert lines[:2] == oops
    assert lines[-1] == panic and lines[-2] == "..."
    assert len(lines) == runner.PANIC_EXCERPT_LINES + 2
    # Only a WARNING: the report starts there. Nothing marked: the console's last lines.
    assert runner.panic_excerpt("\n".join(noise)).splitlines()[0] == noise[50]
    plain = noise[:50]
    assert runner.panic_excerpt("\n".join(plain)).splitlines() == plain[-runner.PANIC_EXCERPT_LINES:]


def test_a_failed_runs_message_says_what_it_ran_into() -> None:
    console = "[ 1.0] booting\n[ 2.0] Kernel panic - not syncing: boom"
    timeout = runner._explained("command timed out", HarnessCode.TIMEOUT, "command", 90, console, "", "")
    assert timeout == "command timed out after 90 s"
    boot = runner._explained("no command", HarnessCode.NO_COMMAND, "boot", 300, console, "", "vCPU 0 at x")
    assert boot == "no command after 300 s\nvCPU 0 at x"
    panic = runner._explained("guest kernel panic: boom", HarnessCode.PANIC, None, 90, console, "", "")
    assert panic.endswith("Kernel panic - not syncing: boom") and "after" not in panic
    # a guest that stopped by itself ran into no limit
    assert runner._explained("stopped", HarnessCode.NO_COMMAND, None, 300, console, "", "") == "stopped"


def _fake_runs(monkeypatch: pytest.MonkeyPatch, codes: list[int], report: str = "x") -> list[bool]:
    """runner.run returns `codes` in turn, panics with `report`; the returned list records each
    boot's tcg_single."""
    seen: list[bool] = []
    monkeypatch.setattr(api, "RETRIED", [])  # fake boots stay out of the real test summary
    monkeypatch.setattr(api, "RUNS", [])

    def fake_run(spec: runner.RunSpec, sink: object = None) -> runner.Outcome:
        seen.append(spec.tcg_single)
        code = codes[len(seen) - 1]
        msg = f"guest kernel panic: {report}" if code == HarnessCode.PANIC else None
        if code == HarnessCode.NO_COMMAND:
            msg = f"guest never reached the command (boot timeout) after 300 s\n{report}"
        return runner.Outcome(code, b"", msg, "tcg", 1.0, 2.0, "")

    monkeypatch.setattr(runner, "run", fake_run)
    return seen


def test_panics_retry_and_the_last_boot_is_single_threaded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    P = HarnessCode.PANIC
    seen = _fake_runs(monkeypatch, [P, P, 0])
    res = VM(lambda: tmp_path).run("true")
    assert res.returncode == 0 and res.boots == 3 and res.tcg_single
    assert seen == [False, False, True]
    # A performance test keeps parallel vCPUs and gets the panic.
    seen = _fake_runs(monkeypatch, [P, P, P])
    res = VM(lambda: tmp_path).run("true", single_on_last_retry=False)
    assert res.returncode == P and res.boots == 3 and seen == [False, False, False]
    # The stale-patch flake alone gets more boots; the last one single-threaded unless told not to.
    flake = "Fatal exception in interrupt\n[ 80.8] Oops: int3: 0000 [#1] SMP NOPTI"
    seen = _fake_runs(monkeypatch, [P, P, P, P, 0], flake)
    res = VM(lambda: tmp_path).run("true", single_on_last_retry=False)
    assert res.returncode == 0 and res.boots == 5 and seen == [False] * 5
    seen = _fake_runs(monkeypatch, [P] * 5, flake)
    res = VM(lambda: tmp_path).run("true")
    assert res.returncode == P and res.boots == 5 and seen == [False] * 4 + [True]
    # Any other panic keeps the three boots.
    seen = _fake_runs(monkeypatch, [P] * 5)
    res = VM(lambda: tmp_path).run("true", single_on_last_retry=False)
    assert res.returncode == P and res.boots == 3
    # A report pointing into a BPF program or sched_ext is ours: never retried.
    for ours in ("Oops: general protection fault\n RIP: 0010:bpf_prog_3f2a_pyland_dispatch+0x4b/0x1a0",
                 "BUG: kernel NULL pointer dereference\n scx_dsq_move+0x21/0x90",
                 "WARNING: CPU: 1 PID: 9 at kernel/sched/ext.c:2012 ops_dequeue+0x1/0x2"):
        seen = _fake_runs(monkeypatch, [P, 0], ours)
        res = VM(lambda: tmp_path).run("true")
        assert res.returncode == P and res.boots == 1 and seen == [False], ours


def test_a_light_guest_that_hung_before_its_command_gets_one_more_boot(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    H, P = HarnessCode.NO_COMMAND, HarnessCode.PANIC
    report = "hang report (...):\n[ 9.1] RIP: 0010:pv_native_safe_halt+0xf/0x20"
    seen = _fake_runs(monkeypatch, [H, 0], report)
    res = VM(lambda: tmp_path, lambda: "tests/test_x.py::t").run("true")
    assert res.returncode == 0 and res.boots == 2 and len(seen) == 2
    assert [(r.who, r.attempt) for r in api.RETRIED] == [("tests/test_x.py::t", 1)]
    retried = api.RETRIED[0].report
    assert "boot timeout" in retried and "RIP: 0010:pv_native_safe_halt" in retried
    # once only: a second hang is the result
    seen = _fake_runs(monkeypatch, [H, H, 0], report)
    res = VM(lambda: tmp_path).run("true")
    assert res.returncode == H and res.boots == 2 and len(seen) == 2
    # the retried boot still gets its panic retries
    seen = _fake_runs(monkeypatch, [H, P, 0], report)
    assert VM(lambda: tmp_path).run("true").boots == 3 and len(seen) == 3
    # systemd may be starting the installed scxctl, a second boot follows the first command: never retried
    for kwargs in ({"systemd": True}, {"then": "true"}):
        seen = _fake_runs(monkeypatch, [H, 0], report)
        res = VM(lambda: tmp_path).run("true", **kwargs)  # type: ignore[arg-type]
        assert res.returncode == H and res.boots == 1 and len(seen) == 1, kwargs


def test_every_retried_boot_is_recorded_with_its_test_and_report(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    flake = "Fatal exception\n[ 80.8] Oops: int3: 0000 [#1] SMP\n[ 80.9] RIP: 0010:__schedule+0x51b"
    _fake_runs(monkeypatch, [HarnessCode.PANIC, 0], flake)
    VM(lambda: tmp_path, lambda: "tests/test_x.py::t").run("true")
    assert [(r.who, r.attempt) for r in api.RETRIED] == [("tests/test_x.py::t", 1)]
    assert "Oops: int3" in api.RETRIED[0].report and "RIP: 0010:__schedule" in api.RETRIED[0].report
    # No panic, no retry.
    seen = _fake_runs(monkeypatch, [3])
    res = VM(lambda: tmp_path).run("true")
    assert res.returncode == 3 and res.boots == 1 and seen == [False]


# ---------------------------------------------------------------- host-only: KVM probe handling


def test_kvm_probe_interpretation() -> None:
    ok, reason = accel.interpret("", "KVM internal error. Suberror: 1\nemulation failure", 0)
    assert not ok and "KVM internal error" in reason
    ok, _ = accel.interpret("[ 0.9] VFS: Unable to mount root fs on unknown-block(0,0)\n", "", 0)
    assert ok
    ok, reason = accel.interpret("", "", None)
    assert not ok and "hung" in reason
    ok, reason = accel.interpret("", "failed to set MSR 0x10a", -6)
    assert not ok and "-6" in reason


def test_kvm_probe_stops_at_the_first_internal_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """QEMU keeps running, its guest paused, after a KVM internal error: the probe must not wait
    out its whole timeout (45 s, which every CI run paid once per guest kernel)."""
    fake = tmp_path / "qemu"
    fake.write_text("#!/bin/sh\necho 'KVM internal error. Suberror: 1' >&2\nexec sleep 60\n")
    fake.chmod(0o755)
    monkeypatch.setattr(accel.os, "access", lambda path, mode: True)
    t0 = time.monotonic()
    ok, reason = accel._probe(str(fake), tmp_path / "vmlinuz")
    assert not ok and "KVM internal error" in reason
    assert time.monotonic() - t0 < 10


def test_kvm_verdict_is_cached_per_key_and_env_overrides(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SCXCTL_VM_CACHE", str(tmp_path))
    monkeypatch.delenv("SCXCTL_VM_ACCEL", raising=False)
    calls: list[Path] = []

    def fake_probe(qemu_bin: str, k: Path) -> tuple[bool, str]:
        calls.append(k)
        return False, "KVM guest failed: KVM internal error"

    monkeypatch.setattr(accel, "_probe", fake_probe)
    monkeypatch.setattr(accel, "_qemu_version", lambda q: "QEMU 7.2")
    k = tmp_path / "6.99-test" / "vmlinuz"
    first = accel.choose("qemu", k)
    second = accel.choose("qemu", k)
    assert (first.kvm, second.kvm) == (False, False)
    assert len(calls) == 1  # the second answer came from the cache file
    doc = json.loads((tmp_path / "kvm-probe.json").read_text())
    assert doc["verdicts"][0]["reason"].startswith("KVM guest failed")
    accel.choose("qemu", tmp_path / "7.0-other" / "vmlinuz")
    assert len(calls) == 2  # another guest kernel is probed again
    # back and forth between guest kernels (a test run's kernel matrix): each was probed once
    for kernel_dir in ("6.99-test", "7.0-other", "6.99-test"):
        accel.choose("qemu", tmp_path / kernel_dir / "vmlinuz")
    assert len(calls) == 2
    assert len(json.loads((tmp_path / "kvm-probe.json").read_text())["verdicts"]) == 2
    (tmp_path / "kvm-probe.json").write_text('{"kvm": false, "reason": "old format", "key": "x"}')
    accel.choose("qemu", k)
    assert len(calls) == 3  # an unreadable cache is no cache, never an error
    monkeypatch.setenv("SCXCTL_VM_ACCEL", "kvm")
    assert accel.choose("qemu", k).kvm is True
    assert len(calls) == 3


# ---------------------------------------------------------------- host-only: kernel, image, disk


def test_kernel_config_parsing_and_requirements() -> None:
    text = "CONFIG_SCHED_CLASS_EXT=y\n# CONFIG_DEBUG_INFO_BTF is not set\nCONFIG_LOCALVERSION=\"\"\n"
    opts = kernel.parse_kconfig(text)
    assert opts["CONFIG_SCHED_CLASS_EXT"] == "y"
    assert opts["CONFIG_DEBUG_INFO_BTF"] == "n"
    missing = kernel.missing_options(opts)
    assert "CONFIG_DEBUG_INFO_BTF" in missing and "CONFIG_SCHED_CLASS_EXT" not in missing
    full = {o: "y" for o in kernel.REQUIRED_CONFIG}
    assert kernel.missing_options(full) == []


def test_kernel_candidate_finds_split_packages() -> None:
    c = kernel.Candidate(
        "linux-image-7.3.4+deb13-cloud-amd64",
        "7.3.4-1~bpo13+1",
        "dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, "
        "linux-base-7.3.4+deb13-cloud-amd64 (= 7.3.4-1~bpo13+1), "
        "linux-binary-7.3.4+deb13-cloud-amd64 (= 7.3.4-1~bpo13+1), "
        "linux-modules-7.3.4+deb13-cloud-amd64 (= 7.3.4-1~bpo13+1)",
    )
    assert c.abi == "7.3.4+deb13"
    assert sorted(c.split_packages()) == [
        "linux-base-7.3.4+deb13-cloud-amd64",
        "linux-binary-7.3.4+deb13-cloud-amd64",
    ]
    old_style = kernel.Candidate("linux-image-6.12.1+deb13-cloud-amd64", "6.12.1-1", "kmod, linux-base")
    assert old_style.split_packages() == []


def test_apt_stanzas_and_debian_version_order() -> None:
    st = apt.parse_stanzas("Package: a\nVersion: 1\nDescription: x\n more\n\nPackage: b\nVersion: 2\n")
    assert [s["Package"] for s in st] == ["a", "b"]
    assert st[0]["Description"] == "x\nmore"
    assert apt.sort_versions(["6.12.117-1", "7.3.4-1~bpo13+1", "7.3.4-1", "6.18.5-1~bpo13+1"]) == [
        "7.3.4-1",
        "7.3.4-1~bpo13+1",
        "6.18.5-1~bpo13+1",
        "6.12.117-1",
    ]


def test_private_apt_never_points_at_host_state(tmp_path: Path) -> None:
    a = apt.PrivateApt(tmp_path)
    a.setup()
    opts = " ".join(a.options())
    assert f"Dir::State={tmp_path}" in opts and f"Dir::Cache={tmp_path}" in opts
    assert "Dir::Etc::sourceparts=-" in opts
    assert "trixie-backports" in a.sources.read_text()


def test_image_cache_key_follows_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    base = image.recipe()
    assert image.cache_key(base) == image.cache_key(image.recipe())
    more = dict(base, packages=[*base["packages"], "strace"])  # type: ignore[list-item]
    assert image.cache_key(more) != image.cache_key(base)
    changed = json.loads(json.dumps(base))
    changed["files"]["customize.sh"] += "\n# changed\n"
    assert image.cache_key(changed) != image.cache_key(base)


def test_mbr_has_signature_and_one_linux_partition() -> None:
    sector = image.mbr("5c7c7e11", 2048, 4096)
    assert len(sector) == 512 and sector[510:] == b"\x55\xaa"
    assert sector[0x1B8:0x1BC] == bytes.fromhex("117e7c5c")
    assert sector[0x1BE + 4] == 0x83
    assert int.from_bytes(sector[0x1BE + 8 : 0x1BE + 12], "little") == 2048
    assert int.from_bytes(sector[0x1BE + 12 : 0x1BE + 16], "little") == 4096
    assert image.ROOT_PARTUUID == "5c7c7e11-01"


def test_hang_report_reads_each_vcpus_instruction_pointer() -> None:
    regs = (
        "CPU#0\nRAX=0000000000000000 RBX=0000000000000001\n"
        "RIP=ffffffff81c18526 RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\n"
        "ES =0000 0000000000000000 00000000 00000000\n"
        "CPU#1\nRAX=0000000000000002 RBX=0000000000000003\n"
        "RIP=ffffffff82153c9f RFL=00000202 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=0\n"
    )
    assert hang.instruction_pointers(regs) == {0: 0xFFFFFFFF81C18526, 1: 0xFFFFFFFF82153C9F}
    assert hang.instruction_pointers("") == {}


def test_hang_report_never_raises_without_a_monitor(tmp_path: Path) -> None:
    assert hang.report(tmp_path / "absent.sock").startswith("QMP failed")


def test_hang_report_gives_up_on_a_monitor_that_never_answers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A QEMU stuck in its main loop accepts the connection (the kernel does) but never greets."""
    monkeypatch.setattr(hang, "REPORT_TIMEOUT_S", 0.5)
    path = tmp_path / "mute.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        t0 = time.monotonic()
        text = hang.report(path)
        assert time.monotonic() - t0 < 5
    assert text == "QMP did not answer within 0.5 s"


def test_hang_report_keeps_what_sysrq_printed_first() -> None:
    """Two CPUs' NMI backtraces with registers ran to 90 lines once: a message that kept the last
    80 lost the header of SysRq l. The start is kept, and the count of what was left out."""
    printed = "\n".join(["[ 8.9] sysrq: Show backtrace of all active CPUs"]
                        + [f"[ 8.9] frame {i}" for i in range(runner.HANG_PRINT_LINES + 40)])
    shown = runner.hang_printed(printed + "\n")
    lines = shown.splitlines()
    assert lines[0] == "[ 8.9] sysrq: Show backtrace of all active CPUs"
    assert len(lines) == runner.HANG_PRINT_LINES + 1
    assert lines[-1] == "[41 more lines in the harness's warning log]"
    assert runner.hang_printed("a\nb\n") == "a\nb"


def test_qemu_argv_snapshots_root_and_selects_init() -> None:
    m = qemu.Machine(Path("/k"), Path("/root.img"), Path("/run.img"), Path("/c"), Path("/t"), Path("/o"))
    argv = qemu.argv(m)
    joined = " ".join(argv)
    assert "file=/root.img,if=none,id=root,format=raw,snapshot=on" in joined
    assert "snapshot" not in argv[argv.index("file=/run.img,if=none,id=run,format=raw")]
    assert "tcg,thread=multi" in argv and "max" in argv
    single = qemu.argv(qemu.Machine(Path("/k"), Path("/r"), Path("/u"), Path("/c"), Path("/t"), Path("/o"),
                                    tcg_single=True))  # fmt: skip
    assert "tcg,thread=single" in single and "tcg,thread=multi" not in single
    assert "init=/usr/local/sbin/scxvm-boot" in argv[argv.index("-append") + 1]
    sd = qemu.argv(qemu.Machine(Path("/k"), Path("/r"), Path("/u"), Path("/c"), Path("/t"), Path("/o"),
                                accel="kvm", systemd=True))  # fmt: skip
    cmdline = sd[sd.index("-append") + 1]
    assert "init=" not in cmdline and "scxvm.mode=systemd" in cmdline
    assert "kvm" in sd and "host" in sd
    counted = qemu.argv(qemu.Machine(Path("/k"), Path("/r"), Path("/u"), Path("/c"), Path("/t"), Path("/o"),
                                     icount=0))  # fmt: skip
    # icount needs single-threaded TCG; sleep=off: idle time is skipped, not waited in host time
    assert "tcg,thread=single" in counted
    assert counted[counted.index("-icount") + 1] == "shift=0,sleep=off,align=off"
    assert "-icount" not in argv and "-icount" not in single
    # the monitor the hang report asks, and the SysRq keys it sends reach the guest's kernel
    asked = qemu.argv(qemu.Machine(Path("/k"), Path("/r"), Path("/u"), Path("/c"), Path("/t"), Path("/o"),
                                   qmp_socket=Path("/w/qmp.sock")))  # fmt: skip
    assert asked[asked.index("-qmp") + 1] == "unix:/w/qmp.sock,server=on,wait=off" and "-qmp" not in argv
    assert "sysrq_always_enabled" in argv[argv.index("-append") + 1].split()


def test_run_disk_carries_the_tree_and_gives_results_back(tmp_path: Path) -> None:
    """mkfs.ext4 -d in, debugfs out: the same tools a real run uses, without booting."""
    src = tmp_path / "hostfile"
    token = secrets.token_hex(8)
    src.write_text(token)
    staging = tmp_path / "stage"
    nonce = rundisk.stage(staging, "exit 3", [Copy(src, "/etc/x")], None)
    assert (staging / "nonce").read_text().strip() == nonce
    assert (staging / "cmd").read_text() == "exit 3"
    assert (staging / "copies.tsv").read_text() == "0\t/etc/x\n"
    assert (staging / "copies" / "0").read_text() == token
    assert "/lib/modules/" not in (staging / "fstab.run").read_text()  # no kernel files given
    assert (staging / "results").stat().st_mode & 0o1777 == 0o1777
    assert (staging / "project" / "scxctl" / "__init__.py").read_bytes() == (
        CHECKOUT / "scxctl" / "__init__.py"
    ).read_bytes()
    assert not list((staging / "project").rglob("__pycache__"))
    (staging / "results" / "sub").mkdir()
    (staging / "results" / "sub" / "r.txt").write_text(token)
    (staging / "exitcode").write_text("3\n")
    img = tmp_path / "run.img"
    rundisk.make(staging, img)
    label = subprocess.run(["e2label", str(img)], capture_output=True, text=True, check=True).stdout.strip()
    assert label == rundisk.LABEL
    assert rundisk.read_exitcode(img) == 3
    dest = tmp_path / "results"
    rundisk.fetch_results(img, dest, tmp_path / "scratch")
    assert (dest / "sub" / "r.txt").read_text() == token


def test_fstab_binds_kernel_files_under_the_guest_release() -> None:
    tab = rundisk.fstab_run("7.3.4+deb13-cloud-amd64")
    assert "/mnt/scxvm/kernel /lib/modules/7.3.4+deb13-cloud-amd64 none bind,X-mount.mkdir" in tab
    assert "/mnt/scxvm/project /opt/scxctl none bind" in tab
    assert {line.split()[1] for line in rundisk.FSTAB_LIGHT.splitlines()} >= {"/sys/fs/bpf", "/sys/fs/cgroup"}


def test_extract_vmlinux_finds_the_compressed_elf_after_junk() -> None:
    elf = b"\x7fELF" + secrets.token_bytes(4096)
    bzimage = b"MZ setup code \x1f\x8b not-a-stream" + gzip.compress(elf) + b"trailing size"
    assert kernel.extract_vmlinux(bzimage) == elf
    assert kernel.extract_vmlinux(b"MZ nothing compressed here") is None


@pytest.mark.parametrize("script", ["guest.sh", "scxvm-boot", "customize.sh"])
def test_guest_scripts_are_valid_bash(script: str) -> None:
    proc = subprocess.run(["bash", "-n", str(image.GUEST_DIR / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_stale_run_dirs_of_dead_harnesses_are_reaped(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale, live, kept = tmp_path / "run-stale", tmp_path / "run-live", tmp_path / "run-kept"
    for d in (stale, live, kept):
        d.mkdir()
    (stale / runner.OWNER).write_text(f"{dead.pid}\n")
    (live / runner.OWNER).write_text(f"{os.getpid()}\n")
    runner._reap_stale_runs(tmp_path)
    assert not stale.exists()
    assert live.exists() and kept.exists()


def test_cache_dir_is_machine_wide_for_root_and_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCXCTL_VM_CACHE", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert config.cache_dir() == Path("/var/cache/scxctl-dev/vm")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert config.cache_dir() == CHECKOUT / ".cache" / "vm"
    monkeypatch.setenv("SCXCTL_VM_CACHE", "/srv/vmcache")
    assert config.cache_dir() == Path("/srv/vmcache")


# ---------------------------------------------------------------- host-only: kernel versions and cache


@pytest.mark.parametrize(
    ("spec", "abi", "hit"),
    [
        ("7.2", "7.2.12+deb13", True),  # a series
        ("7.2", "7.20.1+deb13", False),  # not the 7.20 series
        ("7.2.1", "7.2.12+deb13", False),  # one kernel is not a prefix of another
        ("7.2.12", "7.2.12+deb13", True),
        ("7.2.12+deb13", "7.2.12+deb13", True),
        ("7.2.12+deb13-cloud-amd64", "7.2.12+deb13", True),  # the full release (uname -r)
        ("7.2.12+deb1", "7.2.12+deb13", False),
        ("6.16", "6.16.3+deb13", True),
        ("6.16.3", "6.16.12+deb13", False),
    ],
)
def test_kernel_spec_matches_a_series_or_one_kernel(spec: str, abi: str, hit: bool) -> None:
    assert kernel.matches(spec, abi) is hit


def test_kernel_series_and_abi_of_a_release() -> None:
    assert kernel.series("7.2.12+deb13") == "7.2"
    assert kernel.series("6.16.3+deb13") == "6.16"
    assert kernel.series("7.20.1+deb13") == "7.20"
    assert kernel.abi_of("7.2.12+deb13-cloud-amd64") == "7.2.12+deb13"
    assert kernel.abi_of("7.2.12+deb13") == "7.2.12+deb13"  # an ABI stays as it is


def _image(abi: str, version: str, kinds: tuple[str, ...] = ("base", "binary", "modules"),
           pin: str | None = None) -> dict[str, str]:
    """An image stanza; its split packages pinned to `pin` (default: its own version), as Debian does."""
    deps = ["dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool"]
    deps += [f"linux-{k}-{abi}-cloud-amd64 (= {pin or version})" for k in kinds]
    return {"Package": f"linux-image-{abi}-cloud-amd64", "Version": version, "Depends": ", ".join(deps)}


SPLIT_KINDS = ("base", "binary", "modules")


def _split(abi: str, version: str, kinds: tuple[str, ...] = SPLIT_KINDS) -> list[dict[str, str]]:
    return [{"Package": f"linux-{k}-{abi}-cloud-amd64", "Version": version} for k in kinds]


def _old_style(abi: str, version: str) -> dict[str, str]:
    """An image from before the split: vmlinuz and config in the image package itself."""
    return {"Package": f"linux-image-{abi}-cloud-amd64", "Version": version,
            "Depends": "kmod, initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool"}


class _Offline(Exception):
    """Raised by every archive access in tests that must not reach the network."""


class _FakeApt:
    """PrivateApt over an in-memory archive (stanzas) and prebuilt .debs (`pkg=version` -> file)."""

    def __init__(
        self, root: Path, stanzas: list[dict[str, str]], debs: dict[str, Path] | None = None
    ) -> None:
        self.root, self.stanzas, self.debs = root, stanzas, debs or {}
        self.offline = False
        self.updates = 0
        self.shown: list[str] = []
        self.downloaded: list[list[str]] = []

    def _online(self) -> None:
        if self.offline:
            raise _Offline

    def update(self) -> None:
        self._online()
        self.updates += 1

    def pkgnames(self, prefix: str) -> list[str]:
        self._online()
        return sorted({s["Package"] for s in self.stanzas if s["Package"].startswith(prefix)})

    def show(self, *packages: str) -> list[dict[str, str]]:
        self._online()
        known = {s["Package"] for s in self.stanzas}
        assert set(packages) <= known, f"apt-cache show of unknown packages: {set(packages) - known}"
        self.shown += packages
        return [s for s in self.stanzas if s["Package"] in packages]

    def download(self, specs: list[str], dest: Path) -> list[Path]:
        self._online()
        self.downloaded.append(specs)
        dest.mkdir(parents=True, exist_ok=True)
        return [Path(shutil.copy(self.debs[s], dest)) for s in specs]


def test_kernel_candidate_pins_its_own_packages() -> None:
    c = kernel.Candidate("linux-image-7.3.4+deb13-cloud-amd64", "7.3.4-1~bpo13+1",
                         _image("7.3.4+deb13", "7.3.4-1~bpo13+1")["Depends"] + ", linux-base (>= 4.3~)")
    assert c.kernel_packages() == [f"linux-{k}-7.3.4+deb13-cloud-amd64" for k in SPLIT_KINDS]
    assert set(c.pinned_packages().values()) == {"7.3.4-1~bpo13+1"}
    loose = kernel.Candidate("linux-image-7.3.4+deb13-cloud-amd64", "7.3.4-1~bpo13+1",
                             "linux-binary-7.3.4+deb13-cloud-amd64 (>= 7.3.4-1~bpo13+1)")
    assert loose.pinned_packages() == {"linux-binary-7.3.4+deb13-cloud-amd64": None}  # >= pins nothing
    stanza = _old_style("6.16.3+deb13", "6.16.3-1~bpo13+1")
    old = kernel.Candidate(stanza["Package"], stanza["Version"], stanza["Depends"])
    assert old.kernel_packages() == [] and old.split_packages() == []


def test_candidates_leave_out_images_that_cannot_be_installed(tmp_path: Path) -> None:
    stanzas = [
        _image("7.3.4+deb13", "7.3.4-1~bpo13+1"), *_split("7.3.4+deb13", "7.3.4-1~bpo13+1"),
        _image("7.1.7+deb13", "7.1.7-1~bpo13+1"),  # signed image left behind: no split packages
        _image("6.18.5+deb13", "6.18.5-1~bpo13+1", kinds=("base",)),  # its one split package is gone
        # re-uploaded: the split packages moved on to -2, the image still pins -1
        _image("7.0.12+deb13", "7.0.12-1~bpo13+1"), *_split("7.0.12+deb13", "7.0.12-2~bpo13+1"),
        _old_style("6.16.3+deb13", "6.16.3-1~bpo13+1"),
        _old_style("6.12.117+deb13", "6.12.117-1"),
        {"Package": "linux-image-cloud-amd64", "Version": "7.3.4-1~bpo13+1"},  # metapackage
        {"Package": "linux-image-7.3.4+deb13-cloud-amd64-dbg", "Version": "7.3.4-1~bpo13+1"},
    ]  # fmt: skip
    fake = _FakeApt(tmp_path, stanzas)
    found = kernel.candidates(fake)  # type: ignore[arg-type]
    assert [(c.abi, c.version) for c in found] == [
        ("7.3.4+deb13", "7.3.4-1~bpo13+1"),
        ("6.16.3+deb13", "6.16.3-1~bpo13+1"),
        ("6.12.117+deb13", "6.12.117-1"),
    ]
    assert "linux-image-cloud-amd64" not in fake.shown
    assert "linux-image-7.3.4+deb13-cloud-amd64-dbg" not in fake.shown


def _fake_kernel(root: Path, abi: str, version: str, files: tuple[str, ...] = ("vmlinuz", "config"),
                 info: bool = True) -> kernel.KernelInfo:
    ki = kernel.KernelInfo(f"{abi}-cloud-amd64", version, f"linux-image-{abi}-cloud-amd64")
    d = ki.dir(root)
    d.mkdir(parents=True)
    for f in files:
        (d / f).write_text(f"{f} of {abi}\n")
    if info:
        (d / "info.json").write_text(json.dumps(dataclasses.asdict(ki)))
    return ki


@pytest.fixture
def offline_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty harness cache under tmp_path whose archive access fails the test; the kernel root."""
    monkeypatch.setenv("SCXCTL_VM_CACHE", str(tmp_path))

    def offline(*args: object, **kwargs: object) -> None:
        raise _Offline

    monkeypatch.setattr(apt.PrivateApt, "update", offline)
    monkeypatch.setattr(apt.PrivateApt, "_run", offline)
    return tmp_path / "kernel"


def test_prepare_serves_a_matching_cached_kernel_without_the_archive(offline_cache: Path) -> None:
    root = offline_cache
    for abi in ("7.2.12+deb13", "7.2.6+deb13", "7.20.1+deb13", "6.16.3+deb13"):
        _fake_kernel(root, abi, abi.replace("+deb13", "-1~bpo13+1"))
    _fake_kernel(root, "7.2.13+deb13", "7.2.13-1~bpo13+1", files=("vmlinuz",))  # incomplete: no config
    assert [i.release for i in kernel.cached()] == [
        "7.20.1+deb13-cloud-amd64", "7.2.12+deb13-cloud-amd64", "7.2.6+deb13-cloud-amd64",
        "6.16.3+deb13-cloud-amd64",
    ]  # fmt: skip
    assert kernel.prepare("7.2").release == "7.2.12+deb13-cloud-amd64"  # the series' newest, not 7.20
    assert kernel.prepare("7.20").release == "7.20.1+deb13-cloud-amd64"
    assert kernel.prepare("7.2.6").release == "7.2.6+deb13-cloud-amd64"
    assert kernel.prepare("7.2.6+deb13-cloud-amd64").release == "7.2.6+deb13-cloud-amd64"
    with pytest.raises(_Offline):
        kernel.prepare("7.2.1")  # nothing cached matches: the archive is asked
    with pytest.raises(_Offline):
        kernel.prepare("7.2", refresh=True)


def test_newest_and_oldest_are_served_from_aliases_json(offline_cache: Path) -> None:
    oldest = _fake_kernel(offline_cache, "6.16.3+deb13", "6.16.3-1~bpo13+1")
    _fake_kernel(offline_cache, "7.3.4+deb13", "7.3.4-1~bpo13+1")
    aliases = {"oldest": oldest.release, "newest": "gone-cloud-amd64"}
    (offline_cache / "aliases.json").write_text(json.dumps(aliases))
    assert kernel.prepare("oldest") == oldest
    with pytest.raises(_Offline):
        kernel.prepare("newest")  # the alias names a kernel no longer cached
    with pytest.raises(_Offline):
        kernel.prepare("oldest", refresh=True)


def test_a_default_kernel_from_before_info_json_is_migrated(offline_cache: Path) -> None:
    ki = _fake_kernel(offline_cache, "7.3.4+deb13", "7.3.4-1~bpo13+1", info=False)
    (offline_cache / "current.json").write_text(json.dumps(dataclasses.asdict(ki)))
    assert kernel.current() == ki
    assert json.loads((ki.dir(offline_cache) / "info.json").read_text())["version"] == ki.version
    assert kernel.prepare() == ki and kernel.prepare("7.3") == ki
    # a default kernel whose config is gone is not prepared, before or after the migration
    broken = _fake_kernel(offline_cache, "7.2.12+deb13", "7.2.12-1~bpo13+1", files=("vmlinuz",), info=False)
    (offline_cache / "current.json").write_text(json.dumps(dataclasses.asdict(broken)))
    assert kernel.current() is None


def _deb(tmp: Path, package: str, version: str, files: dict[str, str]) -> Path:
    tree = tmp / f"{package}_{version}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {package}\nVersion: {version}\nArchitecture: amd64\nMaintainer: t <t@example.org>\n"
        "Description: test\n"
    )
    for rel, text in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    out = tmp / f"{package}_{version}_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(out)], check=True,
                   capture_output=True)
    return out


def test_a_kernel_without_sched_ext_is_remembered_and_never_downloaded_again(
    offline_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    good = "".join(f"{o}=y\n" for o in kernel.REQUIRED_CONFIG)
    bad = good.replace("CONFIG_SCHED_CLASS_EXT=y\n", "# CONFIG_SCHED_CLASS_EXT is not set\n")
    debs = {}
    for abi, version, cfg in (("6.12.1+deb13", "6.12.1-1", bad), ("6.16.3+deb13", "6.16.3-1~bpo13+1", good)):
        rel, pkg = f"{abi}-cloud-amd64", f"linux-image-{abi}-cloud-amd64"
        debs[f"{pkg}={version}"] = _deb(tmp_path / "debs", pkg, version,
                                        {f"boot/vmlinuz-{rel}": "bzImage", f"boot/config-{rel}": cfg})
    fake = _FakeApt(tmp_path / "apt", [_old_style("6.12.1+deb13", "6.12.1-1"),
                                       _old_style("6.16.3+deb13", "6.16.3-1~bpo13+1")], debs)
    monkeypatch.setattr(kernel, "PrivateApt", lambda root: fake)

    info = kernel.prepare("oldest")
    assert info.release == "6.16.3+deb13-cloud-amd64"
    assert fake.downloaded == [["linux-image-6.12.1+deb13-cloud-amd64=6.12.1-1"],
                               ["linux-image-6.16.3+deb13-cloud-amd64=6.16.3-1~bpo13+1"]]
    rejected = json.loads((offline_cache / "rejected.json").read_text())
    assert rejected == {"6.12.1-1": ["CONFIG_SCHED_CLASS_EXT"]}
    assert json.loads((offline_cache / "aliases.json").read_text()) == {"oldest": info.release}
    d = info.dir(offline_cache)
    assert (d / "vmlinuz").read_text() == "bzImage" and (d / "lib-modules" / "config").read_text() == good
    assert kernel.cached() == [info]
    assert not list(offline_cache.glob(".work-*"))
    assert [c.abi for c in kernel.available(refresh=False)] == ["6.16.3+deb13"]

    fake.downloaded.clear()
    assert kernel.prepare("oldest", refresh=True) == info  # asks the archive, downloads nothing
    assert fake.downloaded == []
    fake.offline = True
    assert kernel.prepare("oldest") == info
    assert kernel.prepare("6.16") == info


# ---------------------------------------------------------------- host-only: the kernel matrix


def test_matrix_guest_script_is_valid_bash() -> None:
    proc = subprocess.run(["bash", "-n"], input=matrix.GUEST_SCRIPT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _doctor_json(load: dict[str, object], verdict_ok: bool) -> str:
    obj_status = "ok" if load.get("ok") or not load.get("attempted") else "fail"
    return json.dumps({"checks": [
        {"id": "bpf.object", "status": obj_status, "finding": "using bpf/build/pyland.bpf.o",
         "details": {"load": load}},
        {"id": "verdict", "status": "ok" if verdict_ok else "fail", "finding": "...",
         "details": {"can_run_pyland": verdict_ok}},
    ]})  # fmt: skip


REFUSED = "loading pyland.bpf.o failed: extern (func ksym) 'scx_bpf_x': func_proto incompatible with vmlinux"
FAKE_SCXCTL = r"""#!/bin/bash
while [ "${1#-}" != "$1" ]; do shift; [ "$1" = json ] && shift; done  # --log-format json
case $1 in
doctor) cat "$FAKE/doctor.json"; exit 0 ;;
run)
    if [ -n "${FAKE_REFUSE:-}" ]; then echo "scxctl: error: $FAKE_REFUSE"; exit 7; fi
    trap 'echo disabled >"$FAKE/sx/state"; rm -f "$FAKE/sx/root/ops"; exit 0' TERM
    echo '{"event": "pyland stats"}'
    echo enabled >"$FAKE/sx/state"; echo pyland >"$FAKE/sx/root/ops"
    while :; do sleep 0.05; done ;;
bench)
    while [ "$1" != --output ]; do shift; done
    echo '{"runs": [{"tests": [{"status": "pass", "metric": 0.9123, "error": null}]}]}' >"$2"; exit 0 ;;
esac
exit 99
"""


@pytest.mark.parametrize("refuse", [False, True])
def test_matrix_guest_script_and_parser_on_fake_tools(tmp_path: Path, refuse: bool) -> None:
    """The guest script on the host, sched_ext's sysfs and the tools faked: what it writes parses."""
    fake, results, bindir = tmp_path / "fake", tmp_path / "results", tmp_path / "bin"
    for d in (fake / "sx" / "root", results, bindir):
        d.mkdir(parents=True)
    (fake / "sx" / "state").write_text("disabled\n")
    load = ({"attempted": True, "ok": False, "error": REFUSED} if refuse
            else {"attempted": True, "ok": True, "error": None})
    (fake / "doctor.json").write_text(_doctor_json(load, verdict_ok=not refuse))
    tools = (("scxctl", FAKE_SCXCTL), ("stress-ng", "#!/bin/sh\nexit 0\n"), ("dmesg", "#!/bin/sh\n"))
    for name, text in tools:
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    script = matrix.GUEST_SCRIPT
    for old, new in (("R=/results", f"R={results}"), ("SX=/sys/kernel/sched_ext", f"SX={fake}/sx"),
                     ("cd /opt/scxctl", "cd /")):
        assert old in script
        script = script.replace(old, new)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "FAKE": str(fake),
           **({"FAKE_REFUSE": REFUSED} if refuse else {})}
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    row = matrix.parse_results("7.3.4+deb13", results)
    assert row.release == os.uname().release
    assert row.agrees is True
    if refuse:
        assert row.bpf_object_status == "fail" and row.bpf_object_loaded is False
        assert row.bpf_object_reason == REFUSED
        assert (row.attached, row.run_rc, row.run_error) == (False, 7, REFUSED)
        assert row.fairness_rc is None and not row.works
        assert matrix.cells(row)[2] == f"exit 7: {REFUSED}"
    else:
        assert (row.bpf_object_status, row.bpf_object_reason, row.attached) == ("ok", "loaded", True)
        assert (row.stress_rc, row.after_stress, row.run_rc) == (0, "enabled pyland", None)
        assert (row.sigterm_rc, row.state_after_stop) == (0, "disabled")
        assert (row.fairness_status, row.fairness_metric, row.fairness_rc) == ("pass", 0.9123, 0)
        assert row.works
        assert matrix.cells(row)[3:] == ["ok", "rc 0, disabled", "0.91 pass", "yes"]


def _results(tmp_path: Path, files: dict[str, str]) -> Path:
    d = tmp_path / secrets.token_hex(4)
    d.mkdir()
    for name, text in files.items():
        (d / name).write_text(text)
    return d


def test_matrix_row_flags_disagreement_and_ejection(tmp_path: Path) -> None:
    ok_load = {"attempted": True, "ok": True, "error": None}
    # doctor says pyland runs, the kernel then refuses it: a wrong prediction
    wrong = matrix.parse_results("6.16.3+deb13", _results(tmp_path, {
        "uname.txt": "6.16.3+deb13-cloud-amd64\n", "doctor.json": _doctor_json(ok_load, True),
        "attach.txt": "no 3\n", "run.rc": "7\n",
        "run.log": '{"event": "x"}\nscxctl: error: first\nscxctl: error: the kernel said no\n',
    }))  # fmt: skip
    assert (wrong.attached, wrong.run_rc, wrong.agrees) == (False, 7, False)
    assert wrong.run_error == "the kernel said no"  # the last error line
    assert matrix.cells(wrong) == ["6.16.3+deb13", "ok: loaded", "exit 7: the kernel said no",
                                   "-", "-", "-", "NO"]  # fmt: skip
    # attached (so doctor was right), then ejected under the stress mix: agrees, but does not work
    ejected = matrix.parse_results("7.2.6+deb13", _results(tmp_path, {
        "doctor.json": _doctor_json(ok_load, True), "attach.txt": "yes 21\n", "stress.rc": "0\n",
        "after_stress.txt": "disabled none\n", "run.rc": "1\n", "after_stop.txt": "disabled\n",
        "run.log": "scxctl: error: ejected: runnable task stall\n", "fairness.rc": "1\n",
        "fairness.err": "scxctl: error: pyland did not start\n",
    }))  # fmt: skip
    assert ejected.agrees is True and ejected.stress_ok is False and not ejected.works
    kcell, _, run, stress, sigterm, fairness, agrees = matrix.cells(ejected)
    assert (kcell, run, stress, sigterm) == ("7.2.6+deb13", "runs (enabled in 21 s)",
                                             "ejected: ejected: runnable task stall", "-")
    assert fairness == "exit 1: pyland did not start" and agrees == "yes"
    # a guest that never ran the script: no prediction, no agreement
    lost = matrix.Row(kernel="7.3.4+deb13", harness="guest kernel panic: Fatal exception")
    assert lost.agrees is None and matrix.cells(lost)[2] == "guest: guest kernel panic: Fatal exception"
    works = dataclasses.replace(ejected, after_stress="enabled pyland", run_rc=None, sigterm_rc=0)
    assert works.works and matrix.passed([works])
    assert not matrix.passed([works, wrong]) and not matrix.passed([works, lost]) and not matrix.passed([])
    table = matrix.render([works, wrong, lost]).splitlines()
    assert table[0].split(" | ")[0].strip() == "kernel" and set(table[1]) <= {"-", "+"}
    assert len({len(line) for line in table[:2]}) == 1  # the rule is as wide as the header
    assert all(len(c) <= matrix.CELL_WIDTH for line in table[2:] for c in line.split(" | "))


def test_matrix_selects_kernels_by_spec_and_series() -> None:
    offered = ["7.3.4+deb13", "7.2.12+deb13", "7.2.6+deb13", "6.17.8+deb13", "6.16.12+deb13", "6.16.3+deb13"]
    assert matrix.select(offered, None, False) == offered
    newest = ["7.3.4+deb13", "7.2.12+deb13", "6.17.8+deb13", "6.16.12+deb13"]
    assert matrix.select(offered, None, True) == newest
    assert matrix.select(offered, ["6.16.3", "7.2"], False) == ["7.2.12+deb13", "7.2.6+deb13", "6.16.3+deb13"]
    assert matrix.select(offered, ["6.16.3", "7.2"], True) == ["7.2.12+deb13", "6.16.3+deb13"]
    # dropped by the archive, still cached
    assert matrix.select(offered, ["7.1.7"], False, cached=["7.1.7+deb13"]) == ["7.1.7+deb13"]
    with pytest.raises(ValueError, match=r"'7\.9'"):
        matrix.select(offered, ["7.9"], False)


def test_matrix_cli_prints_the_table_writes_json_and_exits_1_on_a_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cands = [kernel.Candidate(f"linux-image-{a}-cloud-amd64", a, "") for a in ("7.3.4+deb13", "6.16.3+deb13")]
    monkeypatch.setattr(kernel, "available", lambda refresh=True: cands)
    monkeypatch.setattr(kernel, "cached", lambda: [])
    monkeypatch.setattr(matrix, "build_object", lambda: pytest.fail("--no-build builds nothing"))
    booted: list[str] = []

    def fake_boot(abi: str, workdir: Path) -> matrix.Row:
        booted.append(abi)
        good = abi.startswith("7.")
        return matrix.Row(
            kernel=abi, bpf_object_status="ok", bpf_object_reason="loaded", doctor_says_runs=True,
            attached=good, run_rc=None if good else 7, stress_rc=0, after_stress="enabled pyland",
            sigterm_rc=0, state_after_stop="disabled",
        )  # fmt: skip

    monkeypatch.setattr(matrix, "boot", fake_boot)
    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("a guest was booted"))
    out = tmp_path / "m.json"
    args = ["matrix", "--kernels", "7.3.4,6.16.3", "--no-build", "--json", str(out)]
    res = CliRunner().invoke(cli.app, args)
    assert res.exit_code == 1, res.output
    assert booted == ["7.3.4+deb13", "6.16.3+deb13"]
    assert "exit 7" in res.output and "NO" in res.output
    data = json.loads(out.read_text())
    assert data["ok"] is False
    assert [(r["kernel"], r["works"], r["agrees"]) for r in data["rows"]] == [
        ("7.3.4+deb13", True, True), ("6.16.3+deb13", False, False)]
    res = CliRunner().invoke(cli.app, ["matrix", "--kernels", "7.3", "--no-build"])
    assert res.exit_code == 0, res.output


# ---------------------------------------------------------------- guest boots


LIGHT_SCRIPT = r"""
set -u
R=/results
cat /sys/kernel/sched_ext/state >$R/state 2>&1
uname -r >$R/uname
grep -c '^CONFIG_SCHED_CLASS_EXT=y$' /boot/config-$(uname -r) >$R/config_sched_ext 2>&1
python3 -c 'import scxctl; print(scxctl.__version__, scxctl.__file__)' >$R/import 2>&1
runuser -u tester -- python3 -c 'import scxctl; print(scxctl.__version__)' >$R/import_tester 2>&1
sha256sum /opt/scxctl/scxctl/cli.py | cut -d' ' -f1 >$R/cli_sha
scxctl doctor --json >$R/doctor.json 2>$R/doctor.err; echo $? >$R/doctor.rc
cat /guest/in.txt >$R/copied_file 2>&1
cat /guest/dir/nested/deep.txt >$R/copied_dir 2>&1
mountpoint -q /sys/fs/bpf && echo yes >$R/bpffs
echo "to-stdout-$TOKEN"
echo "to-stderr-$TOKEN" >&2
exit 3
"""


@pytest.fixture(scope="module")
def light(vm: VM, tmp_path_factory: pytest.TempPathFactory) -> tuple[VMResult, str]:
    token = secrets.token_hex(8)
    host = tmp_path_factory.mktemp("vmcopy")
    (host / "in.txt").write_text(token)
    (host / "dir" / "nested").mkdir(parents=True)
    (host / "dir" / "nested" / "deep.txt").write_text(token[::-1])
    res = vm.run(
        f"TOKEN={token}\n" + LIGHT_SCRIPT,
        timeout=240,
        copy=[(str(host / "in.txt"), "/guest/in.txt"), (str(host / "dir"), "/guest/dir")],
    )
    return res, token


def _read(res: VMResult, name: str) -> str:
    path = res.results / name
    assert path.is_file(), f"guest wrote no /results/{name}; output:\n{res.output}"
    return path.read_text().strip()


@pytest.mark.vm
def test_guest_exit_code_propagates(light: tuple[VMResult, str]) -> None:
    res, _ = light
    assert res.message is None, res.output
    assert res.returncode == 3


@pytest.mark.vm
def test_guest_output_is_streamed_without_kernel_noise(light: tuple[VMResult, str]) -> None:
    res, token = light
    out = res.output
    assert f"to-stdout-{token}" in out and f"to-stderr-{token}" in out
    assert "Linux version" not in out and "SCXVM:" not in out


@pytest.mark.vm
def test_guest_sched_ext_is_built_in_and_disabled(light: tuple[VMResult, str]) -> None:
    res, _ = light
    assert _read(res, "state") == "disabled"
    assert _read(res, "config_sched_ext") == "1"
    assert _read(res, "uname") == kernel.current().release  # type: ignore[union-attr]
    assert _read(res, "bpffs") == "yes"


@pytest.mark.vm
def test_guest_imports_the_working_tree(light: tuple[VMResult, str]) -> None:
    res, _ = light
    version, path = _read(res, "import").split()
    assert version == scxctl.__version__
    assert path == "/opt/scxctl/scxctl/__init__.py"
    assert _read(res, "import_tester") == scxctl.__version__
    assert _read(res, "cli_sha") == hashlib.sha256((CHECKOUT / "scxctl" / "cli.py").read_bytes()).hexdigest()


@pytest.mark.vm
def test_guest_copy_in_and_results_out(light: tuple[VMResult, str]) -> None:
    res, token = light
    assert _read(res, "copied_file") == token
    assert _read(res, "copied_dir") == token[::-1]


@pytest.mark.vm
def test_guest_doctor_finds_sched_ext(light: tuple[VMResult, str]) -> None:
    res, _ = light
    report = json.loads(_read(res, "doctor.json"))
    checks = {c["id"]: c for c in report["checks"]}
    sched_ext = {i: c["status"] for i, c in checks.items() if "sched_ext" in i}
    assert {"kernel.config_sched_ext", "kernel.sched_ext_sysfs", "sched_ext.state"} <= set(sched_ext), checks
    assert set(sched_ext.values()) == {"ok"}, sched_ext
    assert checks["kernel.btf"]["status"] == "ok", checks["kernel.btf"]


@pytest.mark.vm
def test_guest_timeout_is_reported_as_one(vm: VM) -> None:
    res = vm.run("echo before-hang; sleep 600", timeout=5)
    assert res.returncode == HarnessCode.TIMEOUT, res.output
    assert res.message is not None and "timed out" in res.message
    assert "before-hang" in res.output  # streamed before the hang
    assert res.boot_s is not None and res.qemu_s is not None
    assert res.qemu_s < res.boot_s + 5 + 30  # killed soon after the 5 s, not at some later limit
    # the hang report: each vCPU's address, and the guest's own backtraces asked for by SysRq
    assert re.search(r"sample 1: cpu0 0x[0-9a-f]+, cpu1 0x[0-9a-f]+", res.message), res.message
    assert "sysrq: Show backtrace of all active CPUs" in res.message, res.message
    assert "Call Trace:" in res.message and "sysrq: Show Blocked State" in res.message, res.message


ICOUNT_RATES = """cd /opt/scxctl && python3 -c '
from benchmarks.trace_load import pingpong
print(*(pingpong("scxicount", 0.5)["rate_per_s"] for _ in range(5)))'
"""


@pytest.mark.vm
def test_icount_guest_rates_do_not_move_with_the_host(vm: VM) -> None:
    """Under --icount a futex ping-pong's rate, by the guest's clock, repeats to a fraction of a
    percent (multi-threaded TCG: 7-15% from one run to the next), whatever else the host runs.
    Now and then a guest task runs on the other vCPU during a run and costs it a few percent:
    most runs, not all, must agree."""
    res = vm.run(ICOUNT_RATES, timeout=180, icount=0)
    assert res.returncode == 0, res.output
    rates = [float(x) for x in res.output.split()[-5:]]
    mid = statistics.median(rates)
    assert mid > 1000, rates
    assert sum(abs(r / mid - 1) < 0.005 for r in rates) >= 3, rates


@pytest.mark.vm
def test_guest_systemd_boot(vm: VM) -> None:
    res = vm.run(
        "cat /proc/1/comm; test -d /run/systemd/system && echo sd-dir;"
        " systemctl show -p ActiveState --value multi-user.target; id -u tester",
        systemd=True,
        timeout=120,
    )
    assert res.returncode == 0, res.output
    lines = res.output.split()
    assert lines[:3] == ["systemd", "sd-dir", "active"], res.output
    assert int(lines[3]) > 0
