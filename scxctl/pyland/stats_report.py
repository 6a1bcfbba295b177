"""pyland's counters for `scxctl stats` and the daemon's metrics: a JSON snapshot in the runtime directory.

Both readers run without CAP_BPF (a member of the scxctl group; the daemon, which is not the process
holding the object) and must not attach to the BPF object again. The loop already holds every
counter, so it publishes them itself, once a second and atomically, from its periodic service (never
from the per-record path), and removes the file when it stops. A reader tells a live snapshot from a
stale one (a pyland that was killed, or hangs) by its age and its pid.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scxctl import paths
from scxctl.fsutil import read_owned_json, remove_owned, replace_volatile_json
from scxctl.log import get_logger

log = get_logger("scxctl.pyland")

SCHEMA = 1
INTERVAL_S = 1.0
STALE_INTERVALS = 3  # a snapshot this many intervals old is stale: its writer no longer runs its loop


class StatsReport:
    """Writes the snapshot at most once per `interval_s`; `close()` removes it (only our own)."""

    def __init__(self, interval_s: float = INTERVAL_S, path: Path | None = None) -> None:
        self.path = path or paths.pyland_stats_file()
        self.interval_s = interval_s
        self._next = 0.0
        self._written = False
        self._failed = False

    def maybe_write(self, now: float, build: Callable[[], dict[str, Any]]) -> bool:
        """Called from the loop's periodic service; builds the document only when one is due."""
        if now < self._next or self._failed:
            return False
        self._next = now + self.interval_s
        doc = {"schema": SCHEMA, "pid": os.getpid(), "monotonic": time.monotonic(), "wall": time.time(),
               "interval_s": self.interval_s, **build()}
        try:
            replace_volatile_json(self.path, doc)
        except OSError as exc:  # a missing runtime directory must not stop the scheduler
            self._failed = True
            log.warning("cannot write pyland's counters for scxctl stats", path=str(self.path),
                        error=exc.strerror)
            return False
        self._written = True
        return True

    def close(self) -> None:
        if self._written:
            remove_stats(os.getpid(), self.path)


def numbers(values: dict[str, Any]) -> dict[str, int | float]:
    """The int and float entries of a policy's stats() (anything else is no counter and is dropped)."""
    return {str(k): v for k, v in values.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


def read_stats(pid: int | None = None, path: Path | None = None) -> dict[str, Any] | None:
    """The snapshot, or None when there is none, it is unreadable, or it is another process's."""
    doc = read_owned_json(path or paths.pyland_stats_file(), pid)
    return doc if doc is not None and isinstance(doc.get("pid"), int) else None


def remove_stats(pid: int, path: Path | None = None) -> None:
    remove_owned(path or paths.pyland_stats_file(), pid)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's: a reader in the scxctl group, pyland as root
        return True
    return True


def age_s(doc: dict[str, Any], now: float | None = None) -> float:
    """Seconds since the snapshot was written (CLOCK_MONOTONIC: the same for every process)."""
    written = doc.get("monotonic")
    if not isinstance(written, int | float):
        return float("inf")
    return max(0.0, (time.monotonic() if now is None else now) - written)


def stale_reason(doc: dict[str, Any], now: float | None = None) -> str | None:
    """Why the snapshot no longer describes a running pyland, or None while it is live."""
    if not pid_alive(doc["pid"]):
        return "its process is gone"
    interval = doc.get("interval_s")
    interval = interval if isinstance(interval, int | float) and interval > 0 else INTERVAL_S
    age = age_s(doc, now)
    if age > STALE_INTERVALS * interval:
        return f"written {age:.0f} s ago"
    return None
