"""sd_notify without a dependency: one datagram to $NOTIFY_SOCKET (READY, STATUS, WATCHDOG, STOPPING).

The protocol is a newline-separated KEY=VALUE datagram on an AF_UNIX socket; an address starting
with "@" is in the abstract namespace. Outside systemd (no NOTIFY_SOCKET) every call is a no-op.
"""

from __future__ import annotations

import os
import socket


def _address() -> str | None:
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr or addr[0] not in "/@":
        return None
    return "\0" + addr[1:] if addr[0] == "@" else addr


def notify(**fields: str | int) -> bool:
    """Send e.g. notify(READY=1, STATUS="..."); True when a datagram was sent."""
    addr = _address()
    if addr is None:
        return False
    payload = "\n".join(f"{k}={v}" for k, v in fields.items()).encode("utf-8", "replace")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(payload, addr)
    except OSError:
        return False
    return True


def watchdog_interval() -> float | None:
    """Seconds between required WATCHDOG=1 pings (None when the watchdog is off or meant for another pid)."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec:
        return None
    if pid and pid != str(os.getpid()):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 1e6 if value > 0 else None
