"""What pyland enforces of cpu.max, for `scxctl status`: a JSON snapshot in the runtime directory.

The BPF core keeps each limited cgroup's budget in the map `cgroup_bw` (bpf/cgroup_bw.h), which only
a process with CAP_BPF could read; `scxctl status` runs as any member of the scxctl group and asks
the daemon, which is not the process holding the map. So pyland itself writes the snapshot, once a
second and atomically, and removes it when it stops; the daemon reads it for the child it runs.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scxctl import paths
from scxctl.fsutil import read_owned_json, remove_owned, replace_volatile_json
from scxctl.log import get_logger
from scxctl.pyland.records import CGROUP_BW, CGROUP_BW_FIELDS
from scxctl.sysfs import SysRoot

if TYPE_CHECKING:
    from scxctl.bpf.libbpf import BpfObject

log = get_logger("scxctl.pyland")

SNAPSHOT_NAME = "pyland-cgroups.json"
MAP_NAME = "cgroup_bw"
INTERVAL_S = 1.0
MAX_WALK = 20000  # cgroup directories looked at to name an id


def snapshot_path() -> Path:
    return paths.runtime_dir() / SNAPSHOT_NAME


class CgroupReport:
    """Writes the snapshot while cgroups have quotas (and once more when the last one went)."""

    def __init__(self, obj: BpfObject, sysroot: SysRoot) -> None:
        self._map = obj.map(MAP_NAME)
        self._sysroot = sysroot
        self._names: dict[int, str] = {}
        self._next = 0.0
        self._written = False
        self._failed = False

    def maybe_write(self, now: float, read_counters: Callable[[], dict[str, int]]) -> None:
        """Called from the loop's periodic service; reads the counters only once a second."""
        if now < self._next or self._failed:
            return
        self._next = now + INTERVAL_S
        counters = read_counters()
        if not counters.get("nr_bw_cgroups") and not self._written:
            return
        try:
            doc = self.snapshot(counters)
            replace_volatile_json(snapshot_path(), doc)
            self._written = bool(doc["cgroups"])
        except OSError as exc:  # a missing runtime directory must not stop the scheduler
            self._failed = True
            log.warning("cannot write the cpu.max snapshot for scxctl status", path=str(snapshot_path()),
                        error=exc.strerror)

    def snapshot(self, counters: dict[str, int]) -> dict[str, Any]:
        rows = []
        for key, value in self._map.items(8, CGROUP_BW.size):
            cgid = int.from_bytes(key, "little")
            bw = dict(zip(CGROUP_BW_FIELDS, CGROUP_BW.unpack(value), strict=True))
            rows.append({
                "id": cgid,
                "path": self._name(cgid),
                "quota_us": bw["quota_ns"] // 1000,
                "period_us": bw["period_ns"] // 1000,
                "burst_us": bw["burst_ns"] // 1000,
                "throttled": bw["throttled_at"] != 0,
                "nr_throttled": bw["nr_throttled"],
                "throttled_ms": bw["throttled_ns"] // 1_000_000,
                "usage_ms": bw["usage_ns"] // 1_000_000,
                "nr_held": bw["nr_held"],
            })
        rows.sort(key=lambda r: r["path"] or "")
        return {
            "pid": os.getpid(),
            "updated_at": time.time(),
            "cgroups": rows,
            "held": counters.get("nr_bw_held", 0),
            "released": counters.get("nr_bw_released", 0),
            "preempted": counters.get("nr_bw_preempted", 0),
            "overdue": counters.get("nr_bw_overdue", 0),
        }

    def _name(self, cgid: int) -> str | None:
        """The cgroup's path under the cgroup2 mount: its id is its directory's inode number."""
        if cgid not in self._names:
            self._names.update(self._walk())
        return self._names.get(cgid)

    def _walk(self) -> dict[int, str]:
        try:
            mount = self._sysroot.cgroup2_mount()
        except OSError:
            return {}
        if mount is None:
            return {}
        root = self._sysroot.path(mount)
        found: dict[int, str] = {}
        for n, (dirpath, _dirs, _files) in enumerate(os.walk(root)):
            if n >= MAX_WALK:
                break
            with contextlib.suppress(OSError):
                rel = os.path.relpath(dirpath, root)
                found[os.stat(dirpath).st_ino] = "/" if rel == "." else "/" + rel
        return found

    def close(self) -> None:
        """Stopping: the snapshot goes with the scheduler (only ours: the pid is checked)."""
        if self._written:
            remove_snapshot(os.getpid())


def remove_snapshot(pid: int) -> None:
    remove_owned(snapshot_path(), pid)


def read_snapshot(pid: int | None = None) -> dict[str, Any] | None:
    """The snapshot, or None when there is none, it is unreadable, or it is another process's."""
    return read_owned_json(snapshot_path(), pid)
