"""`scxctl run` error paths on a host: one line on stderr, the documented exit code, nothing attached.

The real /sys of this host has no sched_ext (exit 4). The other errors come from a fake sysfs
(SCXCTL_SYSROOT) that says sched_ext exists, so the checks after it can be reached.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakeroot import FakeRoot, hook_btf
from typer.testing import CliRunner

from scxctl.bpf import object as bpfobject
from scxctl.cli import app
from scxctl.errors import ExitCode
from scxctl.pyland.scheduler import BANDWIDTH_PROG, OPS_MAP, RunOptions, open_configured

runner = CliRunner()


def fake_sched_ext(tmp_path: Path, state: str = "disabled", ops: str | None = None) -> Path:
    d = tmp_path / "sys" / "kernel" / "sched_ext"
    d.mkdir(parents=True)
    (d / "state").write_text(state + "\n")
    (d / "switch_all").write_text("0\n")
    (d / "nr_rejected").write_text("0\n")
    (d / "enable_seq").write_text("3\n")
    if ops is not None:
        (d / "root").mkdir()
        (d / "root" / "ops").write_text(ops + "\n")
    return tmp_path


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    res = runner.invoke(app, ["run", *args], env=env)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


def error_lines(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.startswith("scxctl: error:")]


@pytest.mark.skipif(os.path.isdir("/sys/kernel/sched_ext"), reason="this host has sched_ext")
def test_no_sched_ext_exits_4_with_one_line() -> None:
    code, out = invoke()
    assert code == ExitCode.UNSUPPORTED == 4
    assert len(error_lines(out)) == 1
    assert "cannot run sched_ext" in out
    assert "Traceback" not in out


def test_bad_policy_file_exits_2_before_anything_else(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def broken(:\n")
    code, out = invoke("--policy", str(bad))
    assert code == ExitCode.USAGE
    assert len(error_lines(out)) == 1 and str(bad) in out and "Traceback" not in out


def test_another_scheduler_loaded_exits_5_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_sched_ext(tmp_path, state="enabled", ops="scx_rusty")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    code, out = invoke(env={"SCXCTL_SYSROOT": str(root)})
    assert code == ExitCode.BUSY
    assert "another sched_ext scheduler is loaded: scx_rusty" in out


def test_not_root_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_sched_ext(tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    code, out = invoke(env={"SCXCTL_SYSROOT": str(root)})
    assert code == ExitCode.PERMISSION and "needs root" in out


def test_stale_or_missing_object_exits_7(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_sched_ext(tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    raw = Path(__file__).resolve().parent.parent / "bpf" / "build" / "pyland.raw.o"  # no metadata
    code, out = invoke(env={"SCXCTL_SYSROOT": str(root), "SCXCTL_BPF_OBJECT": str(raw)})
    assert code == ExitCode.BPF and "stale pyland BPF object" in out and "make -C bpf" in out
    code, out = invoke("--bpf-object", str(tmp_path / "missing.o"), env={"SCXCTL_SYSROOT": str(root)})
    assert code == ExitCode.BPF and "not found" in out


def test_slice_options_are_checked(tmp_path: Path) -> None:
    code, out = invoke("--slice-us", "500", "--slice-min-us", "1000")
    assert code == ExitCode.USAGE and "--slice-min-us" in out


@pytest.mark.parametrize("hook", [True, False])
def test_a_kernel_without_the_bandwidth_hook_gets_no_such_callback(tmp_path: Path, hook: bool) -> None:
    """libbpf refuses a struct_ops callback the kernel's sched_ext_ops lacks (before 6.17:
    cgroup_set_bandwidth); the object `scxctl run` loads leaves it out there, and only there."""
    fake = FakeRoot(tmp_path).sched_ext_machine()
    fake.write("/sys/kernel/btf/vmlinux", hook_btf(hook))
    with open_configured(bpfobject.resolve(), RunOptions(sysroot=fake.sysroot)) as obj:
        off = obj.member_offset("sched_ext_ops", "cgroup_set_bandwidth")
        slot = bytes(obj.map(OPS_MAP).initial_value()[off:off + 8])
        assert (slot != bytes(8)) is hook  # libbpf keeps the program there; zero: no callback
        assert obj.program(BANDWIDTH_PROG).autoload is hook
