"""The `install` doctor check and scxctl.install: which install runs, and does its unit start it?"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from scxctl import install
from scxctl.doctor.checks_install import install_check
from scxctl.doctor.model import DoctorContext, Status
from scxctl.sysfs import SysRoot

UNIT = """[Unit]
Description=scxctl
[Service]
Type=notify
ExecStart={exe} daemon
"""


def _ctx(root: Path, unit_dir: str | None, exe: str, present: bool) -> DoctorContext:
    if unit_dir is not None:
        d = root / unit_dir.lstrip("/")
        d.mkdir(parents=True)
        (d / "scxctl.service").write_text(UNIT.format(exe=exe))
    if present:
        f = root / exe.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("#!/bin/sh\n")
    return DoctorContext(sysroot=SysRoot(root))


def _as(monkeypatch: pytest.MonkeyPatch, kind: str, executable: str | None) -> None:
    inst = install.Install(kind, Path("/somewhere/scxctl"), Path(executable) if executable else None)
    monkeypatch.setattr(install, "current", lambda code=None: inst)


def test_a_unit_whose_executable_is_missing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _as(monkeypatch, "package", "/usr/bin/scxctl")
    r = install_check(_ctx(tmp_path, "/usr/lib/systemd/system", "/usr/local/bin/scxctl", present=False))
    assert r.status is Status.FAIL
    assert "starts /usr/local/bin/scxctl, which does not exist" in r.finding
    assert r.hint is not None and "/usr/bin/scxctl" in r.hint
    assert r.details["unit"] == "/usr/lib/systemd/system/scxctl.service"


def test_the_package_with_its_own_unit_is_ok(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _as(monkeypatch, "package", "/usr/bin/scxctl")
    r = install_check(_ctx(tmp_path, "/usr/lib/systemd/system", "/usr/bin/scxctl", present=True))
    assert r.status is Status.OK
    assert r.details == {"kind": "package", "code": "/somewhere/scxctl", "executable": "/usr/bin/scxctl",
                         "unit": "/usr/lib/systemd/system/scxctl.service", "unit_exec": "/usr/bin/scxctl"}


def test_a_unit_of_another_install_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _as(monkeypatch, "venv", "/opt/venv/bin/scxctl")
    r = install_check(_ctx(tmp_path, "/etc/systemd/system", "/usr/bin/scxctl", present=True))
    assert r.status is Status.WARN
    assert "another install than this one (/opt/venv/bin/scxctl)" in r.finding


def test_no_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _as(monkeypatch, "venv", "/opt/venv/bin/scxctl")
    assert install_check(_ctx(tmp_path, None, "", present=False)).status is Status.OK
    _as(monkeypatch, "package", "/usr/bin/scxctl")
    r = install_check(_ctx(tmp_path, None, "", present=False))
    assert r.status is Status.WARN and "no scxctl.service is installed" in r.finding


def test_etc_overrides_the_package_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _as(monkeypatch, "package", "/usr/bin/scxctl")
    ctx = _ctx(tmp_path, "/usr/lib/systemd/system", "/usr/bin/scxctl", present=True)
    d = tmp_path / "etc/systemd/system"
    d.mkdir(parents=True)
    (d / "scxctl.service").write_text(UNIT.format(exe="-/opt/x/bin/scxctl"))
    r = install_check(ctx)
    assert r.details["unit"] == "/etc/systemd/system/scxctl.service"
    assert r.details["unit_exec"] == "/opt/x/bin/scxctl" and r.status is Status.FAIL


def test_install_kind_from_where_the_code_lives(tmp_path: Path) -> None:
    checkout = tmp_path / "src"
    (checkout / "scxctl").mkdir(parents=True)
    (checkout / "bpf").mkdir()
    (checkout / "pyproject.toml").write_text("")
    assert install.current(checkout / "scxctl").kind == "checkout"
    pkg = install.current(install.PACKAGE_SITE / "scxctl")
    assert (pkg.kind, pkg.executable) == ("package", install.PACKAGE_EXECUTABLE)
    other = install.current(tmp_path / "site-packages" / "scxctl")
    in_venv = sys.prefix != sys.base_prefix
    assert other.kind == ("venv" if in_venv else "pip")
    # this test process runs from the repository
    assert install.current().kind == "checkout"


def test_exec_start_parsing() -> None:
    assert install.exec_start("ExecStart=/usr/bin/scxctl daemon\n") == Path("/usr/bin/scxctl")
    assert install.exec_start("[Service]\nExecStart=\nExecStart=!/x/scxctl d\n") == Path("/x/scxctl")
    assert install.exec_start("[Service]\nType=simple\n") is None


def test_a_drop_in_replaces_exec_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _as(monkeypatch, "package", "/usr/bin/scxctl")
    ctx = _ctx(tmp_path, "/usr/lib/systemd/system", "/usr/bin/scxctl", present=True)
    d = tmp_path / "etc/systemd/system/scxctl.service.d"
    d.mkdir(parents=True)
    (d / "10-false.conf").write_text("[Service]\nExecStart=\nExecStart=/nonexistent/scxctl daemon\n")
    r = install_check(ctx)
    assert r.details["unit_exec"] == "/nonexistent/scxctl" and r.status is Status.FAIL
    (d / "20-back.conf").write_text("[Service]\nExecStart=\nExecStart=/usr/bin/scxctl daemon\n")
    assert install_check(ctx).status is Status.OK
