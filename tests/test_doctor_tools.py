"""libbpf and toolchain checks: the real host, fake libraries, and fake programs on a fake PATH."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fakeroot import FakeLibbpf, FakeRoot, context

from scxctl.doctor import checks_libbpf as cl
from scxctl.doctor import checks_toolchain as ct
from scxctl.doctor.model import Status, run_command


@pytest.fixture
def fake(tmp_path: Path) -> FakeRoot:
    return FakeRoot(tmp_path).sched_ext_machine()


# libbpf

def test_real_libbpf_version_matches_the_library_file() -> None:
    """The version read through ctypes agrees with the soname target's file name (libbpf.so.1.X.Y)."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    path = re.search(r"libbpf\.so\.1 \(.*\) => (\S+)", out)
    assert path, "libbpf1 is installed by scripts/install.sh"
    m = re.search(r"libbpf\.so\.(\d+)\.(\d+)", os.path.realpath(path.group(1)))
    assert m
    assert cl.libbpf_version(ctypes.CDLL("libbpf.so.1")) == (int(m.group(1)), int(m.group(2)))


def test_libbpf_ok(fake: FakeRoot) -> None:
    r = cl.libbpf(context(fake, load_library=lambda name: FakeLibbpf(1, 5)))
    assert (r.status, r.details["version"]) == (Status.OK, "1.5")


def test_libbpf_exactly_minimum_ok(fake: FakeRoot) -> None:
    assert cl.libbpf(context(fake, load_library=lambda name: FakeLibbpf(1, 4))).status is Status.OK


@pytest.mark.parametrize(("major", "minor"), [(1, 3), (1, 1), (0, 8)])
def test_libbpf_too_old_fails(fake: FakeRoot, major: int, minor: int) -> None:
    r = cl.libbpf(context(fake, load_library=lambda name: FakeLibbpf(major, minor)))
    assert r.status is Status.FAIL
    assert f"{major}.{minor}" in r.finding and "1.4" in r.finding and "pyland" in r.finding
    assert "libbpf1" in (r.hint or "")


def test_libbpf_version_from_string_only(fake: FakeRoot) -> None:
    r = cl.libbpf(context(fake, load_library=lambda name: FakeLibbpf(1, 2, numbers=False)))
    assert (r.status, r.details["version"]) == (Status.FAIL, "1.2")


def test_libbpf_without_version_functions_warns(fake: FakeRoot) -> None:
    r = cl.libbpf(context(fake, load_library=lambda name: FakeLibbpf(numbers=False, string=False)))
    assert r.status is Status.WARN
    assert r.details == {"found": True, "version": None}


def test_libbpf_missing_fails(fake: FakeRoot) -> None:
    def missing(name: str) -> object:
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    r = cl.libbpf(context(fake, load_library=missing))
    assert r.status is Status.FAIL
    assert "libbpf.so.1 not found" in r.finding and r.hint


def test_libbpf_name_asked_for_is_the_soname(fake: FakeRoot) -> None:
    asked: list[str] = []
    cl.libbpf(context(fake, load_library=lambda name: asked.append(name) or FakeLibbpf()))
    assert asked == ["libbpf.so.1"]


# toolchain: fake programs on a fake PATH (real exec of small shell scripts)

