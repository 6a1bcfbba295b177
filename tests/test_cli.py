"""The command line through Typer's runner, plus the real `scxctl doctor --json` on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from fakeroot import FakeRoot
from typer.testing import CliRunner

import scxctl
from scxctl.cli import _ScxctlGroup, app
from scxctl.errors import ExitCode, PermissionDenied, ScxctlError

REPO = Path(__file__).resolve().parent.parent


def _runner() -> CliRunner:
    """stdout and stderr captured apart on every Typer/Click: Click < 8.2 (Debian's typer 0.15) mixes
    them unless told not to, and Click >= 8.2 has no such switch (it always keeps both)."""
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


runner = _runner()


def _both(r: Any) -> str:
    return f"{r.stdout}{r.stderr}"


def _command_paths(cmd: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path, through the groups' own listing (the root group resolves commands lazily)."""
    paths = [prefix]
    if hasattr(cmd, "list_commands"):
        ctx = typer.Context(cmd)
        for name in cmd.list_commands(ctx):
            paths += _command_paths(cmd.get_command(ctx, name), (*prefix, name))
    return paths


ALL_COMMANDS = _command_paths(typer.main.get_command(app))


def test_version() -> None:
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0
    assert r.stdout.strip() == f"scxctl {scxctl.__version__}"


def test_doctor_is_listed_in_help() -> None:
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    assert "doctor" in r.stdout


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda p: " ".join(p) or "scxctl")
def test_help_for_every_command(path: tuple[str, ...]) -> None:
    r = runner.invoke(app, [*path, "--help"])
    assert r.exit_code == 0, _both(r)
    assert "Usage:" in r.stdout
    assert "not implemented" not in r.stdout.lower()


@pytest.mark.parametrize(
    "args", [["doctor", "--bogus"], ["--log-format", "xml", "doctor"], ["no-such-command"], ["doctor", "x"]]
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    r = runner.invoke(app, args)
    assert r.exit_code == int(ExitCode.USAGE)
    assert "Traceback" not in _both(r)


@pytest.mark.parametrize(
    ("args", "message", "help_path"),
    [
        (["bench", "fairness", "--min-time", "x"], "Invalid value for '--min-time'", "scxctl bench fairness"),
        (["no-such-command"], "No such command 'no-such-command'", "scxctl"),
        (["--log-format", "xml", "status"], "Invalid value for '--log-format'", "scxctl"),
    ],
)
def test_usage_errors_are_one_line_through_the_entry_point(
    args: list[str], message: str, help_path: str
) -> None:
    # Through the real entry point: click's own usage errors get our format, not a Rich box.
    r = subprocess.run([sys.executable, "-m", "scxctl", *args], capture_output=True, text=True,
                       timeout=60, cwd=REPO)
    assert r.returncode == int(ExitCode.USAGE), r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"scxctl: error: {message}"), r.stderr
    assert lines[1] == f"scxctl: hint: see '{help_path} -h'"
    assert r.stdout == ""


def _env(root: Path) -> dict[str, str]:
    return {"SCXCTL_SYSROOT": str(root)}


def test_doctor_table_on_a_kernel_without_sched_ext(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).no_sched_ext_machine()
    r = runner.invoke(app, ["doctor"], env=_env(fake.root))
    assert r.exit_code == 1
    out = r.stdout
    for cid in ("kernel.config_sched_ext", "kernel.sched_ext_sysfs", "kernel.btf", "verdict"):
        assert cid in out
    assert "Verdict: THIS KERNEL CANNOT RUN sched_ext SCHEDULERS" in " ".join(out.split())
    assert "What to do:" in out


def test_doctor_exit_0_when_nothing_fails(tmp_path: Path) -> None:
    """A fake sched_ext machine; non-file probes are the real ones (root, bpf(), libbpf of this host).
    Only bpf.object may fail (it reflects whether `make -C bpf` ran); then the exit status must be 1."""
    fake = FakeRoot(tmp_path).sched_ext_machine()
    r = runner.invoke(app, ["doctor", "--json"], env=_env(fake.root))
    doc = json.loads(r.stdout)
    failed = [c["id"] for c in doc["checks"] if c["status"] == "fail"]
    assert set(failed) <= {"bpf.object", "verdict"}
    assert r.exit_code == (1 if failed else 0)


