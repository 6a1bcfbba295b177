"""The lifecycle CLI against a live test daemon: exit codes, one-line errors, rendering, auto-start,
`logs`, and the sd_notify datagrams the daemon sends."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_fakes import REPO, DaemonEnv, daemon_env
from interrupt import sigint_default

from scxctl.commands.logs import format_line, tail_lines
from scxctl.daemon import notify


def scx(env: DaemonEnv, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scxctl", *args],
        env=env.env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonEnv]:
    with daemon_env(tmp_path_factory.mktemp("cli")) as env:
        env.start()
        yield env


def test_status_json_and_text(d: DaemonEnv) -> None:
    done = scx(d, "status", "--json")
    assert done.returncode == 0, done.stderr
    st = json.loads(done.stdout)
    assert st["kernel"]["state"] == "disabled" and st["daemon"]["pid"] == d.proc.pid  # type: ignore[union-attr]
    text = scx(d, "status")
    assert text.returncode == 0 and "default scheduler" in text.stdout and "supervisor: idle" in text.stdout


def test_enable_switch_disable_and_errors(d: DaemonEnv) -> None:
    bad = scx(d, "enable", "scx_nope")
    assert bad.returncode == 2
    assert (
        bad.stderr.splitlines()[0] == "scxctl: error: unknown scheduler 'scx_nope' (configured: pyland, "
        "crashy, ejecty, fake, hangy, hotplug, mute, silent, versioned)"
    )
    assert scx(d, "enable", "fake", "--mode", "turbo").returncode == 2  # typer's own choice check
    assert scx(d, "switch", "--mode", "gaming").returncode == 2  # nothing enabled yet
    ok = scx(d, "enable", "fake")
    assert ok.returncode == 0 and ok.stdout.startswith("fake (auto) running, pid ")
    assert d.kernel.ops() == "fake"
    sw = scx(d, "switch", "--mode", "powersave")
    assert sw.returncode == 0 and "fake (powersave) running" in sw.stdout
    assert scx(d, "enable", "fake", "--policy", "fifo").returncode == 2  # policy is pyland-only
    off = scx(d, "disable")
    assert off.returncode == 0 and "default scheduler" in off.stdout and d.kernel.state() == "disabled"


def test_busy_exit_code_5(d: DaemonEnv) -> None:
    d.kernel.load_foreign("scx_lavd")
    try:
        done = scx(d, "enable", "fake")
        assert done.returncode == 5
        assert "another sched_ext scheduler is loaded (scx_lavd)" in done.stderr
        assert "NOT managed by scxctl" in scx(d, "status").stdout
    finally:
        d.kernel.unload()


def test_list_shows_schedulers_and_modes(d: DaemonEnv) -> None:
    data = json.loads(scx(d, "list", "--json").stdout)
    assert [s["name"] for s in data["schedulers"]][:2] == ["pyland", "crashy"]
    assert [m["name"] for m in data["modes"]] == ["auto", "gaming", "powersave", "lowlatency", "server"]
    text = scx(d, "list").stdout
    assert "fake (default)" in text and "lowlatency" in text


def test_logs_pretty_prints_lifecycle_events(d: DaemonEnv) -> None:
    assert scx(d, "enable", "fake").returncode == 0
    done = scx(d, "logs", "-n", "200")
    assert done.returncode == 0
    line = next(x for x in done.stdout.splitlines() if " scheduler_enabled " in x)
    assert 'scheduler="fake"' in line and "pid=" in line and 'reason="verified"' in line
    assert len(scx(d, "logs", "-n", "3", "--json").stdout.splitlines()) == 3
    assert scx(d, "disable").returncode == 0


def test_unsupported_kernel_exit_code_4(tmp_path: Path) -> None:
    with daemon_env(tmp_path, sched_ext=False) as env:
        env.start()
        done = scx(env, "enable", "fake")
        assert done.returncode == 4 and "cannot run sched_ext schedulers" in done.stderr


def test_no_daemon_status_exit_6_and_enable_autostarts(tmp_path: Path) -> None:
    with daemon_env(tmp_path) as env:
        st = scx(env, "status", "--json")
        assert st.returncode == 6 and json.loads(st.stdout)["daemon"] is None
        assert scx(env, "disable").returncode == 6
        assert scx(env, "disable").stderr.startswith("scxctl: error: no scxctl daemon answers on ")
        done = scx(env, "enable", "fake")  # no systemd on this host: spawns a detached daemon
        assert done.returncode == 0, done.stderr
        assert "started the daemon (spawned)" in done.stderr and env.kernel.ops() == "fake"
        pid = env.status()["daemon"]["pid"]
        os.kill(pid, signal.SIGTERM)
        env.wait_for(lambda: not env.socket.exists(), 15, "spawned daemon exit")
        # the daemon closes its socket first, then stops the scheduler it ran
        env.wait_for(lambda: env.kernel.state() == "disabled", 15, "the exiting daemon stopped its scheduler")


def test_notify_ready_status_and_watchdog(tmp_path: Path) -> None:
    sock_path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock, daemon_env(tmp_path / "d") as env:
        sock.bind(str(sock_path))
        sock.settimeout(20)
        env.start(extra_env={"NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "400000"})
        got: list[str] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sum("WATCHDOG=1" in g for g in got) < 3:
            got.append(sock.recv(4096).decode())
        assert any("READY=1" in g and f"MAINPID={env.proc.pid}" in g for g in got)  # type: ignore[union-attr]
        assert any(g.startswith("WATCHDOG=1\nSTATUS=default scheduler") for g in got)
        assert sum("WATCHDOG=1" in g for g in got) >= 3
        assert env.stop() == 0
        rest = []
        with pytest.raises(TimeoutError):
            while True:
                sock.settimeout(1)
                rest.append(sock.recv(4096).decode())
        assert any("STOPPING=1" in r for r in rest)


def test_notify_abstract_address_and_watchdog_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"scxctl-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify.notify(READY=1)
        assert sock.recv(100) == b"READY=1"
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert notify.notify(READY=1) is False
    monkeypatch.setenv("WATCHDOG_USEC", "2000000")
    monkeypatch.setenv("WATCHDOG_PID", "1")
    assert notify.watchdog_interval() is None  # meant for another process
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert notify.watchdog_interval() == 2.0


def test_tail_and_format(tmp_path: Path) -> None:
    log = tmp_path / "d.log"
    log.write_text(
        "".join(json.dumps({"event": f"e{i}", "level": "info", "pid": i}) + "\n" for i in range(5000))
    )
    tail, ino, end = tail_lines(log, 3, block=100)
    assert (ino, end) == (log.stat().st_ino, log.stat().st_size)
    assert [json.loads(x)["event"] for x in tail] == ["e4997", "e4998", "e4999"]
    assert (
        format_line(
            '{"timestamp": "2026-01-02T03:04:05.678Z", "level": "error", "event": "x", '
            '"scheduler": "pyland", "pid": 7, "reason": "boom", "zz": [1]}'
        )
        == '2026-01-02 03:04:05.678 error    x scheduler="pyland" pid=7 reason="boom" zz=[1]'
    )
    assert format_line("not json") == "not json"


def test_logs_follow_survives_rotation(tmp_path: Path) -> None:
    import threading

    logdir = tmp_path / "log"
    logdir.mkdir()
    env = {**os.environ, "SCXCTL_LOG_DIR": str(logdir), "PYTHONPATH": str(REPO)}
    (logdir / "daemon.log").write_text(json.dumps({"event": "before", "level": "info"}) + "\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "scxctl", "logs", "-f", "-n", "5"], env=env, stdout=subprocess.PIPE, text=True,
        preexec_fn=sigint_default,
    )
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()

    def shown(event: str) -> bool:
        return any(f" {event}" in line for line in list(seen))

    try:
        DaemonEnv.wait_for(lambda: shown("before"), 60, "the existing line")
        with (logdir / "daemon.log").open("a") as f:
            f.write(json.dumps({"event": "appended", "level": "info"}) + "\n")
        DaemonEnv.wait_for(lambda: shown("appended"), 30, "the appended line")
        (logdir / "daemon.log").rename(logdir / "daemon.log.1")
        (logdir / "daemon.log").write_text(json.dumps({"event": "rotated", "level": "info"}) + "\n")
        DaemonEnv.wait_for(lambda: shown("rotated"), 30, "the line in the new file after rotation")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
    assert [ln.split()[-1] for ln in seen] == ["before", "appended", "rotated"]