def _program(directory: Path, name: str, output: str, rc: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    p = directory / name
    p.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\nexit {rc}\n")
    p.chmod(0o755)
    return p


def _clang_version(major: int) -> str:
    return f"Debian clang version {major}.1.7 (3~deb12u1)\nTarget: x86_64-pc-linux-gnu\nThread model: posix"


def test_clang_highest_version_wins(fake: FakeRoot, tmp_path: Path) -> None:
    bin1, bin2 = tmp_path / "bin1", tmp_path / "bin2"
    _program(bin1, "clang-14", _clang_version(14))
    _program(bin2, "clang-19", _clang_version(19))
    _program(bin2, "clang-format", "not a compiler")  # must not be picked up
    r = ct.clang(context(fake, search_path=f"{bin1}:{bin2}", run=run_command))
    assert r.status is Status.OK
    assert r.details["path"] == str(bin2 / "clang-19") and r.details["version"] == "19.1.7"
    assert sorted(Path(c).name for c in r.details["candidates"]) == ["clang-14", "clang-19"]


def test_clang_too_old_warns(fake: FakeRoot, tmp_path: Path) -> None:
    _program(tmp_path / "bin", "clang", _clang_version(14))
    r = ct.clang(context(fake, search_path=str(tmp_path / "bin"), run=run_command))
    assert r.status is Status.WARN
    assert "older than 16" in r.finding


def test_clang_missing_warns_not_fails(fake: FakeRoot, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    r = ct.clang(context(fake, search_path=f"{tmp_path / 'empty'}:{tmp_path / 'does-not-exist'}"))
    assert r.status is Status.WARN
    assert "only to build" in r.finding and "clang" in (r.hint or "")


def test_clang_that_fails_to_run_warns(fake: FakeRoot, tmp_path: Path) -> None:
    _program(tmp_path / "bin", "clang", "clang: error while loading shared libraries", rc=127)
    r = ct.clang(context(fake, search_path=str(tmp_path / "bin"), run=run_command))
    assert r.status is Status.WARN
    assert "error while loading shared libraries" in r.finding


def test_clang_not_executable_is_ignored(fake: FakeRoot, tmp_path: Path) -> None:
    _program(tmp_path / "bin", "clang-19", _clang_version(19)).chmod(0o644)
    assert ct.clang(context(fake, search_path=str(tmp_path / "bin"))).status is Status.WARN


def test_real_clang_on_this_host(fake: FakeRoot) -> None:
    """The check reports the same version as running the compiler it names."""
    r = ct.clang(context(fake, search_path=os.environ.get("PATH", ""), run=run_command))
    assert r.status is Status.OK, r.finding  # clang-19 is installed by scripts/install.sh
    out = subprocess.run([r.details["path"], "--version"], capture_output=True, text=True).stdout
    assert f"clang version {r.details['version']}" in out


@pytest.mark.parametrize(("version", "status"), [("v7.5.0", Status.OK), ("v7.1.0", Status.WARN)])
def test_bpftool_versions(fake: FakeRoot, tmp_path: Path, version: str, status: Status) -> None:
    _program(tmp_path / "sbin", "bpftool", f"bpftool {version}\nusing libbpf v1.5\nfeatures: llvm, skeletons")
    r = ct.bpftool(context(fake, search_path=str(tmp_path / "sbin"), run=run_command))
    assert r.status is status
    assert r.details["version"] == version[1:] and r.details["libbpf"] == "v1.5"


def test_bpftool_missing_warns(fake: FakeRoot) -> None:
    r = ct.bpftool(context(fake))
    assert r.status is Status.WARN and r.details["path"] is None and r.hint


def test_bpftool_without_version_warns(fake: FakeRoot, tmp_path: Path) -> None:
    _program(tmp_path / "sbin", "bpftool", "Segmentation fault", rc=139)
    r = ct.bpftool(context(fake, search_path=str(tmp_path / "sbin"), run=run_command))
    assert r.status is Status.WARN
    assert "does not report a version" in r.finding


def test_real_bpftool_on_this_host(fake: FakeRoot) -> None:
    path = shutil.which("bpftool", path="/usr/local/sbin:/usr/sbin:/sbin:" + os.environ.get("PATH", ""))
    assert path, "bpftool is installed by scripts/install.sh"
    r = ct.bpftool(context(fake, search_path=os.path.dirname(path), run=run_command))
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    assert r.details["version"] in out


def test_run_command_reports_timeouts_and_missing_programs() -> None:
    assert run_command(["sleep", "5"], timeout=0.2).returncode == 124
    missing = run_command(["/nonexistent/program"])
    assert missing.returncode == 126 and "No such file" in missing.output