def test_garbage_and_unreadable_files_give_results_not_tracebacks(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    fake.write("/proc/config.gz", b"\x1f\x8b garbage")
    fake.unreadable_dir("/sys/kernel/sched_ext/state")
    fake.invalid_utf8("/sys/kernel/sched_ext/root/ops")
    fake.write("/sys/kernel/btf/vmlinux", b"\x9f\xeb\x01\x00" + b"\xff" * 40)
    r = runner.invoke(app, ["doctor", "--json"], env=_env(fake.root))
    assert "Traceback" not in _both(r)
    checks = {c["id"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["kernel.config_sched_ext"]["status"] == "warn"
    assert "not valid gzip" in checks["kernel.config_sched_ext"]["finding"]
    assert "Is a directory" in checks["sched_ext.state"]["finding"]
    assert "UTF-8" in checks["sched_ext.loaded"]["finding"]
    assert "not valid BTF" in checks["kernel.btf"]["finding"]
    assert not any("the check itself failed" in c["finding"] for c in checks.values())
    assert r.exit_code == 1  # kernel.btf failed


def test_doctor_json_is_only_json_on_stdout_even_with_debug_logs(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).no_sched_ext_machine()
    r = runner.invoke(app, ["-v", "--log-format", "json", "doctor", "--json"], env=_env(fake.root))
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1 and doc["ok"] is False
    log_lines = [json.loads(line) for line in r.stderr.splitlines() if line.strip()]
    assert {entry["check"] for entry in log_lines if entry["event"] == "doctor check"} == {
        c["id"] for c in doc["checks"]
    }
    assert all(entry["level"] == "debug" and "timestamp" in entry for entry in log_lines)


def test_quiet_suppresses_debug_logs(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).no_sched_ext_machine()
    r = runner.invoke(app, ["-q", "-v", "--log-format", "json", "doctor", "--json"], env=_env(fake.root))
    assert r.stderr.strip() == ""


def test_console_log_format_is_not_json(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).no_sched_ext_machine()
    r = runner.invoke(app, ["-v", "--log-format", "console", "doctor", "--json"], env=_env(fake.root))
    first = r.stderr.splitlines()[0]
    assert "doctor check" in first
    with pytest.raises(json.JSONDecodeError):
        json.loads(first)


def _error_app(exc: BaseException) -> typer.Typer:
    """A throwaway app with scxctl's group class, to see how errors are rendered."""
    t = typer.Typer(cls=_ScxctlGroup)

    @t.command()
    def fail() -> None:
        raise exc

    @t.command()
    def other() -> None:
        pass

    return t


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (PermissionDenied("need root", hint="run with sudo"), ExitCode.PERMISSION),
        (ScxctlError("no sched_ext", ExitCode.UNSUPPORTED), ExitCode.UNSUPPORTED),
        (KeyboardInterrupt(), ExitCode.INTERRUPTED),
    ],
)
def test_errors_are_one_line_and_a_documented_code(exc: BaseException, code: ExitCode) -> None:
    r = runner.invoke(_error_app(exc), ["fail"])
    assert r.exit_code == int(code)
    lines = r.stderr.splitlines()
    assert lines[0].startswith("scxctl: error: ")
    assert "Traceback" not in _both(r)
    if getattr(exc, "hint", None):
        assert lines[1] == "scxctl: hint: run with sudo"


# the real thing, on this machine

def test_real_doctor_json_on_this_machine() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCXCTL_")}
    proc = subprocess.run([sys.executable, "-m", "scxctl", "doctor", "--json"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1
    checks = {c["id"]: c for c in doc["checks"]}
    assert {"kernel.release", "kernel.config_sched_ext", "kernel.sched_ext_sysfs", "kernel.btf", "privileges",
            "bpf.syscall", "libbpf", "toolchain.clang", "toolchain.bpftool", "kernel.isolcpus", "cgroup.cpu",
            "verdict"} <= set(checks)
    assert list(checks)[-1] == "verdict"
    assert checks["kernel.release"]["finding"] == os.uname().release
    has_sched_ext = os.path.isdir("/sys/kernel/sched_ext")  # the fact, observed independently
    assert (checks["kernel.sched_ext_sysfs"]["status"] == "ok") == has_sched_ext
    verdict = checks["verdict"]
    if not has_sched_ext:  # this development host
        assert proc.returncode == 1
        assert checks["kernel.sched_ext_sysfs"]["status"] == "fail"
        assert verdict["status"] == "fail"
        assert verdict["finding"].startswith("THIS KERNEL CANNOT RUN sched_ext SCHEDULERS")
        assert "/sys/kernel/sched_ext is missing" in verdict["finding"]
        assert "CONFIG_SCHED_CLASS_EXT=y" in verdict["hint"]
        assert doc["ok"] is False
    else:
        assert proc.returncode == (1 if doc["summary"]["fail"] else 0)
    assert doc["summary"]["fail"] == sum(c["status"] == "fail" for c in checks.values())


def test_real_doctor_json_pipes_into_json_tool() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCXCTL_")}
    proc = subprocess.run(f"{sys.executable} -m scxctl doctor --json | python3 -m json.tool", shell=True,
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["schema"] == 1


def test_ctrl_c_before_a_command_runs_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while the CLI is still importing or parsing: no traceback, the documented 130."""
    import scxctl.__main__ as entry
    import scxctl.cli

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(scxctl.cli, "main", interrupted)
    with pytest.raises(SystemExit) as exc:
        entry.main()
    assert exc.value.code == 130
    err = capsys.readouterr().err
    assert err == "scxctl: error: interrupted\n"
