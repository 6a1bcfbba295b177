"""The CLI side of the control socket, and starting the daemon when none answers.

Kept import-light (socket + json): `scxctl status` is a round trip, not a start-up cost.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scxctl import paths
from scxctl.daemon import protocol
from scxctl.errors import ExitCode, ScxctlError

STATUS_TIMEOUT_S = 10.0
CHANGE_TIMEOUT_S = 180.0  # enable waits for the kernel to switch (slow under emulation)
MAX_REPLY = 16 * 1024 * 1024
UNIT = "scxctl.service"


class DaemonUnreachable(ScxctlError):
    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            ExitCode.DAEMON_UNREACHABLE,
            hint=f"start it: systemctl start {UNIT} (or run `scxctl daemon` as root)",
        )


def call(
    op: str,
    args: dict[str, Any] | None = None,
    *,
    timeout: float = STATUS_TIMEOUT_S,
    path: Path | None = None,
) -> Any:
    """One request, one reply; the daemon's error is raised as ScxctlError with its exit code."""
    path = path or paths.control_socket()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise DaemonUnreachable(f"no scxctl daemon answers on {path}") from None
        except PermissionError:
            raise DaemonUnreachable(f"cannot connect to {path}: permission denied") from None
        except OSError as exc:
            raise DaemonUnreachable(f"cannot connect to {path}: {exc.strerror or exc}") from None
        try:
            sock.sendall(protocol.request_line(op, args, req_id=os.getpid()))
            line = _read_line(sock)
        except TimeoutError:
            raise DaemonUnreachable(f"the daemon did not answer {op!r} within {timeout:g}s") from None
        except OSError as exc:
            raise DaemonUnreachable(f"connection to the daemon failed: {exc.strerror or exc}") from None
    finally:
        sock.close()
    return protocol.parse_reply(line)


def _read_line(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            raise DaemonUnreachable("the daemon closed the connection without answering")
        end = chunk.find(b"\n")
        if end >= 0:
            chunks.append(chunk[: end + 1])
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_REPLY:
            raise ScxctlError("the daemon's reply is too long")


def answers(path: Path | None = None) -> bool:
    try:
        call("ping", timeout=2.0, path=path)
    except ScxctlError:
        return False
    return True


def _systemd_running() -> bool:
    return Path("/run/systemd/system").is_dir() and shutil.which("systemctl") is not None


def _unit_installed() -> bool:
    """Does systemd know scxctl.service (the package's unit, or one copied to /etc)?"""
    done = subprocess.run(["systemctl", "show", "-p", "LoadState", "--value", UNIT],
                          capture_output=True, text=True, check=False)
    return done.returncode == 0 and done.stdout.strip() not in ("", "not-found")


def start_daemon(wait_s: float = 30.0, use_systemd: bool | None = None) -> str:
    """Start the daemon (systemd when it runs this machine, else a detached process); how it was started.

    Where the unit is installed, only systemd may start the daemon: a private daemon started beside a
    failing unit would run unsupervised, and nothing would restore its scheduler at boot.
    """
    if os.geteuid() != 0:
        raise DaemonUnreachable("no scxctl daemon answers, and only root can start one")
    how = "spawned"
    use_systemd = _systemd_running() if use_systemd is None else use_systemd
    if use_systemd and _unit_installed():
        done = subprocess.run(["systemctl", "start", UNIT], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            why = " ".join(done.stderr.split()) or f"systemctl exited {done.returncode}"
            raise ScxctlError(
                f"{UNIT} is installed but did not start: {why}",
                ExitCode.DAEMON_UNREACHABLE,
                hint=f"see why: systemctl status {UNIT}; journalctl -u {UNIT}",
            )
        how = "systemd"
    if how == "spawned":
        subprocess.Popen(  # fixed argv: this interpreter, no shell
            [sys.executable, "-m", "scxctl", "daemon"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if answers():
            return how
        time.sleep(0.1)
    raise DaemonUnreachable(f"started the daemon ({how}) but it did not answer within {wait_s:g}s")
