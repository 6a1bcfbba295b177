"""How `scxctl enable` starts a daemon that does not answer: through the unit where one is installed."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from scxctl.daemon import client
from scxctl.errors import ExitCode, ScxctlError

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="start_daemon refuses non-root callers first")


def _fake_systemctl(bin_dir: Path, load_state: str, start_rc: int) -> Path:
    """A systemctl that answers `show -p LoadState` and fails or succeeds `start`, logging its calls."""
    calls = bin_dir / "calls.txt"
    script = bin_dir / "systemctl"
    script.write_text(f"""#!/bin/sh
echo "$*" >>{calls}
case "$1" in
  show) echo {load_state} ;;
  start) [ {start_rc} -eq 0 ] || {{ echo "Job for scxctl.service failed because the control process exited \
with error code." >&2; exit {start_rc}; }} ;;
esac
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return calls


def _record_daemon_spawns(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Popen as usual (subprocess.run uses it), except that starting `scxctl daemon` is only recorded."""
    spawned: list[list[str]] = []
    real = subprocess.Popen

    def popen(args: list[str], *a: object, **k: object) -> object:
        if list(args[-2:]) == ["scxctl", "daemon"]:
            spawned.append(list(args))
            return None
        return real(args, *a, **k)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "Popen", popen)
    return spawned


def test_a_failing_unit_is_reported_not_bypassed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_systemctl(tmp_path, "loaded", 1)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    spawned = _record_daemon_spawns(monkeypatch)
    with pytest.raises(ScxctlError) as err:
        client.start_daemon(wait_s=0.1, use_systemd=True)
    assert err.value.code == ExitCode.DAEMON_UNREACHABLE
    msg = err.value.message
    assert msg.startswith("scxctl.service is installed but did not start: Job for scxctl.service")
    assert err.value.hint is not None and "journalctl -u scxctl.service" in err.value.hint
    assert spawned == []  # no private daemon beside the unit
    assert calls.read_text().splitlines() == [
        "show -p LoadState --value scxctl.service", "start scxctl.service"]


def test_without_the_unit_a_detached_daemon_is_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_systemctl(tmp_path, "not-found", 0)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    spawned = _record_daemon_spawns(monkeypatch)
    monkeypatch.setattr(client, "answers", lambda path=None: bool(spawned))
    assert client.start_daemon(wait_s=2, use_systemd=True) == "spawned"
    assert spawned and spawned[0][-2:] == ["scxctl", "daemon"]
    assert "start" not in calls.read_text()
