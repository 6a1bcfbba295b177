"""The one place that reads /sys and /proc.

Every reader goes through a `SysRoot`, whose prefix is `/` in production and a fake tree in tests
(`SCXCTL_SYSROOT` or an explicit argument), so each check can be exercised against present, absent,
malformed and unreadable files without touching the machine.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

SCHED_EXT_DIR = "/sys/kernel/sched_ext"

# /sys/kernel/sched_ext/state values; the transitional ones appear while a scheduler (un)loads
STATE_ENABLED = "enabled"
STATE_DISABLED = "disabled"


class SysRoot:
    """A view of /sys and /proc under a root prefix."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        if root is None:
            root = os.environ.get("SCXCTL_SYSROOT") or "/"
        self.root = Path(root)

    @property
    def is_real(self) -> bool:
        return self.root == Path("/")

    def path(self, abspath: str) -> Path:
        """Map an absolute system path (`/sys/...`) into this root."""
        return self.root / abspath.lstrip("/")

    def exists(self, abspath: str) -> bool:
        return self.path(abspath).exists()

    def is_dir(self, abspath: str) -> bool:
        return self.path(abspath).is_dir()

    def read_bytes(self, abspath: str) -> bytes:
        return self.path(abspath).read_bytes()

    def read_text(self, abspath: str) -> str:
        """File contents, stripped; raises OSError (missing, unreadable) or UnicodeDecodeError."""
        return self.path(abspath).read_text(encoding="utf-8", errors="strict").strip()

    def read_optional(self, abspath: str) -> str | None:
        """Contents, or None when the file does not exist; other errors propagate."""
        try:
            return self.read_text(abspath)
        except FileNotFoundError:
            return None

    def kernel_release(self) -> str:
        if self.is_real:
            return os.uname().release
        return self.read_text("/proc/sys/kernel/osrelease")

    def cmdline(self) -> str:
        return self.read_text("/proc/cmdline")

    def self_cgroups(self) -> list[CgroupMembership]:
        """Every line of /proc/self/cgroup: one per v1 hierarchy, plus `0::/path` for cgroup v2."""
        result = []
        for line in self.read_text("/proc/self/cgroup").splitlines():
            hier, _, rest = line.partition(":")
            controllers, _, path = rest.partition(":")
            result.append(CgroupMembership(hier, tuple(c for c in controllers.split(",") if c), path or "/"))
        return result

    def self_cgroup_v2(self) -> str | None:
        """The unified-hierarchy cgroup path of this process (`0::/path`), or None on cgroup v1."""
        for m in self.self_cgroups():
            if m.hierarchy == "0" and not m.controllers:
                return m.path
        return None

    def cgroup2_mount(self) -> str | None:
        """Where the cgroup2 filesystem is mounted (`/sys/fs/cgroup`, or `.../unified` on hybrid systems)."""
        for line in self.read_text("/proc/self/mountinfo").splitlines():
            fields, sep, tail = line.partition(" - ")
            parts = fields.split()
            if sep and len(parts) >= 5 and tail.split(" ", 1)[0] == "cgroup2":
                return _unescape_mountinfo(parts[4])
        return None


@dataclass(frozen=True)
class CgroupMembership:
    """One line of /proc/PID/cgroup."""

    hierarchy: str  # "0" for the unified (v2) hierarchy
    controllers: tuple[str, ...]  # empty for v2 (and for named v1 hierarchies such as name=systemd)
    path: str


def _unescape_mountinfo(field: str) -> str:
    """Mount points in mountinfo escape space, tab, newline and backslash as \\ooo octal."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


@dataclass(frozen=True)
class SchedExtStatus:
    """What the kernel says about sched_ext right now."""

    available: bool  # /sys/kernel/sched_ext exists (the class is built in)
    state: str | None  # "enabled", "disabled", a transitional state, or None when unreadable
    ops: str | None  # name of the loaded root scheduler (root/ops), None when none is loaded
    switch_all: bool | None
    nr_rejected: int | None
    enable_seq: int | None

    @property
    def enabled(self) -> bool:
        return self.state == STATE_ENABLED


def ops_matches(ops: str | None, name: str) -> bool:
    """Whether root/ops names scheduler `name`. scx's Rust schedulers register their name with their
    version and target appended (`rustland_1.0.14_g5e4a2f5_x86_64_unknown_linux_gnu`); the kernel's C
    examples and pyland register the bare name."""
    return ops is not None and (ops == name or ops.startswith(name + "_"))


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


CPU_DIR = "/sys/devices/system/cpu"


def parse_cpu_list(text: str) -> list[int]:
    """Kernel cpulist format ("0-3,8,10-11") -> sorted CPU ids."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)


def nr_cpu_ids(sysroot: SysRoot | None = None) -> int:
    """The kernel's nr_cpu_ids: one past the highest possible CPU id, the bound of every CPU id.

    Not a count of CPUs: ids can be sparse ("0,4-7"), and offline CPUs keep theirs. Falls back to
    the CPU count where sysfs does not say."""
    sr = sysroot or SysRoot()
    try:
        text = sr.read_optional(f"{CPU_DIR}/possible")
        cpus = parse_cpu_list(text) if text else []
    except (OSError, ValueError):
        cpus = []
    return cpus[-1] + 1 if cpus else os.cpu_count() or 1


def read_sched_ext(sysroot: SysRoot | None = None) -> SchedExtStatus:
    """Read the sched_ext sysfs directory; never raises (unreadable values come back as None)."""
    sr = sysroot or SysRoot()

    def get(name: str) -> str | None:
        try:
            return sr.read_optional(f"{SCHED_EXT_DIR}/{name}")
        except (OSError, UnicodeDecodeError):
            return None

    if not sr.is_dir(SCHED_EXT_DIR):
        return SchedExtStatus(False, None, None, None, None, None)
    ops = get("root/ops")
    switch_all = get("switch_all")
    return SchedExtStatus(
        available=True,
        state=get("state"),
        ops=ops or None,
        switch_all=None if switch_all is None else switch_all == "1",
        nr_rejected=_int_or_none(get("nr_rejected")),
        enable_seq=_int_or_none(get("enable_seq")),
    )


def read_sched_ext_events(sysroot: SysRoot | None = None) -> dict[str, int] | None:
    """The root scheduler's event counters (root/events, 6.16+: `SCX_EV_NAME VALUE` lines), or None
    where the kernel has no such file or no scheduler is loaded (root/ goes with the scheduler).

    Never raises: a file that vanishes mid-read (the scheduler left) or cannot be read is None, and a
    line that is not `NAME VALUE` is skipped, so a newer kernel's extra format cannot break a reader.
    """
    sr = sysroot or SysRoot()
    try:
        text = sr.read_optional(f"{SCHED_EXT_DIR}/root/events")
    except (OSError, UnicodeDecodeError):
        return None
    if text is None:
        return None
    events: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        number = _int_or_none(value.strip())
        if name and number is not None:
            events[name] = number
    return events


VMLINUX_BTF = "/sys/kernel/btf/vmlinux"


def sysrq_reset_sched_ext(sysroot: SysRoot | None = None) -> None:
    """SysRq-S: the kernel unloads whatever BPF scheduler is loaded (exit kind SYSRQ), any owner.

    The only way to unload a scheduler some other process holds; root only (OSError otherwise).
    """
    sr = sysroot or SysRoot()
    sr.path("/proc/sysrq-trigger").write_text("S")
